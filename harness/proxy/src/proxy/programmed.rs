//! Proxies that program each node directly from the model, in-process (the built-in ones):
//! starting one programs every node, and a change re-programs them. What a proxy keeps of a
//! node while it runs lives in the running handle ([`NodeState`]), never in statics: a proxy
//! stopped and started again within a run starts afresh, and two runs share nothing.

use std::collections::BTreeSet;

use anyhow::{Context, Result};

use super::{Env, Running, State, conntrack_cleanup, healthcheck};
use crate::model::{Cluster, IpFamily, Protocol};
use crate::topology::NodeHandle;

/// What a built-in proxy keeps of one node while it runs.
#[derive(Default)]
pub struct NodeState {
    /// The families whose rules were loaded (both on a dual-stack node), so that a dump reads
    /// the tables that were written.
    pub loaded: BTreeSet<IpFamily>,
    /// Its health check servers; dropped (stopped) with the state.
    pub health: healthcheck::Servers,
    /// What the proxy remembers of its last sync on the node, in its own type (iptables mode:
    /// what it wrote, for a partial sync to write only what changed).
    pub memory: Option<Box<dyn std::any::Any + Send + Sync>>,
}

/// Programs one node namespace with the cluster's Services, as the proxy on that node would.
pub trait NodeProgrammer: Send + Sync {
    fn name(&self) -> &str;

    /// Programs (or re-programs) `node` to implement `cluster`, keeping what it runs there in
    /// `state`. Called with the run's runtime entered, for servers the proxy keeps (health
    /// checks).
    fn program_node(&self, cluster: &Cluster, node: &NodeHandle, state: &mut NodeState) -> Result<()>;

    /// The node's data-plane state as loaded.
    fn dump_node(&self, node: &NodeHandle, state: &NodeState) -> Result<String>;

    /// What a change's clearing of stale UDP conntrack entries leaves out, if anything
    /// (kube-proxy leaves nothing).
    fn cleanup_lapse(&self) -> Option<conntrack_cleanup::Lapse> {
        None
    }
}

/// Programs every node of `env` with `state` and returns the handle that re-programs them.
pub fn program_nodes<'a>(
    programmer: &'a dyn NodeProgrammer,
    state: &State<'_>,
    env: &Env<'a>,
) -> Result<Box<dyn Running + 'a>> {
    let nodes = &env.topology.nodes;
    let states = nodes.iter().map(|_| NodeState::default()).collect();
    let mut running = Programmed { programmer, nodes, states, runtime: env.runtime.clone(), applied: None };
    running.update(state)?;
    Ok(Box::new(running))
}

struct Programmed<'a> {
    programmer: &'a dyn NodeProgrammer,
    nodes: &'a [NodeHandle],
    /// One per node, in the order of `nodes`.
    states: Vec<NodeState>,
    runtime: tokio::runtime::Handle,
    /// The state the nodes implement, to tell what a change leaves stale.
    applied: Option<Cluster>,
}

impl Running for Programmed<'_> {
    fn update(&mut self, state: &State<'_>) -> Result<()> {
        // Every node at once, as each node's own proxy would: a node's load is mostly the
        // kernel's time in its own namespace, so a cluster of N nodes takes one node's time
        // rather than N (10,000 Services in nftables mode: the two nodes' first loads overlap).
        let (programmer, runtime, cluster) = (self.programmer, &self.runtime, state.cluster);
        let results: Vec<Result<()>> = std::thread::scope(|scope| {
            let workers: Vec<_> = self
                .nodes
                .iter()
                .zip(&mut self.states)
                .map(|(node, node_state)| {
                    scope.spawn(move || {
                        let _in_runtime = runtime.enter();
                        programmer.program_node(cluster, node, node_state).with_context(|| {
                            format!("programming node {} with {}", node.name, programmer.name())
                        })
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|w| w.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
                .collect()
        });
        // The first failure in node order, whichever thread ended first.
        results.into_iter().collect::<Result<Vec<()>>>()?;
        // After the rules, as kube-proxy does: entries made meanwhile follow the new rules.
        let lapse = self.programmer.cleanup_lapse();
        let before = self.applied.replace(state.cluster.clone());
        if before.is_none() && lapse == Some(conntrack_cleanup::Lapse::FlushedOnStart) {
            let deletions = conntrack_cleanup::flushed_on_start(state.cluster);
            for node in self.nodes {
                conntrack_cleanup::delete(&node.netns, &deletions)
                    .with_context(|| format!("on node {}", node.name))?;
            }
        } else if before.is_none() && lapse != Some(conntrack_cleanup::Lapse::Everything) {
            // A (re)start knows no state before it: what the node holds is the state.
            let udp =
                state.cluster.services.iter().any(|s| s.ports.iter().any(|p| p.protocol == Protocol::Udp));
            for node in self.nodes.iter().filter(|_| udp) {
                let in_node = || format!("on node {}", node.name);
                let listing = conntrack_cleanup::list_udp(&node.netns).with_context(in_node)?;
                let deletions = conntrack_cleanup::reconciled(state.cluster, &listing);
                conntrack_cleanup::delete(&node.netns, &deletions).with_context(in_node)?;
            }
        }
        if let Some(before) = before {
            let deletions = conntrack_cleanup::stale_with(&before, state.cluster, lapse);
            for node in self.nodes {
                conntrack_cleanup::delete(&node.netns, &deletions)
                    .with_context(|| format!("on node {}", node.name))?;
            }
        }
        Ok(())
    }

    fn dump_node(&self, node: &NodeHandle) -> Result<String> {
        let at = self.nodes.iter().position(|n| n.name == node.name);
        let state =
            at.and_then(|i| self.states.get(i)).context("dumping a node this proxy does not run on")?;
        self.programmer.dump_node(node, state)
    }

    /// Stops the health check servers (dropping the node states does).
    fn stop(self: Box<Self>) -> Result<()> {
        drop(self);
        Ok(())
    }
}
