//! Probes written out: a step's probes (the flows of the state after it, as `flows: all` would
//! give them, since a step lists its probes), and a shrunk case's (its failing flows).

use std::path::Path;

use super::case::{Case, Change, ProbeText, SHORT_AFFINITY_SECONDS, q};
use crate::model::{Probe, Protocol, SessionAffinity, Source, Target};
use crate::oracle::{Basis, Outcome};

/// At most this many probes after a step: the flows through the Service it changed first.
const PER_STEP: usize = 10;

/// A probe as the scenario file writes it, named `name`.
pub fn text(probe: &Probe, name: &str, flow: &str) -> ProbeText {
    let from = match &probe.from {
        Source::Pod(p) => format!("{{pod: {}}}", q(p)),
        Source::Node(n) => format!("{{node: {}}}", q(n)),
        Source::External(h) => format!("{{external: {}}}", q(h)),
    };
    let via = |via: &Option<String>| via.as_ref().map(|v| format!(", via: {}", q(v))).unwrap_or_default();
    let to = match &probe.to {
        Target::ClusterIp { service, port } => format!("{{service: {}, port: {}}}", q(service), q(port)),
        Target::NodePort { service, port, node, address } => {
            let address = address.map(|a| format!(", address: {}", q(&a.to_string()))).unwrap_or_default();
            format!("{{service: {}, port: {}, nodePort: {}{address}}}", q(service), q(port), q(node))
        }
        Target::ExternalIp { service, port, ip, via: v } => {
            format!(
                "{{service: {}, port: {}, externalIP: {}{}}}",
                q(service),
                q(port),
                q(&ip.to_string()),
                via(v)
            )
        }
        Target::LoadBalancer { service, port, ip, via: v } => {
            format!(
                "{{service: {}, port: {}, loadBalancer: {}{}}}",
                q(service),
                q(port),
                q(&ip.to_string()),
                via(v)
            )
        }
        Target::HealthCheck { service, node } => {
            format!("{{healthCheck: {}, node: {}}}", q(service), q(node))
        }
        Target::Address(a) => format!("{{address: {}, port: {}}}", q(&a.ip().to_string()), a.port()),
        Target::Localhost { node, port } => {
            format!("{{address: \"127.0.0.1\", port: {port}, via: {}}}", q(node))
        }
    };
    ProbeText {
        name: name.to_string(),
        flow: flow.to_string(),
        from,
        to,
        udp: probe.protocol == Protocol::Udp,
    }
}

/// Gives each step of `case` its probes: flows of the state after it that the oracle judges,
/// those through the Service it changed first (for a deleted Service, its cluster IP as a raw
/// address, where the oracle states an outcome). `Err` when a state does not load (a generator
/// bug, reported with the reader's errors).
pub fn fill_steps(case: &mut Case) -> Result<(), String> {
    for k in 0..case.steps.len() {
        let state = case.state_after(k + 1);
        let rendered = state.render("");
        let scenario = crate::admission::load_str(&rendered, Path::new("state.yaml"))
            .map_err(|e| format!("the state after {} does not load:\n{e}\n{rendered}", case.steps[k].name))?;
        let change = &case.steps[k].change;
        let about = |p: &&Probe| change.service().is_some_and(|s| target_service(&p.to) == Some(s));
        let judged: Vec<&Probe> =
            scenario.probes.iter().filter(|p| known_gap(&scenario.cluster, p).is_none()).collect();
        let mut chosen: Vec<&Probe> = judged.iter().copied().filter(about).collect();
        // Health checks first: few, and the only flows that see a node's count of local
        // endpoints change.
        chosen.sort_by_key(|p| !matches!(p.to, Target::HealthCheck { .. }));
        let others: Vec<&Probe> = judged.iter().copied().filter(|p| !about(p)).collect();
        // Others evenly spaced, so that a restart's probes reach every Service.
        let room = PER_STEP.saturating_sub(chosen.len());
        if room > 0 && !others.is_empty() {
            let stride = others.len().div_ceil(room);
            chosen.extend(others.iter().step_by(stride.max(1)).copied());
        }
        chosen.truncate(PER_STEP);
        let mut probes: Vec<ProbeText> =
            chosen.iter().enumerate().map(|(i, p)| text(p, &format!("p{i}"), &p.name)).collect();
        if let Change::DeleteService(name) = change
            && let Some(gone) = case.state_after(k).services.iter().find(|s| &s.name == name)
        {
            probes.extend(deleted_service_probes(case, &scenario, gone, probes.len()));
        }
        if probes.is_empty() {
            // A step needs a probe; one with nothing to judge after it ends the case there.
            case.steps.truncate(k);
            break;
        }
        case.steps[k].probes = probes;
    }
    Ok(())
}

/// Keeps the streams the first state answers: a held connection where Kubernetes requires the
/// answer (so every profile has a connection for its checks), a UDP stream where the iptables
/// profile expects one (a stream that was never answered has nothing to keep). `Err` when the first state does not load.
pub fn keep_streams(case: &mut Case) -> Result<(), String> {
    if case.streams.is_empty() {
        return Ok(());
    }
    let rendered = case.state_after(0).render("");
    let scenario = crate::admission::load_str(&rendered, Path::new("state.yaml"))
        .map_err(|e| format!("the first state does not load:\n{e}\n{rendered}"))?;
    let cluster = &scenario.cluster;
    case.streams.retain(|st| {
        let probe = Probe {
            name: st.name.clone(),
            from: Source::Pod(st.client.clone()),
            to: Target::ClusterIp { service: st.service.clone(), port: st.port.clone() },
            protocol: if st.source_port.is_some() { Protocol::Udp } else { Protocol::Tcp },
            count: 1,
            interval: None,
            family: None,
            source_port: st.source_port,
            expect: None,
            life: crate::model::Life::OneShot,
            clients: None,
        };
        let answered = |e: &crate::oracle::Expectation| matches!(e.outcome, Outcome::Answered { .. });
        match crate::oracle::expect(cluster, &probe) {
            Ok(e) if st.source_port.is_some() => answered(&e),
            Ok(e) => answered(&e) && e.basis == Basis::Contract,
            Err(_) => false,
        }
    });
    Ok(())
}

/// Probes of a deleted Service's cluster IP from every pod and node, kept where the oracle states
/// an outcome in the state after the deletion.
fn deleted_service_probes(
    case: &Case,
    scenario: &crate::model::Scenario,
    gone: &super::case::ServiceSpec,
    first: usize,
) -> Vec<ProbeText> {
    let Some(ip) = case.primary_cluster_ip(gone) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let sources = scenario.cluster.pods.iter().map(|p| Source::Pod(p.name.clone())).take(1);
    for (i, port) in gone.ports.iter().enumerate() {
        let number = gone.port_number(i);
        for from in sources.clone() {
            let probe = Probe {
                name: "deleted".into(),
                from,
                to: Target::Address(std::net::SocketAddr::new(ip, number)),
                protocol: if port.udp { Protocol::Udp } else { Protocol::Tcp },
                count: case.count,
                interval: None,
                family: None,
                source_port: None,
                expect: None,
                life: crate::model::Life::OneShot,
                clients: None,
            };
            if crate::oracle::expect(&scenario.cluster, &probe).is_ok() {
                let flow = format!("{} -> deleted {}:{} clusterIP", probe.from, gone.name, port.name);
                out.push(text(&probe, &format!("p{}", first + out.len()), &flow));
            }
        }
    }
    out
}

/// The Service a target reaches, if it names one.
pub fn target_service(to: &Target) -> Option<&str> {
    match to {
        Target::ClusterIp { service, .. }
        | Target::NodePort { service, .. }
        | Target::ExternalIp { service, .. }
        | Target::LoadBalancer { service, .. }
        | Target::HealthCheck { service, .. } => Some(service),
        Target::Address(_) | Target::Localhost { .. } => None,
    }
}

/// Why the harness cannot yet judge `probe` right, for a flow left out of generated cases (so
/// that a correct proxy never fails on it); each is a known gap, listed in docs/src/explore.md.
pub fn known_gap(cluster: &crate::model::Cluster, probe: &Probe) -> Option<&'static str> {
    let expected = crate::oracle::expect(cluster, probe).ok()?;
    // Its node port (on any address), or an external IP that is its own address.
    let own_node_port =
        matches!((&probe.from, &probe.to), (Source::Node(n), Target::NodePort { node, .. }) if n == node);
    let own_address = own_node_port
        || match (&probe.from, cluster.target_address(&probe.to)) {
            (Source::Node(n), Some(dst)) => {
                cluster.node(n).is_some_and(|node| node.all_ips().any(|ip| ip == dst.ip()))
            }
            _ => false,
        };
    if own_address && expected.outcome == Outcome::Rejected {
        return Some(
            "a node's own process to its own address (a node port, an external IP on it) without \
             endpoints: rejected in INPUT after OUTPUT made a conntrack entry, which the evidence reads \
             as forwarded",
        );
    }
    let dropped_by_own_node = match (&probe.from, &probe.to) {
        (Source::Node(n), Target::NodePort { node, .. }) => n == node,
        (Source::Node(n), Target::ExternalIp { via, .. } | Target::LoadBalancer { via, .. }) => {
            via.as_ref().is_none_or(|v| v == n)
        }
        (Source::Node(_), _) => true,
        _ => false,
    };
    if dropped_by_own_node && expected.outcome == Outcome::Dropped {
        return Some(
            "a node's own packet dropped by its own rules (internalTrafficPolicy Local without a \
             local endpoint, a load balancer's source ranges): the drop in OUTPUT fails the send \
             with EPERM, which the client reads as refused (and ip6tables mode let one out)",
        );
    }
    let short_affinity = target_service(&probe.to).and_then(|s| cluster.service(s)).is_some_and(|s| {
        matches!(s.session_affinity, SessionAffinity::ClientIp { timeout_seconds } if timeout_seconds <= SHORT_AFFINITY_SECONDS)
    });
    if short_affinity && probe.interval.is_none() && !matches!(probe.to, Target::HealthCheck { .. }) {
        return Some(
            "attempts without an interval to a Service whose affinity timeout is seconds: a loaded \
             machine may space two attempts past it, which the oracle reads as affinity broken (the \
             check of stickiness does not yet read when each attempt was sent)",
        );
    }
    let ranges = expected.outcome == Outcome::Dropped && outside_source_ranges(cluster, probe);
    let no_endpoints = target_service(&probe.to)
        .and_then(|s| cluster.service(s))
        .is_some_and(|s| s.ports.iter().all(|p| p.endpoints.iter().all(|e| !e.ready && !e.serving)));
    if ranges && no_endpoints {
        return Some(
            "a client outside a load balancer's source ranges, the Service without endpoints: \
             builtin-nftables answers with its reject rather than the firewall's drop",
        );
    }
    None
}

/// Whether a load balancer's source ranges leave `probe`'s client out: the Kubernetes
/// contract's test, on the node that receives the flow, as the oracle applies it.
fn outside_source_ranges(cluster: &crate::model::Cluster, probe: &Probe) -> bool {
    let Target::LoadBalancer { service, .. } = &probe.to else { return false };
    let (Some(svc), Some(dst)) = (cluster.service(service), cluster.target_address(&probe.to)) else {
        return false;
    };
    let node = match &probe.from {
        Source::External(_) => cluster.entry_node(&probe.to),
        from => cluster.source_node(from),
    };
    let (Some(node), Some(source)) = (node, cluster.source_ip_to(&probe.from, dst.ip())) else {
        return false;
    };
    !crate::kubernetes::source_ranges_admit(svc, source, node.ip())
}
