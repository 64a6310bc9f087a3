//! Where node ports answer, as kube-proxy's `--nodeport-addresses` and iptables mode's
//! `--iptables-localhost-nodeports` decide it (`NodePortAddresses` in
//! pkg/proxy/util/nodeport_addresses.go, `NewProxier` in pkg/proxy/iptables/proxier.go).
//!
//! Proxy-independent: every built-in proxy reads the same flags the same way, and health
//! check servers bind where node ports answer. IPv4 only, like the rest of the proxies.

use std::net::{IpAddr, Ipv4Addr};

use ipnet::{IpNet, Ipv4Net};

use crate::model::{Node, ProxyConfig, bridge_address};

/// The IPv4 half of `--nodeport-addresses`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePortAddresses {
    /// The IPv4 CIDRs given, up to and excluding a `0.0.0.0/0` (which matches everything).
    cidrs: Vec<Ipv4Net>,
    match_all: bool,
    contains_loopback: bool,
}

impl NodePortAddresses {
    /// `NewNodePortAddresses(IPv4, …)`: IPv6 CIDRs are ignored; no IPv4 CIDR at all, or a
    /// `0.0.0.0/0` among them, matches every address.
    pub fn new(config: &ProxyConfig) -> NodePortAddresses {
        let v4: Vec<Ipv4Net> = config
            .node_port_addresses
            .iter()
            .filter_map(|n| match n {
                IpNet::V4(n) => Some(n.trunc()),
                IpNet::V6(_) => None,
            })
            .collect();
        let loopback = Ipv4Addr::new(127, 0, 0, 0);
        let mut npa =
            NodePortAddresses { cidrs: Vec::new(), match_all: v4.is_empty(), contains_loopback: false };
        if npa.match_all {
            npa.contains_loopback = true;
            return npa;
        }
        for cidr in v4 {
            if cidr.addr().is_loopback() || cidr.contains(&loopback) {
                npa.contains_loopback = true;
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
    pub fn match_all(&self) -> bool {
        self.match_all
    }

    /// Whether 127.0.0.0/8 is among the addresses (always, when matching all).
    pub fn contains_ipv4_loopback(&self) -> bool {
        self.contains_loopback
    }

    /// `GetNodeIPs`: the node's addresses inside the CIDRs (empty when matching all). The
    /// node's interfaces carry its node-network addresses, its pod-bridge gateway and
    /// 127.0.0.1; kube-proxy returns them in a Go map's (random) order, this in that order.
    pub fn node_ips(&self, node: Option<&Node>) -> Vec<Ipv4Addr> {
        if self.match_all {
            return Vec::new();
        }
        let mut found: Vec<Ipv4Addr> = Vec::new();
        for ip in interface_addresses(node) {
            if self.cidrs.iter().any(|c| c.contains(&ip)) && !found.contains(&ip) {
                found.push(ip);
            }
        }
        found
    }
}

/// The IPv4 addresses on a node's interfaces; only loopback's when the node is unknown.
fn interface_addresses(node: Option<&Node>) -> Vec<Ipv4Addr> {
    let mut ips: Vec<IpAddr> = Vec::new();
    if let Some(node) = node {
        ips.extend(node.node_network_ips());
        ips.push(bridge_address(&node.pod_cidr));
    }
    ips.push(IpAddr::V4(Ipv4Addr::LOCALHOST));
    ips.into_iter()
        .filter_map(|ip| match ip {
            IpAddr::V4(v4) => Some(v4),
            IpAddr::V6(_) => None,
        })
        .collect()
}

/// Whether node ports answer on 127.0.0.1 in iptables mode: the flag, unless
/// `--nodeport-addresses` leaves out loopback (`NewProxier` turns it off then). When on,
/// kube-proxy sets `net.ipv4.conf.all.route_localnet=1`.
pub fn localhost_node_ports(config: &ProxyConfig) -> bool {
    config.localhost_node_ports && NodePortAddresses::new(config).contains_ipv4_loopback()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(cidrs: &[&str], localhost: bool) -> ProxyConfig {
        ProxyConfig {
            masquerade_all: false,
            node_port_addresses: cidrs.iter().map(|c| c.parse().unwrap()).collect(),
            localhost_node_ports: localhost,
        }
    }

    fn node() -> Node {
        Node {
            name: "node-a".into(),
            ip: "192.168.50.2".parse().unwrap(),
            secondary_ips: vec!["192.168.50.102".parse().unwrap()],
            pod_cidr: "10.244.0.0/24".parse().unwrap(),
        }
    }

    #[test]
    fn empty_or_zero_matches_all_and_includes_loopback() {
        for cidrs in [&[][..], &["0.0.0.0/0"], &["192.168.50.0/24", "0.0.0.0/0"], &["fd00::/64"]] {
            let npa = NodePortAddresses::new(&config(cidrs, true));
            assert!(npa.match_all(), "{cidrs:?}");
            assert!(npa.contains_ipv4_loopback(), "{cidrs:?}");
            assert!(npa.node_ips(Some(&node())).is_empty());
        }
    }

    #[test]
    fn cidrs_select_node_addresses_bridge_and_loopback() {
        let npa = NodePortAddresses::new(&config(&["192.168.50.100/30", "10.244.0.0/16"], true));
        assert!(!npa.match_all());
        assert!(!npa.contains_ipv4_loopback());
        let ips: Vec<String> = npa.node_ips(Some(&node())).iter().map(|i| i.to_string()).collect();
        assert_eq!(ips, ["192.168.50.102", "10.244.0.1"]);

        let lo = NodePortAddresses::new(&config(&["127.0.0.0/8"], true));
        assert!(lo.contains_ipv4_loopback());
        assert_eq!(lo.node_ips(None), [Ipv4Addr::LOCALHOST]);
    }

    #[test]
    fn localhost_node_ports_needs_the_flag_and_loopback_among_the_addresses() {
        assert!(localhost_node_ports(&config(&[], true)));
        assert!(!localhost_node_ports(&config(&[], false)));
        assert!(!localhost_node_ports(&config(&["192.168.50.0/24"], true)));
        assert!(localhost_node_ports(&config(&["192.168.50.0/24", "127.0.0.1/32"], true)));
    }
}
