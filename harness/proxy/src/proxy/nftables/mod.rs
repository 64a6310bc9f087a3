//! Built-in proxy: kube-proxy's nftables mode, generated from the model and loaded with
//! `nft -f` into each node namespace.
//!
//! `generate` writes the `kube-proxy` table kube-proxy (v1.31 and later) would write on a node
//! for one family (chain names from `naming`, endpoint choice shared with iptables mode), as a
//! structured `ruleset` that `mutants` can break on purpose; `load` runs `nft -f` and reads the
//! ruleset back. A full sync writes the whole table (`in_place`, or in stages on a fresh
//! node); later syncs write only what changed (`partial`). Programming a node also runs the
//! health check servers of `externalTrafficPolicy: Local` load balancers.
//!
//! kube-proxy runs one proxier per family: a dual-stack node gets `table ip kube-proxy` and
//! `table ip6 kube-proxy`, each from that family's view of the cluster.

pub(crate) mod generate;
mod in_place;
mod load;
pub mod mutants;
pub mod naming;
mod partial;
pub mod ruleset;

#[cfg(test)]
mod tests;

use std::collections::BTreeSet;

use anyhow::Result;
use ipnet::IpNet;

pub use generate::{Layout, node_rules};
pub use ruleset::RuleSet;

use crate::model::Profile;
use crate::model::{Cluster, IpFamily};
use crate::proxy::{Env, NodeProgrammer, NodeState, Proxy, Running, State, healthcheck, program_nodes};
use crate::proxy::{Mutant, changes};
use crate::topology::NodeHandle;

/// The current layout (v1.34, and v1.33.5 on).
pub const NAME: &str = "builtin-nftables";
/// The layout of v1.31 to v1.33.4, whose filter chains run before DNAT (kubernetes#131765).
pub(crate) const NAME_V1_31: &str = "builtin-nftables-v1.31";

/// kube-proxy's nftables mode, optionally broken by a [`Mutant`].
#[derive(Debug, Default)]
pub struct BuiltinNftables {
    pub mutant: Option<Mutant>,
    pub layout: Layout,
}

/// The cluster as the nftables proxier on `node` sees it: with no `--nodeport-addresses`
/// given, nftables mode uses `primary` (`platformApplyDefaults` in
/// cmd/kube-proxy/app/server_linux.go), which `newProxyServer` (cmd/kube-proxy/app/server.go)
/// turns into the node's own IP of each family as `/32` and `/128`. Decided on the whole
/// cluster, before a family view, as kube-proxy decides it on the flag.
pub(crate) fn effective_cluster(cluster: &Cluster, node: &str) -> Cluster {
    let mut effective = cluster.clone();
    if cluster.proxy.node_port_addresses.is_empty()
        && let Some(n) = cluster.node(node)
    {
        let primary = n.ips.copied();
        effective.proxy.node_port_addresses = primary
            .filter(|ip| !ip.is_loopback())
            .map(|ip| IpNet::new(ip, IpFamily::of(ip).host_prefix()).expect("a host prefix is valid"))
            .collect();
    }
    effective
}

/// One single-family view per family of the cluster, IPv4 first, as the node's proxiers see
/// them.
fn family_views(cluster: &Cluster, node: &str) -> Vec<Cluster> {
    let effective = effective_cluster(cluster, node);
    let mut families = effective.families();
    families.sort();
    if effective.second_family.is_none() {
        return vec![effective];
    }
    families.iter().map(|&f| effective.family_view(f)).collect()
}

/// The table of one family view in `layout`, with `mutant` applied.
pub(crate) fn family_ruleset(view: &Cluster, node: &str, mutant: Option<Mutant>, layout: Layout) -> RuleSet {
    let misread = mutant.and_then(|m| m.misread(view));
    let view = misread.as_ref().unwrap_or(view);
    let deviations = mutant.map(Mutant::deviations).unwrap_or_default();
    let mut rules = generate::node_rules_with(view, node, deviations, layout);
    if let Some(m) = mutant {
        mutants::apply(m, view, node, &mut rules);
    }
    rules
}

/// The tables of `node` in the default layout, one per family of the cluster (IPv4 first).
#[cfg(test)]
pub(crate) fn node_rulesets(cluster: &Cluster, node: &str, mutant: Option<Mutant>) -> Vec<RuleSet> {
    node_rulesets_in(cluster, node, mutant, Layout::default())
}

/// [`node_rulesets`] in `layout`.
pub(crate) fn node_rulesets_in(
    cluster: &Cluster,
    node: &str,
    mutant: Option<Mutant>,
    layout: Layout,
) -> Vec<RuleSet> {
    family_views(cluster, node).iter().map(|v| family_ruleset(v, node, mutant, layout)).collect()
}

/// The tables of `node` as `add …` lines (for `packetproof rules` and tests).
pub fn render_node(cluster: &Cluster, node: &str, mutant: Option<Mutant>) -> String {
    render_node_in(cluster, node, mutant, Layout::default())
}

/// [`render_node`] in `layout`.
pub(crate) fn render_node_in(
    cluster: &Cluster,
    node: &str,
    mutant: Option<Mutant>,
    layout: Layout,
) -> String {
    node_rulesets_in(cluster, node, mutant, layout).iter().map(RuleSet::render).collect()
}

/// The `nft -f` input that replaces every table of `node` in one transaction.
pub(crate) fn load_text(cluster: &Cluster, node: &str, mutant: Option<Mutant>, layout: Layout) -> String {
    node_rulesets_in(cluster, node, mutant, layout).iter().map(RuleSet::render_replacing).collect()
}

/// The rules of one transaction of a first load ([`RuleSet::render_staged`]): short enough
/// that the kernel's walks of the transaction per anonymous set stay cheap, long enough that
/// few `nft` runs re-read the growing table.
const RULES_PER_STAGE: usize = 5000;

impl BuiltinNftables {
    fn proxy_name(&self) -> &'static str {
        match self.layout {
            Layout::V1_31 => NAME_V1_31,
            Layout::V1_34 => NAME,
        }
    }

    /// Writes the whole table: in stages on a node without one, else in place.
    fn full_sync(&self, node: &NodeHandle, rules: &RuleSet) -> Result<()> {
        let existing = in_place::existing(node, rules)?;
        if existing.is_empty() {
            // A node without tables: loaded in stages, each a short transaction.
            for stage in rules.render_staged(RULES_PER_STAGE) {
                load::apply(node, &stage).map_err(|e| mutants::failed_sync(self.mutant, e))?;
            }
        } else {
            load::apply(node, &in_place::text(rules, &existing))
                .map_err(|e| mutants::failed_sync(self.mutant, e))?;
        }
        in_place::delete_stale_chains(node, rules, &existing);
        Ok(())
    }
}

/// A partial sync of one family's table to `rules`: what the proxy remembers of it, or `None`
/// when its transaction failed.
fn partial_sync(
    node: &NodeHandle,
    view: &Cluster,
    rules: &RuleSet,
    last: &partial::Last,
    changed: &std::collections::HashSet<String>,
) -> Option<partial::Last> {
    // Chains flushed by an earlier sync go first, in their own transaction (kube-proxy's
    // `staleChains`); busy ones are tried again next time, and one in use again is no longer
    // stale.
    let mut pending: BTreeSet<String> = last.stale.iter().filter(|c| !rules.has_chain(c)).cloned().collect();
    if !pending.is_empty() && load::apply(node, &partial::delete_chains(rules.family, &pending)).is_ok() {
        pending.clear();
    }
    let mut written = partial::text(rules, last, changed);
    load::apply(node, &written.text).ok()?;
    pending.append(&mut written.stale);
    if !pending.is_empty() && load::apply(node, &partial::delete_chains(rules.family, &pending)).is_ok() {
        pending.clear();
    }
    Some(partial::Last::partial(view, rules, written, pending))
}

impl Proxy for BuiltinNftables {
    fn name(&self) -> &str {
        self.proxy_name()
    }

    fn profile(&self) -> Profile {
        Profile::KUBE_PROXY_NFTABLES
    }

    fn start<'a>(&'a self, state: &State<'_>, env: &Env<'a>) -> Result<Box<dyn Running + 'a>> {
        program_nodes(self, state, env)
    }

    fn same_as_unbroken(&self, cluster: &Cluster) -> bool {
        let Some(mutant) = self.mutant.filter(|m| m.only_in_the_rules()) else { return false };
        cluster.nodes.iter().all(|node| {
            node_rulesets_in(cluster, &node.name, Some(mutant), self.layout)
                == node_rulesets_in(cluster, &node.name, None, self.layout)
        })
    }
}

impl NodeProgrammer for BuiltinNftables {
    fn name(&self) -> &str {
        self.proxy_name()
    }

    /// Needs a tokio runtime entered on the calling thread when the node serves health checks.
    /// No `route_localnet`: nftables mode has no localhost node ports.
    fn program_node(&self, cluster: &Cluster, node: &NodeHandle, state: &mut NodeState) -> Result<()> {
        let views = family_views(cluster, &node.name);
        if self.mutant == Some(Mutant::AffinityLostOnSync) {
            // The bug: every sync deletes and recreates the table, affinity sets with it.
            load::apply(node, &load_text(cluster, &node.name, self.mutant, self.layout))?;
        } else {
            let memory = changes::Memory::<partial::Last>::in_state(&mut state.memory)?;
            let endpoints_tracked = self.mutant != Some(Mutant::PartialSyncMissesEndpoints);
            for view in &views {
                let family = view.ip_family();
                let rules = family_ruleset(view, &node.name, self.mutant, self.layout);
                let last = memory.families.remove(&family);
                let synced = match partial::plan(last.as_ref(), view, &rules, endpoints_tracked) {
                    partial::Plan::Partial(changed) => {
                        let last = last.as_ref().expect("a partial sync follows one");
                        partial_sync(node, view, &rules, last, &changed)
                    }
                    partial::Plan::Full => None,
                };
                // A failed partial sync is followed by a full one at once (kube-proxy: at its
                // next sync, `needFullSync`).
                let synced = match synced {
                    Some(last) => last,
                    None => {
                        self.full_sync(node, &rules)?;
                        partial::Last::full(view, &rules)
                    }
                };
                memory.families.insert(family, synced);
            }
        }
        let bug = self.mutant.and_then(Mutant::health_bug);
        healthcheck::serve_node(node, &mut state.health, &views, bug)
    }

    fn dump_node(&self, node: &NodeHandle, _state: &NodeState) -> Result<String> {
        load::dump(node)
    }

    fn cleanup_lapse(&self) -> Option<crate::proxy::conntrack_cleanup::Lapse> {
        self.mutant.and_then(Mutant::cleanup_lapse)
    }
}
