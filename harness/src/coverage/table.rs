//! A run's coverage: rule templates with their instances and the probes that covered them,
//! one table per proxy; what the reports print and carry, and what `coverage merge` joins
//! from several runs (modes, kernels, shards).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

use serde::{Deserialize, Serialize};

use super::ScenarioCoverage;
use super::identity::{Location, Rule};
use super::template::template;

/// One proxy's templates.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Table {
    pub proxy: String,
    pub templates: Vec<Template>,
}

/// Rules of one shape: their chain and text with names, addresses and numbers abstracted.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Template {
    /// The rule with its chain and text abstracted (`KUBE-SVC-<hash>`).
    #[serde(flatten)]
    pub rule: Rule,
    /// Rules of this shape seen (one per scenario, node and rule text).
    pub instances: usize,
    /// One of them, and where it was written.
    pub example: Example,
    /// `scenario: probe` for each probe that hit an instance; empty: not covered.
    pub covered_by: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Example {
    pub rule: String,
    pub scenario: String,
    pub node: String,
}

type Key = Rule;

impl Table {
    fn key(t: &Template) -> Key {
        t.rule.clone()
    }

    /// Adds `other`'s templates (the same proxy's, from another run) to these.
    fn absorb(&mut self, other: Table) {
        let mut at: BTreeMap<Key, usize> =
            self.templates.iter().enumerate().map(|(i, t)| (Table::key(t), i)).collect();
        for t in other.templates {
            match at.get(&Table::key(&t)) {
                Some(&i) => {
                    let mine = &mut self.templates[i];
                    mine.instances += t.instances;
                    let covered: BTreeSet<String> = mine.covered_by.drain(..).chain(t.covered_by).collect();
                    mine.covered_by = covered.into_iter().collect();
                }
                None => {
                    at.insert(Table::key(&t), self.templates.len());
                    self.templates.push(t);
                }
            }
        }
        self.templates.sort_by_key(Table::key);
    }

    pub fn covered(&self) -> usize {
        self.templates.iter().filter(|t| !t.covered_by.is_empty()).count()
    }

    /// Covered templates in percent of all; 0 when there are none (nothing was measured).
    pub fn percent(&self) -> f64 {
        if self.templates.is_empty() {
            0.0
        } else {
            100.0 * self.covered() as f64 / self.templates.len() as f64
        }
    }

    /// `rules: 412 of 431 templates covered (95.6 %), builtin-iptables`
    pub fn line(&self) -> String {
        format!(
            "rules: {} of {} templates covered ({:.1} %), {}",
            self.covered(),
            self.templates.len(),
            self.percent(),
            self.proxy
        )
    }

    /// Each template no probe hit, with an example rule and where it was written.
    pub fn uncovered_lines(&self) -> String {
        let mut out = String::new();
        for t in self.templates.iter().filter(|t| t.covered_by.is_empty()) {
            let Rule { at, text } = &t.rule;
            let _ = writeln!(out, "  uncovered: {} {} {}: {text}", at.family, at.table, at.chain);
            let _ = writeln!(
                out,
                "    e.g. {} (scenario {}, node {})",
                t.example.rule, t.example.scenario, t.example.node
            );
        }
        out
    }

    /// Each covered template with the probes that covered it (`--show coverage`).
    pub fn covering_lines(&self) -> String {
        let mut out = String::new();
        for t in self.templates.iter().filter(|t| !t.covered_by.is_empty()) {
            let Rule { at, text } = &t.rule;
            let _ = writeln!(out, "  covered: {} {} {}: {text}", at.family, at.table, at.chain);
            let _ = writeln!(out, "    by {}", t.covered_by.join(", "));
        }
        out
    }
}

/// The run's tables, one per proxy, from each judged scenario's coverage: `(proxy, scenario,
/// coverage)`.
pub fn tables<'a>(
    scenarios: impl IntoIterator<Item = (&'a str, &'a str, &'a ScenarioCoverage)>,
) -> Vec<Table> {
    let mut by_proxy: BTreeMap<String, BTreeMap<Key, (Template, BTreeSet<String>)>> = BTreeMap::new();
    for (proxy, scenario, coverage) in scenarios {
        let templates = by_proxy.entry(proxy.to_string()).or_default();
        for i in &coverage.instances {
            let (chain, text) = template(&i.rule.at.chain, &i.rule.text);
            let key = Rule { at: Location { chain, ..i.rule.at.clone() }, text };
            let (t, covered) = templates.entry(key.clone()).or_insert_with(|| {
                let example = Example {
                    rule: i.rule.text.clone(),
                    scenario: scenario.to_string(),
                    node: i.node.clone(),
                };
                let t = Template { rule: key, instances: 0, example, covered_by: Vec::new() };
                (t, BTreeSet::new())
            });
            t.instances += 1;
            covered.extend(i.hit_by.iter().map(|probe| format!("{scenario}: {probe}")));
        }
    }
    by_proxy
        .into_iter()
        .map(|(proxy, templates)| Table {
            proxy,
            templates: templates
                .into_values()
                .map(|(t, covered)| Template { covered_by: covered.into_iter().collect(), ..t })
                .collect(),
        })
        .collect()
}

/// Why the coverage of `tables` is below `minimum` percent, one sentence per proxy below it
/// (and one when nothing was measured: a gate that cannot see passes nothing).
pub fn below(tables: &[Table], minimum: f64) -> Vec<String> {
    if tables.is_empty() {
        return vec![format!("rules: no coverage was measured, so none reaches --min-coverage {minimum} %")];
    }
    tables
        .iter()
        .filter(|t| t.percent() < minimum)
        .map(|t| {
            format!(
                "rules: {:.1} % of {}'s templates covered, below --min-coverage {minimum} %",
                t.percent(),
                t.proxy
            )
        })
        .collect()
}

/// Tables of several runs joined: one per proxy, a template covered when any run covered it.
pub fn merge(runs: impl IntoIterator<Item = Table>) -> Vec<Table> {
    let mut by_proxy: BTreeMap<String, Table> = BTreeMap::new();
    for table in runs {
        let mine = by_proxy
            .entry(table.proxy.clone())
            .or_insert_with(|| Table { proxy: table.proxy.clone(), templates: vec![] });
        mine.absorb(table);
    }
    by_proxy.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coverage::Instance;

    fn instance(chain: &str, rule: &str, hit_by: &[&str]) -> Instance {
        Instance {
            node: "node-a".into(),
            rule: Rule { at: Location::new("ip", "nat", chain), text: rule.into() },
            hit_by: hit_by.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn two_services(hit: &[&str]) -> ScenarioCoverage {
        ScenarioCoverage {
            instances: vec![
                instance(
                    "KUBE-SVC-AAAAAAAAAAAAAAAA",
                    "-A KUBE-SVC-AAAAAAAAAAAAAAAA -j KUBE-SEP-BBBBBBBBBBBBBBBB",
                    hit,
                ),
                instance(
                    "KUBE-SVC-CCCCCCCCCCCCCCCC",
                    "-A KUBE-SVC-CCCCCCCCCCCCCCCC -j KUBE-SEP-DDDDDDDDDDDDDDDD",
                    &[],
                ),
                instance("KUBE-MARK-MASQ", "-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000", &[]),
            ],
            ..Default::default()
        }
    }

    #[test]
    fn one_shape_for_two_services_is_one_template_covered_by_either() {
        let coverage = two_services(&["to-web"]);
        let tables = tables([("builtin-iptables", "two-services", &coverage)]);
        assert_eq!(tables.len(), 1);
        let t = &tables[0];
        assert_eq!((t.covered(), t.templates.len()), (1, 2));
        assert_eq!(t.line(), "rules: 1 of 2 templates covered (50.0 %), builtin-iptables");
        let svc = t.templates.iter().find(|t| t.rule.at.chain == "KUBE-SVC-<hash>").unwrap();
        assert_eq!(svc.instances, 2);
        assert_eq!(svc.covered_by, ["two-services: to-web"]);
        assert!(
            t.uncovered_lines()
                .contains("KUBE-MARK-MASQ -j MARK --or-mark 0x4000 (scenario two-services, node node-a)")
        );
    }

    #[test]
    fn runs_merge_per_proxy() {
        let (a, b) = (two_services(&["x"]), two_services(&[]));
        let mut masq = two_services(&[]);
        masq.instances[2].hit_by.insert("y".into());
        let first = tables([("builtin-iptables", "s1", &a), ("builtin-nftables", "s1", &b)]);
        let second = tables([("builtin-iptables", "s2", &masq)]);
        let merged = merge(first.into_iter().chain(second));
        assert_eq!(merged.len(), 2);
        assert_eq!(merged[0].proxy, "builtin-iptables");
        assert_eq!(merged[0].covered(), 2);
        assert_eq!(merged[0].templates.iter().map(|t| t.instances).sum::<usize>(), 6);
        assert_eq!(merged[1].covered(), 0);
        assert_eq!(merged[1].percent(), 0.0);
    }
}
