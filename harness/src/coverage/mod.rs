//! Rule coverage: which of the rules a proxy wrote the probes' packets really matched, for any
//! proxy that programs nftables or iptables on the nft backend, from the kernel's own traces
//! (`observe::nftrace`), never by touching the proxy's tables.
//!
//! A [`Recorder`] traces every node of a scenario while its probes run; after each phase it
//! reads the nodes' rules and ties each traced packet to the probe it belongs to
//! ([`attribute`]). The scenario's [`ScenarioCoverage`] lists every rule instance with the
//! probes that hit it; a run's [`Table`] groups instances into templates ([`template`]) and
//! counts a template covered when a probe hit one of its instances.

pub mod attribute;
pub mod rules;
pub mod table;
pub mod template;

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context, Result};

pub use attribute::ProbeFlows;
pub use table::{Example, Table, Template, merge, tables};

use crate::observe::nftrace::{self, Tracer};
use crate::topology::Topology;
use rules::{NodeRules, RuleId};

/// One rule as a node held it in some phase of a scenario, and the probes that hit it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    pub node: String,
    pub family: String,
    pub table: String,
    pub chain: String,
    pub rule: String,
    /// The probes (by name) whose packets it matched.
    pub hit_by: BTreeSet<String>,
}

/// What one scenario's probes covered.
#[derive(Debug, Clone, Default)]
pub struct ScenarioCoverage {
    pub instances: Vec<Instance>,
    /// Packets that matched some proxy rule but belong to no probe (the proxy's own traffic).
    pub unattributed_packets: usize,
    /// What limited the measurement, if anything (a proxy that removed the trace table).
    pub notes: Vec<String>,
}

/// Traces every node of a scenario while its probes run.
pub struct Recorder {
    tracers: Vec<(String, Tracer)>,
    /// Every probe sent so far: a late packet of an earlier phase is still its probe's.
    probes: Vec<ProbeFlows>,
    /// Keyed by (node, family, table, chain, rule text): one rule however many phases held it.
    instances: BTreeMap<(String, String, String, String, String), BTreeSet<String>>,
    /// Each node's rules as last read, for a packet traced before a change removed its rule.
    last: BTreeMap<String, NodeRules>,
    unattributed: usize,
    notes: Vec<String>,
}

impl Recorder {
    /// Adds the trace table to every node and starts reading its traces. Called once the proxy
    /// has started, so that a proxy that replaces the whole ruleset at start keeps it.
    pub fn start(topology: &Topology) -> Result<Recorder> {
        let mut tracers = Vec::new();
        for node in &topology.nodes {
            nftrace::install(&node.netns).with_context(|| format!("node {}", node.name))?;
            tracers.push((
                node.name.clone(),
                Tracer::start(&node.netns).with_context(|| format!("node {}", node.name))?,
            ));
        }
        Ok(Recorder {
            tracers,
            probes: Vec::new(),
            instances: BTreeMap::new(),
            last: BTreeMap::new(),
            unattributed: 0,
            notes: Vec::new(),
        })
    }

    /// After a phase's probes: reads each node's rules and what was traced since the last
    /// phase, and records which probe hit which rule.
    pub fn phase_done(&mut self, topology: &Topology, probes: Vec<ProbeFlows>) -> Result<()> {
        self.probes.extend(probes);
        let mut listed = BTreeMap::new();
        for node in &topology.nodes {
            let rules = rules::list(&node.netns)
                .with_context(|| format!("reading the rules of node {}", node.name))?;
            if !rules.traced {
                // The proxy replaced the whole ruleset (a restart that flushes it): trace again.
                self.notes.push(format!(
                    "node {}: the proxy removed the trace table; it was added again",
                    node.name
                ));
                nftrace::install(&node.netns).with_context(|| format!("node {}", node.name))?;
            }
            listed.insert(node.name.clone(), rules);
        }
        let mut crossings = Vec::new();
        for (node, tracer) in &mut self.tracers {
            let events = tracer.take().with_context(|| format!("node {node}"))?;
            crossings.extend(attribute::crossings(events).into_iter().map(|c| (node.clone(), c)));
        }
        let owners =
            attribute::attribute(&crossings.iter().map(|(_, c)| c).collect::<Vec<_>>(), &self.probes);
        for (node, rules) in &listed {
            for id in &rules.order {
                self.instances.entry(key(node, id, &rules.rules[id])).or_default();
            }
        }
        for ((node, crossing), owners) in crossings.iter().zip(owners) {
            if owners.is_empty() {
                self.unattributed += usize::from(!crossing.hits.is_empty());
                continue;
            }
            for (family, table, chain, handle) in &crossing.hits {
                let id = RuleId {
                    family: family.to_string(),
                    table: table.clone(),
                    chain: chain.clone(),
                    handle: *handle,
                };
                let text = [listed.get(node), self.last.get(node)]
                    .into_iter()
                    .flatten()
                    .find_map(|rules| rules.rules.get(&id));
                let Some(text) = text else { continue };
                let hit_by = self.instances.entry(key(node, &id, text)).or_default();
                hit_by.extend(owners.iter().map(|&i| self.probes[i].label.clone()));
            }
        }
        self.last = listed;
        Ok(())
    }

    pub fn finish(self) -> ScenarioCoverage {
        let instances = self
            .instances
            .into_iter()
            .map(|((node, family, table, chain, rule), hit_by)| Instance {
                node,
                family,
                table,
                chain,
                rule,
                hit_by,
            })
            .collect();
        ScenarioCoverage { instances, unattributed_packets: self.unattributed, notes: self.notes }
    }
}

fn key(node: &str, id: &RuleId, text: &str) -> (String, String, String, String, String) {
    (node.to_string(), id.family.clone(), id.table.clone(), id.chain.clone(), text.to_string())
}
