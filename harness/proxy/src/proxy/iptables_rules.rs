//! An iptables ruleset as data: tables, their chains and an ordered list of rules, rendered to
//! `iptables-restore` input. Shared by the backends that write iptables rules (iptables mode,
//! and IPVS mode for its filtering and masquerade), so neither reaches into the other.
//!
//! Rules stay structured (a chain and argument tokens) until rendering, so a test or a mutant
//! can find, remove or alter one rule first. Arguments are kept in the canonical order
//! `iptables-save` prints them in, so a rendered rule reads exactly like a dumped one.

use std::collections::HashSet;
use std::fmt::Write as _;

use super::lookaside::Lookaside;

/// Builds a rule's argument list from string-like values: `args!["-j", chain]`.
macro_rules! args {
    ($($arg:expr),* $(,)?) => { vec![$(String::from($arg)),*] };
}
pub(crate) use args;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableName {
    Filter,
    Nat,
}

impl TableName {
    pub fn as_str(self) -> &'static str {
        match self {
            TableName::Filter => "filter",
            TableName::Nat => "nat",
        }
    }

    /// The table's built-in chains, in the order `iptables-save` lists them.
    fn builtin_chains(self) -> &'static [&'static str] {
        match self {
            TableName::Filter => &["INPUT", "FORWARD", "OUTPUT"],
            TableName::Nat => &["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"],
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    pub name: String,
    /// Built-in chains have policy ACCEPT; ours have none (`-`).
    pub builtin: bool,
}

/// One `-A CHAIN args…` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub chain: String,
    /// Argument tokens, unquoted (a comment is one token).
    pub args: Vec<String>,
}

impl Rule {
    /// The token after the first `flag`, e.g. `value_of("-j")` is the target.
    pub(crate) fn value_of(&self, flag: &str) -> Option<&str> {
        let at = self.args.iter().position(|a| a == flag)?;
        self.args.get(at + 1).map(String::as_str)
    }

    pub fn target(&self) -> Option<&str> {
        self.value_of("-j")
    }

    pub fn comment(&self) -> Option<&str> {
        self.value_of("--comment")
    }

    pub fn has(&self, token: &str) -> bool {
        self.args.iter().any(|a| a == token)
    }

    /// Replaces the token after `flag`; false when the rule has no `flag`.
    pub(crate) fn set_value(&mut self, flag: &str, value: &str) -> bool {
        match self.args.iter().position(|a| a == flag) {
            Some(at) if at + 1 < self.args.len() => {
                self.args[at + 1] = value.to_string();
                true
            }
            _ => false,
        }
    }

    /// The `-A …` line as `iptables-restore` reads it.
    pub fn line(&self) -> String {
        self.line_with(|_, token| token.to_string())
    }

    /// The line as `iptables-save` prints it back (probabilities at the kernel's precision).
    #[cfg(test)]
    pub(crate) fn saved_line(&self) -> String {
        self.line_with(|flag, token| match flag {
            Some("--probability") => saved_probability(token).unwrap_or_else(|| token.to_string()),
            _ => token.to_string(),
        })
    }

    fn line_with(&self, value: impl Fn(Option<&str>, &str) -> String) -> String {
        let mut line = format!("-A {}", self.chain);
        let mut previous: Option<&str> = None;
        for token in &self.args {
            let shown = value(previous, token);
            line.push(' ');
            if previous == Some("--comment") {
                line.push_str(&quote_like_save(&shown));
            } else if shown.is_empty() || shown.contains(char::is_whitespace) {
                line.push_str(&quote(&shown));
            } else {
                line.push_str(&shown);
            }
            previous = Some(token);
        }
        line
    }
}

/// `xtables_save_string`: bare when only `[A-Za-z0-9_-]`, else double-quoted with `"\'` escaped.
fn quote_like_save(s: &str) -> String {
    let bare = !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare { s.to_string() } else { quote(s) }
}

fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if matches!(c, '"' | '\\' | '\'') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// One table: its chains (built-in first) and its rules in the order they are appended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    pub name: TableName,
    pub chains: Vec<Chain>,
    pub rules: Vec<Rule>,
    /// The chain names declared so far (the list stays the truth: a name found here is looked
    /// for there, as it may have been removed since; 10,000 Services declare 30,000 chains).
    declared: Lookaside<HashSet<String>>,
}

impl Table {
    pub fn new(name: TableName) -> Table {
        let chains =
            name.builtin_chains().iter().map(|c| Chain { name: c.to_string(), builtin: true }).collect();
        Table { name, chains, rules: Vec::new(), declared: Lookaside::default() }
    }

    /// Declares a chain of ours (once; later declarations are no-ops).
    pub(crate) fn add_chain(&mut self, name: &str) {
        if !self.has_chain(name) {
            self.declared.insert(name.to_string());
            self.chains.push(Chain { name: name.to_string(), builtin: false });
        }
    }

    pub(crate) fn has_chain(&self, name: &str) -> bool {
        let builtin = self.name.builtin_chains().contains(&name);
        (builtin || self.declared.contains(name)) && self.chains.iter().any(|c| c.name == name)
    }

    pub fn append(&mut self, chain: &str, args: Vec<String>) {
        self.rules.push(Rule { chain: chain.to_string(), args });
    }

    /// The rules of one chain, in order.
    #[cfg(test)]
    pub(crate) fn rules_in<'a>(&'a self, chain: &'a str) -> impl Iterator<Item = &'a Rule> + 'a {
        self.rules.iter().filter(move |r| r.chain == chain)
    }

    /// Removes a chain of ours, its rules and every rule that jumps to it.
    pub(crate) fn remove_chain(&mut self, name: &str) {
        self.chains.retain(|c| c.builtin || c.name != name);
        self.rules.retain(|r| r.chain != name && r.target() != Some(name));
    }

    /// `*table`, the chain lines, the rules in append order, `COMMIT`.
    fn render_into(&self, out: &mut String) {
        let _ = writeln!(out, "*{}", self.name.as_str());
        for chain in &self.chains {
            let _ = writeln!(out, "{}", chain_line(chain));
        }
        for rule in &self.rules {
            let _ = writeln!(out, "{}", rule.line());
        }
        let _ = writeln!(out, "COMMIT");
    }

    /// As `iptables-save` (nft 1.8.9) prints the table: built-in chains, then ours sorted by
    /// name, and rules grouped by chain in that order.
    #[cfg(test)]
    fn render_saved_into(&self, out: &mut String) {
        let mut order: Vec<&Chain> = self.chains.iter().filter(|c| c.builtin).collect();
        let mut ours: Vec<&Chain> = self.chains.iter().filter(|c| !c.builtin).collect();
        ours.sort_by(|a, b| a.name.cmp(&b.name));
        order.extend(ours);
        let _ = writeln!(out, "*{}", self.name.as_str());
        for chain in &order {
            let _ = writeln!(out, "{}", chain_line(chain));
        }
        for chain in &order {
            for rule in self.rules_in(&chain.name) {
                let _ = writeln!(out, "{}", rule.saved_line());
            }
        }
        let _ = writeln!(out, "COMMIT");
    }
}

fn chain_line(chain: &Chain) -> String {
    let policy = if chain.builtin { "ACCEPT" } else { "-" };
    format!(":{} {policy} [0:0]", chain.name)
}

/// The tables kube-proxy writes, filter first as kube-proxy writes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleSet {
    pub filter: Table,
    pub nat: Table,
}

impl Default for RuleSet {
    fn default() -> Self {
        RuleSet { filter: Table::new(TableName::Filter), nat: Table::new(TableName::Nat) }
    }
}

impl RuleSet {
    pub fn table(&self, name: TableName) -> &Table {
        match name {
            TableName::Filter => &self.filter,
            TableName::Nat => &self.nat,
        }
    }

    pub fn tables(&self) -> [&Table; 2] {
        [&self.filter, &self.nat]
    }

    /// `iptables-restore` input. Without `--noflush` it replaces both tables entirely.
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        for table in self.tables() {
            table.render_into(&mut out);
        }
        out
    }

    /// What `iptables-save` should print once [`RuleSet::render`] is loaded, after
    /// [`normalize_save`]: compare the two to prove the rules loaded as written.
    #[cfg(test)]
    pub(crate) fn render_saved(&self) -> String {
        let mut out = String::new();
        for table in self.tables() {
            table.render_saved_into(&mut out);
        }
        out
    }
}

/// An `iptables-save` dump without its `#` comment lines and with chain counters zeroed, so
/// that dumps of the same rules compare equal.
pub fn normalize_save(dump: &str) -> String {
    let mut out = String::new();
    for line in dump.lines() {
        if line.starts_with('#') {
            continue;
        }
        let line = match (line.starts_with(':'), line.rfind(" [")) {
            (true, Some(at)) if line.ends_with(']') => format!("{} [0:0]", &line[..at]),
            _ => line.to_string(),
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// What `iptables-save` prints for a `--probability` that was loaded as `written`: the kernel
/// keeps `round(p * 2^31)` and `libxt_statistic` prints it back with eleven decimals, so
/// `0.5000000000` comes back as `0.50000000000` and `0.1428571429` as `0.14285714272`.
#[cfg(test)]
pub(crate) fn saved_probability(written: &str) -> Option<String> {
    let p: f64 = written.parse().ok()?;
    let scale = f64::from(0x8000_0000u32);
    let stored = (p * scale).round();
    Some(format!("{:.11}", stored / scale))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_restore_input() {
        let mut rules = RuleSet::default();
        rules.nat.add_chain("KUBE-SERVICES");
        rules.nat.add_chain("KUBE-SERVICES");
        rules.nat.append(
            "PREROUTING",
            args!["-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"],
        );
        let text = rules.render();
        assert_eq!(
            text,
            "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n\
             *nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n\
             :POSTROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n\
             -A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\nCOMMIT\n"
        );
    }

    #[test]
    fn comments_are_quoted_like_iptables_save() {
        let rule = |c: &str| Rule { chain: "X".into(), args: args!["-m", "comment", "--comment", c] };
        assert_eq!(rule("default/nginx").line(), "-A X -m comment --comment \"default/nginx\"");
        assert_eq!(rule("plain-name_1").line(), "-A X -m comment --comment plain-name_1");
        assert_eq!(rule("a \"b\"").line(), "-A X -m comment --comment \"a \\\"b\\\"\"");
    }

    #[test]
    fn saved_form_sorts_chains_and_groups_rules() {
        let mut rules = RuleSet::default();
        rules.nat.add_chain("KUBE-SVC-B");
        rules.nat.add_chain("KUBE-SEP-A");
        rules.nat.append(
            "KUBE-SVC-B",
            args!["-m", "statistic", "--mode", "random", "--probability", "0.5000000000", "-j", "KUBE-SEP-A"],
        );
        rules.nat.append("KUBE-SEP-A", args!["-j", "RETURN"]);
        rules.nat.append("OUTPUT", args!["-j", "KUBE-SVC-B"]);
        let saved = rules.render_saved();
        let nat: Vec<&str> = saved.lines().skip_while(|l| *l != "*nat").collect();
        assert_eq!(
            nat[5..],
            [
                ":KUBE-SEP-A - [0:0]",
                ":KUBE-SVC-B - [0:0]",
                "-A OUTPUT -j KUBE-SVC-B",
                "-A KUBE-SEP-A -j RETURN",
                "-A KUBE-SVC-B -m statistic --mode random --probability 0.50000000000 -j KUBE-SEP-A",
                "COMMIT",
            ]
        );
    }

    #[test]
    fn remove_chain_drops_its_rules_and_jumps() {
        let mut rules = RuleSet::default();
        rules.nat.add_chain("KUBE-SEP-A");
        rules.nat.append("KUBE-SEP-A", args!["-j", "RETURN"]);
        rules.nat.append("OUTPUT", args!["-j", "KUBE-SEP-A"]);
        rules.nat.remove_chain("KUBE-SEP-A");
        assert!(!rules.nat.has_chain("KUBE-SEP-A"));
        assert!(rules.nat.rules.is_empty());
    }

    #[test]
    fn normalize_drops_comments_and_counters() {
        let dump = "# Generated by iptables-save\n*nat\n:PREROUTING ACCEPT [12:720]\n-A X -j Y\nCOMMIT\n# Completed\n";
        assert_eq!(normalize_save(dump), "*nat\n:PREROUTING ACCEPT [0:0]\n-A X -j Y\nCOMMIT\n");
    }

    #[test]
    fn saved_form_matches_iptables_save() {
        // Seed 000 and seed 001 (real dumps) print a half as eleven decimals.
        assert_eq!(saved_probability("0.5000000000").unwrap(), "0.50000000000");
        // Measured with iptables-nft 1.8.9: restore 1/7, 1/3, 1/6 and save them back.
        assert_eq!(saved_probability("0.1428571429").unwrap(), "0.14285714272");
        assert_eq!(saved_probability("0.3333333333").unwrap(), "0.33333333349");
        assert_eq!(saved_probability("0.1666666667").unwrap(), "0.16666666651");
        assert_eq!(saved_probability("x"), None);
    }
}
