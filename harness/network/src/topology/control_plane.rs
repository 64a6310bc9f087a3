//! A control-plane host on the node network: a namespace of its own, attached to the node
//! network's bridge like an external host, at an address of the node network no node or host
//! uses. Proxies that watch the API reach the API server there as a real node would.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use anyhow::{Context, Result};
use ipnet::IpNet;

use super::links::Links;
use super::netns::Netns;
use super::ready;
use super::{NODE_NETWORK_BRIDGE, POD_INTERFACE, Topology, sysctl};
use crate::model::Cluster;

/// The control-plane namespace; dropping it removes the namespace (and its link to the bridge).
#[derive(Debug)]
pub struct ControlPlane {
    pub netns: Netns,
    /// Its address on the node network (the cluster's primary family).
    pub ip: IpAddr,
}

impl ControlPlane {
    /// Creates the namespace (named with the topology's prefix, so leftovers trace to the
    /// run) and wires it to `br0`.
    pub async fn attach(topology: &Topology, cluster: &Cluster) -> Result<ControlPlane> {
        let net_name = topology.node_network.name();
        let prefix = net_name.strip_suffix("net").unwrap_or(net_name);
        let ip =
            unused_address(cluster).context("finding a free node-network address for the control plane")?;
        let cp = ControlPlane { netns: Netns::create(&format!("{prefix}cp"))?, ip };
        // From here an error drops `cp`, which removes the namespace.
        sysctl::host_defaults(&cp.netns)?;
        let links = Links::connect(&cp.netns).await?;
        links.loopback_up().await?;
        let port = "cp0";
        links.veth_into(POD_INTERFACE, port, &topology.node_network).await?;
        let net = Links::connect(&topology.node_network).await?;
        let br0 = net.index(NODE_NETWORK_BRIDGE).await?;
        net.attach(port, br0, false).await?;
        let eth0 = links.index(POD_INTERFACE).await?;
        links.address(eth0, ip, cluster.node_network.prefix_len()).await?;
        links.up(eth0).await?;
        // Until the kernel has acted on the new link's carrier, the bridge drops what crosses
        // it (`ready.rs`): a proxy's first ARP request for the API server went unanswered and
        // its connection waited out ARP's one-second retransmit, at every start.
        ready::wait_until_ready(&links).await?;
        ready::wait_until_ready_named(&net, |name| name == port).await?;
        Ok(cp)
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if let Err(e) = self.netns.remove() {
            eprintln!("packetproof: removing the control-plane namespace: {e:#}");
        }
    }
}

/// The highest host address of the node network that no node (primary or secondary address)
/// and no external host has.
pub fn unused_address(cluster: &Cluster) -> Option<IpAddr> {
    let used: Vec<IpAddr> = cluster
        .nodes
        .iter()
        .flat_map(|n| n.node_network_ips())
        .chain(cluster.external_hosts.iter().map(|h| h.ip()))
        .collect();
    let net = cluster.node_network;
    let (low, high, v4) = match net {
        IpNet::V4(n) => (u32::from(n.network()) as u128, u32::from(n.broadcast()) as u128, true),
        IpNet::V6(n) => (u128::from(n.network()), u128::from(n.broadcast()), false),
    };
    // Skip the broadcast address (IPv4) and keep clear of the network address.
    let mut candidate = high - 1;
    while candidate > low {
        let ip = if v4 {
            IpAddr::V4(Ipv4Addr::from(candidate as u32))
        } else {
            IpAddr::V6(Ipv6Addr::from(candidate))
        };
        if !used.contains(&ip) {
            return Some(ip);
        }
        candidate -= 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_control_plane_takes_the_highest_free_address() {
        use crate::model::{ExternalHost, PerFamily};
        let mut cluster = Cluster::example(Vec::new());
        let ip = unused_address(&cluster).unwrap();
        assert!(cluster.node_network.contains(&ip));
        assert!(cluster.nodes.iter().all(|n| n.ip() != ip));
        // Taken by a host: the next one down.
        let host = ExternalHost { name: "client".into(), ips: PerFamily::single(ip), routes: Vec::new() };
        cluster.external_hosts.push(host);
        let next = unused_address(&cluster).unwrap();
        assert_ne!(next, ip);
        assert!(cluster.node_network.contains(&next));
    }
}
