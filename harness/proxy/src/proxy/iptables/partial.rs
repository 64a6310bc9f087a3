//! Partial syncs, as kube-proxy's iptables mode writes them since v1.27 (`MinimizeIPTablesRestore`,
//! GA in v1.28; `syncProxyRules` in pkg/proxy/iptables/proxier.go): after a full sync, a sync
//! writes with `iptables-restore --noflush` the top-level chains (`KUBE-SERVICES`,
//! `KUBE-NODEPORTS`, `KUBE-EXTERNAL-SERVICES`, …) and only the per-Service chains
//! (`KUBE-SVC-`, `KUBE-SVL-`, `KUBE-EXT-`, `KUBE-FW-`, `KUBE-SEP-`) of the Services whose
//! object or endpoints changed since the last sync; the chains of the others are left as they
//! are in the kernel, and stale ones are flushed and deleted (`-X`). The jumps from the
//! built-in chains are written on full syncs only (kubernetes#114181).
//!
//! A full sync comes first, after [`FULL_SYNC_EVERY`] partial ones (kube-proxy: every
//! `syncPeriod`, an hour by default), after a failed restore, and when anything but the
//! Services changed (the node, the flags: kube-proxy restarts then). It replaces both tables,
//! which leaves what kube-proxy's full `--noflush` restore leaves in a namespace it alone writes.
//!
//! What changed is decided from the model, as kube-proxy decides it from its change trackers
//! ([`changes`]), not by comparing rules: so a tracker that misses a change
//! (kubernetes/kubernetes#121362) leaves stale chains, as it did in kube-proxy.

use std::collections::{BTreeSet, HashSet};
use std::fmt::Write as _;

use super::naming;
use super::ruleset::{RuleSet, Table, TableName};
use crate::model::Cluster;
use crate::proxy::changes::{self, key, shape};

/// Partial syncs between two full ones (kube-proxy counts time instead: a full sync every
/// `syncPeriod`; a run has too few syncs for an hour to pass, so a count keeps both kinds in
/// the path of every scenario with steps).
pub(crate) const FULL_SYNC_EVERY: u32 = 8;

/// One family's last sync.
pub(crate) struct Last {
    /// The family view it wrote.
    cluster: Cluster,
    /// Everything but the Services and pods, as text: a change there means a full sync.
    shape: String,
    /// The chains it left in each table (filter, nat), for the stale ones to delete.
    chains: [BTreeSet<String>; 2],
    /// Partial syncs since the last full one.
    partial_syncs: u32,
}

impl Last {
    pub fn new(cluster: &Cluster, rules: &RuleSet, partial_syncs: u32) -> Last {
        Last {
            cluster: cluster.clone(),
            shape: shape(cluster),
            chains: [chain_names(&rules.filter), chain_names(&rules.nat)],
            partial_syncs,
        }
    }

    pub fn partial_syncs(&self) -> u32 {
        self.partial_syncs
    }
}

fn chain_names(table: &Table) -> BTreeSet<String> {
    table.chains.iter().filter(|c| !c.builtin).map(|c| c.name.clone()).collect()
}

/// How the next sync writes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Plan {
    Full,
    /// Only the per-Service chains of these Services (`namespace/name`).
    Partial(HashSet<String>),
}

/// Decides the next sync of `view` after `last`. `endpoints_tracked: false` is the mutant
/// whose tracker misses endpoint changes.
pub(crate) fn plan(last: Option<&Last>, view: &Cluster, endpoints_tracked: bool) -> Plan {
    let Some(last) = last else { return Plan::Full };
    if last.partial_syncs >= FULL_SYNC_EVERY || last.shape != shape(view) {
        return Plan::Full;
    }
    Plan::Partial(changes::changed_services(&last.cluster, view, endpoints_tracked))
}

/// Whether `name` is one Service's own chain rather than a top-level one.
fn per_service(name: &str) -> bool {
    ["KUBE-SVC-", "KUBE-SVL-", "KUBE-EXT-", "KUBE-FW-", "KUBE-SEP-"].iter().any(|p| name.starts_with(p))
}

/// The per-Service chains of the `changed` Services of `view`, as `generate` names them.
fn chains_of(view: &Cluster, changed: &HashSet<String>) -> HashSet<String> {
    let mut names = HashSet::new();
    for svc in view.services.iter().filter(|s| changed.contains(&key(s))) {
        for port in &svc.ports {
            let name = naming::service_port_name(svc, port);
            names.insert(naming::svc_chain(&name, port.protocol));
            names.insert(naming::svl_chain(&name, port.protocol));
            names.insert(naming::ext_chain(&name, port.protocol));
            names.insert(naming::fw_chain(&name, port.protocol));
            for ep in &port.endpoints {
                names.insert(naming::sep_chain(&name, port.protocol, ep.address()));
            }
        }
    }
    names
}

/// The `iptables-restore --noflush` input of a partial sync to `rules` (the whole ruleset the
/// view calls for) after `last`: the top-level chains and the changed Services' chains, each
/// declared (which flushes it) and written whole, then the stale chains flushed and deleted.
pub(crate) fn text(rules: &RuleSet, view: &Cluster, last: &Last, changed: &HashSet<String>) -> String {
    let owned = chains_of(view, changed);
    let mut out = String::new();
    for (table, before) in rules.tables().into_iter().zip(&last.chains) {
        let now = chain_names(table);
        let written = |name: &str| !per_service(name) || owned.contains(name);
        let stale: Vec<&String> = before.difference(&now).collect();
        let _ = writeln!(out, "*{}", table.name.as_str());
        for chain in table.chains.iter().filter(|c| !c.builtin && written(&c.name)) {
            let _ = writeln!(out, ":{} - [0:0]", chain.name);
        }
        for name in &stale {
            let _ = writeln!(out, ":{name} - [0:0]");
        }
        for rule in table.rules.iter().filter(|r| !is_builtin(table.name, &r.chain) && written(&r.chain)) {
            let _ = writeln!(out, "{}", rule.line());
        }
        for name in &stale {
            let _ = writeln!(out, "-X {name}");
        }
        let _ = writeln!(out, "COMMIT");
    }
    out
}

fn is_builtin(table: TableName, chain: &str) -> bool {
    let builtin: &[&str] = match table {
        TableName::Filter => &["INPUT", "FORWARD", "OUTPUT"],
        TableName::Nat => &["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"],
    };
    builtin.contains(&chain)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Protocol;
    use crate::proxy::test_support::web_service;

    #[test]
    fn a_sync_rewrites_only_what_changed() {
        let before = Cluster::example(vec![
            web_service("a", "10.96.0.10", &["10.244.0.5"]),
            web_service("b", "10.96.0.11", &[]),
        ]);
        let mut after = before.clone();
        after.services[1] = web_service("b", "10.96.0.11", &["10.244.0.6"]);
        let rules = super::super::node_ruleset(&after, "node-a", None);
        let last = Last::new(&before, &super::super::node_ruleset(&before, "node-a", None), 0);
        let Plan::Partial(changed) = plan(Some(&last), &after, true) else { panic!("a full sync") };
        assert_eq!(changed, HashSet::from(["default/b".to_string()]));
        let text = text(&rules, &after, &last, &changed);
        let b = naming::svc_chain("default/b:http", Protocol::Tcp);
        let a = naming::svc_chain("default/a:http", Protocol::Tcp);
        assert!(text.contains(&format!(":{b} - [0:0]")), "{text}");
        assert!(text.contains(&format!("-j {a}")), "KUBE-SERVICES is rewritten whole: {text}");
        assert!(
            !text.contains(&format!(":{a} ")) && !text.contains(&format!("-A {a} ")),
            "an unchanged Service's chains are left alone: {text}"
        );
        assert!(text.contains(":KUBE-SERVICES - [0:0]"), "{text}");
        assert!(!text.contains("-A PREROUTING"), "no jumps from built-in chains: {text}");

        // The mutant's tracker misses the endpoint change.
        assert_eq!(plan(Some(&last), &after, false), Plan::Partial(HashSet::new()));
    }

    #[test]
    fn removed_services_chains_are_deleted_and_full_syncs_come_back() {
        let before = Cluster::example(vec![web_service("a", "10.96.0.10", &["10.244.0.5"])]);
        let after = Cluster::example(vec![]);
        let last = Last::new(&before, &super::super::node_ruleset(&before, "node-a", None), 0);
        let Plan::Partial(changed) = plan(Some(&last), &after, true) else { panic!("a full sync") };
        let text = text(&super::super::node_ruleset(&after, "node-a", None), &after, &last, &changed);
        let a = naming::svc_chain("default/a:http", Protocol::Tcp);
        assert!(text.contains(&format!(":{a} - [0:0]")) && text.contains(&format!("-X {a}")), "{text}");

        assert_eq!(plan(None, &after, true), Plan::Full);
        let tired = Last::new(&before, &super::super::node_ruleset(&before, "node-a", None), FULL_SYNC_EVERY);
        assert_eq!(plan(Some(&tired), &after, true), Plan::Full);
        let mut flags = before.clone();
        flags.proxy.masquerade_all = true;
        assert_eq!(plan(Some(&last), &flags, true), Plan::Full);
    }
}
