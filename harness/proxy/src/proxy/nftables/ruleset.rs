//! One family's `kube-proxy` table as data: chains, sets, maps, rules and elements, rendered
//! as `nft -f` input in the form knftables writes (`add chain ip kube-proxy …`).
//!
//! Rules stay apart from their chains until rendering, so a test or a mutant can find,
//! remove or alter one first. The rendering is the order knftables' fake `Dump()` prints
//! (table, chains, sets, maps, then rules chain by chain, then elements), which is also an
//! order `nft -f` accepts: everything a rule or element names exists before it.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use crate::model::IpFamily;
use crate::proxy::lookaside::Lookaside;

/// kube-proxy's table name, in both families.
pub(crate) const TABLE: &str = "kube-proxy";

/// A base chain's hook: `type filter hook input priority -110`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hook {
    pub kind: &'static str,
    pub hook: &'static str,
    pub priority: i32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    pub name: String,
    pub hook: Option<Hook>,
    pub comment: Option<String>,
}

/// A named set (`map: false`) or verdict map (`map: true`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Set {
    pub name: String,
    pub map: bool,
    /// `ipv4_addr`, or for a map `ipv4_addr . inet_proto . inet_service : verdict`.
    pub type_: String,
    pub flags: Vec<&'static str>,
    /// Element timeout in seconds.
    pub timeout: Option<u32>,
    pub comment: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub chain: String,
    /// The rule as kube-proxy writes it, without its comment.
    pub text: String,
    pub comment: Option<String>,
}

impl Rule {
    /// Whether the rule's text ends with `verdict` (`jump mark-for-masquerade`, `drop`).
    pub fn ends_with(&self, verdict: &str) -> bool {
        self.text.ends_with(verdict)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Element {
    /// The set or map it belongs to.
    pub set: String,
    /// Key parts, joined with ` . ` when rendered.
    pub key: Vec<String>,
    /// A map element's verdict (`goto service-…`, `drop`).
    pub value: Option<String>,
    pub comment: Option<String>,
}

/// One family's `kube-proxy` table. Chains and elements are added through its methods
/// (`add_chain`, `push_chain`, `element`), which keep track of them; they may be changed
/// or removed directly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleSet {
    pub family: IpFamily,
    pub table_comment: String,
    pub chains: Vec<Chain>,
    pub sets: Vec<Set>,
    pub rules: Vec<Rule>,
    pub elements: Vec<Element>,
    added: Lookaside<Added>,
}

/// The chain names and element keys added so far: "not there" without searching lists of tens
/// of thousands for each new one (which was quadratic). The lists stay the truth: a name found
/// here is looked for there, as it may have been removed since.
#[derive(Clone, Default)]
struct Added {
    chains: HashSet<String>,
    elements: HashSet<(String, Vec<String>)>,
}

impl RuleSet {
    pub fn new(family: IpFamily) -> RuleSet {
        RuleSet {
            family,
            table_comment: "rules for kube-proxy".into(),
            chains: Vec::new(),
            sets: Vec::new(),
            rules: Vec::new(),
            elements: Vec::new(),
            added: Lookaside::default(),
        }
    }

    /// `ip` or `ip6`: the table family, and the keyword of address matches.
    pub fn ip(&self) -> &'static str {
        nft_family(self.family)
    }

    /// Adds a regular chain once (kube-proxy's `ensureChain`).
    pub(crate) fn add_chain(&mut self, name: &str) {
        if !self.has_chain(name) {
            self.push_chain(Chain { name: name.into(), hook: None, comment: None });
        }
    }

    /// Adds `chain` as it is (a base chain, or one with a comment), even if one of its name
    /// exists.
    pub(crate) fn push_chain(&mut self, chain: Chain) {
        self.added.chains.insert(chain.name.clone());
        self.chains.push(chain);
    }

    pub(crate) fn has_chain(&self, name: &str) -> bool {
        self.added.chains.contains(name) && self.chains.iter().any(|c| c.name == name)
    }

    /// Removes a chain with its rules.
    pub(crate) fn remove_chain(&mut self, name: &str) {
        self.chains.retain(|c| c.name != name);
        self.rules.retain(|r| r.chain != name);
    }

    pub fn rule(&mut self, chain: &str, text: impl Into<String>) {
        self.rules.push(Rule { chain: chain.into(), text: text.into(), comment: None });
    }

    pub(crate) fn rule_commented(&mut self, chain: &str, text: impl Into<String>, comment: &str) {
        self.rules.push(Rule { chain: chain.into(), text: text.into(), comment: Some(comment.into()) });
    }

    /// Adds a set or map once.
    pub(crate) fn add_set(&mut self, set: Set) {
        if !self.sets.iter().any(|s| s.name == set.name) {
            self.sets.push(set);
        }
    }

    pub(crate) fn remove_set(&mut self, name: &str) {
        self.sets.retain(|s| s.name != name);
        self.elements.retain(|e| e.set != name);
    }

    /// Adds an element; one with the same key in the same set replaces the earlier one (as
    /// kube-proxy's element storage keeps one value per key).
    pub fn element(&mut self, set: &str, key: &[&str], value: Option<String>, comment: Option<&str>) {
        let key: Vec<String> = key.iter().map(|k| k.to_string()).collect();
        let id = (set.to_string(), key);
        if self.added.elements.contains(&id) {
            self.elements.retain(|e| !(e.set == id.0 && e.key == id.1));
        } else {
            self.added.elements.insert(id.clone());
        }
        let key = id.1;
        self.elements.push(Element { set: set.into(), key, value, comment: comment.map(String::from) });
    }

    #[cfg(test)]
    pub(crate) fn rules_in<'a>(&'a self, chain: &'a str) -> impl Iterator<Item = &'a Rule> + 'a {
        self.rules.iter().filter(move |r| r.chain == chain)
    }

    pub(crate) fn elements_of<'a>(&'a self, set: &'a str) -> impl Iterator<Item = &'a Element> + 'a {
        self.elements.iter().filter(move |e| e.set == set)
    }

    /// The table as `add …` commands, one a line, in knftables' dump order.
    pub(crate) fn render(&self) -> String {
        let ip = self.ip();
        let mut out = String::new();
        let _ = writeln!(out, "add table {ip} {TABLE} {{ comment {} ; }}", quote(&self.table_comment));
        let mut chains: Vec<&Chain> = self.chains.iter().collect();
        chains.sort_by(|a, b| a.name.cmp(&b.name));
        for chain in &chains {
            let _ = writeln!(out, "add chain {ip} {TABLE} {}{}", chain.name, chain_spec(chain));
        }
        let mut sets: Vec<&Set> = self.sets.iter().collect();
        // Sets before maps, each by name, as knftables dumps them.
        sets.sort_by(|a, b| (a.map, &a.name).cmp(&(b.map, &b.name)));
        for set in &sets {
            let kind = if set.map { "map" } else { "set" };
            let _ = writeln!(out, "add {kind} {ip} {TABLE} {} {}", set.name, set_spec(set));
        }
        // Rules and elements grouped once, in their order: a table has chains and elements by
        // the ten thousand, and searching all rules for each chain was quadratic.
        let mut rules_of: HashMap<&str, Vec<&Rule>> = HashMap::new();
        for rule in &self.rules {
            rules_of.entry(rule.chain.as_str()).or_default().push(rule);
        }
        let mut elements_of: HashMap<&str, Vec<&Element>> = HashMap::new();
        for e in &self.elements {
            elements_of.entry(e.set.as_str()).or_default().push(e);
        }
        for chain in &chains {
            for rule in rules_of.get(chain.name.as_str()).into_iter().flatten() {
                let _ = writeln!(out, "add rule {ip} {TABLE} {}", rule_line(rule));
            }
        }
        for set in &sets {
            for e in elements_of.get(set.name.as_str()).into_iter().flatten() {
                let _ = writeln!(out, "add element {ip} {TABLE} {} {{ {} }}", set.name, element_body(e));
            }
        }
        out
    }

    /// The table as several `nft -f` inputs, for a node that has none yet: declarations
    /// first, then the rules of the regular chains, at most `rules_per_stage` a transaction,
    /// then the base chains with their rules and every element. Each is its own transaction,
    /// yet nothing is seen half-done: no packet enters the table before its base chains, and
    /// nothing reaches a service chain before the map elements and base-chain rules that
    /// point to it, which come last. Why: the kernel walks a transaction's whole list for
    /// each anonymous set bound in it (`__nft_set_trans_bind`, `nft_set_lookup_byid`), and
    /// every `numgen … vmap { … }` rule holds one, so one transaction of N Services costs N
    /// times its own length.
    pub(crate) fn render_staged(&self, rules_per_stage: usize) -> Vec<String> {
        let ip = self.ip();
        let mut chains: Vec<&Chain> = self.chains.iter().collect();
        chains.sort_by(|a, b| a.name.cmp(&b.name));
        let mut sets: Vec<&Set> = self.sets.iter().collect();
        sets.sort_by(|a, b| (a.map, &a.name).cmp(&(b.map, &b.name)));
        let mut rules_of: HashMap<&str, Vec<&Rule>> = HashMap::new();
        for rule in &self.rules {
            rules_of.entry(rule.chain.as_str()).or_default().push(rule);
        }
        let mut declarations = String::new();
        let _ =
            writeln!(declarations, "add table {ip} {TABLE} {{ comment {} ; }}", quote(&self.table_comment));
        for chain in chains.iter().filter(|c| c.hook.is_none()) {
            let _ = writeln!(declarations, "add chain {ip} {TABLE} {}{}", chain.name, chain_spec(chain));
        }
        for set in &sets {
            let kind = if set.map { "map" } else { "set" };
            let _ = writeln!(declarations, "add {kind} {ip} {TABLE} {} {}", set.name, set_spec(set));
        }
        let mut stages = vec![declarations];
        let mut stage = String::new();
        let mut in_stage = 0;
        for chain in chains.iter().filter(|c| c.hook.is_none()) {
            for rule in rules_of.get(chain.name.as_str()).into_iter().flatten() {
                let _ = writeln!(stage, "add rule {ip} {TABLE} {}", rule_line(rule));
                in_stage += 1;
                if in_stage == rules_per_stage.max(1) {
                    stages.push(std::mem::take(&mut stage));
                    in_stage = 0;
                }
            }
        }
        if !stage.is_empty() {
            stages.push(stage);
        }
        let mut wiring = String::new();
        for chain in chains.iter().filter(|c| c.hook.is_some()) {
            let _ = writeln!(wiring, "add chain {ip} {TABLE} {}{}", chain.name, chain_spec(chain));
        }
        for chain in chains.iter().filter(|c| c.hook.is_some()) {
            for rule in rules_of.get(chain.name.as_str()).into_iter().flatten() {
                let _ = writeln!(wiring, "add rule {ip} {TABLE} {}", rule_line(rule));
            }
        }
        let mut elements_of: HashMap<&str, Vec<&Element>> = HashMap::new();
        for e in &self.elements {
            elements_of.entry(e.set.as_str()).or_default().push(e);
        }
        for set in &sets {
            for e in elements_of.get(set.name.as_str()).into_iter().flatten() {
                let _ = writeln!(wiring, "add element {ip} {TABLE} {} {{ {} }}", set.name, element_body(e));
            }
        }
        stages.push(wiring);
        stages
    }

    /// `nft -f` input that replaces the family's table with this one in one transaction:
    /// `add` then `delete` (so the delete cannot fail on a fresh node), then the table.
    pub(crate) fn render_replacing(&self) -> String {
        let ip = self.ip();
        format!("add table {ip} {TABLE}\ndelete table {ip} {TABLE}\n{}", self.render())
    }
}

pub(crate) fn nft_family(family: IpFamily) -> &'static str {
    match family {
        IpFamily::V4 => "ip",
        IpFamily::V6 => "ip6",
    }
}

/// A string as nft quotes it (kube-proxy's comments hold no quotes).
fn quote(s: &str) -> String {
    format!("\"{s}\"")
}

pub(super) fn chain_spec(chain: &Chain) -> String {
    let mut parts = Vec::new();
    if let Some(h) = &chain.hook {
        parts.push(format!("type {} hook {} priority {} ;", h.kind, h.hook, h.priority));
    }
    if let Some(c) = &chain.comment {
        parts.push(format!("comment {} ;", quote(c)));
    }
    if parts.is_empty() { String::new() } else { format!(" {{ {} }}", parts.join(" ")) }
}

pub(super) fn set_spec(set: &Set) -> String {
    let mut spec = format!("{{ type {} ;", set.type_);
    if !set.flags.is_empty() {
        let _ = write!(spec, " flags {} ;", set.flags.join(","));
    }
    if let Some(t) = set.timeout {
        let _ = write!(spec, " timeout {t}s ;");
    }
    if let Some(c) = &set.comment {
        let _ = write!(spec, " comment {} ;", quote(c));
    }
    spec.push_str(" }");
    spec
}

/// `CHAIN TEXT [comment "C"]`.
pub(crate) fn rule_line(rule: &Rule) -> String {
    match &rule.comment {
        Some(c) => format!("{} {} comment {}", rule.chain, rule.text, quote(c)),
        None => format!("{} {}", rule.chain, rule.text),
    }
}

pub(super) fn element_body(e: &Element) -> String {
    let mut body = e.key.join(" . ");
    if let Some(c) = &e.comment {
        let _ = write!(body, " comment {}", quote(c));
    }
    if let Some(v) = &e.value {
        let _ = write!(body, " : {v}");
    }
    body
}
