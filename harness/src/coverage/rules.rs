//! A node's rules by the handle the kernel's traces name them with: `nft -a list ruleset`,
//! without the harness's own trace table. The tables iptables-nft keeps (`ip nat`, `ip filter`,
//! …) read better as `iptables-save` writes them (nft prints an iptables comment match as
//! nothing), so their rules take `iptables-save`'s text, matched by chain and position.

use std::collections::{BTreeMap, HashMap};

use anyhow::Result;

use super::identity::{Location, RuleId};
use crate::observe::nftables::NftSocket;
use crate::observe::nftrace::TRACE_TABLE;
use crate::topology::netns::Netns;

/// A node's rules, by handle, with their text.
#[derive(Debug, Default, Clone)]
pub struct NodeRules {
    pub rules: HashMap<RuleId, String>,
    /// In listing order, for reporting the rules no packet hit.
    pub order: Vec<RuleId>,
    /// Whether the trace table is there (a proxy that flushes the ruleset removes it).
    pub traced: bool,
}

/// The tables iptables-nft keeps: their rules are `iptables-save`'s.
const XTABLES: &[&str] = &["filter", "nat", "mangle", "raw", "security"];

/// Reads `ns`'s rules and the generation they are of. Handles come over netlink; the text of
/// the tables iptables-nft keeps from `iptables-save` (per family, at once), and from
/// `nft -a list ruleset` only for rules that has no text for (other tables, an odd chain).
pub fn list(ns: &Netns, socket: &mut NftSocket) -> Result<(u32, NodeRules)> {
    for _ in 0..10 {
        let (generation, handles) = socket.rules()?;
        let mut rules = NodeRules::default();
        for h in handles {
            if h.table == TRACE_TABLE {
                rules.traced = true;
                continue;
            }
            let at = Location { family: h.family.to_string(), table: h.table, chain: h.chain };
            rules.order.push(RuleId { at, handle: h.handle });
        }
        let xtables = |family: &str| {
            rules.order.iter().any(|r| r.at.family == family && XTABLES.contains(&r.at.table.as_str()))
        };
        let saves: Vec<(&str, &str)> = [("ip", "iptables-save"), ("ip6", "ip6tables-save")]
            .into_iter()
            .filter(|(family, _)| xtables(family))
            .collect();
        let others = rules.order.iter().any(|r| {
            !(matches!(r.at.family.as_str(), "ip" | "ip6") && XTABLES.contains(&r.at.table.as_str()))
        });
        let (saved, mut listing) = std::thread::scope(|scope| {
            let listing = others.then(|| scope.spawn(|| ns.exec("nft", &["-a", "list", "ruleset"], None)));
            let saved: Vec<_> = saves
                .iter()
                .map(|&(family, program)| (family, scope.spawn(move || ns.exec(program, &[], None))))
                .collect::<Vec<_>>()
                .into_iter()
                .map(|(family, thread)| (family, thread.join().expect("iptables-save thread")))
                .collect();
            (saved, listing.map(|thread| thread.join().expect("nft thread")))
        });
        for (family, output) in saved {
            // An iptables-save that fails (a table it calls incompatible) leaves nft's text.
            if let Ok(output) = output {
                use_saved_text(&mut rules, family, &String::from_utf8_lossy(&output.stdout));
            }
        }
        if listing.is_none() && rules.order.iter().any(|id| !rules.rules.contains_key(id)) {
            listing = Some(ns.exec("nft", &["-a", "list", "ruleset"], None));
        }
        if let Some(listing) = listing {
            let listed = parse_nft(&String::from_utf8_lossy(&listing?.stdout));
            for (id, text) in listed.rules {
                rules.rules.entry(id).or_insert(text);
            }
        }
        if socket.generation()? == generation {
            // A rule no listing shows in a form this reads (none is known) is left out, as
            // the listing alone used to leave it.
            let NodeRules { rules: texts, order, .. } = &mut rules;
            order.retain(|id| texts.contains_key(id));
            return Ok((generation, rules));
        }
    }
    anyhow::bail!("the rules of namespace {} kept changing while they were read", ns.name())
}

/// The rules of `nft -a list ruleset` output, the trace table's left out.
pub(crate) fn parse_nft(text: &str) -> NodeRules {
    let mut out = NodeRules::default();
    let mut table: Option<(String, String)> = None;
    let mut chain: Option<String> = None;
    // Lines of a block other than a chain (a set, a map), skipped to its end.
    let mut other_block = 0usize;
    let mut pending = String::new();
    for line in text.lines() {
        let line = line.trim();
        if other_block > 0 {
            other_block =
                other_block + line.matches('{').count() - line.matches('}').count().min(other_block);
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((family, name)) = table.clone() else {
            let mut words = line.split_whitespace();
            if let (Some("table"), Some(family), Some(name)) = (words.next(), words.next(), words.next()) {
                table = Some((family.to_string(), unquote(name)));
            }
            continue;
        };
        let Some(chain_name) = chain.clone() else {
            if line == "}" {
                table = None;
            } else if let Some(rest) = line.strip_prefix("chain ") {
                chain = Some(unquote(rest.split(" {").next().unwrap_or(rest).trim()));
            } else if line.ends_with('{') || line.contains("{ #") {
                other_block = 1;
            }
            if name == TRACE_TABLE && line.starts_with("chain ") {
                out.traced = true;
            }
            continue;
        };
        if line == "}" {
            chain = None;
            continue;
        }
        if pending.is_empty()
            && (line.starts_with("type ") || line.starts_with("policy "))
            && line.ends_with(';')
        {
            continue;
        }
        if !pending.is_empty() {
            pending.push(' ');
        }
        pending.push_str(line);
        let Some((rule, handle)) = pending.rsplit_once(" # handle ") else { continue };
        if let Ok(handle) = handle.trim().parse::<u64>()
            && name != TRACE_TABLE
        {
            let id = RuleId {
                at: Location { family: family.clone(), table: name.clone(), chain: chain_name },
                handle,
            };
            out.order.push(id.clone());
            out.rules.insert(id, without_counter(rule.trim()));
        }
        pending.clear();
    }
    out
}

fn unquote(name: &str) -> String {
    name.trim_matches('"').to_string()
}

/// `… counter packets 12 bytes 720 …` → `… counter …`: counts differ between two listings.
fn without_counter(rule: &str) -> String {
    let words: Vec<&str> = rule.split(' ').collect();
    let mut out = Vec::with_capacity(words.len());
    let mut i = 0;
    while i < words.len() {
        if words[i] == "packets" && words.get(i + 2) == Some(&"bytes") && i > 0 && words[i - 1] == "counter" {
            i += 4;
            continue;
        }
        out.push(words[i]);
        i += 1;
    }
    out.join(" ").split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Replaces the text of `family`'s iptables-nft rules with `iptables-save`'s (`saved`), chain
/// by chain where both list as many rules.
pub(crate) fn use_saved_text(rules: &mut NodeRules, family: &str, saved: &str) {
    let mut by_chain: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    let mut table = String::new();
    for line in saved.lines() {
        if let Some(name) = line.strip_prefix('*') {
            table = name.trim().to_string();
        } else if let Some(rest) = line.strip_prefix("-A ") {
            let chain = rest.split_whitespace().next().unwrap_or_default().to_string();
            by_chain.entry((table.clone(), chain)).or_default().push(line.to_string());
        }
    }
    let mut listed: BTreeMap<(String, String), Vec<RuleId>> = BTreeMap::new();
    for id in &rules.order {
        if id.at.family == family && XTABLES.contains(&id.at.table.as_str()) {
            listed.entry((id.at.table.clone(), id.at.chain.clone())).or_default().push(id.clone());
        }
    }
    for (key, ids) in listed {
        match by_chain.get(&key) {
            Some(texts) if texts.len() == ids.len() => {
                for (id, text) in ids.into_iter().zip(texts) {
                    rules.rules.insert(id, text.clone());
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LISTING: &str = r#"table ip nat { # handle 1
	chain OUTPUT { # handle 1
		type nat hook output priority -100; policy accept;
		ip daddr 10.96.0.10 tcp dport 80  counter packets 3 bytes 180 dnat to 127.0.0.1:8080 # handle 2
		counter packets 0 bytes 0 jump KUBE-SERVICES # handle 4
	}
	chain KUBE-SERVICES { # handle 3
	}
}
table inet packetproof-trace { # handle 2
	chain mark-prerouting { # handle 1
		type filter hook prerouting priority -500; policy accept;
		meta l4proto { tcp, udp, sctp } meta nftrace set 1 # handle 5
	}
}
table ip kube-proxy { # handle 3
	set cluster-ips { # handle 9
		type ipv4_addr
		elements = { 10.96.0.1,
			     10.96.0.10 }
	}
	chain "service-ULMVA6XW-ns1/svc1/tcp/p80" { # handle 10
		ip daddr 10.96.0.1 numgen random mod 2 vmap { 0 : goto endpoint-A,
			1 : goto endpoint-B } # handle 11
	}
}
"#;

    #[test]
    fn reads_rules_by_handle_without_the_trace_table() {
        let rules = parse_nft(LISTING);
        assert!(rules.traced);
        let keys: Vec<(&str, &str, u64)> =
            rules.order.iter().map(|r| (r.at.table.as_str(), r.at.chain.as_str(), r.handle)).collect();
        assert_eq!(
            keys,
            [
                ("nat", "OUTPUT", 2),
                ("nat", "OUTPUT", 4),
                ("kube-proxy", "service-ULMVA6XW-ns1/svc1/tcp/p80", 11)
            ]
        );
        assert_eq!(
            rules.rules[&rules.order[0]],
            "ip daddr 10.96.0.10 tcp dport 80 counter dnat to 127.0.0.1:8080"
        );
        assert_eq!(
            rules.rules[&rules.order[2]],
            "ip daddr 10.96.0.1 numgen random mod 2 vmap { 0 : goto endpoint-A, 1 : goto endpoint-B }"
        );
    }

    #[test]
    fn iptables_nft_rules_take_iptables_save_text() {
        let mut rules = parse_nft(LISTING);
        let saved = "*nat\n:OUTPUT ACCEPT [0:0]\n-A OUTPUT -d 10.96.0.10/32 -p tcp -m comment --comment \"default/svc:http\" -j DNAT --to-destination 127.0.0.1:8080\n-A OUTPUT -j KUBE-SERVICES\nCOMMIT\n";
        use_saved_text(&mut rules, "ip", saved);
        assert!(rules.rules[&rules.order[0]].contains("--comment \"default/svc:http\""));
        assert_eq!(rules.rules[&rules.order[1]], "-A OUTPUT -j KUBE-SERVICES");
    }
}
