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
mod counters;
pub mod identity;
pub mod rules;
pub mod table;
pub mod template;

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context, Result};

pub use attribute::ProbeFlows;
pub use table::{Example, Table, Template, merge, tables};

use std::sync::Arc;

use crate::observe::nftables::NftSocket;
use crate::observe::nftrace::{self, Tracer};
use crate::topology::Topology;
use crate::topology::netns::Netns;
use identity::{Rule, RuleId};
use rules::NodeRules;

/// One rule as a node held it in some phase of a scenario, and the probes that hit it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    pub node: String,
    pub rule: Rule,
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
    nodes: Vec<Node>,
    /// Every probe sent so far: a late packet of an earlier phase is still its probe's.
    probes: Vec<ProbeFlows>,
    /// Keyed by node and rule: one rule however many phases held it.
    instances: BTreeMap<(String, Rule), BTreeSet<String>>,
    /// Each node's rules as last read, for a packet traced before a change removed its rule.
    last: BTreeMap<String, Arc<NodeRules>>,
    unattributed: usize,
    /// Hits on rules no reading listed (made and replaced between two readings), per node.
    unlisted: BTreeMap<String, usize>,
    notes: Vec<String>,
}

/// One node's tracer and the reading of its rules, which may run in the background while the
/// probes are sent.
struct Node {
    name: String,
    netns: Netns,
    tracer: Tracer,
    /// Away while a background reading has it.
    socket: Option<NftSocket>,
    reading: Option<std::thread::JoinHandle<(NftSocket, Result<Listed>)>>,
    /// The last reading, by the ruleset generation it is of.
    listed: Option<Listed>,
    /// Legacy rules' counts when the phase started (`counters`: tracing cannot see them).
    legacy: counters::Counts,
}

type Listed = (u32, Arc<NodeRules>);

impl Node {
    /// Starts reading the rules in the background; `rules` takes the result if the ruleset is
    /// still of the generation read by then.
    fn read_ahead(&mut self) -> Result<()> {
        let Some(mut socket) = self.socket.take() else { return Ok(()) };
        let netns = self.netns.clone();
        let thread = std::thread::Builder::new()
            .name(format!("rules-{}", self.name))
            .spawn(move || {
                let listed = rules::list(&netns, &mut socket).map(|(g, r)| (g, Arc::new(r)));
                (socket, listed)
            })
            .with_context(|| format!("starting to read the rules of node {}", self.name))?;
        self.reading = Some(thread);
        Ok(())
    }

    fn join_reading(&mut self) {
        if let Some(thread) = self.reading.take() {
            let (socket, listed) = thread.join().expect("the rules reader panicked");
            self.socket = Some(socket);
            // A failed reading ahead is read again now, and fails there if it still does.
            self.listed = listed.ok().or(self.listed.take());
        }
    }

    /// The rules as they are now: the last reading if no commit came since, else read now.
    fn rules(&mut self) -> Result<Arc<NodeRules>> {
        self.join_reading();
        let socket = self.socket.as_mut().expect("no reading is under way");
        let generation = socket.generation()?;
        if let Some((read, rules)) = &self.listed
            && *read == generation
        {
            return Ok(rules.clone());
        }
        let (generation, rules) = rules::list(&self.netns, socket)?;
        let rules = Arc::new(rules);
        self.listed = Some((generation, rules.clone()));
        Ok(rules)
    }
}

impl Recorder {
    /// Adds the trace table to every node and starts reading its traces. Called once the proxy
    /// has started, so that a proxy that replaces the whole ruleset at start keeps it.
    pub fn start(topology: &Topology) -> Result<Recorder> {
        let mut nodes = Vec::new();
        for node in &topology.nodes {
            let in_node = || format!("node {}", node.name);
            let mut socket = NftSocket::open(&node.netns).with_context(in_node)?;
            nftrace::install(&mut socket).with_context(in_node)?;
            let mut state = Node {
                name: node.name.clone(),
                netns: node.netns.clone(),
                tracer: Tracer::start(&node.netns).with_context(in_node)?,
                socket: Some(socket),
                reading: None,
                listed: None,
                legacy: counters::read(&node.netns).with_context(in_node)?,
            };
            state.read_ahead()?;
            nodes.push(state);
        }
        Ok(Recorder {
            nodes,
            probes: Vec::new(),
            instances: BTreeMap::new(),
            last: BTreeMap::new(),
            unattributed: 0,
            unlisted: BTreeMap::new(),
            notes: Vec::new(),
        })
    }

    /// After the proxy changed its rules for a phase: reads them while the probes are sent.
    pub fn rules_changed(&mut self) -> Result<()> {
        for node in &mut self.nodes {
            node.legacy = counters::read(&node.netns).with_context(|| format!("node {}", node.name))?;
        }
        self.nodes.iter_mut().try_for_each(Node::read_ahead)
    }

    /// After a phase's probes: reads each node's rules (unless they are as last read) and
    /// what was traced since the last phase, and records which probe hit which rule.
    pub fn phase_done(&mut self, probes: Vec<ProbeFlows>) -> Result<()> {
        let labels: BTreeSet<String> = probes.iter().map(|p| p.label.clone()).collect();
        self.probes.extend(probes);
        self.count_legacy(&labels)?;
        let read: Vec<Result<Arc<NodeRules>>> = std::thread::scope(|scope| {
            let threads: Vec<_> = self.nodes.iter_mut().map(|node| scope.spawn(|| node.rules())).collect();
            threads.into_iter().map(|t| t.join().expect("the rules reader panicked")).collect()
        });
        let mut listed = BTreeMap::new();
        for (node, rules) in self.nodes.iter_mut().zip(read) {
            let rules = rules.with_context(|| format!("reading the rules of node {}", node.name))?;
            if !rules.traced {
                // The proxy replaced the whole ruleset (a restart that flushes it): trace again.
                self.notes.push(format!(
                    "node {}: the proxy removed the trace table; it was added again",
                    node.name
                ));
                let socket = node.socket.as_mut().expect("no reading is under way");
                nftrace::install(socket).with_context(|| format!("node {}", node.name))?;
            }
            listed.insert(node.name.clone(), rules);
        }
        let mut crossings = Vec::new();
        for node in &mut self.nodes {
            let events = node.tracer.take().with_context(|| format!("node {}", node.name))?;
            crossings.extend(attribute::crossings(events).into_iter().map(|c| (node.name.clone(), c)));
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
            for id in &crossing.hits {
                let text = [listed.get(node), self.last.get(node)]
                    .into_iter()
                    .flatten()
                    .find_map(|rules| rules.rules.get(id));
                let Some(text) = text else {
                    *self.unlisted.entry(node.clone()).or_default() += 1;
                    continue;
                };
                let hit_by = self.instances.entry(key(node, id, text)).or_default();
                hit_by.extend(owners.iter().map(|&i| self.probes[i].label.clone()));
            }
        }
        self.last = listed;
        Ok(())
    }

    /// Legacy rules whose counts grew during the phase count for every probe of it (`labels`).
    fn count_legacy(&mut self, labels: &BTreeSet<String>) -> Result<()> {
        for node in &mut self.nodes {
            let now = counters::read(&node.netns).with_context(|| format!("node {}", node.name))?;
            if now.is_empty() {
                continue;
            }
            for (legacy, _) in &now {
                self.instances.entry((node.name.clone(), legacy.rule.clone())).or_default();
            }
            for legacy in counters::grown(&node.legacy, &now) {
                let hit_by = self.instances.entry((node.name.clone(), legacy.rule.clone())).or_default();
                hit_by.extend(labels.iter().cloned());
            }
            let note = format!(
                "node {}: legacy iptables rules and IPVS servers, which tracing cannot see, are counted per \
                 phase: a hit counts for every probe of its phase",
                node.name
            );
            if !self.notes.contains(&note) {
                self.notes.push(note);
            }
            node.legacy = now;
        }
        Ok(())
    }

    pub fn finish(mut self) -> ScenarioCoverage {
        for (node, hits) in std::mem::take(&mut self.unlisted) {
            self.notes.push(format!(
                "node {node}: {hits} traced hits named rules no reading listed (the proxy replaced them \
                 between two readings), so they count for no template"
            ));
        }
        let instances = std::mem::take(&mut self.instances)
            .into_iter()
            .map(|((node, rule), hit_by)| Instance { node, rule, hit_by })
            .collect();
        ScenarioCoverage {
            instances,
            unattributed_packets: self.unattributed,
            notes: std::mem::take(&mut self.notes),
        }
    }
}

impl Drop for Recorder {
    /// No reading outlives the scenario: its namespaces are about to go.
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(thread) = node.reading.take() {
                let _ = thread.join();
            }
        }
    }
}

fn key(node: &str, id: &RuleId, text: &str) -> (String, Rule) {
    (node.to_string(), Rule { at: id.at.clone(), text: text.to_string() })
}
