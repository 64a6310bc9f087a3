//! Which UDP conntrack entries a sync leaves stale, as kube-proxy decides after each sync
//! (`pkg/proxy/conntrack/cleanup.go`): UDP has no connection end, so an entry keeps sending
//! a client to a translation that no longer exists until it is deleted.
//!
//! - An endpoint that served and is gone (or no longer serves): entries translated to it
//!   through each frontend of its Service (cluster IP, external IPs, load-balancer IPs) and
//!   through its node port.
//! - A Service port that goes from no ready endpoint to some: entries to its frontends (they
//!   may hold a REJECT's or a failed lookup's state) and to its node port.
//! - A UDP Service port that is gone: entries to its cluster IP.
//!
//! Pure: one family's Services before and after a sync in, deletions out.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;

use crate::model::{Endpoint, IpFamily, Protocol, Service, ServicePort};

/// One `conntrack -D -p udp …` filter.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Deletion {
    /// Every UDP entry to a frontend IP: `--orig-dst IP`.
    ToIp(IpAddr),
    /// Every UDP entry to a node port: `--dport PORT` (of a family).
    ToPort(u16, IpFamily),
    /// UDP entries to a frontend IP translated to an endpoint: `--orig-dst IP --dst-nat EP`.
    Translated { frontend: IpAddr, endpoint: IpAddr },
    /// UDP entries to a node port translated to an endpoint: `--dport PORT --dst-nat EP`.
    PortTranslated { port: u16, endpoint: IpAddr },
}

impl Deletion {
    /// The arguments of `conntrack` for this deletion.
    pub fn args(&self) -> Vec<String> {
        let family = |f: IpFamily| match f {
            IpFamily::V4 => "ipv4",
            IpFamily::V6 => "ipv6",
        };
        let mut args: Vec<String> = vec!["-D".into(), "-p".into(), "udp".into(), "-f".into()];
        match *self {
            Deletion::ToIp(ip) => {
                args.extend([family(IpFamily::of(ip)).into(), "--orig-dst".into(), ip.to_string()])
            }
            Deletion::ToPort(port, f) => args.extend([family(f).into(), "--dport".into(), port.to_string()]),
            Deletion::Translated { frontend, endpoint } => args.extend([
                family(IpFamily::of(frontend)).into(),
                "--orig-dst".into(),
                frontend.to_string(),
                "--dst-nat".into(),
                endpoint.to_string(),
            ]),
            Deletion::PortTranslated { port, endpoint } => args.extend([
                family(IpFamily::of(endpoint)).into(),
                "--dport".into(),
                port.to_string(),
                "--dst-nat".into(),
                endpoint.to_string(),
            ]),
        }
        args
    }
}

impl fmt::Display for Deletion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "conntrack {}", self.args().join(" "))
    }
}

/// A service port's identity across syncs: namespace, name, port name, protocol.
type PortKey = (String, String, String, Protocol);

fn udp_ports(services: &[Service]) -> BTreeMap<PortKey, (&Service, &ServicePort)> {
    services
        .iter()
        .flat_map(|s| s.ports.iter().map(move |p| (s, p)))
        .filter(|(_, p)| p.protocol == Protocol::Udp)
        .map(|(s, p)| ((s.namespace.clone(), s.name.clone(), p.name.clone(), p.protocol), (s, p)))
        .collect()
}

fn frontends(service: &Service) -> impl Iterator<Item = IpAddr> + '_ {
    std::iter::once(service.cluster_ip)
        .chain(service.external_ips.iter().copied())
        .chain(service.load_balancer_ips.iter().copied())
}

/// `ip:port` and whether it serves, as kube-proxy compares endpoints.
fn serving(ep: &Endpoint) -> bool {
    ep.serving
}

/// The deletions that make conntrack agree with `new` after `old` (one family's Services).
pub fn stale_entries(old: &[Service], new: &[Service]) -> Vec<Deletion> {
    let (old_ports, new_ports) = (udp_ports(old), udp_ports(new));
    let mut out = BTreeSet::new();
    for (key, (old_svc, old_port)) in &old_ports {
        let Some((svc, port)) = new_ports.get(key) else {
            // The port is gone: entries to its cluster IP lead nowhere now.
            out.insert(Deletion::ToIp(old_svc.cluster_ip));
            continue;
        };
        for ep in old_port.endpoints.iter().filter(|e| serving(e)) {
            let kept = port.endpoints.iter().any(|n| n.address() == ep.address() && serving(n));
            if kept {
                continue;
            }
            for frontend in frontends(svc) {
                out.insert(Deletion::Translated { frontend, endpoint: ep.ip });
            }
            if let Some(np) = port.node_port {
                out.insert(Deletion::PortTranslated { port: np, endpoint: ep.ip });
            }
        }
    }
    for (key, (svc, port)) in &new_ports {
        let had_ready = old_ports.get(key).is_some_and(|(_, p)| p.endpoints.iter().any(|e| e.ready));
        if port.endpoints.iter().any(|e| e.ready) && !had_ready {
            out.extend(frontends(svc).map(Deletion::ToIp));
            if let Some(np) = port.node_port {
                out.insert(Deletion::ToPort(np, IpFamily::of(svc.cluster_ip)));
            }
        }
    }
    out.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(ip: &str) -> Endpoint {
        Endpoint {
            ip: ip.parse().unwrap(),
            port: 53,
            ready: true,
            serving: true,
            terminating: false,
            node: None,
            pod: String::new(),
        }
    }

    fn dns(endpoints: Vec<Endpoint>, node_port: Option<u16>) -> Service {
        Service {
            ports: vec![ServicePort {
                name: "dns".into(),
                protocol: Protocol::Udp,
                port: 53,
                node_port,
                endpoints,
            }],
            external_ips: vec!["203.0.113.7".parse().unwrap()],
            ..Service::new("kube-system", "kube-dns", "10.96.0.10".parse().unwrap())
        }
    }

    fn shown(d: &[Deletion]) -> Vec<String> {
        d.iter().map(|d| d.args()[5..].join(" ")).collect()
    }

    #[test]
    fn a_removed_endpoint_is_forgotten_through_every_frontend_and_the_node_port() {
        let old = [dns(vec![ep("10.244.1.5"), ep("10.244.2.5")], Some(30053))];
        let new = [dns(vec![ep("10.244.2.5")], Some(30053))];
        assert_eq!(
            shown(&stale_entries(&old, &new)),
            [
                "--orig-dst 10.96.0.10 --dst-nat 10.244.1.5",
                "--orig-dst 203.0.113.7 --dst-nat 10.244.1.5",
                "--dport 30053 --dst-nat 10.244.1.5",
            ]
        );
    }

    #[test]
    fn an_endpoint_that_stops_serving_is_stale_and_one_that_never_served_is_not() {
        let mut stopped = ep("10.244.1.5");
        stopped.ready = false;
        stopped.serving = false;
        let old = [dns(vec![ep("10.244.1.5"), ep("10.244.2.5")], None)];
        let new = [dns(vec![stopped.clone(), ep("10.244.2.5")], None)];
        assert_eq!(stale_entries(&old, &new).len(), 2);
        // Not serving before: no traffic can have been translated to it.
        let old = [dns(vec![stopped, ep("10.244.2.5")], None)];
        let new = [dns(vec![ep("10.244.2.5")], None)];
        assert!(stale_entries(&old, &new).is_empty());
    }

    #[test]
    fn a_service_that_gains_its_first_ready_endpoint_clears_its_frontends() {
        let old = [dns(vec![], Some(30053))];
        let new = [dns(vec![ep("10.244.1.5")], Some(30053))];
        assert_eq!(
            shown(&stale_entries(&old, &new)),
            ["--orig-dst 10.96.0.10", "--orig-dst 203.0.113.7", "--dport 30053"]
        );
        // A brand-new Service too (its IP may have been another's, or rejected before).
        assert_eq!(stale_entries(&[], &new).len(), 3);
        // Unchanged: nothing.
        assert!(stale_entries(&new, &new).is_empty());
    }

    #[test]
    fn a_deleted_udp_service_clears_its_cluster_ip_and_tcp_is_never_touched() {
        let old = [dns(vec![ep("10.244.1.5")], None)];
        assert_eq!(shown(&stale_entries(&old, &[])), ["--orig-dst 10.96.0.10"]);
        let mut tcp = dns(vec![ep("10.244.1.5")], None);
        tcp.ports[0].protocol = Protocol::Tcp;
        assert!(stale_entries(&[tcp.clone()], &[]).is_empty());
        assert!(stale_entries(&[], &[tcp]).is_empty());
    }

    #[test]
    fn arguments_name_the_family() {
        let d = Deletion::Translated {
            frontend: "fd00::10".parse().unwrap(),
            endpoint: "fd00:1::5".parse().unwrap(),
        };
        assert_eq!(d.to_string(), "conntrack -D -p udp -f ipv6 --orig-dst fd00::10 --dst-nat fd00:1::5");
    }
}
