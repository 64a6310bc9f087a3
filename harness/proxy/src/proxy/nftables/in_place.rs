//! Updating a node's `kube-proxy` table in place, as kube-proxy's nftables proxier does on
//! every sync (pkg/proxy/nftables/proxier.go, `syncProxyRules`), rather than deleting and
//! recreating it: one transaction that ensures the table, flushes every chain and every set
//! and map except the `affinity-…` sets still in use, adds the new contents, and deletes the
//! stale affinity sets. So the ClientIP affinity a client earned survives every sync and a
//! restart (the restart lost it in one release: kubernetes/kubernetes#123162).
//!
//! Base chains (with a hook) are deleted and added again, so that a changed priority loads.
//! Stale service chains are flushed, not deleted: before kernel 6.2 a chain whose last map
//! element goes in the same transaction is still busy (the proxier's `staleChains`). One that
//! is already empty, flushed by an earlier sync, is deleted.

use std::collections::BTreeMap;
use std::fmt::Write;

use anyhow::{Context, Result};

use super::ruleset::{RuleSet, TABLE};
use crate::topology::NodeHandle;

/// What a node's table holds now: each chain with its rule count, each set and map.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Existing {
    pub chains: BTreeMap<String, usize>,
    /// Each set's element timeout, in seconds (none without one).
    pub timeouts: BTreeMap<String, Option<u32>>,
    /// The chains with a hook (base chains).
    pub hooked: std::collections::BTreeSet<String>,
    /// Name → whether it is a map.
    pub sets: BTreeMap<String, bool>,
}

impl Existing {
    /// No table yet (or an empty one).
    pub fn is_empty(&self) -> bool {
        self.chains.is_empty() && self.sets.is_empty()
    }
}

/// Reads the family's table of `node` (`nft list table`); none yet is an empty one.
pub fn existing(node: &NodeHandle, rules: &RuleSet) -> Result<Existing> {
    let listed = node.netns.exec("nft", &["list", "table", rules.ip(), TABLE], None);
    match listed {
        Ok(out) => Ok(parse(&String::from_utf8_lossy(&out.stdout))),
        Err(e) if format!("{e:#}").contains("No such file or directory") => Ok(Existing::default()),
        Err(e) => Err(e).with_context(|| format!("reading the {} table of node {}", rules.ip(), node.name)),
    }
}

/// `nft list table` output → its chains (with their rule counts) and sets.
fn parse(listing: &str) -> Existing {
    let mut existing = Existing::default();
    let mut depth = 0usize;
    let mut chain: Option<String> = None;
    let mut set: Option<String> = None;
    for line in listing.lines().map(str::trim) {
        if depth == 1 {
            let mut words = line.split_whitespace();
            match (words.next(), words.next()) {
                (Some("chain"), Some(name)) => {
                    existing.chains.insert(name.to_string(), 0);
                    chain = Some(name.to_string());
                }
                (Some(kind @ ("set" | "map")), Some(name)) => {
                    existing.sets.insert(name.to_string(), kind == "map");
                    existing.timeouts.insert(name.to_string(), None);
                    set = Some(name.to_string());
                }
                _ => {}
            }
        } else if depth == 2
            && let Some(name) = &set
            && let Some(duration) = line.strip_prefix("timeout ")
        {
            existing.timeouts.insert(name.clone(), seconds(duration));
        } else if depth == 2
            && let Some(name) = &chain
            && line.starts_with("type ")
        {
            existing.hooked.insert(name.clone());
        } else if depth == 2
            && let Some(name) = &chain
            && !line.is_empty()
            && line != "}"
            && !["type ", "comment ", "policy "].iter().any(|p| line.starts_with(p))
        {
            *existing.chains.entry(name.clone()).or_default() += 1;
        }
        let opened = line.matches('{').count();
        let closed = line.matches('}').count();
        depth = (depth + opened).saturating_sub(closed);
        if depth < 2 {
            chain = None;
            set = None;
        }
    }
    existing
}

/// The stale service chains of `rules`' table, emptied by the transaction [`text`] wrote:
/// a second transaction deletes them. On kernels before 6.2 one whose last map element
/// just went may still count as busy; it then stays, empty, until the next sync's [`text`]
/// deletes it.
pub(crate) fn delete_stale_chains(node: &NodeHandle, rules: &RuleSet, existing: &Existing) {
    let ip = rules.ip();
    let wanted_chain = |name: &str| rules.chains.iter().any(|c| c.name == name);
    let mut text = String::new();
    for (name, &rules_now) in &existing.chains {
        if !wanted_chain(name) && rules_now > 0 && !existing.hooked.contains(name) {
            let _ = writeln!(text, "delete chain {ip} {TABLE} {name}");
        }
    }
    if !text.is_empty() {
        // Busy is not an error: the chain is empty and unreferenced, and goes next time.
        let _ = node.netns.exec("nft", &["-f", "-"], Some(text.as_bytes()));
    }
}

/// An nft duration (`3h`, `10m`, `1h30m`, `600s`) in seconds.
fn seconds(text: &str) -> Option<u32> {
    let mut total = 0u32;
    let mut number = String::new();
    for c in text.trim().chars() {
        match c {
            '0'..='9' => number.push(c),
            'd' | 'h' | 'm' | 's' => {
                let unit = match c {
                    'd' => 86400,
                    'h' => 3600,
                    'm' => 60,
                    _ => 1,
                };
                total += number.parse::<u32>().ok()? * unit;
                number.clear();
            }
            _ => return None,
        }
    }
    number.is_empty().then_some(total)
}

/// The transaction that turns `existing` into `rules`.
pub fn text(rules: &RuleSet, existing: &Existing) -> String {
    let ip = rules.ip();
    let mut out = String::new();
    let wanted_chain = |name: &str| rules.chains.iter().any(|c| c.name == name);
    let wanted_set = |name: &str| rules.sets.iter().any(|s| s.name == name);
    // An affinity set is kept with what it learned; a new timeout is set in place by the set's
    // `add set`, as kube-proxy's does (v1.30.3, kernel 6.18: the elements stay). Flags cannot
    // change in place: a set that gains or loses its timeout (a mutant's) is made again.
    let kept = |name: &str| {
        name.starts_with("affinity-")
            && rules.sets.iter().any(|s| {
                s.name == name
                    && existing.timeouts.get(name).copied().flatten().is_some() == s.timeout.is_some()
            })
    };
    let _ = writeln!(out, "add table {ip} {TABLE}");
    for (name, &rules_now) in &existing.chains {
        // An empty stale chain was flushed by an earlier sync: nothing references it now.
        if !wanted_chain(name) && rules_now == 0 {
            continue;
        }
        let _ = writeln!(out, "flush chain {ip} {TABLE} {name}");
    }
    for (name, &map) in &existing.sets {
        let kind = if map { "map" } else { "set" };
        if !kept(name) {
            let _ = writeln!(out, "flush {kind} {ip} {TABLE} {name}");
        }
        if name.starts_with("affinity-") && wanted_set(name) && !kept(name) {
            let _ = writeln!(out, "delete {kind} {ip} {TABLE} {name}");
        }
    }
    // Base chains are recreated, as the proxier does on its first sync: a hook or priority
    // that changed (another layout) cannot be altered in place.
    for chain in rules.chains.iter().filter(|c| c.hook.is_some() && existing.chains.contains_key(&c.name)) {
        let _ = writeln!(out, "delete chain {ip} {TABLE} {}", chain.name);
    }
    out.push_str(&rules.render());
    for (name, &map) in &existing.sets {
        if !wanted_set(name) {
            let kind = if map { "map" } else { "set" };
            let _ = writeln!(out, "delete {kind} {ip} {TABLE} {name}");
        }
    }
    for (name, &rules_now) in &existing.chains {
        // A stale base chain is referenced by nothing: it goes at once.
        if !wanted_chain(name) && (rules_now == 0 || existing.hooked.contains(name)) {
            let _ = writeln!(out, "delete chain {ip} {TABLE} {name}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::IpFamily;

    const LISTING: &str = "table ip kube-proxy {
	comment \"rules for kube-proxy\"
	set cluster-ips {
		type ipv4_addr
		elements = { 10.96.0.10 }
	}
	set affinity-X4OAB2EO-default/web/tcp/http__10.244.1.10/8080 {
		type ipv4_addr
		flags dynamic,timeout
		timeout 3h
	}
	set affinity-GONE-default/old/tcp/http__10.244.1.11/8080 {
		type ipv4_addr
		flags dynamic,timeout
		timeout 3h
	}
	map service-ips {
		type ipv4_addr . inet_proto . inet_service : verdict
		elements = { 10.96.0.10 . tcp . 80 : goto service-X-default/web/tcp/http }
	}
	chain filter-forward {
		type filter hook forward priority -110; policy accept;
		ct state new jump service-endpoints-check
	}
	chain service-X-default/web/tcp/http {
		ip daddr 10.96.0.10 tcp dport 80 ip saddr != 10.244.0.0/16 jump mark-for-masquerade
	}
	chain service-OLD-default/old/tcp/http {
	}
}
";

    #[test]
    fn reads_chains_with_their_rule_counts_and_sets() {
        let e = parse(LISTING);
        assert_eq!(e.chains.get("filter-forward"), Some(&1));
        assert_eq!(e.chains.get("service-X-default/web/tcp/http"), Some(&1));
        assert_eq!(e.chains.get("service-OLD-default/old/tcp/http"), Some(&0));
        assert_eq!(e.sets.get("service-ips"), Some(&true));
        assert_eq!(e.sets.len(), 4);
    }

    #[test]
    fn keeps_live_affinity_sets_and_clears_everything_else() {
        let mut rules = RuleSet::new(IpFamily::V4);
        rules.add_chain("filter-forward");
        rules.add_set(super::super::ruleset::Set {
            name: "affinity-X4OAB2EO-default/web/tcp/http__10.244.1.10/8080".into(),
            map: false,
            type_: "ipv4_addr".into(),
            flags: vec!["dynamic", "timeout"],
            timeout: Some(10800),
            comment: None,
        });
        let text = text(&rules, &parse(LISTING));
        assert!(!text.contains("flush set ip kube-proxy affinity-X4OAB2EO"), "{text}");
        assert!(text.contains("flush set ip kube-proxy cluster-ips"), "{text}");
        assert!(text.contains("flush map ip kube-proxy service-ips"), "{text}");
        assert!(text.contains("delete set ip kube-proxy affinity-GONE"), "{text}");
        // A stale chain with rules is flushed now and deleted once empty.
        assert!(text.contains("flush chain ip kube-proxy service-X-default/web/tcp/http"), "{text}");
        assert!(!text.contains("delete chain ip kube-proxy service-X-"), "{text}");
        assert!(text.contains("delete chain ip kube-proxy service-OLD-default/old/tcp/http"), "{text}");
        assert!(!text.contains("delete table"), "{text}");
    }
}
