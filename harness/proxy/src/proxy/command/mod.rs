//! The `command` adapter: runs the user's proxy program inside each node namespace, handing
//! it the desired state as a file.
//!
//! Per node, the adapter writes `state.yaml` (see [`state_file`]: a Kubernetes `List` of the
//! Nodes, Services and EndpointSlices, `metadata.resourceVersion` = the generation) into a
//! directory of its own and runs the command there: inside the node's network namespace, in
//! the scenario file's directory, stdout and stderr kept as artifacts
//! (`command-<node>.stdout`, `.stderr`, and the state file itself).
//!
//! # Options (a JSON object; relative paths are relative to the scenario file's directory)
//!
//! ```json
//! {"command": ["python3", "proxies/clusterip.py", "--state", "{state}", "--node", "{node}"],
//!  "mode": "daemon",
//!  "ready": ["sh", "-c", "test \"$(cat {state}.applied)\" = {generation}"],
//!  "reload": "sighup",
//!  "timeoutSeconds": 30}
//! ```
//! - `command` (required): the argv, with placeholders (see [`template`]: `{state}`, `{node}`,
//!   `{nodeIP}`, `{clusterCIDR}`, `{serviceCIDR}`, `{generation}`, `{proxyConfig}`). A relative
//!   program path with a `/` is taken from the scenario's directory, the working directory of
//!   every command. `{proxyConfig}` is a KubeProxyConfiguration (JSON) of the scenario's
//!   `spec.proxyConfig` (`proxy::kube_proxy_config::scenario_settings`): a scenario that sets
//!   any of it is refused unless the command or `ready` passes that file, since the proxy could
//!   not know settings the verdicts depend on.
//! - `mode`: `oneshot` (default) runs the command to its end on every node, at start and again
//!   after each update; exit status 0 means the node is programmed, anything else is a setup
//!   error carrying the command's stderr. `daemon` starts it once per node and keeps it running
//!   until teardown (SIGTERM, then SIGKILL after 5 s, to its whole process group). A oneshot
//!   command's leftovers (processes of its group still running when it exits) are killed.
//! - `ready` (required for `daemon`): a command run in the node namespace until it exits 0,
//!   which must mean "the node implements the state file's generation" (the `{generation}`
//!   placeholder lets it tell a fresh state from the previous one).
//! - `reload` (`daemon` only): how a daemon learns of an update: `sighup` (default: the state
//!   file is replaced, then the process the command started gets SIGHUP) or `watch` (the file
//!   is only replaced, atomically by a rename; the daemon watches it). Either way the update
//!   returns once `ready` passes for the new generation.
//! - `timeoutSeconds` (default 30): how long a oneshot run, or a daemon's readiness, may take.
//!
//! # Convention (no options given)
//!
//! For a scenario file `<dir>/<stem>.yaml`, the options are read from
//! `<dir>/proxies/<stem>.json`. This is how `spec.proxy: command` finds them until scenario
//! files can carry adapter options.

pub mod process;
pub(crate) mod state_file;
pub mod template;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use nix::sys::signal::Signal;
use serde::Deserialize;

use crate::containment::ScratchDir;
use crate::model::Cluster;
use crate::proxy::{Env, Proxy, Running, State};
use crate::topology::NodeHandle;
use process::Process;
use template::Template;

pub const NAME: &str = "command";

/// How long a daemon has to exit after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// Pause between two readiness checks.
const READY_POLL: Duration = Duration::from_millis(50);

/// Runs a program per node; the default reads its options by convention at start.
#[derive(Debug, Clone, Default)]
pub struct CommandProxy {
    config: Option<Config>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    #[default]
    Oneshot,
    Daemon,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reload {
    #[default]
    Sighup,
    Watch,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Options {
    command: Vec<String>,
    #[serde(default)]
    mode: Mode,
    ready: Option<Vec<String>>,
    reload: Option<Reload>,
    timeout_seconds: Option<f64>,
}

#[derive(Debug, Clone)]
struct Config {
    command: Template,
    mode: Mode,
    ready: Option<Template>,
    reload: Reload,
    timeout: Duration,
    /// The scenario's directory: every command's working directory.
    dir: PathBuf,
}

impl CommandProxy {
    /// From the adapter options of a scenario in `scenario_dir` (see the module doc).
    pub fn from_options(options: &serde_json::Value, scenario_dir: &Path) -> Result<CommandProxy> {
        let what = "reading the command adapter's options";
        let o: Options = serde_json::from_value(options.clone()).context(what)?;
        let dir = std::path::absolute(scenario_dir)
            .with_context(|| format!("resolving the scenario directory {}", scenario_dir.display()))?;
        let mut argv = o.command;
        // A relative program path is the scenario's, not the harness's working directory's.
        if let Some(program) = argv.first_mut()
            && program.contains('/')
            && Path::new(program.as_str()).is_relative()
        {
            *program = dir.join(&*program).to_string_lossy().into_owned();
        }
        let command = Template::new(argv).with_context(|| format!("{what}: in `command`"))?;
        let ready = o.ready.map(Template::new).transpose().with_context(|| format!("{what}: in `ready`"))?;
        match o.mode {
            Mode::Daemon if ready.is_none() => bail!(
                "{what}: mode daemon needs a `ready` command (run in the node until it exits 0), \
                 or the harness cannot tell when the node is programmed"
            ),
            Mode::Oneshot if ready.is_some() || o.reload.is_some() => {
                bail!(
                    "{what}: `ready` and `reload` are for mode daemon; a oneshot command is done when it exits 0"
                )
            }
            _ => {}
        }
        let seconds = o.timeout_seconds.unwrap_or(30.0);
        let timeout = Duration::try_from_secs_f64(seconds)
            .ok()
            .filter(|d| !d.is_zero())
            .with_context(|| format!("{what}: timeoutSeconds {seconds} is not a positive duration"))?;
        let reload = o.reload.unwrap_or_default();
        Ok(CommandProxy { config: Some(Config { command, mode: o.mode, ready, reload, timeout, dir }) })
    }

    /// The options of the scenario file `source` by convention: `<dir>/proxies/<stem>.json`.
    fn conventional(source: &Path) -> Result<CommandProxy> {
        let path = conventional_options(source);
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!("no options given to the command adapter, and none in {} either", path.display())
        })?;
        let options: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("reading {} as JSON", path.display()))?;
        let dir = crate::model::folder_of(source);
        CommandProxy::from_options(&options, dir).with_context(|| format!("in {}", path.display()))
    }
}

/// `<dir>/proxies/<stem>.json` for the scenario file `<dir>/<stem>.yaml`.
pub(crate) fn conventional_options(source: &Path) -> PathBuf {
    let stem = source.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    crate::model::folder_of(source).join("proxies").join(format!("{stem}.json"))
}

impl Proxy for CommandProxy {
    fn name(&self) -> &str {
        NAME
    }

    fn start<'a>(&'a self, state: &State<'_>, env: &Env<'a>) -> Result<Box<dyn Running + 'a>> {
        let config = match &self.config {
            Some(config) => config.clone(),
            None => CommandProxy::conventional(env.source)?.config.expect("from_options sets it"),
        };
        refuse_unknown_settings(&config, state.cluster)?;
        let dir = work_dir()?;
        // From here, dropping `launched` (on any error) stops what started and removes `dir`.
        let mut launched = Launched { config, dir, nodes: Vec::new(), generation: 1, stopped: false };
        for node in &env.topology.nodes {
            let dir = launched.dir.path().join(&node.name);
            std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
            launched.nodes.push(NodeRun { node: node.clone(), dir, daemon: None });
        }
        launched.write_states(state)?;
        match launched.config.mode {
            Mode::Oneshot => launched.run_oneshots(state.cluster)?,
            Mode::Daemon => {
                for i in 0..launched.nodes.len() {
                    launched.spawn_daemon(i, state.cluster)?;
                }
                launched.wait_ready(state.cluster)?;
            }
        }
        Ok(Box::new(launched))
    }
}

/// The scenario's proxy settings reach the proxy only through `{proxyConfig}`; a scenario that
/// changes them for a command that never reads them would be judged by settings the proxy
/// does not have.
fn refuse_unknown_settings(config: &Config, cluster: &Cluster) -> Result<()> {
    let changed = crate::proxy::kube_proxy_config::changed_settings(&cluster.proxy);
    let passed =
        config.command.uses("proxyConfig") || config.ready.as_ref().is_some_and(|r| r.uses("proxyConfig"));
    if changed.is_empty() || passed {
        return Ok(());
    }
    bail!(
        "the scenario sets spec.proxyConfig.{}, which the command adapter hands to the proxy only as \
         the {{proxyConfig}} file (a KubeProxyConfiguration): the command does not pass it, so the \
         proxy could not know it; add {{proxyConfig}} to the command's arguments",
        changed.join(", spec.proxyConfig.")
    )
}

/// A fresh directory for the state files and logs of one start.
fn work_dir() -> Result<ScratchDir> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let name = format!("packetproof-command-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    let dir = std::env::temp_dir().join(name);
    ScratchDir::create(dir.clone()).with_context(|| format!("creating {}", dir.display()))
}

/// One node's files and, in daemon mode, its process.
struct NodeRun {
    node: NodeHandle,
    /// Holds `state.yaml`, `stdout`, `stderr`, `ready.stdout`, `ready.stderr`.
    dir: PathBuf,
    daemon: Option<Process>,
}

impl NodeRun {
    fn state(&self) -> PathBuf {
        self.dir.join("state.yaml")
    }
    fn proxy_config(&self) -> PathBuf {
        self.dir.join("proxy-config.json")
    }
    fn log(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

struct Launched {
    config: Config,
    /// Every node's directory; removed when the proxy stops.
    dir: ScratchDir,
    nodes: Vec<NodeRun>,
    generation: u64,
    stopped: bool,
}

impl Launched {
    /// The placeholder values for `node`.
    fn vars(&self, run: &NodeRun, cluster: &Cluster) -> Result<BTreeMap<&'static str, String>> {
        let node = cluster
            .nodes
            .iter()
            .find(|n| n.name == run.node.name)
            .with_context(|| format!("node {} is not in the desired state", run.node.name))?;
        let (cluster_cidr, service_cidr) = crate::proxy::kube_proxy_config::cidrs(cluster);
        Ok(BTreeMap::from([
            ("state", run.state().to_string_lossy().into_owned()),
            ("node", node.name.clone()),
            ("nodeIP", node.ip().to_string()),
            ("clusterCIDR", cluster_cidr),
            ("serviceCIDR", service_cidr),
            ("generation", self.generation.to_string()),
            ("proxyConfig", run.proxy_config().to_string_lossy().into_owned()),
        ]))
    }

    fn write_states(&self, state: &State<'_>) -> Result<()> {
        let contents = state_file::render(state.cluster, state.objects, self.generation)?;
        let (cluster_cidr, _) = crate::proxy::kube_proxy_config::cidrs(state.cluster);
        for run in &self.nodes {
            state_file::write_atomically(&run.state(), &contents)
                .with_context(|| format!("writing the state file of node {}", run.node.name))?;
            let settings = crate::proxy::kube_proxy_config::scenario_settings(
                state.cluster,
                &run.node.name,
                &cluster_cidr,
            );
            state_file::write_atomically(
                &run.proxy_config(),
                serde_json::to_string_pretty(&settings)?.as_bytes(),
            )
            .with_context(|| format!("writing the proxy settings of node {}", run.node.name))?;
        }
        Ok(())
    }

    /// Runs the command on every node, one after another, each to a zero exit.
    fn run_oneshots(&self, cluster: &Cluster) -> Result<()> {
        for run in &self.nodes {
            let argv = self.config.command.render(&self.vars(run, cluster)?)?;
            let (stdout, stderr) = (run.log("stdout"), run.log("stderr"));
            let (status, process) = process::run(
                &run.node.netns,
                &argv,
                &self.config.dir,
                &stdout,
                &stderr,
                self.config.timeout,
            )?;
            match status {
                Some(s) if s.success() => {}
                Some(s) => bail!(
                    "node {}: `{}` failed ({s}); its stderr:\n{}",
                    run.node.name,
                    process.shown,
                    process.stderr_tail()
                ),
                None => bail!(
                    "node {}: `{}` did not finish within {:?} and was killed; its stderr:\n{}",
                    run.node.name,
                    process.shown,
                    self.config.timeout,
                    process.stderr_tail()
                ),
            }
        }
        Ok(())
    }

    fn spawn_daemon(&mut self, i: usize, cluster: &Cluster) -> Result<()> {
        let run = &self.nodes[i];
        let argv = self.config.command.render(&self.vars(run, cluster)?)?;
        let process =
            Process::spawn(&run.node.netns, &argv, &self.config.dir, &run.log("stdout"), &run.log("stderr"))
                .with_context(|| format!("starting the proxy on node {}", run.node.name))?;
        self.nodes[i].daemon = Some(process);
        Ok(())
    }

    /// Waits until every node's ready check exits 0 (one deadline for all), failing early if a
    /// daemon exits.
    fn wait_ready(&mut self, cluster: &Cluster) -> Result<()> {
        let deadline = Instant::now() + self.config.timeout;
        let ready = self.config.ready.clone().expect("daemon mode has a ready command");
        for i in 0..self.nodes.len() {
            let argv = ready.render(&self.vars(&self.nodes[i], cluster)?)?;
            let run = &mut self.nodes[i];
            let (out, err) = (run.log("ready.stdout"), run.log("ready.stderr"));
            loop {
                let daemon = run.daemon.as_mut().expect("daemon mode starts one per node");
                if let Some(status) = daemon.exited()? {
                    bail!(
                        "node {}: `{}` exited ({status}) before it was ready; its stderr:\n{}",
                        run.node.name,
                        daemon.shown,
                        daemon.stderr_tail()
                    );
                }
                let _ = std::fs::remove_file(&err);
                let left = deadline.saturating_duration_since(Instant::now()).max(READY_POLL);
                let (status, check) =
                    process::run(&run.node.netns, &argv, &self.config.dir, &out, &err, left)?;
                if status.is_some_and(|s| s.success()) {
                    break;
                }
                if Instant::now() >= deadline {
                    let last = status
                        .map_or("was killed at the deadline".to_string(), |s| format!("last ended with {s}"));
                    bail!(
                        "node {}: not ready within {:?} (generation {}): the ready check `{}` {last}; \
                         its stderr:\n{}\nthe proxy's stderr:\n{}",
                        run.node.name,
                        self.config.timeout,
                        self.generation,
                        check.shown,
                        check.stderr_tail(),
                        daemon_tail(run)
                    );
                }
                std::thread::sleep(READY_POLL);
            }
        }
        Ok(())
    }

    /// Stops every daemon and removes the files; safe to call twice.
    fn shutdown(&mut self) -> Result<()> {
        if self.stopped {
            return Ok(());
        }
        self.stopped = true;
        let mut errors = Vec::new();
        for run in &mut self.nodes {
            if let Some(mut daemon) = run.daemon.take()
                && let Err(e) = daemon.stop(STOP_GRACE)
            {
                errors.push(format!("node {}: {e:#}", run.node.name));
            }
        }
        if let Err(e) = std::fs::remove_dir_all(self.dir.path()) {
            errors.push(format!("removing {}: {e}", self.dir.path().display()));
        }
        if !errors.is_empty() {
            bail!("stopping the command proxy: {}", errors.join("; "));
        }
        Ok(())
    }
}

fn daemon_tail(run: &NodeRun) -> String {
    run.daemon.as_ref().map_or_else(|| process::tail(&run.log("stderr")), Process::stderr_tail)
}

impl Running for Launched {
    fn update(&mut self, state: &State<'_>) -> Result<()> {
        self.generation += 1;
        self.write_states(state)?;
        match self.config.mode {
            Mode::Oneshot => self.run_oneshots(state.cluster),
            Mode::Daemon => {
                if self.config.reload == Reload::Sighup {
                    for run in &mut self.nodes {
                        let daemon = run.daemon.as_mut().expect("daemon mode starts one per node");
                        daemon.signal(Signal::SIGHUP).with_context(|| {
                            format!("telling the proxy on node {} to reload", run.node.name)
                        })?;
                    }
                }
                self.wait_ready(state.cluster)
            }
        }
    }

    /// `iptables-save` and `nft list ruleset`: the program may have written either.
    fn dump_node(&self, node: &NodeHandle) -> Result<String> {
        let mut dump = String::new();
        for (program, args) in [("iptables-save", &[][..]), ("nft", &["list", "ruleset"][..])] {
            dump.push_str(&format!("# {program} {}\n", args.join(" ")));
            match node.netns.exec(program, args, None) {
                Ok(out) => dump.push_str(&crate::observe::nftrace::without_trace_table(
                    &String::from_utf8_lossy(&out.stdout),
                )),
                Err(e) => dump.push_str(&format!("# failed: {e:#}\n")),
            }
        }
        Ok(dump)
    }

    fn artifacts(&self) -> Vec<(String, Vec<u8>)> {
        let mut files = Vec::new();
        for run in &self.nodes {
            for name in ["stdout", "stderr", "state.yaml", "ready.stderr"] {
                // An empty log says nothing a missing one does not.
                if let Ok(bytes) = std::fs::read(run.log(name))
                    && !bytes.is_empty()
                {
                    files.push((format!("command-{}.{name}", run.node.name), bytes));
                }
            }
        }
        files
    }

    fn stop(mut self: Box<Self>) -> Result<()> {
        self.shutdown()
    }
}

impl Drop for Launched {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(v: serde_json::Value) -> Result<CommandProxy> {
        CommandProxy::from_options(&v, Path::new("/suite"))
    }

    #[test]
    fn a_scenario_that_changes_proxy_settings_needs_a_command_that_passes_them() {
        let mut cluster = Cluster::example(vec![]);
        let plain = options(serde_json::json!({"command": ["p", "{state}"]})).unwrap().config.unwrap();
        refuse_unknown_settings(&plain, &cluster).expect("default settings need not be passed");
        cluster.proxy.masquerade_all = true;
        let refused = refuse_unknown_settings(&plain, &cluster).unwrap_err().to_string();
        assert!(
            refused.contains("spec.proxyConfig.masqueradeAll") && refused.contains("{proxyConfig}"),
            "{refused}"
        );
        let literal =
            options(serde_json::json!({"command": ["p", "{{proxyConfig}}"]})).unwrap().config.unwrap();
        assert!(
            refuse_unknown_settings(&literal, &cluster).is_err(),
            "a literal brace is not the placeholder"
        );
        let passing =
            options(serde_json::json!({"command": ["p", "--config={proxyConfig}"]})).unwrap().config.unwrap();
        refuse_unknown_settings(&passing, &cluster).expect("passed as the file");
    }

    #[test]
    fn reads_oneshot_and_daemon_options() {
        let c = options(serde_json::json!({"command": ["proxies/p.py", "{state}"]})).unwrap().config.unwrap();
        assert_eq!(c.mode, Mode::Oneshot);
        assert_eq!(c.command.program(), "/suite/proxies/p.py");
        assert_eq!(c.timeout, Duration::from_secs(30));
        let c = options(serde_json::json!({
            "command": ["python3", "p.py"], "mode": "daemon", "ready": ["true"], "reload": "watch", "timeoutSeconds": 2.5
        }))
        .unwrap()
        .config
        .unwrap();
        assert_eq!((c.mode, c.reload, c.timeout), (Mode::Daemon, Reload::Watch, Duration::from_millis(2500)));
        // A bare program name is looked up on PATH, not in the scenario's directory.
        assert_eq!(c.command.program(), "python3");
    }

    #[test]
    fn refuses_options_that_cannot_work() {
        let err = |v| format!("{:#}", options(v).unwrap_err());
        assert!(
            err(serde_json::json!({"command": ["p"], "mode": "daemon"})).contains("needs a `ready` command")
        );
        assert!(err(serde_json::json!({"command": ["p"], "ready": ["true"]})).contains("for mode daemon"));
        assert!(err(serde_json::json!({"command": ["p", "{nodeName}"]})).contains("unknown placeholder"));
        assert!(err(serde_json::json!({"command": ["p"], "mode": "forever"})).contains("unknown variant"));
        assert!(err(serde_json::json!({"command": ["p"], "timeoutSeconds": 0})).contains("not a positive"));
        assert!(err(serde_json::json!({"cmd": ["p"]})).contains("unknown field"));
    }

    #[test]
    fn convention_reads_proxies_stem_json() {
        assert_eq!(conventional_options(Path::new("/suite/x.yaml")), Path::new("/suite/proxies/x.json"));
    }
}
