//! What a case exercises, as short strings: the field combinations it writes (per Service:
//! type × traffic policies, affinity, endpoint conditions, topology; per cluster: family,
//! local-traffic detection, proxy settings; per step: the change) and, once it ran, the flows
//! the oracle judged (source kind × frontend × expected outcome). Generation prefers cases that
//! bring combinations not yet seen, and a saved corpus keeps the fewest cases that cover all
//! of them.
//!
//! The hook for coverage of another kind (rule templates a proxy's rules reached, the
//! rule-coverage issue): a [`Guide`] scores candidates and hears of every finished run; the
//! explorer asks only that trait.

use std::collections::{BTreeSet, HashSet};

use super::case::*;
use crate::model::{Source, Target};
use crate::oracle::Outcome;
use crate::verdict::ProbeVerdict;

/// One thing a case exercises: a field combination it writes, or a kind of flow × outcome the
/// oracle judged once it ran.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Feature {
    Field(String),
    Flow(String),
}

/// Steers generation: how much a candidate case would add, and what a run covered.
pub trait Guide {
    /// How much `case` (with `features`, its field combinations) would add to what was covered.
    fn novelty(&self, case: &Case, features: &BTreeSet<Feature>) -> usize;
    /// A case was chosen: its field combinations now count as generated.
    fn chosen(&mut self, features: &BTreeSet<Feature>);
    /// A chosen case ran and was judged: what it reached.
    fn judged(&mut self, reached: &BTreeSet<Feature>);
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

    fn judged(&mut self, reached: &BTreeSet<Feature>) {
        self.seen.extend(reached.iter().cloned());
    }
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
                }
                service(case, new, "after a step: ", &mut f);
            }
        }
    }
    f
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
        f.insert(format!("{prefix}{kind} externalIP on a node's address etp {}", policy(s.etp_local)));
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
