//! The stage a scenario's traffic plays on: the async runtime and the namespaces, then, as the
//! caller needs them, the pods' servers, the proxy under test (started, changed, restarted)
//! and the capture points. The runner and `bench` set up through it, so the order of set-up
//! and teardown is written once; everything comes down in reverse order on every way out: at
//! the end of [`Stage::play`], on an error, in a panic.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use tokio::runtime::Runtime;

use crate::model::{Cluster, NODE_UPLINK, POD_INTERFACE};
use crate::observe::{Capture, Frame};
use crate::proxy::{Env, Proxy, Running, State};
use crate::topology::Topology;
use crate::topology::existing::NodeMap;
use crate::traffic::Servers;

/// The runtime and the namespaces. Dropping it removes every namespace.
pub struct Stage {
    // Fields drop in declaration order: the namespaces go before the runtime.
    topology: Topology,
    runtime: Runtime,
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
        Ok(Stage { topology, runtime })
    }

    /// Runs `scene` on the stage, then stops what it started (the servers, then the proxy)
    /// and removes the namespaces. When `scene` fails or panics, the same comes down by
    /// dropping (a proxy's drop stops it).
    pub fn play<'p, T>(self, scene: impl for<'s> FnOnce(&mut Scene<'s, 'p>) -> Result<T>) -> Result<T> {
        let value = {
            let mut on = Scene {
                captures: Vec::new(),
                servers: None,
                proxy: None,
                topology: &self.topology,
                runtime: &self.runtime,
            };
            let value = scene(&mut on)?;
            on.stop()?;
            value
        };
        let Stage { topology, runtime } = self;
        drop(runtime);
        topology.teardown().context("removing the scenario's namespaces")?;
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
