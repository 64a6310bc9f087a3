//! Partial syncs, as kube-proxy's nftables mode writes them (`syncProxyRules` in
//! pkg/proxy/nftables/proxier.go, v1.31 and later): after a full sync, a sync writes one
//! transaction with
//! - the per-Service chains (`service-`, `local-`, `external-`, `firewall-`, `endpoint-`) of
//!   the Services whose object or endpoints changed, each added, flushed and written whole
//!   (`ensureChain` with `skipServiceUpdate`), with their affinity sets;
//! - the map and set elements that changed: added, deleted, or deleted and added again when
//!   their value changed (`nftElementStorage.ensureElem` and `cleanupLeftoverKeys`, which
//!   compare with what the proxier last wrote, not with the kernel);
//! - the stale Service chains flushed, and deleted by a later transaction (`staleChains`:
//!   before kernel 6.2 a chain whose last map element goes in the same transaction is still
//!   busy), and the stale affinity sets deleted.
//!
//! The base chains and the top-level chains and sets (`setupNFTables`) are written by full
//! syncs only. A full sync comes first (`needFullSync` starts true), after a failed sync, and
//! when anything but the Services changed (kube-proxy: a node's labels set `needFullSync`;
//! other flags mean a restart). Unlike iptables mode, nftables mode has no periodic full sync:
//! every sync after the first successful one is partial until one fails.
//!
//! Partial transactions stay short, and that is why they exist: the kernel walks a whole
//! transaction for each anonymous set bound in it (every `numgen … vmap { … }` rule holds
//! one), so rewriting 10,000 Services in one transaction is quadratic
//! (kubernetes/kubernetes#126013).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt::Write as _;

use super::ruleset::{RuleSet, TABLE, chain_spec, element_body, rule_line, set_spec};
use crate::model::{Cluster, IpFamily};
use crate::proxy::changes;

/// One family's last sync: what the proxier's element storages and its chain bookkeeping hold.
pub(crate) struct Last {
    /// The family view it wrote.
    cluster: Cluster,
    /// Everything but the Services and pods ([`changes::shape`]).
    shape: String,
    /// The base and top-level chains with their rules, and the sets and maps declared: what
    /// only a full sync writes. A change there (a generator writing per-Service content into
    /// a top-level chain) takes a full sync rather than leaving it unwritten.
    frame: String,
    /// The per-Service chains it left.
    service_chains: HashSet<String>,
    /// The affinity sets it left, with their element timeouts.
    affinity: HashMap<String, Option<u32>>,
    /// Each element of every other set and map: (set, key) → value (empty in a set).
    elements: HashMap<(String, String), String>,
    /// Stale chains flushed but not yet deleted (busy, on kernels before 6.2).
    pub stale: BTreeSet<String>,
}

impl Last {
    /// After a full sync: the table holds all of `rules`.
    pub fn full(cluster: &Cluster, rules: &RuleSet) -> Last {
        Last {
            cluster: cluster.clone(),
            shape: changes::shape(cluster),
            frame: frame(rules),
            service_chains: rules
                .chains
                .iter()
                .filter(|c| is_service_chain(&c.name))
                .map(|c| c.name.clone())
                .collect(),
            affinity: rules
                .sets
                .iter()
                .filter(|s| is_affinity_set(&s.name))
                .map(|s| (s.name.clone(), s.timeout))
                .collect(),
            elements: elements(rules),
            stale: BTreeSet::new(),
        }
    }

    /// After a partial sync that wrote `written`, with the stale chains still `pending`
    /// deletion: what the kernel holds, which is not all of `rules` when a change was missed
    /// (the chains of a Service the trackers did not mark are neither rewritten nor made).
    pub fn partial(cluster: &Cluster, rules: &RuleSet, written: Partial, pending: BTreeSet<String>) -> Last {
        Last {
            cluster: cluster.clone(),
            shape: changes::shape(cluster),
            frame: frame(rules),
            service_chains: written.chains,
            affinity: written.affinity,
            elements: elements(rules),
            stale: pending,
        }
    }
}

/// Each element of every set and map but the affinity sets: (set, key) → value.
fn elements(rules: &RuleSet) -> HashMap<(String, String), String> {
    rules
        .elements
        .iter()
        .filter(|e| !is_affinity_set(&e.set))
        .map(|e| ((e.set.clone(), e.key.join(" . ")), e.value.clone().unwrap_or_default()))
        .collect()
}

/// kube-proxy's `isServiceChainName`: only per-Service chain names hold a `/`.
fn is_service_chain(name: &str) -> bool {
    name.contains('/')
}

/// kube-proxy's `isAffinitySetName`.
fn is_affinity_set(name: &str) -> bool {
    name.starts_with("affinity-")
}

/// The `namespace/name` of the Service a per-Service chain or affinity set belongs to:
/// `PREFIX-HASH8-namespace/name/protocol/port[__ip/port]` (`naming`).
fn owner(name: &str) -> Option<String> {
    let (_, hashed) = name.split_once('-')?;
    let base = hashed.get(9..).filter(|_| hashed.as_bytes().get(8) == Some(&b'-'))?;
    let mut parts = base.splitn(3, '/');
    let (namespace, service) = (parts.next()?, parts.next()?);
    Some(format!("{namespace}/{service}"))
}

/// What only a full sync writes, as text.
fn frame(rules: &RuleSet) -> String {
    let mut out = String::new();
    for chain in rules.chains.iter().filter(|c| !is_service_chain(&c.name)) {
        let _ = writeln!(out, "{}{}", chain.name, chain_spec(chain));
    }
    for rule in rules.rules.iter().filter(|r| !is_service_chain(&r.chain)) {
        let _ = writeln!(out, "{}", rule_line(rule));
    }
    for set in rules.sets.iter().filter(|s| !is_affinity_set(&s.name)) {
        let _ = writeln!(out, "{} {}", set.name, set_spec(set));
    }
    out
}

/// How the next sync writes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Plan {
    Full,
    /// Only the chains of these Services (`namespace/name`), and the elements that changed.
    Partial(HashSet<String>),
}

/// Decides the next sync of `view` (whose table is `rules`) after `last`.
/// `endpoints_tracked: false` is the mutant whose tracker misses endpoint changes.
pub(crate) fn plan(last: Option<&Last>, view: &Cluster, rules: &RuleSet, endpoints_tracked: bool) -> Plan {
    let Some(last) = last else { return Plan::Full };
    if last.shape != changes::shape(view) || last.frame != frame(rules) {
        return Plan::Full;
    }
    Plan::Partial(changes::changed_services(&last.cluster, view, endpoints_tracked))
}

/// A partial sync's transaction, the stale chains it flushes (to delete afterwards), and the
/// per-Service chains and affinity sets the table holds once it committed.
pub(crate) struct Partial {
    pub text: String,
    pub stale: BTreeSet<String>,
    chains: HashSet<String>,
    affinity: HashMap<String, Option<u32>>,
}

/// The `nft -f` transaction of a partial sync to `rules` (the whole table the view calls
/// for) after `last`, for the `changed` Services.
pub(crate) fn text(rules: &RuleSet, last: &Last, changed: &HashSet<String>) -> Partial {
    let ip = rules.ip();
    let rewritten = |name: &str| owner(name).is_some_and(|o| changed.contains(&o));
    let mut out = String::new();
    let mut chains = HashSet::new();
    for chain in rules.chains.iter().filter(|c| is_service_chain(&c.name)) {
        if rewritten(&chain.name) {
            let _ = writeln!(out, "add chain {ip} {TABLE} {}{}", chain.name, chain_spec(chain));
            let _ = writeln!(out, "flush chain {ip} {TABLE} {}", chain.name);
        } else if !last.service_chains.contains(&chain.name) {
            continue;
        }
        chains.insert(chain.name.clone());
    }
    // An affinity set keeps what it learned; a new timeout is set in place by its `add set`, as
    // kube-proxy's does (v1.30.3, kernel 6.18: the elements stay). Its users, the Service's
    // chains, were flushed above.
    let mut affinity = HashMap::new();
    for set in rules.sets.iter().filter(|s| is_affinity_set(&s.name)) {
        let before = last.affinity.get(&set.name);
        if rewritten(&set.name) {
            // Flags cannot change in place: a set that gains or loses its timeout is made again.
            if before.is_some_and(|timeout| timeout.is_some() != set.timeout.is_some()) {
                let _ = writeln!(out, "delete set {ip} {TABLE} {}", set.name);
            }
            let _ = writeln!(out, "add set {ip} {TABLE} {} {}", set.name, set_spec(set));
            affinity.insert(set.name.clone(), set.timeout);
        } else if let Some(&timeout) = before {
            affinity.insert(set.name.clone(), timeout);
        }
    }
    for rule in rules.rules.iter().filter(|r| is_service_chain(&r.chain) && rewritten(&r.chain)) {
        let _ = writeln!(out, "add rule {ip} {TABLE} {}", rule_line(rule));
    }
    let mut now: HashSet<(&str, String)> = HashSet::new();
    for e in rules.elements.iter().filter(|e| !is_affinity_set(&e.set)) {
        let key = e.key.join(" . ");
        let value = e.value.as_deref().unwrap_or_default();
        match last.elements.get(&(e.set.clone(), key.clone())) {
            Some(before) if before == value => {}
            Some(_) => {
                let _ = writeln!(out, "delete element {ip} {TABLE} {} {{ {key} }}", e.set);
                let _ = writeln!(out, "add element {ip} {TABLE} {} {{ {} }}", e.set, element_body(e));
            }
            None => {
                let _ = writeln!(out, "add element {ip} {TABLE} {} {{ {} }}", e.set, element_body(e));
            }
        }
        now.insert((e.set.as_str(), key));
    }
    let mut gone: Vec<&(String, String)> =
        last.elements.keys().filter(|(set, key)| !now.contains(&(set.as_str(), key.clone()))).collect();
    gone.sort();
    for (set, key) in gone {
        let _ = writeln!(out, "delete element {ip} {TABLE} {set} {{ {key} }}");
    }
    let wanted: HashSet<&str> = rules.chains.iter().map(|c| c.name.as_str()).collect();
    let stale: BTreeSet<String> =
        last.service_chains.iter().filter(|c| !wanted.contains(c.as_str())).cloned().collect();
    for chain in &stale {
        let _ = writeln!(out, "flush chain {ip} {TABLE} {chain}");
    }
    let sets: HashSet<&str> = rules.sets.iter().map(|s| s.name.as_str()).collect();
    let mut stale_sets: Vec<&String> = last.affinity.keys().filter(|s| !sets.contains(s.as_str())).collect();
    stale_sets.sort();
    for set in stale_sets {
        let _ = writeln!(out, "delete set {ip} {TABLE} {set}");
    }
    Partial { text: out, stale, chains, affinity }
}

/// The transaction deleting `stale` chains, already flushed and unreferenced.
pub(crate) fn delete_chains(family: IpFamily, stale: &BTreeSet<String>) -> String {
    let ip = super::ruleset::nft_family(family);
    stale.iter().map(|c| format!("delete chain {ip} {TABLE} {c}\n")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::test_support::web_service;

    fn table(cluster: &Cluster) -> RuleSet {
        super::super::node_rulesets(cluster, "node-a", None).remove(0)
    }

    #[test]
    fn names_the_service_a_chain_belongs_to() {
        let chains = table(&Cluster::example(vec![web_service("web-1", "10.96.0.10", &["10.244.0.5"])]));
        let owned: Vec<Option<String>> =
            chains.chains.iter().filter(|c| is_service_chain(&c.name)).map(|c| owner(&c.name)).collect();
        assert!(!owned.is_empty());
        assert!(owned.iter().all(|o| o.as_deref() == Some("default/web-1")), "{owned:?}");
        assert_eq!(owner("services"), None);
    }

    #[test]
    fn a_sync_writes_only_the_changed_services_chains_and_elements() {
        let before = Cluster::example(vec![
            web_service("a", "10.96.0.10", &["10.244.0.5"]),
            web_service("b", "10.96.0.11", &[]),
        ]);
        let mut after = before.clone();
        after.services[1] = web_service("b", "10.96.0.11", &["10.244.0.6"]);
        let last = Last::full(&before, &table(&before));
        let rules = table(&after);
        let Plan::Partial(changed) = plan(Some(&last), &after, &rules, true) else { panic!("a full sync") };
        assert_eq!(changed, HashSet::from(["default/b".to_string()]));
        let Partial { text, stale, .. } = text(&rules, &last, &changed);
        assert!(stale.is_empty());
        assert!(
            text.contains("add chain ip kube-proxy service-") && text.contains("default/b/tcp/http"),
            "{text}"
        );
        assert!(!text.contains("default/a/"), "an unchanged Service is left alone: {text}");
        // b had no endpoints: its no-endpoint element goes, its service-ips element comes.
        assert!(
            text.contains("delete element ip kube-proxy no-endpoint-services { 10.96.0.11 . tcp . 80 }"),
            "{text}"
        );
        assert!(
            text.contains("add element ip kube-proxy service-ips { 10.96.0.11 . tcp . 80 : goto service-"),
            "{text}"
        );
        assert!(!text.contains("10.96.0.10 . tcp"), "{text}");
        assert!(!text.contains("filter-") && !text.contains("add table"), "no base chains: {text}");

        // The mutant's tracker misses the endpoint change: the chains stay, the elements follow.
        assert_eq!(plan(Some(&last), &after, &rules, false), Plan::Partial(HashSet::new()));
    }

    #[test]
    fn a_removed_service_leaves_its_chains_flushed_and_full_syncs_come_back() {
        let before = Cluster::example(vec![web_service("a", "10.96.0.10", &["10.244.0.5"])]);
        let after = Cluster::example(vec![]);
        let last = Last::full(&before, &table(&before));
        let rules = table(&after);
        let Plan::Partial(changed) = plan(Some(&last), &after, &rules, true) else { panic!("a full sync") };
        let Partial { text, stale, .. } = text(&rules, &last, &changed);
        assert!(!stale.is_empty() && stale.iter().all(|c| c.contains("default/a/")), "{stale:?}");
        for chain in &stale {
            assert!(text.contains(&format!("flush chain ip kube-proxy {chain}\n")), "{text}");
        }
        assert!(text.contains("delete element ip kube-proxy cluster-ips { 10.96.0.10 }"), "{text}");
        assert!(
            delete_chains(IpFamily::V4, &stale).lines().all(|l| l.starts_with("delete chain ip kube-proxy "))
        );

        assert_eq!(plan(None, &after, &rules, true), Plan::Full);
        let mut flags = after.clone();
        flags.proxy.masquerade_all = true;
        assert_eq!(plan(Some(&last), &flags, &table(&flags), true), Plan::Full);
    }
}
