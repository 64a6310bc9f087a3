//! The fallback where tracing cannot see: rules a proxy wrote with iptables-legacy live in the
//! kernel's x_tables, and IPVS's virtual and real servers in its own tables, neither of which
//! nftrace names. Their packet counters (`iptables-legacy-save -c`, `ipvsadm --stats`) are read
//! when a phase starts and when it ends; a rule whose count grew was hit by some probe of that
//! phase, so it counts for all of them (which one, the counters cannot say).

use std::collections::BTreeMap;

use anyhow::{Context, Result};

use super::identity::{Location, Rule};
use crate::topology::netns::Netns;

/// A legacy rule (its text as `-save` writes it, without the counters) or an IPVS server; the
/// index tells apart identical rules of one chain.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct LegacyRule {
    pub rule: Rule,
    pub index: usize,
}

impl LegacyRule {
    fn new(at: Location, index: usize, text: &str) -> LegacyRule {
        LegacyRule { rule: Rule { at, text: text.to_string() }, index }
    }
}

/// Each legacy rule of a namespace with its packet count, in listing order.
pub type Counts = Vec<(LegacyRule, u64)>;

/// Reads the namespace's legacy rules and IPVS servers with their counts: no legacy rules when it has no legacy table
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
    counts.extend(read_ipvs(ns)?);
    Ok(counts)
}

/// IPVS's virtual and real servers as `ipvsadm -S -n` writes them, each with the packets it
/// received (`ipvsadm -L -n --stats --exact`): none where the namespace has none (its
/// `/proc/net/ip_vs` lists only its header).
pub fn read_ipvs(ns: &Netns) -> Result<Counts> {
    let listing = ns.run(|| std::fs::read_to_string("/proc/thread-self/net/ip_vs").unwrap_or_default())?;
    if listing.lines().count() <= 3 {
        return Ok(Vec::new());
    }
    let saved = ns.exec("ipvsadm", &["-S", "-n"], None).context("running ipvsadm -S -n")?;
    let stats =
        ns.exec("ipvsadm", &["-L", "-n", "--stats", "--exact"], None).context("running ipvsadm --stats")?;
    Ok(parse_ipvs(&String::from_utf8_lossy(&saved.stdout), &String::from_utf8_lossy(&stats.stdout)))
}

/// Joins `ipvsadm -S -n` (the servers as rules) with `ipvsadm -L -n --stats --exact` (their
/// incoming packets), by protocol and address.
fn parse_ipvs(saved: &str, stats: &str) -> Counts {
    let mut received: BTreeMap<(String, Option<String>), u64> = BTreeMap::new();
    let mut virtual_server = None;
    for line in stats.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let packets = |i: usize| words.get(i).and_then(|w| w.parse::<u64>().ok());
        match words.first() {
            Some(&("TCP" | "UDP" | "SCTP")) => {
                let key = format!("{} {}", words[0], words.get(1).unwrap_or(&""));
                if let Some(n) = packets(3) {
                    received.insert((key.clone(), None), n);
                }
                virtual_server = Some(key);
            }
            Some(&"->") => {
                if let (Some(vs), Some(n)) = (&virtual_server, packets(3)) {
                    received.insert((vs.clone(), Some(words[1].to_string())), n);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    let mut index: BTreeMap<&str, usize> = BTreeMap::new();
    for line in saved.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let (Some(&kind), Some(&proto), Some(&address)) = (words.first(), words.get(1), words.get(2)) else {
            continue;
        };
        let proto = match proto {
            "-t" | "--tcp-service" => "TCP",
            "-u" | "--udp-service" => "UDP",
            "--sctp-service" => "SCTP",
            _ => continue,
        };
        let vs = format!("{proto} {address}");
        let (chain, key) = match kind {
            "-A" => ("virtual servers", (vs, None)),
            "-a" => {
                let Some(real) = words.iter().position(|w| *w == "-r").and_then(|i| words.get(i + 1)) else {
                    continue;
                };
                ("real servers", (vs, Some(real.to_string())))
            }
            _ => continue,
        };
        let family = if address.starts_with('[') { "ip6" } else { "ip" };
        let n = index.entry(chain).or_default();
        let packets = received.get(&key).copied().unwrap_or(0);
        out.push((LegacyRule::new(Location::new(family, "ipvs", chain), *n, line.trim()), packets));
        *n += 1;
    }
    out
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
        out.push((LegacyRule::new(Location::new(family, &table, chain), *n, rule), packets));
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
            LegacyRule::new(Location::new("ip", "nat", "PREROUTING"), 0, "-A PREROUTING -j KUBE-SERVICES")
        );
        assert_eq!(counts[0].1, 3);
        assert_eq!((counts[1].0.index, counts[2].0.index), (0, 1));
        assert_eq!((counts[3].0.rule.at.table.as_str(), counts[3].1), ("filter", 7));
    }

    #[test]
    fn ipvs_servers_are_read_as_rules_with_their_packets() {
        let saved = "-A -t 10.96.0.10:80 -s rr\n-a -t 10.96.0.10:80 -r 10.244.1.10:8080 -m -w 1\n\
                     -A -u [fd00::10]:53 -s rr -p 10800\n";
        let stats = "IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port               Conns   InPkts  OutPkts  InBytes OutBytes
  -> RemoteAddress:Port
TCP  10.96.0.10:80                       2       12       10      800      900
  -> 10.244.1.10:8080                    2       12       10      800      900
UDP  [fd00::10]:53                       0        0        0        0        0
";
        let counts = parse_ipvs(saved, stats);
        let got: Vec<(&str, &str, u64)> =
            counts.iter().map(|(r, n)| (r.rule.at.family.as_str(), r.rule.at.chain.as_str(), *n)).collect();
        assert_eq!(
            got,
            [("ip", "virtual servers", 12), ("ip", "real servers", 12), ("ip6", "virtual servers", 0)]
        );
        assert_eq!(counts[1].0.rule.text, "-a -t 10.96.0.10:80 -r 10.244.1.10:8080 -m -w 1");
    }

    #[test]
    fn only_rules_whose_count_grew_were_hit() {
        let before = parse("ip", BEFORE);
        let after = parse("ip", &BEFORE.replacen("[0:0] -A KUBE-SERVICES", "[2:120] -A KUBE-SERVICES", 1));
        let hit: Vec<&str> = grown(&before, &after).iter().map(|r| r.rule.at.chain.as_str()).collect();
        assert_eq!(hit, ["KUBE-SERVICES"]);
        // Rewritten (the count fell) and then hit: counted from zero.
        let rewritten = parse("ip", &BEFORE.replace("[7:420]", "[1:60]"));
        let hit: Vec<&str> = grown(&before, &rewritten).iter().map(|r| r.rule.at.chain.as_str()).collect();
        assert_eq!(hit, ["INPUT"]);
    }
}
