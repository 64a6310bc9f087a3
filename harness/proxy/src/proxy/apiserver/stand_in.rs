//! A stand-in for a cluster packetproof did not make, to prove the existing-nodes mode where
//! no kind cluster exists: nodes that are privileged podman containers (`--network none`,
//! found again through `podman inspect` as kind's are through `docker inspect`) or, without a
//! container engine, plain namespaces; a node network (a bridge, playing kind's docker
//! network) giving each node `eth0` and the scenario's address; an embedded API server
//! holding the Nodes (on a control-plane host of that network for the nodes, and on this
//! machine's 127.0.0.1 for packetproof, as kind publishes its API server); and on every node
//! the reference proxy watching it. What the cluster is made of is this module's; what
//! packetproof adds to it during a run is `existing`'s.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Map, Value};

use super::node_image::{self, IMAGE};
use super::objects::node_object;
use super::sync::{self, SyncJudge, SyncMetrics};
use super::{DEFAULT_HEALTHZ_PORT, DEFAULT_METRICS_PORT, kubeconfig};
use crate::apiserver::{ApiServer, Kind, Store};
use crate::containment::ScratchDir;
use crate::model::{Cluster, NODE_NETWORK_BRIDGE, NODE_UPLINK, POD_INTERFACE};
use crate::proxy::kube_proxy_config::{Mode, NodeSettings, cidrs, kube_proxy_configuration};
use crate::topology::existing::{NodeMap, NodeRef};
use crate::topology::links::Links;
use crate::topology::netns::{Netns, process_prefix};
use crate::topology::sysctl;

const SYNC_TIMEOUT: Duration = Duration::from_secs(60);

/// What the stand-in nodes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nodes {
    /// Privileged containers of podman (or of the engine `ENGINE` names, e.g. docker).
    Podman,
    /// Network namespaces named `/run/netns/pp-…`.
    Namespaces,
}

/// Why the container engine cannot host stand-in nodes on this machine, if it cannot. The
/// nodes' image is made here, offline, when the engine lacks it (`node_image`).
pub fn podman_unavailable() -> Option<String> {
    node_image::ensure(&node_image::engine()).err().map(|e| format!("{e:#}"))
}

/// The proxy every stand-in node runs: this build's `reference-proxy`.
#[derive(Debug, Clone)]
pub struct NodeProxy {
    pub bin: PathBuf,
    pub mode: Mode,
    /// Further flags, e.g. `--mutant no-hairpin-masq`.
    pub flags: Vec<String>,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A running stand-in cluster. Dropping it removes its containers, namespaces and proxies.
pub struct StandIns {
    /// Where each scenario node is, as a run is told (`--node NAME=REF`).
    pub nodes: NodeMap,
    /// A kubeconfig for packetproof: the API server on this machine's 127.0.0.1.
    pub kubeconfig: PathBuf,
    pub store: Arc<Store>,
    node_netns: Vec<(String, Netns)>,
    containers: Vec<String>,
    made: Vec<Netns>,
    servers: Vec<ApiServer>,
    proxies: Vec<(String, Child, PathBuf)>,
    dir: ScratchDir,
    runtime: tokio::runtime::Handle,
}

impl StandIns {
    /// Makes the cluster for `cluster`'s nodes and waits until every node's proxy synced.
    pub fn start(
        cluster: &Cluster,
        kind: Nodes,
        proxy: &NodeProxy,
        runtime: &tokio::runtime::Handle,
    ) -> Result<StandIns> {
        let prefix = format!("{}si{}-", process_prefix(), NEXT.fetch_add(1, Ordering::Relaxed));
        let dir = std::env::temp_dir().join(format!("packetproof-{prefix}stand-in"));
        let dir = ScratchDir::create(dir.clone()).with_context(|| format!("creating {}", dir.display()))?;
        let mut s = StandIns {
            nodes: NodeMap::new(),
            kubeconfig: dir.path().join("kubeconfig"),
            store: Arc::new(Store::default()),
            node_netns: Vec::new(),
            containers: Vec::new(),
            made: Vec::new(),
            servers: Vec::new(),
            proxies: Vec::new(),
            dir,
            runtime: runtime.clone(),
        };
        // From here an error drops `s`, which removes what exists so far.
        let net = Netns::create(&format!("{prefix}net"))?;
        s.made.push(net.clone());
        for node in &cluster.nodes {
            let (reference, ns) = match kind {
                Nodes::Namespaces => {
                    let ns = Netns::create(&format!("{prefix}n-{}", node.name))?;
                    s.made.push(ns.clone());
                    (NodeRef::Path(ns.path()), ns)
                }
                Nodes::Podman => {
                    let name = format!("{prefix}{}", node.name);
                    s.containers.push(name.clone());
                    run_container(&name)?;
                    let reference = NodeRef::Container { engine: node_image::engine(), name };
                    let ns = reference.open()?;
                    (reference, ns)
                }
            };
            s.nodes.insert(node.name.clone(), reference);
            s.node_netns.push((node.name.clone(), ns));
        }
        let cp_ip = crate::topology::control_plane::unused_address(cluster)
            .context("no free node-network address for the API server")?;
        let cp = Netns::create(&format!("{prefix}cp"))?;
        s.made.push(cp.clone());
        runtime.block_on(wire(cluster, &net, &s.node_netns, &cp, cp_ip))?;
        // A node has long had its IPv6 link-local address, past duplicate address detection,
        // when a run meets it; so must these, or a snapshot sees the address arrive (the
        // kernel adds it a while after the carrier) or leave `tentative` during the run.
        let deadline = Instant::now() + SYNC_TIMEOUT;
        for (node, ns) in &s.node_netns {
            let settled = || -> Result<bool> {
                let link_local =
                    ns.exec("ip", &["-6", "address", "show", "dev", NODE_UPLINK, "scope", "link"], None)?;
                let tentative = ns.exec("ip", &["-6", "address", "show", "tentative"], None)?;
                Ok(!link_local.stdout.is_empty() && tentative.stdout.is_empty())
            };
            while !settled()? {
                if Instant::now() >= deadline {
                    bail!("stand-in node {node} keeps a tentative IPv6 address");
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }

        s.store.replace(Kind::Node, cluster.nodes.iter().map(node_object).collect())?;
        let inside = SocketAddr::new(cp_ip, 6443);
        let listener =
            cp.run(move || TcpListener::bind(inside))?.with_context(|| format!("binding {inside}"))?;
        s.servers.push(ApiServer::serve_store(listener, runtime, Arc::clone(&s.store))?);
        let outside = TcpListener::bind("127.0.0.1:0").context("binding the API server to 127.0.0.1")?;
        let outside_addr = outside.local_addr()?;
        s.servers.push(ApiServer::serve_store(outside, runtime, Arc::clone(&s.store))?);
        std::fs::write(&s.kubeconfig, kubeconfig(outside_addr)).context("writing the kubeconfig")?;
        let node_kubeconfig = s.dir.path().join("node-kubeconfig");
        std::fs::write(&node_kubeconfig, kubeconfig(inside)).context("writing the nodes' kubeconfig")?;

        let started = sync::unix_now();
        s.start_proxies(cluster, proxy, &node_kubeconfig)?;
        let deadline = Instant::now() + SYNC_TIMEOUT;
        for i in 0..s.node_netns.len() {
            let judge = SyncJudge::at_start(started);
            let (node, ns) = &s.node_netns[i];
            let (_, child, log) = &mut s.proxies[i];
            let alive = || -> Result<()> {
                if let Some(status) = child.try_wait()? {
                    bail!(
                        "the stand-in proxy on {node} exited ({status}): {}",
                        std::fs::read_to_string(&*log).unwrap_or_default()
                    );
                }
                Ok(())
            };
            sync::wait_metrics(ns, metrics_addr(), judge, deadline, alive)
                .with_context(|| format!("waiting for the stand-in proxy on {node}"))?;
        }
        Ok(s)
    }

    fn start_proxies(
        &mut self,
        cluster: &Cluster,
        proxy: &NodeProxy,
        kubeconfig: &std::path::Path,
    ) -> Result<()> {
        let (cluster_cidr, service_cidr) = cidrs(cluster);
        let gates: Map<String, Value> = match proxy.mode {
            Mode::Nftables => Map::from_iter([("NFTablesProxyMode".to_string(), Value::Bool(true))]),
            Mode::Iptables | Mode::Ipvs => Map::new(),
        };
        for (node, ns) in &self.node_netns {
            let kubeconfig = kubeconfig.to_string_lossy();
            let settings = NodeSettings {
                kubeconfig: &kubeconfig,
                node,
                cluster_cidr: &cluster_cidr,
                healthz: Some(SocketAddr::new(IpAddr::from([0, 0, 0, 0]), DEFAULT_HEALTHZ_PORT)),
                metrics: Some(metrics_addr()),
            };
            let config = kube_proxy_configuration(cluster, proxy.mode, &gates, &settings);
            let path = self.dir.path().join(format!("config-{node}.json"));
            std::fs::write(&path, serde_json::to_string_pretty(&config)?)
                .with_context(|| format!("writing {}", path.display()))?;
            let log = self.dir.path().join(format!("proxy-{node}.log"));
            let out = std::fs::File::create(&log)?;
            let mut cmd = ns.command(&proxy.bin.to_string_lossy());
            cmd.args(["reference-proxy", "--config"])
                .arg(&path)
                .args(["--netns", "/proc/self/ns/net", "--service-cidr", &service_cidr])
                .args(&proxy.flags)
                .stdin(Stdio::null())
                .stdout(out.try_clone()?)
                .stderr(out);
            // SAFETY: prctl is async-signal-safe. The proxy dies with this process.
            unsafe {
                cmd.pre_exec(|| {
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
            let child = crate::containment::spawn(&mut cmd)
                .with_context(|| format!("starting the stand-in proxy on {node}"))?;
            self.proxies.push((node.clone(), child, log));
        }
        Ok(())
    }

    /// Each node's sync metrics now.
    pub fn metrics(&self) -> Vec<SyncMetrics> {
        self.node_netns
            .iter()
            .map(|(_, ns)| {
                sync::http_get(ns, metrics_addr(), "/metrics")
                    .map(|b| SyncMetrics::parse(&b))
                    .unwrap_or_default()
            })
            .collect()
    }

    /// Waits until every node's proxy synced a change made at `pushed` (Unix time), `before`
    /// being the metrics just before it.
    pub fn wait_synced(&self, pushed: f64, before: Vec<SyncMetrics>) -> Result<()> {
        let deadline = Instant::now() + SYNC_TIMEOUT;
        for ((node, ns), before) in self.node_netns.iter().zip(before) {
            let judge = SyncJudge::after_push(pushed, before, sync::Families::BOTH);
            sync::wait_metrics(ns, metrics_addr(), judge, deadline, || Ok(()))
                .with_context(|| format!("waiting for the stand-in proxy on {node}"))?;
        }
        Ok(())
    }

    /// What a run must leave as it found it, per node: links and addresses, routes of every
    /// table, iptables and nftables rules (without counters), the settings packetproof may
    /// change. Not the neighbour or conntrack tables: traffic fills those.
    pub fn snapshot(&self) -> Result<BTreeMap<String, String>> {
        let mut all = BTreeMap::new();
        for (node, ns) in &self.node_netns {
            let mut text = String::new();
            for args in [
                &["-d", "link", "show"][..],
                &["address", "show"],
                &["-4", "route", "show", "table", "all"],
                &["-6", "route", "show", "table", "all"],
                &["-4", "rule", "show"],
            ] {
                let out = ns.exec("ip", args, None)?;
                text.push_str(&format!("# ip {}\n{}", args.join(" "), String::from_utf8_lossy(&out.stdout)));
            }
            text.push_str(&sync::without_counters(&super::dump(ns)?));
            for key in sysctl::NODE_SETTINGS.iter().chain(sysctl::EVERY_NAMESPACE).map(|(k, _)| k) {
                text.push_str(&format!("{key} = {}\n", sysctl::read(ns, key)?));
            }
            all.insert(node.clone(), text);
        }
        Ok(all)
    }

    /// The stand-in proxies' logs, for a failure message.
    pub fn logs(&self) -> String {
        self.proxies
            .iter()
            .map(|(node, _, log)| format!("--- {node}\n{}", std::fs::read_to_string(log).unwrap_or_default()))
            .collect()
    }

    fn remove_all(&mut self) -> Result<()> {
        let mut first_error: Option<anyhow::Error> = None;
        for (_, mut child, _) in self.proxies.drain(..) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let _ = child.wait();
        }
        for server in self.servers.drain(..) {
            if tokio::runtime::Handle::try_current().is_ok() {
                drop(server);
            } else {
                self.runtime.block_on(server.stop());
            }
        }
        for name in self.containers.drain(..) {
            let engine = node_image::engine();
            // podman waits 10 s for a SIGTERM that `sleep` as PID 1 ignores; docker kills at once.
            let now: &[&str] = if engine.ends_with("podman") { &["-t", "0"] } else { &[] };
            let out = Command::new(&engine).args(["rm", "-f"]).args(now).arg(&name).output();
            if let Err(e) = out.map_err(anyhow::Error::from).and_then(|o| {
                if o.status.success() {
                    Ok(())
                } else {
                    bail!("{}", String::from_utf8_lossy(&o.stderr).trim())
                }
            }) {
                first_error.get_or_insert(e.context(format!("removing container {name}")));
            }
        }
        for ns in self.made.drain(..).rev() {
            if let Err(e) = ns.remove() {
                first_error.get_or_insert(e);
            }
        }
        let _ = std::fs::remove_dir_all(self.dir.path());
        first_error.map_or(Ok(()), Err)
    }

    pub fn stop(mut self) -> Result<()> {
        self.remove_all()
    }
}

impl Drop for StandIns {
    fn drop(&mut self) {
        if let Err(e) = self.remove_all() {
            eprintln!("packetproof: removing the stand-in cluster: {e:#}");
        }
    }
}

fn metrics_addr() -> SocketAddr {
    SocketAddr::new(IpAddr::from([127, 0, 0, 1]), DEFAULT_METRICS_PORT)
}

/// A privileged container with no network of the engine's (podman's own would write rules
/// into this machine's iptables), idling; lowered ulimits (root here may lack
/// CAP_SYS_RESOURCE) and runc (crun refuses hybrid cgroups).
fn run_container(name: &str) -> Result<()> {
    let engine = node_image::engine();
    let out = Command::new(&engine)
        .args(["run", "-d", "--privileged", "--network", "none", "--runtime", "runc"])
        .args(["--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768"])
        .args(["--name", name, IMAGE])
        .output()
        .with_context(|| format!("running `{engine} run` for {name}"))?;
    if !out.status.success() {
        bail!("`{engine} run` for {name}: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// The node network: each node's `eth0` on one bridge with the scenario's addresses, the
/// settings a node boots with (not the ones only packetproof needs: those it sets and puts
/// back itself), and the control-plane host.
async fn wire(
    cluster: &Cluster,
    net: &Netns,
    nodes: &[(String, Netns)],
    cp: &Netns,
    cp_ip: IpAddr,
) -> Result<()> {
    let prefix = cluster.node_network.prefix_len();
    let bridge = Links::connect(net).await?;
    bridge.loopback_up().await?;
    let br0 = bridge.bridge(NODE_NETWORK_BRIDGE).await?;
    for (i, (name, ns)) in nodes.iter().enumerate() {
        for (key, value) in sysctl::NODE_SETTINGS {
            sysctl::write(ns, key, value)?;
        }
        let links = Links::connect(ns).await?;
        links.loopback_up().await?;
        let port = format!("n{i}");
        links.veth_into(NODE_UPLINK, &port, net).await?;
        bridge.attach(&port, br0, false).await?;
        let eth0 = links.index(NODE_UPLINK).await?;
        let node = cluster.node(name).context("a stand-in node not in the cluster")?;
        for ip in node.node_network_ips() {
            links
                .address(eth0, ip, crate::topology::node_network_prefix(node, ip, cluster.node_network))
                .await?;
        }
        links.up(eth0).await?;
    }
    let links = Links::connect(cp).await?;
    links.loopback_up().await?;
    links.veth_into(POD_INTERFACE, "cp0", net).await?;
    bridge.attach("cp0", br0, false).await?;
    let eth0 = links.index(POD_INTERFACE).await?;
    links.address(eth0, cp_ip, prefix).await?;
    links.up(eth0).await?;
    Ok(())
}
