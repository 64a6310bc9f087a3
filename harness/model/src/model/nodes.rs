//! Nodes, external hosts and pods: the machines and workloads a cluster is made of.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;

use super::{PerFamily, Protocol};

#[cfg(any(test, feature = "test-support"))]
impl Node {
    /// A node of the unit tests: one address, no secondary IPs, one family.
    pub fn example(name: &str, ip: &str, pod_cidr: &str) -> Node {
        Node {
            zone: None,
            name: name.to_string(),
            ips: PerFamily::single(ip.parse().unwrap()),
            secondary_ips: vec![],
            pod_cidrs: PerFamily::single(pod_cidr.parse().unwrap()),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub name: String,
    /// The node's InternalIP of each family on the node network.
    pub ips: PerFamily<IpAddr>,
    /// Further addresses of the node on the node network (same prefix as the `ips` of their
    /// family), of either family.
    pub secondary_ips: Vec<IpAddr>,
    /// This node's share of the pod CIDR of each family (`spec.podCIDRs`); the first address
    /// is the node's bridge (gateway) address. Of the same families as `ips`.
    pub pod_cidrs: PerFamily<IpNet>,
    /// Its `topology.kubernetes.io/zone` label: the zone topology hints are matched against.
    pub zone: Option<String>,
}

impl Node {
    /// The node's InternalIP of the (primary) family: in a [`Cluster::family_view`], the
    /// view's.
    pub fn ip(&self) -> IpAddr {
        *self.ips.primary()
    }

    /// The node's pod CIDR of the (primary) family: in a [`Cluster::family_view`], the view's.
    pub fn pod_cidr(&self) -> IpNet {
        *self.pod_cidrs.primary()
    }

    /// Every address on the node's node-network interface: the primary family's InternalIP,
    /// then the secondary addresses (of either family).
    pub fn node_network_ips(&self) -> impl Iterator<Item = IpAddr> + '_ {
        std::iter::once(self.ip()).chain(self.secondary_ips.iter().copied())
    }

    /// Every address of the node of every family: its InternalIPs, primary first, then the
    /// secondary addresses.
    pub fn all_ips(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.ips.copied().chain(self.secondary_ips.iter().copied())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalHost {
    pub name: String,
    /// Its address of each family it has.
    pub ips: PerFamily<IpAddr>,
    /// Its routes through nodes, e.g. the service CIDR via a node, as a router that learned
    /// the cluster IPs over BGP has them.
    pub routes: Vec<HostRoute>,
}

/// A route of an external host: `to` through node `via`'s address of that family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRoute {
    pub to: IpNet,
    pub via: String,
}

impl ExternalHost {
    /// Its address of the (primary) family: in a [`Cluster::family_view`], the view's.
    pub fn ip(&self) -> IpAddr {
        *self.ips.primary()
    }

    /// The node this host's traffic to `ip` goes through, by the longest matching route.
    pub fn route_to(&self, ip: IpAddr) -> Option<&HostRoute> {
        self.routes.iter().filter(|r| r.to.contains(&ip)).max_by_key(|r| r.to.prefix_len())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    pub node: String,
    /// `status.podIPs`: its address of each family it has.
    pub ips: PerFamily<IpAddr>,
    pub labels: BTreeMap<String, String>,
    /// Ports the pod's containers declare; the harness serves each of them.
    pub ports: Vec<ContainerPort>,
}

impl Pod {
    /// Its address of the (primary) family: in a [`Cluster::family_view`], the view's.
    pub fn ip(&self) -> IpAddr {
        *self.ips.primary()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerPort {
    pub name: Option<String>,
    pub port: u16,
    pub protocol: Protocol,
}
