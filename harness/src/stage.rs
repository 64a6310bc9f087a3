//! The stage a scenario's traffic plays on: the async runtime and the namespaces, then, as the
//! caller needs them, the pods' servers, the proxy under test (started, changed, restarted)
//! and the capture points. The runner and `bench` set up through it, so the order of set-up
//! and teardown is written once; everything comes down in reverse order on every way out: at
//! the end of [`Stage::play`], on an error, in a panic.
//!
//! A worker that runs one cluster again and again (the mutant hunt: every mutant against each
//! scenario) keeps its stage in a [`Keeper`]: at the end of a run that went well the stage is
//! kept as the run left it, and the next run of the same topology resets it (`reuse::reset`)
//! and plays on it instead of building a new one. A next run of another topology takes it down
//! unreset: a reset nobody uses is work lost. A stage the reset cannot put back as built is
//! taken down, and the reason printed.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context, Result};
use tokio::runtime::Runtime;

use crate::model::{Cluster, NODE_UPLINK, POD_INTERFACE};
use crate::observe::{Capture, Frame};
use crate::proxy::{Env, Proxy, Running, State};
use crate::reuse;
use crate::topology::Topology;
use crate::topology::existing::NodeMap;
use crate::traffic::Servers;
use crate::traffic::client::SourcePorts;

/// The runtime and the namespaces. Dropping it removes every namespace.
pub struct Stage {
    // Fields drop in declaration order: the namespaces go before the runtime.
    topology: Topology,
    runtime: Runtime,
    /// For a stage a [`Keeper`] may keep: its topology's shape and what it read as built.
    reusable: Option<(String, reuse::State)>,
    /// The clients' source ports, over every run on this stage: a kept stage's next run takes
    /// ports its last run did not, whose connections may still be in TIME_WAIT.
    source_ports: SourcePorts,
}

/// A kept stage whose clients have taken source ports past this is not kept again: the
/// ports wrap around to ones whose connections may still be in TIME_WAIT.
const LAST_SOURCE_PORT_TO_KEEP: u16 = 60_000;

/// The stage a worker kept from its last run, for a next run of the same topology.
#[derive(Default)]
pub struct Keeper {
    /// As its last run left it: reset only when a run of its topology comes.
    kept: Option<Stage>,
    /// Why the last stage kept could not be reset, if it could not.
    refused: Option<String>,
}

/// Topologies built, runs that played on a kept one instead, and kept ones whose reset
/// failed, by this process.
static BUILT: AtomicUsize = AtomicUsize::new(0);
static REUSED: AtomicUsize = AtomicUsize::new(0);
static REFUSED: AtomicUsize = AtomicUsize::new(0);

/// What this process did with its topologies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReuseCounts {
    pub built: usize,
    /// Runs that played on a topology kept from an earlier run, reset.
    pub kept: usize,
    /// Kept topologies whose reset left something (what no reset undoes: an IPVS connection,
    /// a legacy iptables table, a process still inside; or what the reset missed): each was
    /// taken down, and its next run built anew.
    pub not_reset: usize,
}

/// [`ReuseCounts`] so far.
pub fn reuse_counts() -> ReuseCounts {
    ReuseCounts {
        built: BUILT.load(Ordering::Relaxed),
        kept: REUSED.load(Ordering::Relaxed),
        not_reset: REFUSED.load(Ordering::Relaxed),
    }
}

impl Keeper {
    /// The stage kept, reset now: what the next run of its topology would play on; `None` if
    /// none was kept or its reset failed ([`Keeper::refused`] says why).
    pub fn reset_kept(&mut self) -> Result<Option<&Stage>> {
        let Some(stage) = self.kept.take() else { return Ok(None) };
        self.kept = self.reset(stage)?;
        Ok(self.kept.as_ref())
    }

    /// Why the last stage kept could not be reset (what its reset left).
    pub fn refused(&self) -> Option<&str> {
        self.refused.as_deref()
    }

    /// `stage` reset to its topology as built, or `None` (taken down, the reason kept and
    /// printed) where the reset could not.
    fn reset(&mut self, stage: Stage) -> Result<Option<Stage>> {
        let (_, built) = stage.reusable.as_ref().expect("only a reusable stage is kept");
        match stage.runtime.block_on(reuse::reset(&stage.topology, built)) {
            Ok(()) => {
                self.refused = None;
                Ok(Some(stage))
            }
            Err(e) => {
                let why = format!("{e:#}");
                eprintln!("packetproof: a topology not used again: {why}");
                REFUSED.fetch_add(1, Ordering::Relaxed);
                self.refused = Some(why);
                stage.teardown()?;
                Ok(None)
            }
        }
    }

    /// A stage for `cluster`: the kept one, reset, if it was built for the same topology, else
    /// a new one (the kept one, of another topology, is taken down first, unreset).
    pub fn stage_for(&mut self, cluster: &Cluster) -> Result<Stage> {
        let shape = shape(cluster);
        match self.kept.take() {
            Some(stage) if stage.reusable.as_ref().is_some_and(|(s, _)| *s == shape) => {
                if let Some(stage) = self.reset(stage)? {
                    REUSED.fetch_add(1, Ordering::Relaxed);
                    return Ok(stage);
                }
            }
            Some(other) => other.teardown()?,
            None => {}
        }
        let mut stage = Stage::build(cluster, &NodeMap::new())?;
        let built = stage.runtime.block_on(stage.topology.state(reuse::Depth::Reuse));
        stage.reusable = Some((shape, built.context("reading the topology as built")?));
        Ok(stage)
    }
}

/// What a topology is built from (`Topology::build` reads nothing else of the cluster): two
/// clusters of one shape get the same namespaces, links, addresses and routes.
fn shape(cluster: &Cluster) -> String {
    let destinations: Vec<_> = cluster
        .services
        .iter()
        .flat_map(|s| s.external_ips.iter().chain(&s.load_balancer_ips).chain(&s.proxied_load_balancer_ips))
        .collect();
    format!(
        "{:?}",
        (
            &cluster.nodes,
            &cluster.pods,
            &cluster.external_hosts,
            cluster.service_cidr,
            cluster.node_network,
            &cluster.second_family,
            destinations
        )
    )
}

impl Stage {
    /// Builds `cluster`'s namespaces, or wires its pods into `nodes` (existing nodes, by
    /// scenario node name; empty: packetproof makes the nodes).
    pub fn build(cluster: &Cluster, nodes: &NodeMap) -> Result<Stage> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        let topology = runtime.block_on(async {
            if nodes.is_empty() {
                Topology::build(cluster).await
            } else {
                Topology::build_on_existing(cluster, nodes).await
            }
        })?;
        BUILT.fetch_add(1, Ordering::Relaxed);
        Ok(Stage { topology, runtime, reusable: None, source_ports: SourcePorts::default() })
    }

    /// What the stage's namespaces hold now (see `reuse::state`).
    pub fn state(&self, depth: reuse::Depth) -> Result<reuse::State> {
        self.runtime.block_on(self.topology.state(depth))
    }

    fn teardown(self) -> Result<()> {
        let Stage { topology, runtime, .. } = self;
        drop(runtime);
        topology.teardown().context("removing the scenario's namespaces")
    }

    /// Runs `scene` on the stage, then stops what it started (the servers, then the proxy)
    /// and removes the namespaces. When `scene` fails or panics, the same comes down by
    /// dropping (a proxy's drop stops it).
    pub fn play<'p, T>(self, scene: impl for<'s> FnOnce(&mut Scene<'s, 'p>) -> Result<T>) -> Result<T> {
        self.play_keeping(None, scene)
    }

    /// As [`Stage::play`]; a stage from `keeper` goes back to it as the run left it (its next
    /// run resets it) instead of coming down.
    pub fn play_keeping<'p, T>(
        self,
        keeper: Option<&mut Keeper>,
        scene: impl for<'s> FnOnce(&mut Scene<'s, 'p>) -> Result<T>,
    ) -> Result<T> {
        let value = {
            let mut on = Scene {
                captures: Vec::new(),
                servers: None,
                proxy: None,
                topology: &self.topology,
                runtime: &self.runtime,
                source_ports: &self.source_ports,
            };
            let value = scene(&mut on)?;
            on.stop()?;
            value
        };
        let ports_left = self.source_ports.peek() < LAST_SOURCE_PORT_TO_KEEP;
        if let (Some(keeper), true, true) = (keeper, self.reusable.is_some(), ports_left) {
            keeper.kept = Some(self);
            return Ok(value);
        }
        self.teardown()?;
        Ok(value)
    }
}

/// What plays on a [`Stage`]: servers, the proxy under test and captures, each started when
/// the caller needs it. `'p`: the proxy's own lifetime, longer than the scene's.
pub struct Scene<'s, 'p: 's> {
    // Fields drop in declaration order, the reverse of the runner's set-up: captures, servers,
    // then the proxy.
    captures: Vec<(String, Capture)>,
    servers: Option<Servers>,
    proxy: Option<OnStage<'s, 'p>>,
    topology: &'s Topology,
    runtime: &'s Runtime,
    source_ports: &'s SourcePorts,
}

/// The proxy under test, with what it takes to start it again (a restart step).
struct OnStage<'s, 'p: 's> {
    proxy: &'p dyn Proxy,
    env: Env<'s>,
    /// None once a restart's stop succeeded and its start did not.
    running: Option<Box<dyn Running + 's>>,
}

impl<'s, 'p: 's> Scene<'s, 'p> {
    pub fn topology(&self) -> &'s Topology {
        self.topology
    }

    pub fn runtime(&self) -> &'s Runtime {
        self.runtime
    }

    /// The source ports the stage's clients take next.
    pub fn source_ports(&self) -> &'s SourcePorts {
        self.source_ports
    }

    /// Serves every pod's declared ports (and the endpoint ports of hosts), and a listener on
    /// 127.0.0.1 of each `(node, port)` in `localhost`.
    pub fn start_servers(
        &mut self,
        cluster: &Cluster,
        localhost: impl IntoIterator<Item = (String, u16)>,
    ) -> Result<()> {
        let _in_runtime = self.runtime.enter();
        let mut servers = Servers::start(cluster, self.topology)?;
        for (node, port) in localhost {
            servers.listen_on_localhost(&self.topology.node(&node)?.netns, port)?;
        }
        self.servers = Some(servers);
        Ok(())
    }

    /// Starts `proxy` on every node and returns once every node implements `state`. `source`
    /// is the scenario file, beside which adapters find their inputs.
    pub fn start_proxy(&mut self, proxy: &'p dyn Proxy, state: &State<'_>, source: &'p Path) -> Result<()> {
        let env = Env { topology: self.topology, runtime: self.runtime.handle().clone(), source };
        let running =
            proxy.start(state, &env).with_context(|| format!("starting {} on every node", proxy.name()))?;
        self.proxy = Some(OnStage { proxy, env, running: Some(running) });
        Ok(())
    }

    /// The running proxy, to change or to time.
    pub fn running(&mut self) -> Result<&mut (dyn Running + 's)> {
        let running = self.proxy.as_mut().and_then(|p| p.running.as_mut());
        Ok(running.context("the proxy is not running")?.as_mut())
    }

    /// The running proxy, to read (its rules, its files), if it runs.
    pub fn proxy(&self) -> Option<&(dyn Running + 's)> {
        self.proxy.as_ref().and_then(|p| p.running.as_deref())
    }

    /// Makes every node implement `state` (a step) and returns once it does.
    pub fn update(&mut self, state: &State<'_>) -> Result<()> {
        self.running()?.update(state)
    }

    /// Stops the proxy and starts it again on the same nodes with `state`, as a node's
    /// kube-proxy restarts: what it programmed and the conntrack table stay as they are.
    pub fn restart(&mut self, state: &State<'_>) -> Result<()> {
        if self.running()?.restart(state)? {
            return Ok(());
        }
        let on = self.proxy.as_mut().context("the proxy is not running")?;
        if let Some(running) = on.running.take() {
            running.stop().with_context(|| format!("stopping {} for a restart", on.proxy.name()))?;
        }
        let started = on.proxy.start(state, &on.env);
        on.running = Some(started.with_context(|| format!("starting {} again", on.proxy.name()))?);
        Ok(())
    }

    /// Starts a capture on every interface traffic can reach a pod, a node or an external
    /// host by.
    pub fn start_captures(&mut self) -> Result<()> {
        let topology = self.topology;
        let mut captures = Vec::new();
        for (name, ns) in &topology.pods {
            captures.push((format!("pod/{name}"), Capture::start(ns, POD_INTERFACE)?));
        }
        for (name, ns) in &topology.external_hosts {
            captures.push((format!("external/{name}"), Capture::start(ns, POD_INTERFACE)?));
        }
        for node in &topology.nodes {
            captures.push((format!("node/{}", node.name), Capture::start(&node.netns, NODE_UPLINK)?));
            captures.push((format!("node/{}/lo", node.name), Capture::start(&node.netns, "lo")?));
            // Where a local pod's traffic reaches a host-network endpoint of its own node.
            captures
                .push((format!("bridge/{}", node.name), Capture::start(&node.netns, &topology.pod_bridge)?));
        }
        self.captures = captures;
        Ok(())
    }

    /// The capture points, by key (`pod/NAME`, `external/NAME`, `node/NAME`, `node/NAME/lo`,
    /// `bridge/NAME`).
    pub fn captures(&self) -> &[(String, Capture)] {
        &self.captures
    }

    /// Stops the captures: what each capture point took, by key.
    pub fn stop_captures(&mut self) -> Result<BTreeMap<String, Vec<Frame>>> {
        std::mem::take(&mut self.captures)
            .into_iter()
            .map(|(key, capture)| {
                Ok((key.clone(), capture.stop().with_context(|| format!("stopping capture {key}"))?))
            })
            .collect()
    }

    /// The end of a scene that went well: the servers stop (their sockets closed, so the
    /// namespaces can go), then the proxy.
    fn stop(mut self) -> Result<()> {
        if let Some(servers) = self.servers.take() {
            self.runtime.block_on(servers.stop());
        }
        if let Some(OnStage { proxy, running: Some(running), .. }) = self.proxy.take() {
            running.stop().with_context(|| format!("stopping {}", proxy.name()))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::model::Objects;
    use crate::proxy::iptables::BuiltinIptables;

    /// Plays `scene` on a stage with the built-in iptables proxy, servers and captures up;
    /// `made`: the namespaces the stage made, read before `scene` runs.
    fn play(made: &mut Vec<PathBuf>, scene: impl FnOnce() -> Result<()>) -> Result<()> {
        let cluster = crate::commands::bench::two_nodes_eight_pods();
        let objects = Objects::default();
        let proxy = BuiltinIptables { mutant: None };
        let stage = Stage::build(&cluster, &NodeMap::new()).expect("the stage builds");
        stage.play(|on| {
            *made = on.topology().namespaces().map(|ns| ns.path()).collect();
            on.start_proxy(&proxy, &State { cluster: &cluster, objects: &objects }, Path::new("stage.yaml"))?;
            on.start_servers(&cluster, [])?;
            on.start_captures()?;
            scene()
        })
    }

    fn left(made: &[PathBuf]) -> Vec<&PathBuf> {
        made.iter().filter(|path| path.exists()).collect()
    }

    #[test]
    fn a_stage_comes_down_however_its_scene_ends() {
        if !crate::privileges::scenarios_can_run() {
            return;
        }
        let mut made = Vec::new();
        play(&mut made, || Ok(())).expect("a scene that went well");
        assert!(!made.is_empty() && left(&made).is_empty(), "left behind: {:?}", left(&made));

        let failed = play(&mut made, || anyhow::bail!("the scene failed"));
        assert_eq!(failed.expect_err("the scene's error").to_string(), "the scene failed");
        assert!(!made.is_empty() && left(&made).is_empty(), "left behind after an error: {:?}", left(&made));

        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            play(&mut made, || panic!("the scene panicked"))
        }));
        assert!(panicked.is_err(), "the panic went through");
        assert!(!made.is_empty() && left(&made).is_empty(), "left behind after a panic: {:?}", left(&made));
    }
}
