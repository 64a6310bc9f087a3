//! The cluster as network namespaces: one per node, pod and external host, and one for the
//! node network, joined by veth pairs and bridges over netlink. Removed on every path out.
//!
//! ```text
//!  pod ns: eth0 ──veth── node ns: vethN ─┐ cni0 (bridge, pod gateway, hairpin ports)
//!                        node ns: eth0 ──veth── net ns: nN ─┐ br0 (bridge: the node network)
//!                   external ns: eth0 ──veth── net ns: xN ─┘
//! ```
//! Links are created inside harness namespaces only (a veth is made in one namespace with its
//! peer placed straight into the other), so the machine's own namespace never changes.

pub mod control_plane;
pub mod existing;
pub mod journal;
pub mod links;
pub mod netns;
mod ready;
mod stalled;
pub mod sysctl;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{Context, Result};
use ipnet::IpNet;

use crate::model::{
    Cluster, NODE_NETWORK_BRIDGE, NODE_UPLINK, Node, POD_BRIDGE, POD_INTERFACE, Pod, Source, bridge_address,
};
use links::Links;
pub use netns::Netns;

/// On Ctrl-C, SIGTERM or SIGHUP, removes this process's namespaces and exits with 128 + the
/// signal's number (130, 143, 129). Here, above both, since it undoes what each holds.
pub fn install_interrupt_handler() {
    crate::signals::on_termination(|| {
        eprintln!("\npacketproof: interrupted, removing this run's namespaces");
        crate::containment::stop_everything(&netns::live_paths());
        existing::undo_all();
        netns::remove_all_live_and_stop();
    });
}

/// What [`remove_leftovers`] removed, and what it could not.
#[derive(Debug, Default)]
pub struct Leftovers {
    pub removed: Vec<String>,
    /// Additions to existing nodes or a cluster that could not be taken back now, with why:
    /// their journals stay for a later try.
    pub not_undone: Vec<String>,
}

/// Removes what runs no longer alive left behind (every run's with `include_live`): their
/// namespaces, their additions to existing nodes, and their scratch directories. Says what was
/// removed and what could not be, for the user.
pub fn remove_leftovers(include_live: bool, delete: existing::DeleteApiObject) -> Result<Leftovers> {
    let namespaces = netns::cleanup(include_live)?.into_iter().map(|name| format!("namespace {name}"));
    let orphans = existing::undo_orphans(include_live, delete)?;
    let additions = orphans.undone.into_iter().map(|j| format!("the additions of {j}"));
    let scratch =
        crate::containment::remove_stale_scratch().into_iter().map(|d| format!("directory {}", d.display()));
    Ok(Leftovers {
        removed: namespaces.chain(additions).chain(scratch).collect(),
        not_undone: orphans.not_undone,
    })
}

/// A node namespace, as handed to a proxy to program.
#[derive(Debug, Clone)]
pub struct NodeHandle {
    /// The scenario's node name.
    pub name: String,
    pub netns: Netns,
}

/// Distinguishes the topologies of concurrent scenarios within one process.
static NEXT_TOPOLOGY: AtomicU32 = AtomicU32::new(0);

/// A built cluster. Dropping it removes every namespace it made.
#[derive(Debug)]
pub struct Topology {
    pub node_network: Netns,
    pub nodes: Vec<NodeHandle>,
    pub pods: BTreeMap<String, Netns>,
    pub external_hosts: BTreeMap<String, Netns>,
    /// The name of the bridge the pods hang off on every node (`cni0`; on existing nodes a
    /// name of this run's own, beside the cluster's CNI).
    pub pod_bridge: String,
    /// Every namespace made, in creation order, for teardown.
    created: Vec<Netns>,
    /// On existing nodes: what was added to them, undone after the namespaces go.
    additions: Option<existing::Additions>,
    /// The routes (an external host's, to one address) a probe steered through a node.
    steered: std::sync::Mutex<std::collections::BTreeSet<(String, IpAddr)>>,
}

impl Topology {
    /// Builds the cluster's namespaces and links; on failure removes whatever it made.
    pub async fn build(cluster: &Cluster) -> Result<Topology> {
        let prefix = format!("{}{}-", netns::process_prefix(), NEXT_TOPOLOGY.fetch_add(1, Ordering::Relaxed));
        let mut topo = Topology {
            node_network: Netns::create(&format!("{prefix}net"))?,
            nodes: Vec::new(),
            pods: BTreeMap::new(),
            external_hosts: BTreeMap::new(),
            pod_bridge: POD_BRIDGE.into(),
            created: Vec::new(),
            additions: None,
            steered: Default::default(),
        };
        topo.created.push(topo.node_network.clone());
        // From here on, an error drops `topo`, which removes what exists so far.
        for node in &cluster.nodes {
            let ns = topo.create(&format!("{prefix}n-{}", node.name))?;
            topo.nodes.push(NodeHandle { name: node.name.clone(), netns: ns });
        }
        for pod in &cluster.pods {
            let ns = topo.create(&format!("{prefix}p-{}", pod.name))?;
            topo.pods.insert(pod.name.clone(), ns);
        }
        for host in &cluster.external_hosts {
            let ns = topo.create(&format!("{prefix}x-{}", host.name))?;
            topo.external_hosts.insert(host.name.clone(), ns);
        }
        topo.wire(cluster).await?;
        topo.wait_until_ready().await?;
        Ok(topo)
    }

    /// Wires the cluster's pods into nodes that already exist (`nodes`: every scenario node
    /// by name); see [`existing`]. On failure undoes whatever it added.
    pub async fn build_on_existing(cluster: &Cluster, nodes: &existing::NodeMap) -> Result<Topology> {
        let index = NEXT_TOPOLOGY.fetch_add(1, Ordering::Relaxed);
        let prefix = format!("{}{index}-", netns::process_prefix());
        existing::build(cluster, nodes, &prefix, index).await
    }

    /// Returns once the kernel has acted on every link's carrier in every namespace made (see
    /// [`ready`]): a probe sent earlier can vanish at a bridge port not yet forwarding.
    async fn wait_until_ready(&self) -> Result<()> {
        for ns in &self.created {
            ready::wait_until_ready(&Links::connect(ns).await?).await?;
        }
        Ok(())
    }

    fn create(&mut self, name: &str) -> Result<Netns> {
        let ns = Netns::create(name)?;
        self.created.push(ns.clone());
        Ok(ns)
    }

    /// Links, addresses, routes and sysctls, as a CNI plugin and a node's boot would set them.
    /// Each namespace gets its sysctls before any link is made in it or moved into it (a
    /// link copies the namespace's IPv6 defaults when it arrives), so the node network's first.
    /// Links are made once; addresses and routes per family (one family view each: a
    /// dual-stack cluster has two).
    async fn wire(&self, cluster: &Cluster) -> Result<()> {
        let views: Vec<Cluster> = if cluster.second_family.is_some() {
            cluster.families().into_iter().map(|f| cluster.family_view(f)).collect()
        } else {
            vec![cluster.clone()]
        };
        sysctl::host_defaults(&self.node_network)?;
        let net = Links::connect(&self.node_network).await?;
        net.loopback_up().await?;
        let br0 = net.bridge(NODE_NETWORK_BRIDGE).await?;

        for (i, node) in cluster.nodes.iter().enumerate() {
            let ns = &self.node(&node.name)?.netns;
            let links = Links::connect(ns).await?;
            links.loopback_up().await?;
            sysctl::node_defaults(ns)?;

            // Uplink to the node network.
            let port = format!("n{i}");
            links.veth_into(NODE_UPLINK, &port, &self.node_network).await?;
            net.attach(&port, br0, false).await?;
            let uplink = links.index(NODE_UPLINK).await?;
            for (view, node) in on_node(&views, &node.name) {
                for ip in node.node_network_ips() {
                    links.address(uplink, ip, node_network_prefix(node, ip, view.node_network)).await?;
                }
            }
            links.up(uplink).await?;

            // Pod bridge with the node's gateway address for its pod CIDR.
            let cni0 = links.bridge(POD_BRIDGE).await?;
            for (_, node) in on_node(&views, &node.name) {
                links.address(cni0, bridge_address(&node.pod_cidr()), node.pod_cidr().prefix_len()).await?;
            }

            for (view, node) in on_node(&views, &node.name) {
                // Other nodes' pods are reached through those nodes, as a simple routed CNI does.
                for other in view.nodes.iter().filter(|o| o.name != node.name) {
                    links.route_via(other.pod_cidr(), other.ip(), uplink).await?;
                }
                // Without a route covering the service CIDR, traffic to a VIP that the proxy
                // does not translate fails locally with ENETUNREACH instead of reaching its
                // REJECT.
                links.route_dev(view.service_cidr, uplink).await?;
                // External and load-balancer IPs live outside every subnet here; a node's own
                // processes need a route to them before the proxy's OUTPUT rules can act.
                for ip in external_destinations(view) {
                    links.route_dev(IpNet::from(ip), uplink).await?;
                }
            }

            for (j, pod) in cluster.pods.iter().filter(|p| p.node == node.name).enumerate() {
                let pod_ns = &self.pods[&pod.name];
                wire_pod(&links, ns, cni0, pod_ns, &format!("veth{j}"), &views, pod, node).await?;
            }
        }

        for (i, host) in cluster.external_hosts.iter().enumerate() {
            let ns = &self.external_hosts[&host.name];
            let links = Links::connect(ns).await?;
            links.loopback_up().await?;
            sysctl::host_defaults(ns)?;
            let port = format!("x{i}");
            links.veth_into(POD_INTERFACE, &port, &self.node_network).await?;
            net.attach(&port, br0, false).await?;
            let eth0 = links.index(POD_INTERFACE).await?;
            for view in &views {
                if let Some(host) = view.external_host(&host.name) {
                    links.address(eth0, host.ip(), view.node_network.prefix_len()).await?;
                }
            }
            links.up(eth0).await?;
            // Its own routes through nodes (e.g. cluster IPs advertised over BGP).
            for view in &views {
                for route in view.external_host(&host.name).map(|h| h.routes.as_slice()).unwrap_or_default() {
                    let via = view.node(&route.via).with_context(|| format!("no node {}", route.via))?;
                    links.route_via(route.to, via.ip(), eth0).await?;
                }
            }
        }
        Ok(())
    }

    /// Routes an external host's traffic for `dest` through `via`, as a router or cloud load
    /// balancer in front of the cluster would.
    pub async fn steer(&self, host: &str, dest: IpAddr, via: IpAddr) -> Result<()> {
        // The node's own address may itself be steered (an external IP on it, probed through
        // another node): a gateway must be on the link, and IPv6 refuses one reached through
        // another gateway ("No route to host").
        if via != dest {
            self.unsteer(host, via).await?;
        }
        let ns = self
            .external_hosts
            .get(host)
            .with_context(|| format!("no namespace for external host {host}"))?;
        let links = Links::connect(ns).await?;
        let eth0 = links.index(POD_INTERFACE).await?;
        links.steer(dest, via, eth0).await?;
        self.steered.lock().unwrap_or_else(|e| e.into_inner()).insert((host.to_string(), dest));
        Ok(())
    }

    /// Gives `host` back its own route to `dest`, if a probe steered it: a probe that takes
    /// the route as the host has it must not inherit an earlier probe's, which sends a node's
    /// own address through another node, whose conntrack then sees only one direction of the
    /// connection and drops the rest as invalid (found by `packetproof explore`: an external IP
    /// on a node's address, probed through the other node, then a health check of that node).
    pub async fn unsteer(&self, host: &str, dest: IpAddr) -> Result<()> {
        let key = (host.to_string(), dest);
        if !self.steered.lock().unwrap_or_else(|e| e.into_inner()).remove(&key) {
            return Ok(());
        }
        let ns = self
            .external_hosts
            .get(host)
            .with_context(|| format!("no namespace for external host {host}"))?;
        Links::connect(ns).await?.unsteer(dest).await
    }

    /// Gives every external host back its own routes (see [`Topology::unsteer`]).
    pub async fn unsteer_all(&self) -> Result<()> {
        let steered: Vec<_> =
            self.steered.lock().unwrap_or_else(|e| e.into_inner()).iter().cloned().collect();
        for (host, dest) in steered {
            self.unsteer(&host, dest).await?;
        }
        Ok(())
    }

    pub fn node(&self, name: &str) -> Result<&NodeHandle> {
        self.nodes.iter().find(|n| n.name == name).with_context(|| format!("no namespace for node {name}"))
    }

    /// The namespace a probe source sends from.
    pub fn source_netns(&self, source: &Source) -> Result<&Netns> {
        match source {
            Source::Pod(name) => self.pods.get(name).with_context(|| format!("no namespace for pod {name}")),
            Source::Node(name) => Ok(&self.node(name)?.netns),
            Source::External(name) => self
                .external_hosts
                .get(name)
                .with_context(|| format!("no namespace for external host {name}")),
        }
    }

    /// Every namespace of this topology, for reports and leak checks.
    pub fn namespaces(&self) -> impl Iterator<Item = &Netns> {
        self.created.iter()
    }

    /// Removes every namespace; reports the first failure but tries them all.
    pub fn teardown(mut self) -> Result<()> {
        self.remove_all()
    }

    fn remove_all(&mut self) -> Result<()> {
        let mut first_error = None;
        // A process still inside would hold its namespace alive once unmounted.
        let paths: Vec<_> = self.created.iter().map(Netns::path).collect();
        let killed = crate::containment::kill_namespace_holders(&paths);
        if !killed.is_empty() {
            eprintln!(
                "packetproof: killed what was still running in the cluster's namespaces: {}",
                killed.join(", ")
            );
        }
        for ns in self.created.drain(..).rev() {
            if let Err(e) = ns.remove() {
                first_error.get_or_insert(e);
            }
        }
        if let Some(additions) = self.additions.take()
            && let Err(e) = additions.undo()
        {
            first_error.get_or_insert(e.context("undoing what was added to existing nodes"));
        }
        first_error.map_or(Ok(()), Err)
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        if let Err(e) = self.remove_all() {
            eprintln!("packetproof: tearing down a topology: {e:#}");
        }
    }
}

/// Each family view that has node `name`, with the node as that view has it.
/// Plugs `pod` into its node as a bridged CNI does: a veth whose node side `host_side` joins
/// the bridge `cni0` (hairpin on, as kubelet sets it, so a pod can reach itself through its
/// Service), the pod's address of every family and default routes via the bridge.
#[allow(clippy::too_many_arguments)]
async fn wire_pod(
    links: &Links,
    node_ns: &netns::Netns,
    cni0: u32,
    pod_ns: &netns::Netns,
    host_side: &str,
    views: &[Cluster],
    pod: &Pod,
    node: &Node,
) -> Result<()> {
    let pod_links = Links::connect(pod_ns).await?;
    pod_links.loopback_up().await?;
    sysctl::host_defaults(pod_ns)?;
    pod_links.veth_into(POD_INTERFACE, host_side, node_ns).await?;
    links.attach(host_side, cni0, true).await?;
    let eth0 = pod_links.index(POD_INTERFACE).await?;
    let families: Vec<(&Pod, &Node)> =
        on_node(views, &node.name).filter_map(|(view, node)| Some((view.pod(&pod.name)?, node))).collect();
    for (pod, node) in &families {
        pod_links.address(eth0, pod.ip(), node.pod_cidr().prefix_len()).await?;
    }
    pod_links.up(eth0).await?;
    for (_, node) in &families {
        pod_links.default_route(bridge_address(&node.pod_cidr()), eth0).await?;
    }
    Ok(())
}

fn on_node<'a>(views: &'a [Cluster], name: &'a str) -> impl Iterator<Item = (&'a Cluster, &'a Node)> + 'a {
    views.iter().filter_map(move |v| Some((v, v.node(name)?)))
}

/// Every external IP and load-balancer IP (ipMode Proxy too: traffic to it leaves through
/// the uplink) of the cluster's Services, once each.
fn external_destinations(cluster: &Cluster) -> Vec<IpAddr> {
    let mut ips: Vec<IpAddr> = cluster
        .services
        .iter()
        .flat_map(|s| {
            let load_balancer = s.load_balancer_ips.iter().chain(&s.proxied_load_balancer_ips);
            s.external_ips.iter().chain(load_balancer).copied()
        })
        .collect();
    ips.sort();
    ips.dedup();
    ips
}

/// The prefix an address of the node network gets on a node: the network's for the node IP; a
/// host prefix for a secondary address, as VIP managers (kube-vip, keepalived) add a VIP, so
/// that the kernel sends the node's own traffic to it from the VIP, not from the node IP.
pub fn node_network_prefix(node: &crate::model::Node, ip: std::net::IpAddr, net: ipnet::IpNet) -> u8 {
    if ip == node.ip() { net.prefix_len() } else { crate::model::IpFamily::of(ip).host_prefix() }
}
