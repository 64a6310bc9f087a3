//! Where node ports answer, as kube-proxy's `--nodeport-addresses` and iptables mode's
//! `--iptables-localhost-nodeports` decide it (`NodePortAddresses` in
//! pkg/proxy/util/nodeport_addresses.go, `NewProxier` in pkg/proxy/iptables/proxier.go).
//!
//! Proxy-independent: every built-in proxy reads the same flags the same way, and health
//! check servers bind where node ports answer. Per family, as kube-proxy runs one proxier per
//! family: a single-stack cluster asks for its own.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

use crate::model::{IpFamily, Node, ProxyConfig, bridge_address};

/// `--nodeport-addresses` for one family (`NewNodePortAddresses(family, …)`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePortAddresses {
    family: IpFamily,
    /// The family's CIDRs given, up to and excluding a zero CIDR (which matches everything).
    cidrs: Vec<IpNet>,
    match_all: bool,
    contains_ipv4_loopback: bool,
}

impl NodePortAddresses {
    /// CIDRs of the other family are ignored; none of this family at all, or a zero CIDR
    /// (`0.0.0.0/0`, `::/0`) among them, matches every address.
    pub fn new(config: &ProxyConfig, family: IpFamily) -> NodePortAddresses {
        let ours: Vec<IpNet> = config
            .node_port_addresses
            .iter()
            .filter(|n| IpFamily::of_net(n) == family)
            .map(IpNet::trunc)
            .collect();
        let mut npa = NodePortAddresses {
            family,
            cidrs: Vec::new(),
            match_all: ours.is_empty(),
            contains_ipv4_loopback: false,
        };
        if npa.match_all {
            npa.contains_ipv4_loopback = family == IpFamily::V4;
            return npa;
        }
        let loopback = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 0));
        for cidr in ours {
            if family == IpFamily::V4 && (cidr.addr().is_loopback() || cidr.contains(&loopback)) {
                npa.contains_ipv4_loopback = true;
            }
            if cidr.prefix_len() == 0 {
                npa.match_all = true;
                npa.cidrs.clear();
                break;
            }
            npa.cidrs.push(cidr);
        }
        npa
    }

    /// Node ports answer on every local address (the `addrtype --dst-type LOCAL` form).
    pub(crate) fn match_all(&self) -> bool {
        self.match_all
    }

    /// Whether 127.0.0.0/8 is among the addresses (always, when matching all IPv4; never for
    /// IPv6, whose loopback kube-proxy serves no node ports on).
    pub(crate) fn contains_ipv4_loopback(&self) -> bool {
        self.contains_ipv4_loopback
    }

    /// `GetNodeIPs`: the node's addresses of this family inside the CIDRs (empty when
    /// matching all). The node's interfaces carry its node-network addresses, its pod-bridge
    /// gateway and loopback (127.0.0.1 or ::1); kube-proxy returns them in a Go map's
    /// (random) order, this in that order.
    pub(crate) fn node_ips(&self, node: Option<&Node>) -> Vec<IpAddr> {
        if self.match_all {
            return Vec::new();
        }
        let mut found: Vec<IpAddr> = Vec::new();
        for ip in interface_addresses(node, self.family) {
            if self.cidrs.iter().any(|c| c.contains(&ip)) && !found.contains(&ip) {
                found.push(ip);
            }
        }
        found
    }
}

/// The addresses of `family` on a node's interfaces; only loopback's when the node is unknown.
fn interface_addresses(node: Option<&Node>, family: IpFamily) -> Vec<IpAddr> {
    let mut ips: Vec<IpAddr> = Vec::new();
    if let Some(node) = node {
        ips.extend(node.node_network_ips());
        ips.push(bridge_address(&node.pod_cidr()));
    }
    ips.push(match family {
        IpFamily::V4 => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpFamily::V6 => IpAddr::V6(Ipv6Addr::LOCALHOST),
    });
    ips.retain(|ip| IpFamily::of(*ip) == family);
    ips
}

/// Whether node ports answer on 127.0.0.1 in iptables mode: the flag, unless
/// `--nodeport-addresses` leaves out loopback (`NewProxier` turns it off then); never for
/// IPv6. When on, kube-proxy sets `net.ipv4.conf.all.route_localnet=1`.
pub(crate) fn localhost_node_ports(config: &ProxyConfig, family: IpFamily) -> bool {
    config.localhost_node_ports && NodePortAddresses::new(config, family).contains_ipv4_loopback()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::PerFamily;

    fn config(cidrs: &[&str], localhost: bool) -> ProxyConfig {
        ProxyConfig {
            masquerade_all: false,
            node_port_addresses: cidrs.iter().map(|c| c.parse().unwrap()).collect(),
            localhost_node_ports: localhost,
            ..ProxyConfig::default()
        }
    }

    fn node() -> Node {
        Node {
            zone: None,
            name: "node-a".into(),
            ips: PerFamily::single("192.168.50.2".parse().unwrap()),
            secondary_ips: vec!["192.168.50.102".parse().unwrap()],
            pod_cidrs: PerFamily::single("10.244.0.0/24".parse().unwrap()),
        }
    }

    #[test]
    fn empty_or_zero_matches_all_and_includes_loopback() {
        for cidrs in [&[][..], &["0.0.0.0/0"], &["192.168.50.0/24", "0.0.0.0/0"], &["fd00::/64"]] {
            let npa = NodePortAddresses::new(&config(cidrs, true), IpFamily::V4);
            assert!(npa.match_all(), "{cidrs:?}");
            assert!(npa.contains_ipv4_loopback(), "{cidrs:?}");
            assert!(npa.node_ips(Some(&node())).is_empty());
        }
    }

    #[test]
    fn cidrs_select_node_addresses_bridge_and_loopback() {
        let npa =
            NodePortAddresses::new(&config(&["192.168.50.100/30", "10.244.0.0/16"], true), IpFamily::V4);
        assert!(!npa.match_all());
        assert!(!npa.contains_ipv4_loopback());
        let ips: Vec<String> = npa.node_ips(Some(&node())).iter().map(|i| i.to_string()).collect();
        assert_eq!(ips, ["192.168.50.102", "10.244.0.1"]);

        let lo = NodePortAddresses::new(&config(&["127.0.0.0/8"], true), IpFamily::V4);
        assert!(lo.contains_ipv4_loopback());
        assert_eq!(lo.node_ips(None), [IpAddr::V4(Ipv4Addr::LOCALHOST)]);
    }

    #[test]
    fn localhost_node_ports_needs_the_flag_and_loopback_among_the_addresses() {
        let v4 = |c: &ProxyConfig| localhost_node_ports(c, IpFamily::V4);
        assert!(v4(&config(&[], true)));
        assert!(!v4(&config(&[], false)));
        assert!(!v4(&config(&["192.168.50.0/24"], true)));
        assert!(v4(&config(&["192.168.50.0/24", "127.0.0.1/32"], true)));
    }

    fn v6_node() -> Node {
        Node {
            zone: None,
            name: "node-a".into(),
            ips: PerFamily::single("fd00:192:168:50::2".parse().unwrap()),
            secondary_ips: vec!["fd00:192:168:50::102".parse().unwrap()],
            pod_cidrs: PerFamily::single("fd00:10:244:1::/64".parse().unwrap()),
        }
    }

    #[test]
    fn ipv6_takes_its_own_cidrs_and_never_localhost() {
        // No IPv6 CIDR, or ::/0: every address; the IPv4 ones belong to the other proxier.
        for cidrs in [&[][..], &["192.168.50.0/24"], &["::/0"], &["fd00:192:168:50::/64", "::/0"]] {
            let npa = NodePortAddresses::new(&config(cidrs, true), IpFamily::V6);
            assert!(npa.match_all(), "{cidrs:?}");
            assert!(!npa.contains_ipv4_loopback(), "{cidrs:?}");
        }
        assert!(!localhost_node_ports(&config(&[], true), IpFamily::V6));
        let npa = NodePortAddresses::new(
            &config(&["fd00:192:168:50::100/120", "fd00:10:244::/56", "::1/128", "10.0.0.0/8"], true),
            IpFamily::V6,
        );
        assert!(!npa.match_all());
        let ips: Vec<String> = npa.node_ips(Some(&v6_node())).iter().map(|i| i.to_string()).collect();
        assert_eq!(ips, ["fd00:192:168:50::102", "fd00:10:244:1::1", "::1"]);
    }
}
