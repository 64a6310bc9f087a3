//! Built-in proxy: kube-proxy's iptables mode, generated from the model and loaded with
//! `iptables-restore` into each node namespace.
//!
//! `generate` writes what kube-proxy v1.30 would write on a node (chain names from `naming`,
//! endpoint choice from `endpoints`), as a structured `ruleset` that `mutants` can break on
//! purpose; `load` puts it into the namespace and reads it back.

pub mod endpoints;
pub mod generate;
pub mod ladder;
mod load;
pub mod mutants;
pub mod naming;
pub mod ruleset;

#[cfg(test)]
mod tests;

use anyhow::Result;

pub use generate::node_rules;
pub use mutants::Mutant;
pub use ruleset::{RuleSet, normalize_save};

use crate::model::Cluster;
use crate::proxy::Proxy;
use crate::topology::NodeHandle;

pub const NAME: &str = "builtin-iptables";

/// kube-proxy's iptables mode, optionally broken by a [`Mutant`].
#[derive(Debug, Default)]
pub struct BuiltinIptables {
    pub mutant: Option<Mutant>,
}

/// The rules for `node`, with `mutant` applied.
pub fn node_ruleset(cluster: &Cluster, node: &str, mutant: Option<Mutant>) -> RuleSet {
    let mut rules = node_rules(cluster, node);
    if let Some(m) = mutant {
        m.apply(cluster, &mut rules);
    }
    rules
}

/// The `iptables-restore` input for `node` (for `packetproof rules`).
pub fn render_node(cluster: &Cluster, node: &str, mutant: Option<Mutant>) -> String {
    node_ruleset(cluster, node, mutant).render()
}

impl Proxy for BuiltinIptables {
    fn name(&self) -> &str {
        NAME
    }

    fn program_node(&self, cluster: &Cluster, node: &NodeHandle) -> Result<()> {
        load::restore(node, &render_node(cluster, &node.name, self.mutant))
    }

    fn dump_node(&self, node: &NodeHandle) -> Result<String> {
        load::save(node)
    }
}
