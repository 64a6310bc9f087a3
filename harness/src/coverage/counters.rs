//! The fallback where tracing cannot see: rules a proxy wrote with iptables-legacy live in the
//! kernel's x_tables, which nftrace never names. Their packet counters (`iptables-legacy-save
//! -c`) are read when a phase starts and when it ends; a rule whose count grew was hit by some
//! probe of that phase, so it counts for all of them (which one, the counters cannot say).

use std::collections::BTreeMap;

use anyhow::{Context, Result};

use crate::topology::netns::Netns;

/// A legacy rule: family (`ip`, `ip6`), table, chain, and its text as `-save` writes it
/// without the counters; the index tells apart identical rules of one chain.
pub type LegacyRule = (String, String, String, usize, String);

/// Each legacy rule of a namespace with its packet count, in listing order.
pub type Counts = Vec<(LegacyRule, u64)>;

/// Reads the namespace's legacy rules with their counts: none when it has no legacy table
/// (`ip_tables_names` under the namespace's `/proc/net` lists the tables in use; read from a
/// thread inside it, so that no program runs where there is nothing to count).
pub fn read(ns: &Netns) -> Result<Counts> {
    let mut counts = Vec::new();
    for (family, names, save) in [
        ("ip", "ip_tables_names", "iptables-legacy-save"),
        ("ip6", "ip6_tables_names", "ip6tables-legacy-save"),
    ] {
        // A kernel without legacy tables has no such file: nothing to count.
        let path = format!("/proc/thread-self/net/{names}");
        let tables = ns.run(move || std::fs::read_to_string(path).unwrap_or_default())?;
        if tables.trim().is_empty() {
            continue;
        }
        let out = ns.exec(save, &["-c"], None).with_context(|| format!("running {save} -c"))?;
        counts.extend(parse(family, &String::from_utf8_lossy(&out.stdout)));
    }
    Ok(counts)
}

/// The rules of a `-save -c` listing with their packet counts.
fn parse(family: &str, text: &str) -> Counts {
    let mut out = Vec::new();
    let mut table = String::new();
    let mut index: BTreeMap<String, usize> = BTreeMap::new();
    for line in text.lines() {
        if let Some(name) = line.strip_prefix('*') {
            table = name.to_string();
            index.clear();
            continue;
        }
        let Some(rest) = line.strip_prefix('[') else { continue };
        let Some((counters, rule)) = rest.split_once("] ") else { continue };
        let Some(packets) = counters.split(':').next().and_then(|p| p.parse::<u64>().ok()) else { continue };
        let Some(chain) = rule.strip_prefix("-A ").and_then(|r| r.split(' ').next()) else { continue };
        let n = index.entry(chain.to_string()).or_default();
        out.push(((family.to_string(), table.clone(), chain.to_string(), *n, rule.to_string()), packets));
        *n += 1;
    }
    out
}

/// The rules of `after` whose count grew since `before` (a rule new since then counts from
/// zero; one whose count fell was rewritten, and counts from zero too).
pub fn grown<'a>(before: &Counts, after: &'a Counts) -> Vec<&'a LegacyRule> {
    let earlier: BTreeMap<&LegacyRule, u64> = before.iter().map(|(r, n)| (r, *n)).collect();
    after
        .iter()
        .filter(|(rule, now)| match earlier.get(rule) {
            Some(&then) if then <= *now => *now > then,
            _ => *now > 0,
        })
        .map(|(rule, _)| rule)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = "*nat
:PREROUTING ACCEPT [0:0]
[3:180] -A PREROUTING -j KUBE-SERVICES
[0:0] -A KUBE-SERVICES -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-A
[0:0] -A KUBE-SERVICES -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-A
COMMIT
*filter
[7:420] -A INPUT -j KUBE-FIREWALL
COMMIT
";

    #[test]
    fn counts_are_read_per_rule_and_identical_rules_kept_apart() {
        let counts = parse("ip", BEFORE);
        assert_eq!(counts.len(), 4);
        assert_eq!(
            counts[0].0,
            ("ip".into(), "nat".into(), "PREROUTING".into(), 0, "-A PREROUTING -j KUBE-SERVICES".into())
        );
        assert_eq!(counts[0].1, 3);
        assert_eq!((counts[1].0.3, counts[2].0.3), (0, 1));
        assert_eq!((counts[3].0.1.as_str(), counts[3].1), ("filter", 7));
    }

    #[test]
    fn only_rules_whose_count_grew_were_hit() {
        let before = parse("ip", BEFORE);
        let after = parse("ip", &BEFORE.replacen("[0:0] -A KUBE-SERVICES", "[2:120] -A KUBE-SERVICES", 1));
        let hit: Vec<&str> = grown(&before, &after).iter().map(|r| r.2.as_str()).collect();
        assert_eq!(hit, ["KUBE-SERVICES"]);
        // Rewritten (the count fell) and then hit: counted from zero.
        let rewritten = parse("ip", &BEFORE.replace("[7:420]", "[1:60]"));
        let hit: Vec<&str> = grown(&before, &rewritten).iter().map(|r| r.2.as_str()).collect();
        assert_eq!(hit, ["INPUT"]);
    }
}
