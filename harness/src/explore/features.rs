//! What a case exercises, as short strings: the field combinations it writes (per Service:
//! type × traffic policies, affinity, endpoint conditions, topology; per cluster: family,
//! local-traffic detection, proxy settings; per step: the change) and, once it ran, the flows
//! the oracle judged (source kind × frontend × expected outcome). Generation prefers cases that
//! bring combinations not yet seen, and a saved corpus keeps the fewest cases that cover all
//! of them.
//!
//! Two guides steer generation through one trait, [`Guide`]: [`FieldCombinations`] prefers
//! candidates that write combinations not yet generated; [`RuleCoverage`] also keeps every
//! case whose run reached a rule template of the proxy's not reached before, and mutates such
//! cases further, as coverage-guided fuzzers keep inputs that reach new edges.

use std::collections::{BTreeSet, HashSet};

use super::case::*;
use super::rng::Rng;
use crate::model::{Source, Target};
use crate::oracle::Outcome;
use crate::verdict::ProbeVerdict;

/// One thing a case exercises: a field combination it writes, or a kind of flow × outcome the
/// oracle judged once it ran.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Feature {
    Field(String),
    Flow(String),
    /// A rule template of the proxy's that some probe's packets matched (`coverage`).
    Rule(String),
}

/// Steers generation: how much a candidate case would add, and what a run covered.
pub trait Guide {
    /// How much `case` (with `features`, its field combinations) would add to what was covered.
    fn novelty(&self, case: &Case, features: &BTreeSet<Feature>) -> usize;
    /// A case was chosen: its field combinations now count as generated.
    fn chosen(&mut self, features: &BTreeSet<Feature>);
    /// A chosen case ran and was judged: what it reached.
    fn judged(&mut self, case: &Case, reached: &BTreeSet<Feature>);
    /// A case to mutate rather than draw afresh, if the guide keeps some (it may draw from
    /// `rng` to choose, so that the choice is the seed's).
    fn parent(&self, _rng: &mut Rng) -> Option<&Case> {
        None
    }
}

/// The default guide: field combinations not yet generated.
#[derive(Default)]
pub struct FieldCombinations {
    pub seen: HashSet<Feature>,
}

impl Guide for FieldCombinations {
    fn novelty(&self, _: &Case, features: &BTreeSet<Feature>) -> usize {
        features.iter().filter(|f| !self.seen.contains(*f)).count()
    }

    fn chosen(&mut self, features: &BTreeSet<Feature>) {
        self.seen.extend(features.iter().cloned());
    }

    fn judged(&mut self, _: &Case, reached: &BTreeSet<Feature>) {
        self.seen.extend(reached.iter().cloned());
    }
}

/// The guide by rule coverage: candidates are scored as [`FieldCombinations`] scores them,
/// and every case whose run reached a rule template not reached before becomes a parent, which
/// half of the later cases mutate (`grammar::mutated`) instead of drawing afresh.
#[derive(Default)]
pub struct RuleCoverage {
    fields: FieldCombinations,
    rules: HashSet<Feature>,
    /// The cases that reached new templates, oldest first.
    parents: Vec<Case>,
}

/// Parents kept at most: the oldest go first, as their templates are the longest explored.
const MOST_PARENTS: usize = 256;

impl Guide for RuleCoverage {
    fn novelty(&self, case: &Case, features: &BTreeSet<Feature>) -> usize {
        self.fields.novelty(case, features)
    }

    fn chosen(&mut self, features: &BTreeSet<Feature>) {
        self.fields.chosen(features);
    }

    fn judged(&mut self, case: &Case, reached: &BTreeSet<Feature>) {
        self.fields.judged(case, reached);
        let new_rules: Vec<&Feature> =
            reached.iter().filter(|f| matches!(f, Feature::Rule(_)) && !self.rules.contains(*f)).collect();
        if new_rules.is_empty() {
            return;
        }
        self.rules.extend(new_rules.into_iter().cloned());
        if self.parents.len() == MOST_PARENTS {
            self.parents.remove(0);
        }
        self.parents.push(case.clone());
    }

    fn parent(&self, rng: &mut Rng) -> Option<&Case> {
        if self.parents.is_empty() || !rng.chance(50) {
            return None;
        }
        Some(&self.parents[rng.below(self.parents.len())])
    }
}

/// The rule templates a run's probes reached, from its coverage (`run --coverage`).
pub fn of_coverage(coverage: &crate::coverage::ScenarioCoverage) -> BTreeSet<Feature> {
    coverage
        .instances
        .iter()
        .filter(|i| !i.hit_by.is_empty())
        .map(|i| {
            let (chain, text) = crate::coverage::template::template(&i.rule.at.chain, &i.rule.text);
            Feature::Rule(format!("{} {} {chain}: {text}", i.rule.at.family, i.rule.at.table))
        })
        .collect()
}

/// The field combinations `case` writes.
pub fn of_case(case: &Case) -> BTreeSet<Feature> {
    fields(case).into_iter().map(Feature::Field).collect()
}

fn fields(case: &Case) -> BTreeSet<String> {
    let mut f = BTreeSet::new();
    let p = &case.proxy;
    f.insert(format!("family {:?}, {} nodes", case.family, case.nodes.len()));
    f.insert(format!("detectLocal {:?}, masqueradeAll {}", p.detect_local, p.masquerade_all));
    if p.node_port_addresses {
        f.insert("nodePortAddresses".into());
    }
    if case.martian && case.external.is_some() {
        f.insert(format!(
            "martian 127.0.0.1 from outside, localhostNodePorts {}",
            !p.localhost_node_ports_off
        ));
    }
    if case.secondary_ips {
        f.insert(format!("second node addresses, nodePortAddresses {}", p.node_port_addresses));
    }
    if p.localhost_node_ports_off {
        f.insert("localhostNodePorts false".into());
    }
    if case.nodes.iter().any(|n| n.zone.is_some()) {
        f.insert(format!("zones, gate {}", p.traffic_distribution_gate));
    }
    if let Some(ExternalSpec { routed_via: Some(_) }) = &case.external {
        f.insert("service CIDR routed from outside".into());
    }
    for s in &case.services {
        service(case, s, "", &mut f);
    }
    for e in &case.expiries {
        let service = case.services.iter().find(|s| s.name == e.service);
        f.insert(format!("affinity expiry waited out on {:?}", service.map(|s| s.kind)));
    }
    for st in &case.streams {
        let kind = match (st.source_port, st.out_of_window) {
            (Some(_), _) => "UDP stream",
            (None, false) => "held connection",
            (None, true) => "held connection, out-of-window checks",
        };
        let service = case.services.iter().find(|s| s.name == st.service);
        f.insert(format!("{kind} to {:?}", service.map(|s| s.kind)));
        if !case.steps.is_empty() {
            f.insert(format!("{kind} across steps"));
        }
        for (k, step) in case.steps.iter().enumerate() {
            f.insert(format!("{kind} across {}", step_on_stream(case, k, step, st)));
        }
    }
    for step in &case.steps {
        if step.restart {
            f.insert("step changes a Service while the proxy restarts".into());
        }
        match &step.change {
            Change::RestartProxy => {
                f.insert("step restart".into());
            }
            Change::DeleteService(_) => {
                f.insert("step delete Service".into());
            }
            Change::ReplaceService(new) => {
                if let Some(old) = case.services.iter().find(|s| s.name == new.name) {
                    for (what, changed) in [
                        ("type", old.kind != new.kind),
                        ("externalTrafficPolicy", old.etp_local != new.etp_local),
                        ("internalTrafficPolicy", old.itp_local != new.itp_local),
                        ("sessionAffinity", old.affinity != new.affinity),
                        ("endpoints", old.slice != new.slice),
                        ("publishNotReadyAddresses", old.publish_not_ready != new.publish_not_ready),
                    ] {
                        if changed {
                            f.insert(format!("step changes {what} of {:?}", new.kind));
                        }
                    }
                    let (before, after) = (endpoint_nodes(case, old), endpoint_nodes(case, new));
                    if before.iter().any(|n| !after.contains(n)) {
                        f.insert(format!(
                            "step leaves a node without endpoints of {:?} etp {}",
                            new.kind,
                            policy(new.etp_local)
                        ));
                    }
                    if after.iter().any(|n| !before.contains(n)) {
                        f.insert(format!(
                            "step gives a node its first endpoint of {:?} etp {}",
                            new.kind,
                            policy(new.etp_local)
                        ));
                    }
                }
                service(case, new, "after a step: ", &mut f);
            }
        }
    }
    f
}

/// What a step does to a kept flow's Service: a kept flow meets each kind of step apart.
fn step_on_stream(case: &Case, k: usize, step: &StepSpec, st: &StreamSpec) -> &'static str {
    let before = case.state_after(k);
    let old = before.services.iter().find(|s| s.name == st.service);
    match (&step.change, step.restart) {
        (Change::RestartProxy, _) => "a restart",
        (Change::DeleteService(name), false) if name == &st.service => "its Service's deletion",
        (Change::DeleteService(name), true) if name == &st.service => {
            "its Service's deletion while restarting"
        }
        (Change::ReplaceService(new), restart) if new.name == st.service => {
            let serving = |s: &ServiceSpec| s.slice.as_ref().is_none_or(|e| e.iter().any(|e| e.serving));
            match (old.is_some_and(serving), serving(new), restart) {
                (true, false, false) => "its Service scaled to zero",
                (true, false, true) => "its Service scaled to zero while restarting",
                (true, true, false) if old.is_some_and(|old| drains_all(old, new)) => {
                    "its serving endpoints' drain for a new replica"
                }
                (true, true, true) if old.is_some_and(|old| drains_all(old, new)) => {
                    "its serving endpoints' drain for a new replica while restarting"
                }
                (_, _, false) if old.and_then(|o| o.slice.as_ref()) != new.slice.as_ref() => {
                    "its endpoints' change"
                }
                (_, _, true) => "its Service's change while restarting",
                _ => "its Service's policies' change",
            }
        }
        (_, false) => "another Service's change",
        (_, true) => "another Service's change while restarting",
    }
}

/// Whether every endpoint serving in `old`'s slice turns terminating (still serving) in
/// `new`'s, beside a ready endpoint `old` did not list: a rolling update's moment.
fn drains_all(old: &ServiceSpec, new: &ServiceSpec) -> bool {
    let (Some(before), Some(after)) = (&old.slice, &new.slice) else { return false };
    let still_serving = |e: &EndpointSpec| {
        after.iter().any(|a| a.target == e.target && !a.ready && a.serving && a.terminating)
    };
    let fresh = after.iter().any(|a| a.ready && !before.iter().any(|b| b.target == a.target));
    fresh && before.iter().filter(|e| e.serving).all(still_serving)
}

/// The nodes holding endpoints of a Service's written slice.
fn endpoint_nodes(case: &Case, s: &ServiceSpec) -> BTreeSet<String> {
    s.slice.as_deref().unwrap_or_default().iter().filter_map(|e| case.endpoint_node(e)).collect()
}

fn service(case: &Case, s: &ServiceSpec, prefix: &str, f: &mut BTreeSet<String>) {
    let kind = format!("{:?}", s.kind);
    let udp = s.ports.iter().any(|p| p.udp);
    f.insert(format!("{prefix}{kind} etp {} itp {} udp {udp}", policy(s.etp_local), policy(s.itp_local)));
    if let Some(timeout) = s.affinity {
        f.insert(format!(
            "{prefix}{kind} ClientIP affinity (timeout given {}) etp {}",
            timeout.is_some(),
            policy(s.etp_local)
        ));
    }
    if case.family == Family::Dual {
        f.insert(format!("{prefix}{kind} families {:?}", s.families));
    }
    if !s.external_ips.is_empty() {
        f.insert(format!("{prefix}{kind} externalIPs etp {}", policy(s.etp_local)));
    }
    if s.external_ip_on_node.is_some() {
        f.insert(format!(
            "{prefix}{kind} externalIP on a node's address etp {}, port another's node port {}",
            policy(s.etp_local),
            s.port_on_node_port_of.is_some()
        ));
    }
    if s.lb_ips_on_nodes && case.secondary_ips {
        f.insert(format!("{prefix}LB IPs on the nodes' second addresses etp {}", policy(s.etp_local)));
    }
    for &(_, proxy) in &s.lb_ingress {
        f.insert(format!(
            "{prefix}LB ingress ipMode {} etp {}",
            if proxy { "Proxy" } else { "VIP" },
            policy(s.etp_local)
        ));
    }
    for r in &s.source_ranges {
        f.insert(format!("{prefix}loadBalancerSourceRanges {r:?} etp {}", policy(s.etp_local)));
    }
    if s.kind == ServiceType::LoadBalancer && !s.allocate_node_ports {
        f.insert(format!("{prefix}LB without node ports"));
    }
    if s.topology != Topology::None {
        f.insert(format!(
            "{prefix}topology {:?} gate {} itp {}",
            s.topology,
            case.proxy.traffic_distribution_gate,
            policy(s.itp_local)
        ));
    }
    if s.ports.iter().any(|p| p.named_target) && s.slice.is_none() {
        f.insert(format!("{prefix}named targetPort"));
    }
    match &s.slice {
        None => {
            for pod in case.pods.iter().filter(|p| p.app.as_ref() == Some(&s.name)) {
                f.insert(format!(
                    "{prefix}selected pod ready {} terminating {} publishNotReady {}",
                    pod.ready, pod.terminating, s.publish_not_ready
                ));
            }
        }
        Some(endpoints) => {
            if endpoints.is_empty() {
                f.insert(format!("{prefix}{kind} no endpoints"));
            }
            for e in endpoints {
                let what = match &e.target {
                    EndpointTarget::Pod(_) => "pod".to_string(),
                    EndpointTarget::Node { node_name, .. } => format!("host-network (nodeName {node_name})"),
                };
                f.insert(format!(
                    "{prefix}{kind} etp {} itp {}: {what} endpoint ready {} serving {} terminating {}",
                    policy(s.etp_local),
                    policy(s.itp_local),
                    e.ready,
                    e.serving,
                    e.terminating
                ));
                if e.hint.is_some() {
                    f.insert(format!("{prefix}hinted endpoint, topology {:?}", s.topology));
                }
            }
            if s.topology != Topology::None && !endpoints.is_empty() {
                // What decides whether hints apply: every ready endpoint hinted or not, and
                // hints on unready ones; enough attempts to see an endpoint never chosen.
                let ready_unhinted = endpoints.iter().any(|e| e.ready && e.hint.is_none());
                let unready_hinted = endpoints.iter().any(|e| !e.ready && e.hint.is_some());
                // A node's zone that some ready endpoint is hinted for: hints that would narrow.
                let zones: BTreeSet<&String> = case.nodes.iter().filter_map(|n| n.zone.as_ref()).collect();
                let hinted_zone =
                    endpoints.iter().any(|e| e.ready && e.hint.as_ref().is_some_and(|z| zones.contains(z)));
                // PreferClose is read only behind its feature gate.
                let read = s.topology == Topology::Annotation || case.proxy.traffic_distribution_gate;
                f.insert(format!(
                    "{prefix}topology {:?} read {read}, a ready endpoint unhinted {ready_unhinted}, an unready one \
                     hinted {unready_hinted}, a node's zone hinted {hinted_zone}, spread {}",
                    s.topology,
                    case.count >= 40 && s.affinity.is_none()
                ));
            }
        }
    }
}

fn policy(local: bool) -> &'static str {
    if local { "Local" } else { "Cluster" }
}

/// What a judged probe reached: its kind of flow and the outcome the oracle expected.
pub fn of_verdict(v: &ProbeVerdict) -> Feature {
    let outcome = match &v.expected.outcome {
        Outcome::Answered { backends, .. } => {
            let masq = backends.values().any(|s| matches!(s, crate::oracle::SeenSource::Masqueraded { .. }));
            format!("answered ({})", if masq { "masqueraded" } else { "client's source" })
        }
        other => outcome_kind(other).to_string(),
    };
    Feature::Flow(format!(
        "{} {outcome}",
        flow_kind(&v.probe.from, &v.probe.to, v.probe.protocol == crate::model::Protocol::Udp)
    ))
}

fn outcome_kind(o: &Outcome) -> &'static str {
    match o {
        Outcome::Answered { .. } => "answered",
        Outcome::Rejected => "rejected",
        Outcome::Closed { .. } => "closed",
        Outcome::Dropped => "dropped",
        Outcome::Forwarded => "forwarded",
        Outcome::Unanswered { .. } => "unanswered",
        Outcome::Http { .. } => "http",
    }
}

/// A flow's kind: its source's kind, the frontend's kind and the protocol
/// (`pod -> nodePort (UDP)`); what "the same kind of flow" means when shrinking.
pub fn flow_kind(from: &Source, to: &Target, udp: bool) -> String {
    let source = match from {
        Source::Pod(_) => "pod",
        Source::Node(_) => "node",
        Source::External(_) => "external",
    };
    let frontend = match to {
        Target::ClusterIp { .. } => "clusterIP",
        Target::NodePort { .. } => "nodePort",
        Target::ExternalIp { .. } => "externalIP",
        Target::LoadBalancer { .. } => "loadBalancer",
        Target::HealthCheck { .. } => "healthCheck",
        Target::Address(_) => "address",
        Target::Localhost { .. } => "localhost",
    };
    format!("{source} -> {frontend} ({})", if udp { "UDP" } else { "TCP" })
}
