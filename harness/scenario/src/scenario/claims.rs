//! What Services claim on every node and on the wire, shared by all of them: node ports (per
//! protocol), health-check node ports (kube-proxy's own TCP server, so any protocol's node port
//! clashes with one), and each external or load-balancer IP:port. A second claim is refused
//! with a message naming the first.

use std::collections::HashMap;
use std::net::IpAddr;
use std::ops::RangeInclusive;

use crate::model::Protocol;

/// kube-apiserver's default `--service-node-port-range`.
pub(crate) const DEFAULT_NODE_PORT_RANGE: RangeInclusive<u16> = 30000..=32767;

pub(crate) struct Claims {
    /// Where node ports and health-check node ports must lie (`spec.cluster.serviceNodePortRange`).
    range: RangeInclusive<u16>,
    node_ports: HashMap<(u16, Protocol), String>,
    health_checks: HashMap<u16, String>,
    frontends: HashMap<(IpAddr, u16, Protocol), String>,
}

impl Default for Claims {
    fn default() -> Self {
        Claims::new(DEFAULT_NODE_PORT_RANGE)
    }
}

impl Claims {
    pub fn new(range: RangeInclusive<u16>) -> Claims {
        Claims { range, node_ports: HashMap::new(), health_checks: HashMap::new(), frontends: HashMap::new() }
    }

    /// kube-apiserver's refusal of a node port outside its range (pkg/registry/core/service/
    /// portallocator: "provided port is not in the valid range").
    fn in_range(&self, port: u16) -> Result<(), String> {
        if self.range.contains(&port) {
            return Ok(());
        }
        Err(format!(
            "{port}: provided port is not in the valid range. The range of valid ports is {}-{} \
             (kube-apiserver's --service-node-port-range; set spec.cluster.serviceNodePortRange for another)",
            self.range.start(),
            self.range.end()
        ))
    }

    /// `port`/`protocol` on every node, for `owner` (e.g. `Service default/web`).
    pub(crate) fn node_port(&mut self, port: u16, protocol: Protocol, owner: &str) -> Result<(), String> {
        self.in_range(port)?;
        if let Some(first) = self.health_checks.get(&port) {
            return Err(format!("node port {port}/{protocol} is already the healthCheckNodePort of {first}"));
        }
        if let Some(first) = self.node_ports.get(&(port, protocol)) {
            return Err(format!("node port {port}/{protocol} is already used by {first}"));
        }
        self.node_ports.insert((port, protocol), owner.to_string());
        Ok(())
    }

    /// A health-check node port: TCP, but unique against node ports of every protocol, as the
    /// API server allocates them from one range.
    pub(crate) fn health_check(&mut self, port: u16, owner: &str) -> Result<(), String> {
        self.in_range(port)?;
        let node_port = [Protocol::Tcp, Protocol::Udp, Protocol::Sctp]
            .into_iter()
            .find_map(|p| self.node_ports.get(&(port, p)).map(|first| (p, first)));
        if let Some((protocol, first)) = node_port {
            return Err(format!(
                "healthCheckNodePort {port} is already node port {port}/{protocol} of {first}"
            ));
        }
        if let Some(first) = self.health_checks.get(&port) {
            return Err(format!("healthCheckNodePort {port} is already the healthCheckNodePort of {first}"));
        }
        self.health_checks.insert(port, owner.to_string());
        Ok(())
    }

    /// `ip:port/protocol` as `owner`, e.g. `an external IP of Service default/web`: one address
    /// and port may lead to one Service port only.
    pub fn frontend(&mut self, ip: IpAddr, port: u16, protocol: Protocol, owner: &str) -> Result<(), String> {
        if let Some(first) = self.frontends.get(&(ip, port, protocol)) {
            return Err(format!(
                "{ip}:{port}/{protocol} is already {first}: one address and port can lead to one Service port only"
            ));
        }
        self.frontends.insert((ip, port, protocol), owner.to_string());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_ports_are_per_protocol_and_health_checks_clash_with_any() {
        let mut c = Claims::default();
        c.node_port(30053, Protocol::Udp, "Service a").unwrap();
        c.node_port(30053, Protocol::Tcp, "Service b").unwrap();
        assert_eq!(
            c.node_port(30053, Protocol::Udp, "Service c").unwrap_err(),
            "node port 30053/UDP is already used by Service a"
        );
        assert_eq!(
            c.health_check(30053, "Service c").unwrap_err(),
            "healthCheckNodePort 30053 is already node port 30053/TCP of Service b"
        );
        c.health_check(32000, "Service c").unwrap();
        assert_eq!(
            c.node_port(32000, Protocol::Udp, "Service d").unwrap_err(),
            "node port 32000/UDP is already the healthCheckNodePort of Service c"
        );
        assert_eq!(
            c.health_check(32000, "Service d").unwrap_err(),
            "healthCheckNodePort 32000 is already the healthCheckNodePort of Service c"
        );
    }

    #[test]
    fn frontends_are_per_address_port_and_protocol() {
        let mut c = Claims::default();
        let ip: IpAddr = "203.0.113.10".parse().unwrap();
        c.frontend(ip, 53, Protocol::Udp, "an external IP of Service default/dns-udp").unwrap();
        c.frontend(ip, 53, Protocol::Tcp, "an external IP of Service default/dns-tcp").unwrap();
        assert_eq!(
            c.frontend(ip, 53, Protocol::Udp, "x").unwrap_err(),
            "203.0.113.10:53/UDP is already an external IP of Service default/dns-udp: \
             one address and port can lead to one Service port only"
        );
    }

    #[test]
    fn node_ports_outside_the_range_are_refused_as_kube_apiserver_does() {
        let mut c = Claims::default();
        let e = c.node_port(80, Protocol::Tcp, "Service a").unwrap_err();
        assert!(
            e.starts_with(
                "80: provided port is not in the valid range. The range of valid ports is 30000-32767"
            ),
            "{e}"
        );
        assert!(c.health_check(32768, "Service a").is_err());
        let mut wide = Claims::new(80..=32767);
        assert!(wide.node_port(80, Protocol::Tcp, "Service a").is_ok());
    }
}
