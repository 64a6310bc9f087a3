//! Shrinking: the smaller cases a failing one may be cut down to, biggest cuts first (as
//! Hypothesis and proptest shrink: remove, then simplify). The explorer runs them and keeps the
//! first that still fails the same way ([`Signature`]), until none does.

use std::collections::BTreeSet;

use super::case::*;
use crate::results::{Outcome, ScenarioReport};
use crate::verdict::symptom::Symptom;

/// How a case fails: each (symptom, kind of flow) of its failing probes, or the proxy's own
/// failure. A smaller case fails "the same way" when it shares one of the original's.
pub type Signature = BTreeSet<(Symptom, String)>;

/// The flow kind given to a proxy that failed at its own job.
pub const THE_PROXY: &str = "(the proxy)";

pub fn signature(report: &ScenarioReport) -> Signature {
    match &report.outcome {
        Outcome::Judged(verdicts) => verdicts
            .iter()
            .filter(|v| v.failed())
            .flat_map(|v| {
                let kind = super::features::flow_kind(
                    &v.probe.from,
                    &v.probe.to,
                    v.probe.protocol == crate::model::Protocol::Udp,
                );
                v.symptoms().into_iter().map(move |s| (s, kind.clone()))
            })
            .collect(),
        Outcome::ProxyFailed(_) => BTreeSet::from([(Symptom::ProxyFailed, THE_PROXY.to_string())]),
        Outcome::Skipped(_) => BTreeSet::new(),
    }
}

/// Whether `now` fails the way `first` did: some (symptom, flow kind) of the first failure.
pub fn same_way(first: &Signature, now: &Signature) -> bool {
    first.iter().any(|s| now.contains(s))
}

/// Smaller cases, biggest cuts first. `failing` are the first state's failing probes (to list
/// in place of every flow).
pub fn candidates(case: &Case, failing: &[ProbeText]) -> Vec<Case> {
    let mut out = Vec::new();
    let mut push = |c: Case| {
        if &c != case && !out.contains(&c) {
            out.push(c);
        }
    };
    fewer_parts(case, failing, &mut push);
    each_service(case, &mut push, fewer_service_parts);
    each_service(case, &mut push, simpler_services);
    simpler_settings(case, &mut push);
    out
}

/// Fewer flows, steps, Services, streams, restarts, probes, nodes, pods, external hosts.
fn fewer_parts(case: &Case, failing: &[ProbeText], push: &mut impl FnMut(Case)) {
    // Every flow → only the failing ones (or none, when only a step's fail).
    if case.probes.is_none() {
        push(Case { probes: Some(failing.to_vec()), ..case.clone() });
    }
    for k in (0..case.steps.len()).rev() {
        let mut c = case.clone();
        c.steps.truncate(k);
        push(c);
        let mut c = case.clone();
        c.steps.remove(k);
        push(c);
    }
    for s in &case.services {
        push(without_service(case, &s.name));
    }
    for i in 0..case.streams.len() {
        let mut c = case.clone();
        c.streams.remove(i);
        push(c);
    }
    for i in 0..case.expiries.len() {
        let mut c = case.clone();
        c.expiries.remove(i);
        push(c);
    }
    for k in 0..case.steps.len() {
        if case.steps[k].restart {
            let mut c = case.clone();
            c.steps[k].restart = false;
            push(c);
        }
    }
    if let Some(probes) = &case.probes {
        for i in 0..probes.len() {
            let mut c = case.clone();
            c.probes.as_mut().unwrap().remove(i);
            push(c);
        }
    }
    for k in 0..case.steps.len() {
        for i in 0..case.steps[k].probes.len() {
            let mut c = case.clone();
            c.steps[k].probes.remove(i);
            push(c);
        }
    }
    if case.nodes.len() > 1 {
        for n in &case.nodes {
            push(without_node(case, &n.name));
        }
    }
    for p in &case.pods {
        push(without_pod(case, &p.name));
    }
    if case.external.is_some() {
        push(Case { external: None, ..case.clone() });
    }
}

/// Fewer ports, endpoints, addresses of a Service.
fn fewer_service_parts(s: &ServiceSpec) -> Vec<ServiceSpec> {
    let mut cuts = Vec::new();
    for i in 0..s.ports.len() {
        if s.ports.len() > 1 {
            let mut t = s.clone();
            t.ports.remove(i);
            cuts.push(t);
        }
    }
    if let Some(endpoints) = &s.slice {
        for i in 0..endpoints.len() {
            let mut t = s.clone();
            t.slice.as_mut().unwrap().remove(i);
            cuts.push(t);
        }
    }
    for i in 0..s.external_ips.len() {
        let mut t = s.clone();
        t.external_ips.remove(i);
        cuts.push(t);
    }
    if s.external_ip_on_node.is_some() {
        cuts.push(ServiceSpec { external_ip_on_node: None, ..s.clone() });
    }
    if s.lb_ips_on_nodes {
        cuts.push(ServiceSpec { lb_ips_on_nodes: false, ..s.clone() });
    }
    for i in 0..s.lb_ingress.len() {
        let mut t = s.clone();
        t.lb_ingress.remove(i);
        cuts.push(t);
    }
    for i in 0..s.source_ranges.len() {
        let mut t = s.clone();
        t.source_ranges.remove(i);
        cuts.push(t);
    }
    cuts
}

/// Simpler values of a Service: each policy and option back to its default, one at a time.
fn simpler_services(s: &ServiceSpec) -> Vec<ServiceSpec> {
    let mut simpler = Vec::new();
    let mut with = |f: &dyn Fn(&mut ServiceSpec)| {
        let mut t = s.clone();
        f(&mut t);
        simpler.push(t);
    };
    with(&|t| t.etp_local = false);
    with(&|t| t.itp_local = false);
    with(&|t| t.affinity = None);
    with(&|t| t.topology = Topology::None);
    with(&|t| t.publish_not_ready = false);
    with(&|t| t.allocate_node_ports = true);
    with(&|t| t.port_on_node_port_of = None);
    with(&|t| t.families = ServiceFamilies::Primary);
    with(&|t| {
        t.ports.iter_mut().for_each(|p| p.named_target = false);
    });
    with(&|t| {
        t.ports.iter_mut().for_each(|p| p.udp = false);
    });
    with(&|t| {
        if t.kind == ServiceType::LoadBalancer {
            t.kind = ServiceType::NodePort;
            t.lb_ingress.clear();
            t.source_ranges.clear();
        } else if t.kind == ServiceType::NodePort {
            t.kind = ServiceType::ClusterIp;
            t.etp_local = false;
        }
    });
    with(&|t| {
        for e in t.slice.iter_mut().flatten() {
            (e.ready, e.serving, e.terminating) = (true, true, false);
        }
    });
    with(&|t| {
        for e in t.slice.iter_mut().flatten() {
            e.hint = None;
        }
    });
    simpler
}

/// Simpler pods, proxy settings, families, zones, external routes and counts.
fn simpler_settings(case: &Case, push: &mut impl FnMut(Case)) {
    for i in 0..case.pods.len() {
        let mut c = case.clone();
        c.pods[i].ready = true;
        c.pods[i].terminating = false;
        push(c);
    }
    push(Case { proxy: ProxySpec::default(), ..case.clone() });
    let p = &case.proxy;
    for simpler in [
        ProxySpec { masquerade_all: false, ..p.clone() },
        ProxySpec { detect_local: DetectMode::ClusterCidr, ..p.clone() },
        ProxySpec { node_port_addresses: false, ..p.clone() },
        ProxySpec { localhost_node_ports_off: false, ..p.clone() },
        ProxySpec { traffic_distribution_gate: false, ..p.clone() },
    ] {
        push(Case { proxy: simpler, ..case.clone() });
    }
    if case.family != Family::V4 {
        push(Case { family: Family::V4, ..case.clone() });
    }
    if case.secondary_ips {
        push(Case { secondary_ips: false, ..case.clone() });
    }
    if case.martian {
        push(Case { martian: false, ..case.clone() });
    }
    let mut c = case.clone();
    c.nodes.iter_mut().for_each(|n| n.zone = None);
    push(c);
    if let Some(ExternalSpec { routed_via: Some(_) }) = &case.external {
        push(Case { external: Some(ExternalSpec { routed_via: None }), ..case.clone() });
    }
    for count in [3, 6] {
        if case.count > count {
            push(Case { count, ..case.clone() });
        }
    }
}

/// For each Service (in the first state and in the steps that replace it), the case with each
/// of `variants`' versions of it.
fn each_service(
    case: &Case,
    push: &mut impl FnMut(Case),
    variants: impl Fn(&ServiceSpec) -> Vec<ServiceSpec>,
) {
    for i in 0..case.services.len() {
        for v in variants(&case.services[i]) {
            let mut c = case.clone();
            c.services[i] = v;
            push(c);
        }
    }
    for k in 0..case.steps.len() {
        if let Change::ReplaceService(s) = &case.steps[k].change {
            for v in variants(s) {
                let mut c = case.clone();
                c.steps[k].change = Change::ReplaceService(v);
                push(c);
            }
        }
    }
}

fn without_service(case: &Case, name: &str) -> Case {
    let mut c = case.clone();
    c.services.retain(|s| s.name != name);
    c.pods.retain(|p| p.app.as_deref() != Some(name));
    c.steps.retain(|st| st.change.service() != Some(name));
    c.streams.retain(|st| st.service != name);
    c.expiries.retain(|e| e.service != name);
    c
}

fn without_node(case: &Case, name: &str) -> Case {
    let mut c = case.clone();
    c.nodes.retain(|n| n.name != name);
    let gone: Vec<String> = c.pods.iter().filter(|p| p.node == name).map(|p| p.name.clone()).collect();
    c.pods.retain(|p| p.node != name);
    let keep = |e: &EndpointSpec| match &e.target {
        EndpointTarget::Pod(p) => !gone.contains(p),
        EndpointTarget::Node { node, .. } => node != name,
    };
    for s in c.services.iter_mut().chain(c.steps.iter_mut().filter_map(|st| match &mut st.change {
        Change::ReplaceService(s) => Some(s),
        _ => None,
    })) {
        if let Some(endpoints) = &mut s.slice {
            endpoints.retain(keep);
        }
    }
    if let Some(ExternalSpec { routed_via: Some(via) }) = &c.external
        && via == name
    {
        c.external = Some(ExternalSpec { routed_via: None });
    }
    c
}

fn without_pod(case: &Case, name: &str) -> Case {
    let mut c = case.clone();
    c.pods.retain(|p| p.name != name);
    c.streams.retain(|st| st.client != name);
    for e in &mut c.expiries {
        e.clients.retain(|client| client != name);
    }
    for s in c.services.iter_mut().chain(c.steps.iter_mut().filter_map(|st| match &mut st.change {
        Change::ReplaceService(s) => Some(s),
        _ => None,
    })) {
        if let Some(endpoints) = &mut s.slice {
            endpoints.retain(|e| e.target != EndpointTarget::Pod(name.to_string()));
        }
    }
    c
}
