//! Proxies that program each node directly from the model, in-process (the built-in ones):
//! starting one programs every node, and a change re-programs them.

use anyhow::{Context, Result};

use super::{Env, Running, State, conntrack_cleanup};
use crate::model::Cluster;
use crate::topology::NodeHandle;

/// Programs one node namespace with the cluster's Services, as the proxy on that node would.
pub trait NodeProgrammer: Send + Sync {
    fn name(&self) -> &str;

    /// Programs (or re-programs) `node` to implement `cluster`. Called with the run's
    /// runtime entered, for servers the proxy keeps (health checks).
    fn program_node(&self, cluster: &Cluster, node: &NodeHandle) -> Result<()>;

    /// The node's data-plane state as loaded.
    fn dump_node(&self, node: &NodeHandle) -> Result<String>;

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
    let mut running =
        Programmed { programmer, nodes: &env.topology.nodes, runtime: env.runtime.clone(), applied: None };
    running.update(state)?;
    Ok(Box::new(running))
}

struct Programmed<'a> {
    programmer: &'a dyn NodeProgrammer,
    nodes: &'a [NodeHandle],
    runtime: tokio::runtime::Handle,
    /// The state the nodes implement, to tell what a change leaves stale.
    applied: Option<Cluster>,
}

impl Running for Programmed<'_> {
    fn update(&mut self, state: &State<'_>) -> Result<()> {
        let _in_runtime = self.runtime.enter();
        for node in self.nodes {
            self.programmer
                .program_node(state.cluster, node)
                .with_context(|| format!("programming node {} with {}", node.name, self.programmer.name()))?;
        }
        // After the rules, as kube-proxy does: entries made meanwhile follow the new rules.
        if let Some(before) = self.applied.replace(state.cluster.clone()) {
            let deletions =
                conntrack_cleanup::stale_with(&before, state.cluster, self.programmer.cleanup_lapse());
            for node in self.nodes {
                conntrack_cleanup::delete(&node.netns, &deletions)
                    .with_context(|| format!("on node {}", node.name))?;
            }
        }
        Ok(())
    }

    fn dump_node(&self, node: &NodeHandle) -> Result<String> {
        self.programmer.dump_node(node)
    }
}
