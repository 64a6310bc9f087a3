//! Loading a ruleset into a node namespace and reading it back, with `iptables-restore` and
//! `iptables-save` for an IPv4 cluster and `ip6tables-restore`/`ip6tables-save` for IPv6.

use std::collections::BTreeSet;

use anyhow::{Context, Result};

use crate::model::IpFamily;
use crate::proxy::loader;
use crate::topology::NodeHandle;

/// `iptables-restore`/`iptables-save`, or their IPv6 twins.
fn tools(family: IpFamily) -> (&'static str, &'static str) {
    match family {
        IpFamily::V4 => ("iptables-restore", "iptables-save"),
        IpFamily::V6 => ("ip6tables-restore", "ip6tables-save"),
    }
}

fn rule_kind(family: IpFamily) -> &'static str {
    match family {
        IpFamily::V4 => "iptables",
        IpFamily::V6 => "ip6tables",
    }
}

/// Replaces the node's `filter` and `nat` tables of `family` with `text` (no `--noflush`: the
/// namespace is ours alone). `-w` waits for the xtables lock, which iptables-legacy shares
/// across namespaces.
pub fn restore(node: &NodeHandle, text: &str, family: IpFamily) -> Result<()> {
    let (restore, _) = tools(family);
    loader::run(node, restore, &["-w"], text, rule_kind(family), offending_lines)
}

/// Writes `text` into the node's tables of `family` with `--noflush`: the chains it declares
/// are flushed and rewritten, every other chain is left as it is (a partial sync).
pub fn restore_noflush(node: &NodeHandle, text: &str, family: IpFamily) -> Result<()> {
    let (restore, _) = tools(family);
    loader::run(node, restore, &["-w", "--noflush"], text, rule_kind(family), offending_lines)
}

/// The input lines an error points at: the line it names and, when that is a `COMMIT` (nft
/// checks jump targets only when committing), the first rule using a name it quotes
/// (`Chain 'KUBE-X' does not exist`).
fn offending_lines<'t>(message: &str, text: &'t str) -> Vec<(usize, &'t str)> {
    let line = |n: usize| text.lines().nth(n.checked_sub(1)?).map(|l| (n, l));
    let mut found: Vec<(usize, &str)> = failed_line(message).and_then(line).into_iter().collect();
    if found.iter().all(|(_, l)| *l == "COMMIT") {
        for name in message.split('\'').skip(1).step_by(2) {
            let uses = |l: &&str| l.starts_with("-A ") && l.split(' ').any(|t| t == name);
            if let Some((i, l)) = text.lines().enumerate().find(|(_, l)| uses(l)) {
                found.push((i + 1, l));
            }
        }
    }
    found
}

/// The node's tables as `iptables-save` prints them, or `ip6tables-save` when only IPv6 rules
/// were `loaded` there; both, IPv4 first, on a dual-stack node.
pub fn save(node: &NodeHandle, loaded: &BTreeSet<IpFamily>) -> Result<String> {
    let v4_only = BTreeSet::from([IpFamily::V4]);
    let families = if loaded.is_empty() { &v4_only } else { loaded };
    let mut dump = String::new();
    for &family in families {
        let (_, save) = tools(family);
        let out = node
            .netns
            .exec(save, &[], None)
            .with_context(|| format!("dumping {} rules of node {}", rule_kind(family), node.name))?;
        dump.push_str(&String::from_utf8_lossy(&out.stdout));
    }
    Ok(dump)
}

/// The input line an `iptables-restore` error names: `line 31: RULE_APPEND failed` (nft),
/// `line 31 failed` (legacy), `Error occurred at line: 31` (parse errors).
fn failed_line(message: &str) -> Option<usize> {
    message.match_indices("line").find_map(|(at, word)| {
        let rest = message[at + word.len()..].trim_start_matches([':', ' ']);
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_failed_line_in_each_dialect() {
        let nft = "iptables-restore v1.8.9 (nf_tables): \nline 31: RULE_APPEND failed (Invalid argument): rule in chain PREROUTING";
        assert_eq!(failed_line(nft), Some(31));
        assert_eq!(failed_line("iptables-restore: line 7 failed"), Some(7));
        assert_eq!(failed_line("unknown option \"--x\"\nError occurred at line: 5"), Some(5));
        assert_eq!(failed_line("running `iptables-restore -w` in namespace pp-1-n: No such file"), None);
    }

    #[test]
    fn a_failed_commit_points_at_the_rule_using_the_missing_chain() {
        let text = "*nat\n:X - [0:0]\n-A X -j KUBE-NOPE\nCOMMIT\n";
        let message = "Chain 'KUBE-NOPE' does not exist\nError occurred at line: 4";
        assert_eq!(offending_lines(message, text), [(4, "COMMIT"), (3, "-A X -j KUBE-NOPE")]);
    }
}
