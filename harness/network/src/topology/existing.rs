//! Nodes packetproof did not make: a kind node or any container found through its engine
//! (`docker inspect` / `podman inspect`: the network namespace of its PID), or a namespace by
//! path. packetproof enters them, checks that they hold the addresses the scenario names, and
//! adds only what a CNI would for its own pods: a bridge with the pod gateway address, a veth
//! per pod, routes to the other nodes' scenario pod CIDRs, the node settings a CNI needs (each
//! changed one restored to its old value). Every addition is recorded here before it is made
//! and undone at the end: after success, failure, panic (drop) and Ctrl-C ([`undo_all`]).
//!
//! The node network is the cluster's own (kind's docker network), so external hosts cannot be
//! attached to it here: a scenario with external hosts is refused.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, Result, bail};

use super::journal::{self, Journal};
use super::links::Links;
use super::netns::Netns;
use super::{NODE_UPLINK, NodeHandle, Topology, on_node, sysctl, wire_pod};
use crate::model::{Cluster, Node, bridge_address};

/// Where an existing node's network namespace is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeRef {
    /// A container by name, through its engine's `inspect` (`docker`, `podman`).
    Container { engine: String, name: String },
    /// A namespace file: `/proc/PID/ns/net`, `/run/netns/NAME`.
    Path(PathBuf),
}

impl fmt::Display for NodeRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeRef::Container { engine, name } => write!(f, "{engine}:{name}"),
            NodeRef::Path(path) => write!(f, "netns:{}", path.display()),
        }
    }
}

impl std::str::FromStr for NodeRef {
    type Err = anyhow::Error;

    /// `docker:NAME`, `podman:NAME`, `netns:PATH`, or an absolute path.
    fn from_str(text: &str) -> Result<NodeRef> {
        match text.split_once(':') {
            Some(("docker" | "podman", "")) => bail!("{text:?}: a container name is missing"),
            Some((engine @ ("docker" | "podman"), name)) => {
                Ok(NodeRef::Container { engine: engine.to_string(), name: name.to_string() })
            }
            Some(("netns", path)) if path.starts_with('/') => Ok(NodeRef::Path(path.into())),
            _ if text.starts_with('/') => Ok(NodeRef::Path(text.into())),
            _ => bail!("{text:?}: expected docker:CONTAINER, podman:CONTAINER, netns:/PATH or /PATH"),
        }
    }
}

/// The scenario's node names and where each existing node is (`--node NAME=REF`).
pub type NodeMap = BTreeMap<String, NodeRef>;

/// `NAME=REF`, as `--node` takes it.
pub fn parse_assignment(text: &str) -> Result<(String, NodeRef)> {
    let (name, reference) = text
        .split_once('=')
        .with_context(|| format!("{text:?}: expected NODE=REF, e.g. kind-worker=docker:kind-worker"))?;
    Ok((name.to_string(), reference.parse()?))
}

impl NodeRef {
    /// Opens the namespace: a container's through `ENGINE inspect` of its PID.
    pub fn open(&self) -> Result<Netns> {
        match self {
            NodeRef::Path(path) => Netns::open_path(path),
            NodeRef::Container { engine, name } => {
                let pid = container_pid(engine, name)?;
                Netns::open_path(&PathBuf::from(format!("/proc/{pid}/ns/net")))
                    .with_context(|| format!("entering container {name} ({engine}, pid {pid})"))
            }
        }
    }
}

/// The PID of a running container, as `docker inspect` and `podman inspect` report it.
fn container_pid(engine: &str, name: &str) -> Result<u32> {
    let out = std::process::Command::new(engine)
        .args(["inspect", "--format", "{{.State.Pid}}", name])
        .output()
        .with_context(|| format!("running `{engine} inspect {name}`"))?;
    if !out.status.success() {
        bail!("`{engine} inspect {name}`: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    match text.trim().parse::<u32>() {
        Ok(0) => bail!("container {name} ({engine}) is not running"),
        Ok(pid) => Ok(pid),
        Err(_) => bail!("`{engine} inspect {name}` gave no PID: {:?}", text.trim()),
    }
}

/// One interface address as `ip -j address` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Address {
    interface: String,
    ip: IpAddr,
    prefix: u8,
}

/// The addresses of every interface of the namespace (read, never changed).
fn addresses(ns: &Netns) -> Result<Vec<Address>> {
    let out = ns.exec("ip", &["-j", "address", "show"], None)?;
    parse_addresses(&String::from_utf8_lossy(&out.stdout))
}

fn parse_addresses(json: &str) -> Result<Vec<Address>> {
    let links: serde_json::Value = serde_json::from_str(json).context("reading `ip -j address` output")?;
    let mut found = Vec::new();
    for link in links.as_array().into_iter().flatten() {
        let interface = link["ifname"].as_str().unwrap_or_default().to_string();
        for info in link["addr_info"].as_array().into_iter().flatten() {
            let (Some(ip), Some(prefix)) = (info["local"].as_str(), info["prefixlen"].as_u64()) else {
                continue;
            };
            let Ok(ip) = ip.parse() else { continue };
            found.push(Address { interface: interface.clone(), ip, prefix: prefix as u8 });
        }
    }
    Ok(found)
}

/// The scenario's node must be the existing one: each of its node-network addresses on the
/// uplink ([`NODE_UPLINK`], where captures listen), with the scenario's node-network prefix.
fn check_addresses(node: &Node, reference: &NodeRef, found: &[Address]) -> Result<()> {
    let want = node.all_ips();
    for ip in want {
        if !found.iter().any(|a| a.interface == NODE_UPLINK && a.ip == ip) {
            let held: Vec<String> = found
                .iter()
                .filter(|a| !a.ip.is_loopback())
                .map(|a| format!("{} {}/{}", a.interface, a.ip, a.prefix))
                .collect();
            bail!(
                "node {} ({reference}) does not hold the scenario's address {ip} on {NODE_UPLINK}; it holds: {} \
                 (write the node's real addresses into the scenario)",
                node.name,
                if held.is_empty() { "nothing".to_string() } else { held.join(", ") }
            );
        }
    }
    Ok(())
}

/// Something packetproof added to a namespace it did not make, and how to take it back.
pub enum Undo {
    /// A link it made (its routes and addresses go with it).
    Link { netns: Netns, name: String },
    /// A route it added: the arguments of `ip route del`.
    Route { netns: Netns, args: Vec<String> },
    /// A setting it changed, and the value to put back.
    Sysctl { netns: Netns, key: String, value: String },
    /// Anything else (objects written into a cluster's API server).
    Hook(Box<dyn FnOnce() -> Result<()> + Send>),
}

impl Undo {
    /// How the journal writes it down; `None` for what a path cannot name (a hook).
    fn entry(&self) -> Option<journal::Entry> {
        Some(match self {
            Undo::Link { netns, name } => journal::Entry::Link { netns: netns.path(), name: name.clone() },
            Undo::Route { netns, args } => journal::Entry::Route { netns: netns.path(), args: args.clone() },
            Undo::Sysctl { netns, key, value } => {
                journal::Entry::Sysctl { netns: netns.path(), key: key.clone(), value: value.clone() }
            }
            Undo::Hook(_) => return None,
        })
    }

    /// The undo a journal entry names, in its namespace if that still exists.
    fn from_entry(entry: journal::Entry, delete: DeleteApiObject) -> Result<Option<Undo>> {
        let open = |path: &std::path::Path| match Netns::open_path(path) {
            Ok(ns) => Ok(Some(ns)),
            // The node (container) is gone, and what was added to it with it.
            Err(_) if !path.exists() => Ok(None),
            Err(e) => Err(e),
        };
        Ok(match entry {
            journal::Entry::Link { netns, name } => open(&netns)?.map(|netns| Undo::Link { netns, name }),
            journal::Entry::Route { netns, args } => open(&netns)?.map(|netns| Undo::Route { netns, args }),
            journal::Entry::Sysctl { netns, key, value } => {
                open(&netns)?.map(|netns| Undo::Sysctl { netns, key, value })
            }
            journal::Entry::ApiObject { kubeconfig, kind, namespace, name } => {
                Some(Undo::Hook(Box::new(move || delete(&kubeconfig, &kind, &namespace, &name))))
            }
        })
    }

    fn run(self) -> Result<()> {
        match self {
            Undo::Link { netns, name } => tolerate_gone(netns.exec("ip", &["link", "del", &name], None)),
            Undo::Route { netns, args } => {
                let mut all = vec!["route", "del"];
                all.extend(args.iter().map(String::as_str));
                tolerate_gone(netns.exec("ip", &all, None))
            }
            Undo::Sysctl { netns, key, value } => sysctl::write(&netns, &key, &value),
            Undo::Hook(hook) => hook(),
        }
    }
}

/// A link or route that is already gone (a pod's veth goes with its namespace) is undone.
fn tolerate_gone(result: Result<std::process::Output>) -> Result<()> {
    match result {
        Err(e)
            if ["Cannot find device", "No such process", "No such device"]
                .iter()
                .any(|m| format!("{e:#}").contains(m)) =>
        {
            Ok(())
        }
        other => other.map(|_| ()),
    }
}

/// What every live [`Additions`] still has to undo, by its id: Ctrl-C undoes it all.
static PENDING: Mutex<BTreeMap<u64, Vec<Undo>>> = Mutex::new(BTreeMap::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

fn pending() -> std::sync::MutexGuard<'static, BTreeMap<u64, Vec<Undo>>> {
    PENDING.lock().unwrap_or_else(|e| e.into_inner())
}

/// A record of additions to things packetproof did not make, undone in reverse order by
/// [`Additions::undo`], on drop, or by [`undo_all`] on Ctrl-C.
#[derive(Debug)]
pub struct Additions {
    id: u64,
}

impl Default for Additions {
    fn default() -> Self {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        pending().insert(id, Vec::new());
        Additions { id }
    }
}

impl Additions {
    /// Records an addition; call it before making the addition, so an interrupt in between
    /// still undoes it (undoing what is not there is tolerated). It is also written to the
    /// journal, for a run killed outright ([`undo_orphans`]).
    pub fn push(&self, undo: Undo) {
        if let Some(entry) = undo.entry() {
            self.write_down(&entry);
        }
        pending().entry(self.id).or_default().push(undo);
    }

    /// Writes down, for a run killed outright, an addition a [`Undo::Hook`] takes back.
    pub fn write_down(&self, entry: &journal::Entry) {
        if let Err(e) = Journal::new(self.id).append(entry) {
            eprintln!("packetproof: {e:#} (a run killed outright could not take this addition back)");
        }
    }

    /// Undoes everything recorded, newest first; reports the first failure but tries all.
    pub fn undo(self) -> Result<()> {
        self.undo_now()
    }

    /// Drops the record without undoing it (its owner took everything back itself).
    pub fn forget(self) {
        pending().remove(&self.id);
        Journal::new(self.id).close();
    }

    fn undo_now(&self) -> Result<()> {
        let undos = pending().remove(&self.id).unwrap_or_default();
        let undone = run_all(undos);
        Journal::new(self.id).close();
        undone
    }
}

impl Drop for Additions {
    fn drop(&mut self) {
        if let Err(e) = self.undo_now() {
            eprintln!("packetproof: undoing additions to existing nodes: {e:#}");
        }
    }
}

fn run_all(undos: Vec<Undo>) -> Result<()> {
    let mut first_error = None;
    for undo in undos.into_iter().rev() {
        if let Err(e) = undo.run() {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Deletes an object a killed run wrote to a cluster's API (kubeconfig, kind, namespace, name).
/// The proxy that wrote it knows how; topology only keeps the record of it.
pub type DeleteApiObject = fn(&std::path::Path, &str, &str, &str) -> Result<()>;

/// Undoes every live record; for Ctrl-C and fatal paths.
pub fn undo_all() {
    let all: Vec<(u64, Vec<Undo>)> = std::mem::take(&mut *pending()).into_iter().collect();
    for (id, undos) in all {
        match run_all(undos) {
            Ok(()) => Journal::new(id).close(),
            Err(e) => eprintln!("packetproof: undoing additions to existing nodes: {e:#}"),
        }
    }
}

/// What the journals of runs killed outright held.
#[derive(Debug, Default)]
pub struct OrphansUndone {
    /// Each journal undone, with how many additions it held.
    pub undone: Vec<String>,
    /// Each journal that could not be undone now (its cluster unreachable, say), with why: kept
    /// for a later try.
    pub not_undone: Vec<String>,
}

/// Takes back what runs killed outright added to existing nodes (all runs' but this one's with
/// `include_live`), newest first. A journal that cannot be undone stays, and the others are
/// still undone: one unreachable cluster must not keep every later run from cleaning up.
pub fn undo_orphans(include_live: bool, delete: DeleteApiObject) -> Result<OrphansUndone> {
    Ok(undo_each(journal::orphans(include_live)?, delete))
}

fn undo_each(orphans: Vec<journal::Orphan>, delete: DeleteApiObject) -> OrphansUndone {
    let mut found = OrphansUndone::default();
    for orphan in orphans {
        let count = orphan.entries.len();
        let path = orphan.path.display().to_string();
        let undone = orphan
            .entries
            .into_iter()
            .map(|entry| Undo::from_entry(entry, delete))
            .filter_map(Result::transpose)
            .collect::<Result<Vec<_>>>()
            .with_context(|| format!("reading {path}"))
            .and_then(|undos| run_all(undos).with_context(|| format!("undoing {path}")));
        match undone {
            Ok(()) => {
                let _ = std::fs::remove_file(&orphan.path);
                found.undone.push(format!("{path} ({count} additions)"));
            }
            Err(e) => found.not_undone.push(format!("{e:#}")),
        }
    }
    found
}

/// A short tag for the links of one topology, unique per process and topology
/// (interface names hold 15 bytes): `pp<pid base 36>x<n>`.
fn link_tag(topology: u32) -> String {
    let mut pid = std::process::id();
    let mut digits = Vec::new();
    loop {
        digits.push(std::char::from_digit(pid % 36, 36).expect("a base-36 digit"));
        pid /= 36;
        if pid == 0 {
            break;
        }
    }
    let pid: String = digits.into_iter().rev().collect();
    format!("pp{pid}x{topology}")
}

/// Builds a topology on existing nodes: each of the scenario's nodes must be named in
/// `nodes`; pods are namespaces of this run wired into them.
pub(super) async fn build(cluster: &Cluster, nodes: &NodeMap, prefix: &str, index: u32) -> Result<Topology> {
    if !cluster.external_hosts.is_empty() {
        bail!(
            "external hosts are not modelled against existing nodes: their node network is the cluster's own \
             (run this scenario on packetproof's own nodes)"
        );
    }
    let unknown: Vec<&String> = nodes.keys().filter(|n| cluster.node(n).is_none()).collect();
    if !unknown.is_empty() {
        bail!("existing nodes {unknown:?} are not nodes of the scenario");
    }
    let mut topo = Topology {
        // The cluster's node network is not ours; this namespace stays empty.
        node_network: Netns::create(&format!("{prefix}net"))?,
        nodes: Vec::new(),
        pods: BTreeMap::new(),
        external_hosts: BTreeMap::new(),
        pod_bridge: format!("{}b", link_tag(index)),
        created: Vec::new(),
        additions: Some(Additions::default()),
        steered: Default::default(),
    };
    topo.created.push(topo.node_network.clone());
    for node in &cluster.nodes {
        let reference = nodes.get(&node.name).with_context(|| {
            format!(
                "node {} of the scenario is not given an existing node (--node {}=REF)",
                node.name, node.name
            )
        })?;
        let ns = reference.open()?;
        check_addresses(node, reference, &addresses(&ns)?)?;
        topo.nodes.push(NodeHandle { name: node.name.clone(), netns: ns });
    }
    for pod in &cluster.pods {
        let ns = topo.create(&format!("{prefix}p-{}", pod.name))?;
        topo.pods.insert(pod.name.clone(), ns);
    }
    wire(&topo, cluster, &link_tag(index)).await?;
    wait_until_ready(&topo, &link_tag(index)).await?;
    Ok(topo)
}

/// As on packetproof's own nodes (`ready.rs`), no probe goes out before the kernel has acted
/// on the new links' carrier: every link of the pods' namespaces, and on each node the links
/// this run added there (named with its tag), the node's own left alone.
async fn wait_until_ready(topo: &Topology, tag: &str) -> Result<()> {
    for ns in &topo.created {
        super::ready::wait_until_ready(&Links::connect(ns).await?).await?;
    }
    for node in &topo.nodes {
        let links = Links::connect(&node.netns).await?;
        super::ready::wait_until_ready_named(&links, |name| name.starts_with(tag)).await?;
    }
    Ok(())
}

/// What a CNI adds to a node for its pods, recorded before each step.
async fn wire(topo: &Topology, cluster: &Cluster, tag: &str) -> Result<()> {
    let additions = topo.additions.as_ref().expect("an existing-node topology records its additions");
    let views: Vec<Cluster> = if cluster.second_family.is_some() {
        cluster.families().into_iter().map(|f| cluster.family_view(f)).collect()
    } else {
        vec![cluster.clone()]
    };
    for node in &cluster.nodes {
        let ns = &topo.node(&node.name)?.netns;
        for (key, value) in sysctl::NODE_SETTINGS.iter().chain(sysctl::EVERY_NAMESPACE) {
            let old = sysctl::read(ns, key)?;
            if old != *value {
                additions.push(Undo::Sysctl { netns: ns.clone(), key: key.to_string(), value: old });
                sysctl::write(ns, key, value)?;
            }
        }
        let links = Links::connect(ns).await?;
        let uplink = links.index(NODE_UPLINK).await?;
        let bridge = topo.pod_bridge.clone();
        additions.push(Undo::Link { netns: ns.clone(), name: bridge.clone() });
        let cni0 = links.bridge(&bridge).await?;
        for (_, node) in on_node(&views, &node.name) {
            links.address(cni0, bridge_address(&node.pod_cidr()), node.pod_cidr().prefix_len()).await?;
        }
        for (view, node) in on_node(&views, &node.name) {
            // The other nodes' scenario pod CIDRs, as a routed CNI adds them.
            for other in view.nodes.iter().filter(|o| o.name != node.name) {
                let args = vec![
                    other.pod_cidr().to_string(),
                    "via".into(),
                    other.ip().to_string(),
                    "dev".into(),
                    NODE_UPLINK.into(),
                ];
                additions.push(Undo::Route { netns: ns.clone(), args });
                links.route_via(other.pod_cidr(), other.ip(), uplink).await?;
            }
            // A node without a route to the service CIDR (no default route) gets one, or
            // untranslated service traffic fails with ENETUNREACH before the proxy's REJECT.
            let probe = view.service_cidr.hosts().next().unwrap_or(view.service_cidr.addr());
            if ns.exec("ip", &["route", "get", &probe.to_string()], None).is_err() {
                let args = vec![view.service_cidr.to_string(), "dev".into(), NODE_UPLINK.into()];
                additions.push(Undo::Route { netns: ns.clone(), args });
                links.route_dev(view.service_cidr, uplink).await?;
            }
        }
        for (j, pod) in cluster.pods.iter().filter(|p| p.node == node.name).enumerate() {
            let pod_ns = &topo.pods[&pod.name];
            let host_side = format!("{tag}v{j}");
            additions.push(Undo::Link { netns: ns.clone(), name: host_side.clone() });
            wire_pod(&links, ns, cni0, pod_ns, &host_side, &views, pod, node).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::PerFamily;

    /// A cluster that cannot be reached now keeps its own journal, and only its own: the
    /// journal of a node that is gone (its namespace with it) is undone beside it.
    #[test]
    fn a_journal_that_cannot_be_undone_stays_and_the_others_are_undone() {
        let dir = std::env::temp_dir().join(format!("pp-orphans-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, entry: journal::Entry| {
            std::fs::write(dir.join(name), serde_json::to_string(&entry).unwrap() + "\n").unwrap();
        };
        // Pids that cannot be alive (above pid_max's ceiling) own both.
        write(
            "4194305-1",
            journal::Entry::ApiObject {
                kubeconfig: "/nonexistent/kubeconfig".into(),
                kind: "Service".into(),
                namespace: "default".into(),
                name: "web".into(),
            },
        );
        write("4194306-1", journal::Entry::Link { netns: "/nonexistent/ns/net".into(), name: "ppx0".into() });
        let unreachable: DeleteApiObject =
            |_, _, _, name| anyhow::bail!("deleting {name}: connection refused");
        let found = undo_each(journal::orphans_in(&dir, false).unwrap(), unreachable);
        let left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into())
            .collect();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(found.undone.len(), 1, "{found:?}");
        assert!(found.undone[0].contains("4194306-1"), "{found:?}");
        assert_eq!(found.not_undone.len(), 1, "{found:?}");
        assert!(
            found.not_undone[0].contains("4194305-1") && found.not_undone[0].contains("connection refused")
        );
        assert_eq!(left, ["4194305-1"], "the journal not undone stays for a later try");
    }

    #[test]
    fn node_references_read_like_the_engines_name_them() {
        let r: NodeRef = "docker:kind-worker".parse().unwrap();
        assert_eq!(r, NodeRef::Container { engine: "docker".into(), name: "kind-worker".into() });
        assert_eq!("podman:n1".parse::<NodeRef>().unwrap().to_string(), "podman:n1");
        assert_eq!("/proc/42/ns/net".parse::<NodeRef>().unwrap(), NodeRef::Path("/proc/42/ns/net".into()));
        assert_eq!("netns:/run/netns/x".parse::<NodeRef>().unwrap(), NodeRef::Path("/run/netns/x".into()));
        assert!("docker:".parse::<NodeRef>().is_err());
        assert!("kind-worker".parse::<NodeRef>().is_err());
        assert!("netns:relative".parse::<NodeRef>().is_err());
        let (name, r) = parse_assignment("node-a=podman:stand-in-a").unwrap();
        assert_eq!((name.as_str(), r.to_string().as_str()), ("node-a", "podman:stand-in-a"));
        assert!(parse_assignment("podman:x").is_err());
    }

    #[test]
    fn a_node_must_hold_the_scenarios_address_on_its_uplink() {
        let json = r#"[{"ifname":"lo","addr_info":[{"family":"inet","local":"127.0.0.1","prefixlen":8}]},
            {"ifname":"eth0","addr_info":[{"family":"inet","local":"172.18.0.3","prefixlen":16},
            {"family":"inet6","local":"fc00:f853:ccd:e793::3","prefixlen":64}]}]"#;
        let found = parse_addresses(json).unwrap();
        assert_eq!(found.len(), 3);
        let node = |ip: &str| Node {
            name: "kind-worker".into(),
            ips: PerFamily::single(ip.parse().unwrap()),
            secondary_ips: vec![],
            pod_cidrs: PerFamily::single("10.244.1.0/24".parse().unwrap()),
            zone: None,
        };
        let r: NodeRef = "docker:kind-worker".parse().unwrap();
        assert!(check_addresses(&node("172.18.0.3"), &r, &found).is_ok());
        let e = check_addresses(&node("172.18.0.9"), &r, &found).unwrap_err().to_string();
        assert!(e.contains("does not hold the scenario's address 172.18.0.9 on eth0"), "{e}");
        assert!(e.contains("eth0 172.18.0.3/16"), "{e}");
        assert!(!e.contains("127.0.0.1"), "{e}");
    }

    #[test]
    fn link_tags_fit_an_interface_name_with_their_suffixes() {
        let tag = link_tag(999);
        assert!(tag.starts_with("pp"));
        assert!(format!("{tag}v99").len() <= 15, "{tag}");
    }
}
