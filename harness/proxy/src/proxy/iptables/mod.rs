//! Built-in proxy: kube-proxy's iptables mode, generated from the model and loaded with
//! `iptables-restore` (`ip6tables-restore` for an IPv6 cluster) into each node namespace.
//!
//! `generate` writes what kube-proxy v1.30 would write on a node (chain names from `naming`,
//! endpoint choice from `endpoints`), as a structured `ruleset` that `mutants` can break on
//! purpose; `load` puts it into the namespace and reads it back. Programming a node also does
//! what kube-proxy does besides rules: `route_localnet` for localhost node ports, and the
//! health check servers of `externalTrafficPolicy: Local` load balancers.

pub(crate) mod generate;
pub(crate) mod ladder;
mod load;
pub mod mutants;
pub mod naming;
pub(crate) mod partial;

#[cfg(test)]
mod tests;

use anyhow::{Context, Result};

pub use generate::node_rules;

// The rule set is shared with IPVS mode; `super::ruleset` in this backend's files names it.
pub(crate) use super::iptables_rules as ruleset;
pub use super::iptables_rules::{Rule, RuleSet, normalize_save};

use crate::model::{Cluster, Profile};
use crate::proxy::{
    Env, NodeProgrammer, NodeState, Proxy, Running, State, healthcheck, node_ports, program_nodes,
};
use crate::proxy::{Mutant, changes};
use crate::topology::NodeHandle;

/// The default proxy ([`crate::model::DEFAULT_PROXY`]).
pub const NAME: &str = crate::model::DEFAULT_PROXY;

/// kube-proxy's iptables mode, optionally broken by a [`Mutant`].
#[derive(Debug, Default)]
pub struct BuiltinIptables {
    pub mutant: Option<Mutant>,
}

/// The rules for `node`, with `mutant` applied.
pub(crate) fn node_ruleset(cluster: &Cluster, node: &str, mutant: Option<Mutant>) -> RuleSet {
    let misread = mutant.and_then(|m| m.misread(cluster));
    let cluster = misread.as_ref().unwrap_or(cluster);
    let deviations = mutant.map(Mutant::deviations).unwrap_or_default();
    let mut rules = generate::node_rules_with(cluster, node, deviations);
    if let Some(m) = mutant {
        m.apply(cluster, &mut rules);
    }
    rules
}

/// The views a node is programmed with: each family's on its own in a dual-stack cluster, as
/// kube-proxy runs a proxier per family.
fn family_views(cluster: &Cluster) -> Vec<Cluster> {
    if cluster.second_family.is_some() {
        cluster.families().into_iter().map(|f| cluster.family_view(f)).collect()
    } else {
        vec![cluster.clone()]
    }
}

/// The sysctl kube-proxy sets (once, at start) so that node ports answer on 127.0.0.1 (IPv4
/// only: there are no node ports on ::1).
const ROUTE_LOCALNET: &str = "/proc/sys/net/ipv4/conf/all/route_localnet";

/// The `iptables-restore` (or `ip6tables-restore`) input for `node` (for `packetproof rules`);
/// for a dual-stack cluster, the IPv4 input then the IPv6 one, each family's view on its own.
pub fn render_node(cluster: &Cluster, node: &str, mutant: Option<Mutant>) -> String {
    if cluster.second_family.is_none() {
        return node_ruleset(cluster, node, mutant).render();
    }
    let mut families = cluster.families();
    families.sort();
    families.iter().map(|&f| node_ruleset(&cluster.family_view(f), node, mutant).render()).collect()
}

impl Proxy for BuiltinIptables {
    fn name(&self) -> &str {
        NAME
    }

    fn profile(&self) -> Profile {
        Profile::KUBE_PROXY_IPTABLES
    }

    fn start<'a>(&'a self, state: &State<'_>, env: &Env<'a>) -> Result<Box<dyn Running + 'a>> {
        program_nodes(self, state, env)
    }

    fn same_as_unbroken(&self, cluster: &Cluster) -> bool {
        let Some(mutant) = self.mutant.filter(|m| m.only_in_the_rules()) else { return false };
        let views = family_views(cluster);
        cluster.nodes.iter().all(|node| {
            views
                .iter()
                .all(|v| node_ruleset(v, &node.name, Some(mutant)) == node_ruleset(v, &node.name, None))
        })
    }
}

impl NodeProgrammer for BuiltinIptables {
    fn name(&self) -> &str {
        NAME
    }

    /// Needs a tokio runtime entered on the calling thread when the node serves health checks.
    /// A dual-stack cluster is programmed per family, as kube-proxy runs a proxier per family:
    /// each family's view into its own tables (`iptables-restore`, `ip6tables-restore`).
    fn program_node(&self, cluster: &Cluster, node: &NodeHandle, state: &mut NodeState) -> Result<()> {
        let views = family_views(cluster);
        for view in &views {
            let family = view.ip_family();
            if node_ports::localhost_node_ports(&view.proxy, family) {
                node.netns
                    .run(|| std::fs::write(ROUTE_LOCALNET, "1"))?
                    .with_context(|| format!("setting route_localnet on node {}", node.name))?;
            }
            state.loaded.insert(family);
            let rules = node_ruleset(view, &node.name, self.mutant);
            let memory = changes::Memory::<partial::Last>::in_state(&mut state.memory)?;
            let last = memory.families.remove(&family);
            let endpoints_tracked = self.mutant != Some(Mutant::PartialSyncMissesEndpoints);
            let partial_syncs = match partial::plan(last.as_ref(), view, endpoints_tracked) {
                partial::Plan::Partial(changed) if self.mutant != Some(Mutant::AffinityLostOnSync) => {
                    let last = last.as_ref().expect("a partial sync follows one");
                    let text = partial::text(&rules, view, last, &changed);
                    // A failed partial sync is followed by a full one at once (kube-proxy:
                    // at its next sync, `needFullSync`).
                    load::restore_noflush(node, &text, family).ok().map(|()| last.partial_syncs() + 1)
                }
                _ => None,
            };
            let partial_syncs = match partial_syncs {
                Some(n) => n,
                None => {
                    if self.mutant == Some(Mutant::AffinityLostOnSync) {
                        // The bug: the tables are emptied before every sync, so the `recent`
                        // lists of the affinity rules go with their last rule.
                        load::restore(node, "*filter\nCOMMIT\n*nat\nCOMMIT\n", family)?;
                    }
                    load::restore(node, &rules.render(), family)?;
                    0
                }
            };
            memory.families.insert(family, partial::Last::new(view, &rules, partial_syncs));
        }
        let bug = self.mutant.and_then(Mutant::health_bug);
        healthcheck::serve_node(node, &mut state.health, &views, bug)
    }

    fn dump_node(&self, node: &NodeHandle, state: &NodeState) -> Result<String> {
        load::save(node, &state.loaded)
    }

    fn cleanup_lapse(&self) -> Option<crate::proxy::conntrack_cleanup::Lapse> {
        self.mutant.and_then(Mutant::cleanup_lapse)
    }
}
