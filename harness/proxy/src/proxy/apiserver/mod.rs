//! Proxies that watch the Kubernetes API (an unmodified kube-proxy, or `packetproof
//! reference-proxy`): the harness runs an API server on a control-plane host of the node
//! network, serves the desired state there, starts the proxy's command in every node
//! namespace with a kubeconfig (and a KubeProxyConfiguration, `{config}`) pointing at it, and
//! waits until each node's proxy has applied every change: by kube-proxy's sync metrics
//! (`sync`), or, for a proxy without them, by its rules settling.
//!
//! Selected as `apiserver` with a command template (options `command`, `mode`,
//! `featureGates`, `metricsPort`, `healthzPort`, `profile`, `syncTimeoutSeconds`; or env
//! `PACKETPROOF_PROXY_COMMAND`), or as `reference-proxy-iptables` / `reference-proxy-nftables`
//! (this binary's `reference-proxy`, given the same configuration file).
//!
//! A real kube-proxy (v1.30) runs under packetproof like this:
//!
//! ```text
//! packetproof run scenarios --proxy apiserver --proxy-option mode=iptables \
//!   --proxy-option 'command=kube-proxy --config={config} --hostname-override={node}'
//! ```
//!
//! For nftables mode: `mode=nftables` and `featureGates=NFTablesProxyMode=true` (v1.30).
//! IPVS mode (`mode=ipvs`) needs a kernel with IPVS: inside the kernel matrix, which carries
//! the binary into its VMs (`packetproof matrix --guest-file PATH/kube-proxy`).

mod command;
mod node_image;

pub mod objects;
pub mod stand_in;
pub mod sync;

use std::net::{IpAddr, SocketAddr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Map, Value};

use crate::containment::ScratchDir;
use crate::proxy::kube_proxy_config::{self as config, Mode, NodeSettings};
pub use command::{PLACEHOLDERS, Template, Vars};
use sync::{SyncJudge, SyncMetrics};

use super::{Env, Proxy, Running, State};
use crate::apiserver::ApiServer;
use crate::model::Cluster;
use crate::model::Profile;
use crate::topology::control_plane::ControlPlane;
use crate::topology::{Netns, NodeHandle};

pub const NAME: &str = "apiserver";
pub const REFERENCE_IPTABLES: &str = "reference-proxy-iptables";
pub const REFERENCE_NFTABLES: &str = "reference-proxy-nftables";

/// The API server's port on the control-plane host (the namespace is ours alone).
const API_PORT: u16 = 6443;
/// kube-proxy's default healthz port.
pub(crate) const DEFAULT_HEALTHZ_PORT: u16 = 10256;
/// kube-proxy's default metrics port (on 127.0.0.1 of each node).
pub(crate) const DEFAULT_METRICS_PORT: u16 = 10249;
/// kube-proxy waits up to ~30 s for its Node before falling back; a first sync takes 1-2 s.
const DEFAULT_SYNC_TIMEOUT: Duration = Duration::from_secs(60);
/// Without sync metrics: rules unchanged this long count as applied (kube-proxy's default
/// min-sync-period is 1 s).
const QUIET: Duration = Duration::from_millis(1500);
/// Without sync metrics: after a change, rules that have not moved this long count as applied
/// (the change did not touch this node's rules).
const UNCHANGED_AFTER: Duration = Duration::from_secs(5);
/// SIGTERM, then SIGKILL after this.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// A proxy driven through the API server.
#[derive(Debug, Clone)]
pub struct ApiServerProxy {
    name: String,
    template: Template,
    /// Where each node's proxy serves `/healthz` (`{healthzPort}`, and the configuration's
    /// healthzBindAddress).
    healthz_port: Option<u16>,
    /// Where each node's proxy serves kube-proxy's `/metrics` on 127.0.0.1: the sync signal.
    /// None: wait for the node's rules to settle instead.
    metrics_port: Option<u16>,
    /// The configuration file's `mode`.
    mode: Mode,
    /// The configuration file's `featureGates`.
    feature_gates: Map<String, Value>,
    sync_timeout: Duration,
    /// What its outcomes are judged by: the implementation it runs, if known.
    profile: Profile,
}

impl ApiServerProxy {
    /// From scenario or command-line options: `command` (a string split on whitespace, or a
    /// list of words) with placeholders [`PLACEHOLDERS`]; `mode` (`iptables`, `nftables`:
    /// the configuration file's mode, default iptables) and `featureGates` (a mapping, or
    /// `A=true,B=false`); `metricsPort` and `healthzPort` (numbers, or null for none; 10249
    /// and 10256 when the command uses `{config}` or the port's placeholder); without a
    /// metrics port, syncs are told by the node's rules settling; `syncTimeoutSeconds`;
    /// `profile` (default: the mode's kube-proxy profile when the command uses `{config}`,
    /// else `kubernetes`).
    pub fn from_options(options: &Value) -> Result<Self> {
        let template = match &options["command"] {
            Value::String(s) => Template::parse(s)?,
            Value::Array(words) => Template::from_words(
                words
                    .iter()
                    .map(|w| w.as_str().map(str::to_string).context("a command word that is not a string"))
                    .collect::<Result<_>>()?,
            )?,
            Value::Null => match std::env::var("PACKETPROOF_PROXY_COMMAND") {
                Ok(s) => Template::parse(&s)?,
                Err(_) => bail!(
                    "proxy {NAME} needs a command: option `command` or env PACKETPROOF_PROXY_COMMAND \
                     (placeholders: {})",
                    PLACEHOLDERS.join(" ")
                ),
            },
            other => bail!("option `command` must be a string or a list of strings, not {other}"),
        };
        let writes_config = template.uses("{config}");
        let port = |key: &str, placeholder: &str, default: u16| -> Result<Option<u16>> {
            match options.get(key) {
                None if writes_config || template.uses(placeholder) => Ok(Some(default)),
                None | Some(Value::Null) => Ok(None),
                Some(v) => Ok(Some(
                    v.as_u64()
                        .and_then(|p| u16::try_from(p).ok())
                        .with_context(|| format!("option `{key}` must be a port number or null"))?,
                )),
            }
        };
        let healthz_port = port("healthzPort", "{healthzPort}", DEFAULT_HEALTHZ_PORT)?;
        let metrics_port = port("metricsPort", "{metricsPort}", DEFAULT_METRICS_PORT)?;
        let mode = match options.get("mode") {
            None => Mode::Iptables,
            Some(v) => Mode::parse(v.as_str().context("option `mode` must be a string")?)
                .map_err(|e| anyhow::anyhow!("option `mode`: {e}"))?,
        };
        let feature_gates = match options.get("featureGates") {
            None => Map::new(),
            Some(v) => feature_gates(v)?,
        };
        let sync_timeout = sync_timeout(options)?;
        // kube-proxy configured by the file is judged by its mode's choices.
        let default_profile = if writes_config { mode_profile(mode) } else { Profile::KUBERNETES };
        let profile = super::options::profile(options, default_profile)?;
        super::options::refuse_unknown(NAME, options, OPTIONS)?;
        Ok(ApiServerProxy {
            name: NAME.into(),
            template,
            healthz_port,
            metrics_port,
            mode,
            feature_gates,
            sync_timeout,
            profile,
        })
    }

    /// `packetproof reference-proxy` in `mode` (`iptables` or `nftables`), found as env
    /// `PACKETPROOF_BIN` or else this very executable.
    pub fn reference(mode: Mode) -> Result<Self> {
        Self::reference_with_flags(mode, &[])
    }

    /// A reference proxy from scenario or command-line options: `flags`, a list of further
    /// `reference-proxy` flags (e.g. `["--no-conntrack-cleanup"]`, a broken build for
    /// `packetproof diff` or mutant tests), and `syncTimeoutSeconds` (a first sync of 10,000
    /// Services takes longer than the default).
    pub(crate) fn reference_from_options(mode: Mode, options: &Value) -> Result<Self> {
        let mut flags = Vec::new();
        for (key, value) in options.as_object().into_iter().flatten() {
            match (key.as_str(), value) {
                ("flags", Value::Array(words)) => {
                    for w in words {
                        flags.push(w.as_str().context("option `flags` must list strings")?);
                    }
                }
                ("flags", _) => bail!("option `flags` must be a list of strings"),
                ("syncTimeoutSeconds", _) => {}
                (other, _) => bail!(
                    "{} takes only the options `flags` and `syncTimeoutSeconds`, not {other:?}",
                    reference_name(mode)?
                ),
            }
        }
        let mut proxy = Self::reference_with_flags(mode, &flags)?;
        proxy.sync_timeout = sync_timeout(options)?;
        Ok(proxy)
    }

    /// [`ApiServerProxy::reference`] with further flags, e.g. `--no-conntrack-cleanup` (a
    /// deliberately broken proxy for mutant tests); the name says which.
    pub(crate) fn reference_with_flags(mode: Mode, flags: &[&str]) -> Result<Self> {
        let bin = match std::env::var_os("PACKETPROOF_BIN") {
            Some(b) => PathBuf::from(b),
            None => std::env::current_exe().context("finding this executable for reference-proxy")?,
        };
        Self::reference_at(&bin, mode, flags)
    }

    /// The reference proxy run from the `packetproof` binary at `bin` (tests name the one
    /// cargo built: `env!("CARGO_BIN_EXE_packetproof")`).
    pub fn reference_at(bin: &std::path::Path, mode: Mode, flags: &[&str]) -> Result<Self> {
        let mut words = vec![bin.to_string_lossy().into_owned(), "reference-proxy".into()];
        words.extend(
            "--config {config} --netns {netns} --service-cidr {serviceCIDR}"
                .split_whitespace()
                .map(str::to_string),
        );
        words.extend(flags.iter().map(|f| f.to_string()));
        let mut name = reference_name(mode)?.to_string();
        if !flags.is_empty() {
            name = format!("{name} ({})", flags.join(" "));
        }
        Ok(ApiServerProxy {
            name,
            template: Template::from_words(words)?,
            healthz_port: Some(DEFAULT_HEALTHZ_PORT),
            metrics_port: Some(DEFAULT_METRICS_PORT),
            mode,
            // As kube-proxy v1.30, the reference proxy runs nftables mode only behind its gate.
            feature_gates: match mode {
                Mode::Nftables => Map::from_iter([("NFTablesProxyMode".to_string(), Value::Bool(true))]),
                Mode::Iptables | Mode::Ipvs => Map::new(),
            },
            sync_timeout: DEFAULT_SYNC_TIMEOUT,
            // Built on the built-in generators, which write what kube-proxy writes.
            profile: mode_profile(mode),
        })
    }
}

/// The reference proxy's name in `mode`.
fn reference_name(mode: Mode) -> Result<&'static str> {
    match mode {
        Mode::Iptables => Ok(REFERENCE_IPTABLES),
        Mode::Nftables => Ok(REFERENCE_NFTABLES),
        Mode::Ipvs => bail!("the reference proxy has no IPVS mode"),
    }
}

/// Option `syncTimeoutSeconds`: how long a node's proxy may take to report a sync.
fn sync_timeout(options: &Value) -> Result<Duration> {
    match options.get("syncTimeoutSeconds") {
        None => Ok(DEFAULT_SYNC_TIMEOUT),
        Some(v) => Ok(Duration::from_secs(
            v.as_u64().filter(|s| *s > 0).context("option `syncTimeoutSeconds` must be a positive number")?,
        )),
    }
}

/// The options of `apiserver`.
const OPTIONS: &[&str] =
    &["command", "mode", "featureGates", "metricsPort", "healthzPort", "profile", "syncTimeoutSeconds"];

fn mode_profile(mode: Mode) -> Profile {
    match mode {
        Mode::Iptables => Profile::KUBE_PROXY_IPTABLES,
        Mode::Nftables => Profile::KUBE_PROXY_NFTABLES,
        Mode::Ipvs => Profile::KUBE_PROXY_IPVS,
    }
}

/// `featureGates` as a mapping (`{NFTablesProxyMode: true}`) or kube-proxy's flag form
/// (`NFTablesProxyMode=true,Other=false`).
fn feature_gates(value: &Value) -> Result<Map<String, Value>> {
    let mut gates = Map::new();
    match value {
        Value::Object(m) => {
            for (k, v) in m {
                let on = v.as_bool().with_context(|| format!("feature gate {k} must be true or false"))?;
                gates.insert(k.clone(), Value::Bool(on));
            }
        }
        Value::String(text) => {
            for pair in text.split(',').filter(|p| !p.is_empty()) {
                let (k, v) = pair
                    .split_once('=')
                    .with_context(|| format!("feature gate {pair:?}: expected NAME=true|false"))?;
                let on =
                    v.parse::<bool>().with_context(|| format!("feature gate {k} must be true or false"))?;
                gates.insert(k.to_string(), Value::Bool(on));
            }
        }
        other => bail!("option `featureGates` must be a mapping or NAME=BOOL,…, not {other}"),
    }
    Ok(gates)
}

/// The cluster's proxy configuration as kube-proxy flags (`{proxyFlags}`).
pub(crate) fn proxy_flags(cluster: &Cluster) -> Vec<String> {
    let mut flags = Vec::new();
    if cluster.proxy.masquerade_all {
        flags.push("--masquerade-all".to_string());
    }
    let mut ranges: Vec<String> = cluster.proxy.node_port_addresses.iter().map(|r| r.to_string()).collect();
    if !ranges.is_empty() {
        ranges.sort();
        flags.push(format!("--nodeport-addresses={}", ranges.join(",")));
    }
    if !cluster.proxy.localhost_node_ports {
        flags.push("--iptables-localhost-nodeports=false".to_string());
    }
    flags
}

/// A kubeconfig naming the API server at `server` (plain HTTP, no credentials).
pub fn kubeconfig(server: SocketAddr) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: packetproof\n  cluster:\n    server: http://{server}\n\
         users:\n- name: proxy\n  user: {{}}\ncontexts:\n- name: packetproof\n  context:\n    cluster: packetproof\n\
         \x20   user: proxy\ncurrent-context: packetproof\n"
    )
}

impl Proxy for ApiServerProxy {
    fn name(&self) -> &str {
        &self.name
    }

    fn profile(&self) -> Profile {
        self.profile
    }

    fn start<'a>(&'a self, state: &State<'_>, env: &Env<'a>) -> Result<Box<dyn Running + 'a>> {
        let control_plane = env.runtime.block_on(ControlPlane::attach(env.topology, state.cluster))?;
        let bind = SocketAddr::new(control_plane.ip, API_PORT);
        let listener = control_plane
            .netns
            .run(move || listen(bind))?
            .with_context(|| format!("binding the API server to {bind}"))?;
        let server = ApiServer::serve(listener, &env.runtime)?;
        let dir = std::env::temp_dir().join(format!("packetproof-{}", control_plane.netns.name()));
        let dir = ScratchDir::create(dir.clone()).with_context(|| format!("creating {}", dir.display()))?;
        let mut running = ApiRunning {
            proxy: self,
            nodes: Vec::new(),
            server: Some(server),
            control_plane: Some(control_plane),
            runtime: env.runtime.clone(),
            dir,
        };
        // From here an error drops `running`, which stops whatever started.
        // What the nodes hold before any proxy runs, for proxies without sync metrics.
        let baselines = running.baselines(&env.topology.nodes);
        objects::push(running.store(), state)?;
        let started = sync::unix_now();
        let (cluster_cidr, service_cidr) = config::cidrs(state.cluster);
        for node in &env.topology.nodes {
            let model = state
                .cluster
                .node(&node.name)
                .with_context(|| format!("node {} is not in the model", node.name))?;
            let kubeconfig_path = running.dir.path().join(format!("kubeconfig-{}", node.name));
            std::fs::write(&kubeconfig_path, kubeconfig(bind))
                .with_context(|| format!("writing {}", kubeconfig_path.display()))?;
            let kubeconfig_path = kubeconfig_path.to_string_lossy().into_owned();
            let settings = NodeSettings {
                kubeconfig: &kubeconfig_path,
                node: &node.name,
                cluster_cidr: &cluster_cidr,
                healthz: self.healthz_port.map(|p| SocketAddr::new(IpAddr::from([0, 0, 0, 0]), p)),
                metrics: self.metrics_port.map(|p| SocketAddr::new(IpAddr::from([127, 0, 0, 1]), p)),
            };
            let config =
                config::kube_proxy_configuration(state.cluster, self.mode, &self.feature_gates, &settings);
            let config_path = running.dir.path().join(format!("config-{}.yaml", node.name));
            std::fs::write(&config_path, serde_json::to_string_pretty(&config)?)
                .with_context(|| format!("writing {}", config_path.display()))?;
            let vars = Vars {
                kubeconfig: kubeconfig_path.clone(),
                node: node.name.clone(),
                node_ip: model.ip().to_string(),
                netns: node.netns.name().to_string(),
                cluster_cidr: cluster_cidr.clone(),
                service_cidr: service_cidr.clone(),
                healthz_port: self.healthz_port,
                metrics_port: self.metrics_port,
                config: config_path.to_string_lossy().into_owned(),
                proxy_flags: proxy_flags(state.cluster),
            };
            running.spawn(node, &self.template.expand(&vars)?)?;
        }
        let judges = running
            .nodes
            .iter()
            .map(|n| SyncJudge::at_start(started).with_topology_labels(zoned(state.cluster, &n.node.name)))
            .collect();
        running.wait_synced(judges, &baselines, None)?;
        Ok(Box::new(running))
    }
}

/// Whether `node` carries a zone label, which reaches kube-proxy by an event of its own.
fn zoned(cluster: &Cluster, node: &str) -> bool {
    cluster.node(node).is_some_and(|n| n.zone.is_some())
}

/// A listening socket on `addr`, which may still be tentative (an IPv6 address on a link
/// whose carrier is not up yet): free-bind does not wait for it.
fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    match addr {
        SocketAddr::V4(_) => socket.set_freebind_v4(true)?,
        SocketAddr::V6(_) => socket.set_freebind_v6(true)?,
    }
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(128)?;
    Ok(socket.into())
}

/// One node's proxy process.
struct NodeProxy {
    node: NodeHandle,
    child: Option<Child>,
    /// The command it runs, to run it again (a restart).
    argv: Vec<String>,
    log: PathBuf,
    /// Where its kube-proxy metrics answer, if it serves them.
    metrics: Option<SocketAddr>,
}

struct ApiRunning<'a> {
    proxy: &'a ApiServerProxy,
    nodes: Vec<NodeProxy>,
    server: Option<ApiServer>,
    control_plane: Option<ControlPlane>,
    runtime: tokio::runtime::Handle,
    /// Kubeconfigs and logs.
    dir: ScratchDir,
}

impl ApiRunning<'_> {
    fn store(&self) -> &crate::apiserver::Store {
        self.server.as_ref().expect("the server runs until stop").store()
    }

    fn spawn(&mut self, node: &NodeHandle, argv: &[String]) -> Result<()> {
        let log = self.dir.path().join(format!("{}.log", node.name));
        // Appended to: a restarted proxy's log follows its first run's.
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone().context("sharing the proxy log")?;
        let mut cmd = node.netns.command(&argv[0]);
        cmd.args(&argv[1..]).stdin(Stdio::null()).stdout(out).stderr(err);
        // SAFETY: prctl is async-signal-safe. The proxy dies with the harness, never outlives it.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = crate::containment::spawn(&mut cmd)
            .with_context(|| format!("starting `{}` on node {}", argv.join(" "), node.name))?;
        let metrics = self.proxy.metrics_port.map(|p| SocketAddr::new(IpAddr::from([127, 0, 0, 1]), p));
        self.nodes.push(NodeProxy {
            node: node.clone(),
            child: Some(child),
            argv: argv.to_vec(),
            log,
            metrics,
        });
        Ok(())
    }

    /// Each node's rules without counters, when syncs are told by rules settling (no metrics).
    fn baselines(&self, nodes: &[NodeHandle]) -> Vec<String> {
        if self.proxy.metrics_port.is_some() {
            return Vec::new();
        }
        nodes.iter().map(|n| dump(&n.netns).map(|d| sync::without_counters(&d)).unwrap_or_default()).collect()
    }

    /// Each node's sync metrics now (empty where they cannot be read: the judge then waits
    /// for them).
    fn metrics_now(&self) -> Vec<SyncMetrics> {
        self.nodes
            .iter()
            .map(|n| match n.metrics {
                Some(addr) => sync::http_get(&n.node.netns, addr, "/metrics")
                    .map(|body| SyncMetrics::parse(&body))
                    .unwrap_or_default(),
                None => SyncMetrics::default(),
            })
            .collect()
    }

    /// Waits until every node's proxy has applied what was pushed: by its sync metrics, as
    /// `judges` (one per node) decide, or by its rules moving from `baselines` and settling
    /// (or, with `unchanged_after`, staying).
    fn wait_synced(
        &mut self,
        judges: Vec<SyncJudge>,
        baselines: &[String],
        unchanged_after: Option<Duration>,
    ) -> Result<()> {
        let deadline = Instant::now() + self.proxy.sync_timeout;
        let store = std::sync::Arc::clone(self.server.as_ref().expect("the server runs until stop").store());
        // Every node's wait at once (`sync::wait_all`): each node's grace overlaps the others'.
        let waited = {
            let mut waits: Vec<Box<dyn sync::NodeWait + '_>> = Vec::new();
            for ((i, n), judge) in self.nodes.iter_mut().enumerate().zip(judges) {
                let NodeProxy { node, child, log, metrics, .. } = n;
                let (node, log) = (&*node, &*log);
                let netns = &node.netns;
                let store = std::sync::Arc::clone(&store);
                let alive = move || -> Result<()> {
                    // A proxy refused what it asks for will not sync: the refusal is the cause
                    // (the server's gap, or the proxy's request, for the user to see: exit 2).
                    refused(&store)?;
                    let Some(c) = child.as_mut() else {
                        bail!("the proxy on node {} was stopped", node.name)
                    };
                    // An exit is most often a wrong command or flag, for the user to fix (exit 2);
                    // a proxy that runs but cannot apply its rules fails (`sync::MetricsWait`).
                    if let Some(status) = c.try_wait()? {
                        bail!(
                            "the proxy on node {} exited ({status}); its log ends:\n{}",
                            node.name,
                            log_tail(log)
                        );
                    }
                    Ok(())
                };
                waits.push(match metrics {
                    Some(addr) => Box::new(sync::MetricsWait::new(netns, *addr, judge, alive)),
                    None => {
                        let baseline = baselines.get(i).map_or("", String::as_str);
                        let dump = move || dump(netns);
                        Box::new(sync::StableWait::new(baseline, QUIET, unchanged_after, dump, alive))
                    }
                });
            }
            let mut waits: Vec<&mut dyn sync::NodeWait> = waits.iter_mut().map(|w| &mut **w as _).collect();
            sync::wait_all(&mut waits, deadline)
        };
        // The log goes with the proxy; its end goes into the error. A proxy that failed its
        // syncs has failed the scenario, and its whole log is the evidence.
        if let Err((i, e)) = waited {
            let NodeProxy { node, log, .. } = &self.nodes[i];
            let proxy_failed = e.chain().any(|c| c.is::<crate::proxy::ProxyFailed>());
            let e = e.context(format!("waiting for the proxy on node {} to sync", node.name));
            let message = if format!("{e:#}").contains("its log ends") {
                format!("{e:#}")
            } else {
                format!("{e:#}; its log ends:\n{}", log_tail(log))
            };
            if proxy_failed {
                let whole = std::fs::read(log).unwrap_or_default();
                let log = vec![(format!("{}.log", node.name), whole)];
                return Err(crate::proxy::ProxyFailed { message, log }.into());
            }
            bail!("{message}");
        }
        Ok(())
    }

    fn stop_all(&mut self) -> Result<()> {
        let mut first_error = None;
        for n in &mut self.nodes {
            if let Some(child) = n.child.take()
                && let Err(e) = stop_child(child)
            {
                first_error.get_or_insert(e.context(format!("stopping the proxy on node {}", n.node.name)));
            }
        }
        if let Some(server) = self.server.take() {
            if tokio::runtime::Handle::try_current().is_ok() {
                drop(server);
            } else {
                self.runtime.block_on(server.stop());
            }
        }
        // Removes the control-plane namespace.
        self.control_plane.take();
        let _ = std::fs::remove_dir_all(self.dir.path());
        first_error.map_or(Ok(()), Err)
    }
}

/// An error naming every request the embedded server refused, if it refused any. Whatever a
/// proxy asks for is served or this says so: a proxy kept from its objects never syncs, and
/// "no sync" would blame it for the server's gap.
fn refused(store: &crate::apiserver::Store) -> Result<()> {
    let refusals = store.refusals();
    let Some(first) = refusals.first() else { return Ok(()) };
    let mut seen = std::collections::HashSet::new();
    let distinct: Vec<String> =
        refusals.iter().map(|r| r.to_string()).filter(|l| seen.insert(l.clone())).collect();
    let shown = distinct.iter().take(5).map(|l| format!("\n  {l}")).collect::<String>();
    let more = distinct.len().saturating_sub(5);
    let more =
        if more > 0 { format!("\n  … and {more} more (apiserver-requests.log)") } else { String::new() };
    bail!(
        "the embedded API server refused {} request(s) of the proxy, first {} {}: a proxy kept from \
         the objects it watches cannot be judged:{shown}{more}",
        refusals.len(),
        first.request.split(' ').next().unwrap_or(""),
        first.request.split(' ').nth(1).map_or("", |p| p.split('?').next().unwrap_or(p)),
    )
}

/// SIGTERM, up to [`STOP_GRACE`] to exit, then SIGKILL.
fn stop_child(mut child: Child) -> Result<()> {
    let pid = Pid::from_raw(child.id() as i32);
    if child.try_wait()?.is_none() {
        let _ = kill(pid, Signal::SIGTERM);
        let deadline = Instant::now() + STOP_GRACE;
        while child.try_wait()?.is_none() {
            if Instant::now() >= deadline {
                let _ = child.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    child.wait().context("reaping the proxy")?;
    Ok(())
}

fn log_tail(path: &std::path::Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// The node's rules, whatever the proxy uses: iptables of both families, and the nftables
/// tables that are not iptables-nft's own (kube-proxy's nftables mode writes `kube-proxy`).
pub fn dump(netns: &Netns) -> Result<String> {
    let mut out = String::new();
    let mut section = |title: String, text: &str| {
        // Without the timestamps iptables-save prints, unchanged rules read the same.
        let text: String = text.lines().filter(|l| !l.starts_with('#')).map(|l| format!("{l}\n")).collect();
        if !text.trim().is_empty() {
            out.push_str(&format!("# {title}\n{text}"));
        }
    };
    for program in ["iptables-save", "ip6tables-save"] {
        if let Ok(o) = netns.exec(program, &[], None) {
            section(program.to_string(), &String::from_utf8_lossy(&o.stdout));
        }
    }
    if let Ok(o) = netns.exec("nft", &["list", "tables"], None) {
        for line in String::from_utf8_lossy(&o.stdout).lines() {
            let Some((family, name)) = nft_table(line) else { continue };
            if let Ok(t) = netns.exec("nft", &["list", "table", family, name], None) {
                section(format!("nft list table {family} {name}"), &String::from_utf8_lossy(&t.stdout));
            }
        }
    }
    Ok(out)
}

/// `table ip kube-proxy` → (`ip`, `kube-proxy`); `None` for the tables iptables-nft keeps
/// (already in the iptables-save sections) and for coverage's trace table (the harness's, not
/// the proxy's: a sync must never be read into it).
fn nft_table(line: &str) -> Option<(&str, &str)> {
    const XTABLES: &[&str] = &["filter", "nat", "mangle", "raw", "security"];
    let mut words = line.split_whitespace();
    let (Some("table"), Some(family), Some(name)) = (words.next(), words.next(), words.next()) else {
        return None;
    };
    let xtables = matches!(family, "ip" | "ip6") && XTABLES.contains(&name);
    let traced = name == crate::observe::nftrace::TRACE_TABLE;
    (!xtables && !traced).then_some((family, name))
}

impl Running for ApiRunning<'_> {
    fn update(&mut self, state: &State<'_>) -> Result<()> {
        let nodes: Vec<NodeHandle> = self.nodes.iter().map(|n| n.node.clone()).collect();
        let baselines = self.baselines(&nodes);
        let before = self.metrics_now();
        let pushed = sync::unix_now();
        let resource_version = self.store().resource_version();
        if objects::push(self.store(), state)? == 0 {
            return Ok(());
        }
        let families = objects::families_reached(self.store(), resource_version)?;
        let programming = objects::programming_expected(self.store(), resource_version)?;
        let judges = before
            .into_iter()
            .map(|b| SyncJudge::after_push(pushed, b, families).with_programming(programming))
            .collect();
        self.wait_synced(judges, &baselines, Some(UNCHANGED_AFTER))
    }

    /// Each node's proxy process is stopped (SIGTERM) and run again with the same command,
    /// against the same API server holding `state`, as a node's kube-proxy restarts.
    fn restart(&mut self, state: &State<'_>) -> Result<bool> {
        objects::push(self.store(), state)?;
        let nodes: Vec<NodeHandle> = self.nodes.iter().map(|n| n.node.clone()).collect();
        // The rules stay as they were: a proxy without metrics is done once they stand still.
        let baselines = self.baselines(&nodes);
        let stopped = std::mem::take(&mut self.nodes);
        let mut commands = Vec::new();
        for mut n in stopped {
            if let Some(child) = n.child.take() {
                stop_child(child).with_context(|| format!("stopping the proxy on node {}", n.node.name))?;
            }
            commands.push((n.node, n.argv));
        }
        let restarted = sync::unix_now();
        for (node, argv) in &commands {
            self.spawn(node, argv)?;
        }
        let judges = self
            .nodes
            .iter()
            .map(|n| SyncJudge::at_start(restarted).with_topology_labels(zoned(state.cluster, &n.node.name)))
            .collect();
        self.wait_synced(judges, &baselines, Some(UNCHANGED_AFTER))?;
        Ok(true)
    }

    fn dump_node(&self, node: &NodeHandle) -> Result<String> {
        dump(&node.netns)
    }

    fn artifacts(&self) -> Vec<(String, Vec<u8>)> {
        let mut files: Vec<(String, Vec<u8>)> = self
            .nodes
            .iter()
            .map(|n| (format!("{}.log", n.node.name), std::fs::read(&n.log).unwrap_or_default()))
            .collect();
        if let Some(server) = &self.server {
            files.push(("apiserver-requests.log".into(), server.store().request_log().into_bytes()));
        }
        files
    }

    fn stop(mut self: Box<Self>) -> Result<()> {
        self.stop_all()
    }
}

impl Drop for ApiRunning<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.stop_all() {
            eprintln!("packetproof: stopping {}: {e:#}", self.proxy.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nft_dumps_leave_iptables_nft_tables_to_iptables_save() {
        assert_eq!(nft_table("table ip kube-proxy"), Some(("ip", "kube-proxy")));
        assert_eq!(nft_table("table inet cilium"), Some(("inet", "cilium")));
        assert_eq!(nft_table("table ip nat"), None);
        assert_eq!(nft_table("table ip6 filter"), None);
        assert_eq!(nft_table("table inet packetproof-trace"), None);
        assert_eq!(nft_table(""), None);
    }

    #[test]
    fn reference_proxies_take_a_sync_timeout() {
        let p = ApiServerProxy::reference_from_options(Mode::Nftables, &json!({"syncTimeoutSeconds": 900}))
            .unwrap();
        assert_eq!(p.sync_timeout, Duration::from_secs(900));
        assert_eq!(p.name(), REFERENCE_NFTABLES);
        for bad in [json!({"syncTimeoutSeconds": 0}), json!({"syncTimeoutSeconds": "900"})] {
            assert!(ApiServerProxy::reference_from_options(Mode::Nftables, &bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn reference_proxies_take_no_other_option() {
        let p = ApiServerProxy::reference_from_options(
            Mode::Iptables,
            &json!({"flags": ["--no-conntrack-cleanup"]}),
        )
        .unwrap();
        assert_eq!(p.name(), "reference-proxy-iptables (--no-conntrack-cleanup)");
        assert!(ApiServerProxy::reference_from_options(Mode::Iptables, &json!({"command": "x"})).is_err());
        assert!(ApiServerProxy::reference_from_options(Mode::Iptables, &json!({"flags": "x"})).is_err());
        assert_eq!(
            ApiServerProxy::reference_from_options(Mode::Iptables, &json!({})).unwrap().name(),
            REFERENCE_IPTABLES
        );
    }

    #[test]
    fn options_give_the_command_and_the_healthz_port() {
        let p = ApiServerProxy::from_options(
            &json!({"command": "kube-proxy --healthz-bind-address=0.0.0.0:{healthzPort}"}),
        )
        .unwrap();
        assert_eq!(p.healthz_port, Some(DEFAULT_HEALTHZ_PORT));
        let p =
            ApiServerProxy::from_options(&json!({"command": ["my proxy", "{node}"], "healthzPort": null}))
                .unwrap();
        assert_eq!(p.healthz_port, None);
        assert!(ApiServerProxy::from_options(&json!({"command": 3})).is_err());
        let p =
            ApiServerProxy::from_options(&json!({"command": "x", "profile": "kube-proxy-nftables"})).unwrap();
        assert_eq!(p.profile, Profile::KUBE_PROXY_NFTABLES);
        assert!(ApiServerProxy::from_options(&json!({"command": "x", "profile": "ipvs"})).is_err());
        assert!(ApiServerProxy::from_options(&json!({"command": "x {bogus}"})).is_err());
        assert!(ApiServerProxy::from_options(&json!({"command": "x", "healthzport": 1})).is_err());
    }

    #[test]
    fn a_configuration_file_brings_kube_proxys_ports_and_the_modes_profile() {
        let p = ApiServerProxy::from_options(&json!({
            "command": "kube-proxy --config={config}",
            "mode": "nftables",
            "featureGates": "NFTablesProxyMode=true",
        }))
        .unwrap();
        assert_eq!(
            (p.metrics_port, p.healthz_port),
            (Some(DEFAULT_METRICS_PORT), Some(DEFAULT_HEALTHZ_PORT))
        );
        assert_eq!(p.profile, Profile::KUBE_PROXY_NFTABLES);
        assert_eq!(p.feature_gates["NFTablesProxyMode"], true);
        let p = ApiServerProxy::from_options(
            &json!({"command": "kube-proxy --config={config}", "metricsPort": null}),
        )
        .unwrap();
        assert_eq!((p.metrics_port, p.mode, p.profile), (None, Mode::Iptables, Profile::KUBE_PROXY_IPTABLES));
        let ipvs = ApiServerProxy::from_options(&json!({"command": "kp --config={config}", "mode": "ipvs"}))
            .unwrap();
        assert_eq!((ipvs.mode, ipvs.profile), (Mode::Ipvs, Profile::KUBE_PROXY_IPVS));
        assert!(ApiServerProxy::from_options(&json!({"command": "x", "mode": "userspace"})).is_err());
        assert!(ApiServerProxy::from_options(&json!({"command": "x", "featureGates": "A=maybe"})).is_err());
    }

    #[test]
    fn a_kubeconfig_reads_back_with_kubes_parser() {
        let text = kubeconfig("192.168.50.254:6443".parse().unwrap());
        let k = read_kubeconfig(&text);
        assert_eq!(
            k.clusters[0].cluster.as_ref().unwrap().server.as_deref(),
            Some("http://192.168.50.254:6443")
        );
    }

    /// Writes the text to a file and lets kube read it, as a proxy built on kube would.
    fn read_kubeconfig(text: &str) -> kube::config::Kubeconfig {
        let path = std::env::temp_dir().join(format!("pp-kubeconfig-test-{}", std::process::id()));
        std::fs::write(&path, text).unwrap();
        let k = kube::config::Kubeconfig::read_from(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        k
    }
}
