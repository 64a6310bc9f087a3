//! Built-in proxy: kube-proxy's IPVS mode (v1.30.3, pkg/proxy/ipvs/), generated from the
//! model and loaded into each node namespace with `ipvsadm`, `ipset`, `ip` and
//! `iptables-restore`.
//!
//! `plan` decides what a node gets for one family (virtual servers and real servers, the
//! service addresses bound to the dummy interface `kube-ipvs0`, the ipsets, the iptables
//! rules that match them); `ipset` and `virtual_servers` render and diff those as their tools
//! read them; `load` puts them in the namespace; `mutants` breaks them on purpose. A
//! dual-stack node gets both families' plans, as kube-proxy runs a proxier per family.
//!
//! It runs only where the kernel has IPVS (the kernel matrix's VMs): elsewhere every
//! scenario is skipped with the reason ([`Proxy::unavailable`]).

mod ipset;
mod load;
pub mod mutants;
pub mod plan;
mod virtual_servers;

#[cfg(test)]
mod tests;

use anyhow::Result;

use crate::model::Cluster;
use crate::model::Profile;
use crate::proxy::Mutant;
use crate::proxy::{Env, NodeProgrammer, NodeState, Proxy, Running, State, healthcheck, program_nodes};
use crate::topology::NodeHandle;

pub const NAME: &str = "builtin-ipvs";

/// kube-proxy's IPVS mode, optionally broken by a [`Mutant`] of [`mutants::CATALOG`].
#[derive(Debug, Default)]
pub struct BuiltinIpvs {
    pub mutant: Option<Mutant>,
}

/// The single-family views of the cluster, IPv4 first.
fn family_views(cluster: &Cluster) -> Vec<Cluster> {
    if cluster.second_family.is_none() {
        return vec![cluster.clone()];
    }
    let mut families = cluster.families();
    families.sort();
    families.iter().map(|&f| cluster.family_view(f)).collect()
}

/// What `node` gets, one plan per family, with `mutant` applied.
pub(crate) fn node_plans(cluster: &Cluster, node: &str, mutant: Option<Mutant>) -> Vec<plan::FamilyPlan> {
    family_views(cluster)
        .iter()
        .map(|view| {
            let misread = mutant.and_then(|m| m.misread(view));
            let view = misread.as_ref().unwrap_or(view);
            let mut p = plan::family_plan(view, node, mutants::breaks(mutant));
            if let Some(m) = mutant {
                mutants::apply(m, &mut p);
            }
            p
        })
        .collect()
}

/// Everything `node` gets, as the tools' inputs (for `packetproof rules`): the `ipvsadm -R`
/// lines for an empty table, the addresses of `kube-ipvs0`, the `ipset restore` input and each
/// family's `iptables-restore` input.
pub fn render_node(cluster: &Cluster, node: &str, mutant: Option<Mutant>) -> String {
    let plans = node_plans(cluster, node, mutant);
    let servers: virtual_servers::Table = plans.iter().flat_map(|p| p.servers.clone()).collect();
    let mut out = String::from("# ipvsadm -R\n");
    for line in virtual_servers::sync_commands(&virtual_servers::Table::new(), &servers) {
        out.push_str(&line);
        out.push('\n');
    }
    out.push_str(&format!("# addresses of {}\n", plan::DUMMY));
    for ip in plans.iter().flat_map(|p| &p.bound) {
        out.push_str(&format!("{ip}\n"));
    }
    out.push_str("# ipset restore -exist\n");
    for p in &plans {
        out.push_str(&p.sets.render());
    }
    for p in &plans {
        out.push_str(&format!("# {:?} iptables-restore\n", p.family));
        out.push_str(&p.rules.render());
    }
    out
}

impl Proxy for BuiltinIpvs {
    fn name(&self) -> &str {
        NAME
    }

    fn profile(&self) -> Profile {
        Profile::KUBE_PROXY_IPVS
    }

    fn unavailable(&self) -> Option<String> {
        load::unavailable()
    }

    fn start<'a>(&'a self, state: &State<'_>, env: &Env<'a>) -> Result<Box<dyn Running + 'a>> {
        program_nodes(self, state, env)
    }

    /// The whole plan compared: rules, sets, virtual servers and the addresses of `kube-ipvs0`.
    fn same_as_unbroken(&self, cluster: &Cluster) -> bool {
        let Some(mutant) = self.mutant.filter(|m| m.only_in_the_rules()) else { return false };
        cluster.nodes.iter().all(|node| {
            node_plans(cluster, &node.name, Some(mutant)) == node_plans(cluster, &node.name, None)
        })
    }
}

impl NodeProgrammer for BuiltinIpvs {
    fn name(&self) -> &str {
        NAME
    }

    /// Needs a tokio runtime entered on the calling thread when the node serves health checks.
    fn program_node(&self, cluster: &Cluster, node: &NodeHandle, state: &mut NodeState) -> Result<()> {
        let plans = node_plans(cluster, &node.name, self.mutant);
        load::apply(node, &plans, mutants::flushes_on_sync(self.mutant))?;
        let bug = self.mutant.and_then(Mutant::health_bug);
        healthcheck::serve_node(node, &mut state.health, &family_views(cluster), bug)
    }

    fn dump_node(&self, node: &NodeHandle, _state: &NodeState) -> Result<String> {
        // ip6tables-save on a node without IPv6 rules prints empty tables: harmless.
        load::dump(node, &[crate::model::IpFamily::V4, crate::model::IpFamily::V6])
    }

    fn cleanup_lapse(&self) -> Option<crate::proxy::conntrack_cleanup::Lapse> {
        self.mutant.and_then(Mutant::cleanup_lapse)
    }
}
