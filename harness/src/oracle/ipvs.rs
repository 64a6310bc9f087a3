//! kube-proxy's IPVS mode (profile `kube-proxy-ipvs`, v1.30.3's pkg/proxy/ipvs/proxier.go)
//! where it departs from what the Service contract requires or chooses otherwise than the
//! iptables mode. Under profile `kubernetes` the same flows are judged by the contract, so a
//! run of IPVS mode held to it shows these as failures: that is the truth about IPVS mode.
//!
//! - A Local policy with no local endpoint falls back to the Cluster endpoints (`syncEndpoint`:
//!   "Allow access from local PODs even if no local endpoints exist", kubernetes#97081); when
//!   there are none (internalTrafficPolicy Local on a Service nothing outside reaches), the
//!   virtual server has no real servers and the kernel answers ICMP port unreachable
//!   (`ip_vs_leave`, net/netfilter/ipvs/ip_vs_core.c).
//! - externalTrafficPolicy Local traffic is never masqueraded (the `*-LOCAL` sets RETURN
//!   before `KUBE-MARK-MASQ` in `writeIptablesRules`) and every external virtual server holds
//!   the node's local endpoints, whoever sends: pods and the node itself are not
//!   short-circuited to every endpoint. An endpoint off the translating node then replies
//!   past it unless the client's address routes back through it ("Traffic from an external
//!   source will be routed but the reply will have the POD address and will be discarded").
//! - An external IP on the node network is bound to every node's `kube-ipvs0`, so without
//!   `--ipvs-strict-arp` every node answers ARP for it: which node an outside host reaches
//!   is a race (not judged).
//! - ClientIP affinity is a persistence template that lives while connections it scheduled
//!   do (`ip_vs_conn_expire` re-arms a template that still controls connections), so it
//!   outlives `timeoutSeconds` while the last connection lingers.

use std::net::IpAddr;
use std::time::Duration;

use super::endpoints::{cluster_wide, cluster_wide_on, local_to, node_of};
use super::frontend::{ExternalKind, Frontend};
use super::paths::{self, answered, client_source, describe, is_hairpin, masqueraded_toward, rejected};
use super::{Basis, Expectation, Outcome, Prediction, Profile, SeenSource, Spread};
use crate::kubernetes::source_ranges_admit;
use crate::model::{
    Cluster, Endpoint, Node, Probe, Protocol, Service, ServicePort, ServiceType, Source, TrafficPolicy,
};

/// What kube-proxy's IPVS mode makes of a classified destination.
pub(super) fn predict(cluster: &Cluster, probe: &Probe, front: Frontend<'_>) -> Result<Prediction, String> {
    let inner = match &front {
        Frontend::Chosen { frontend, .. } => frontend.as_ref(),
        other => other,
    };
    let choice = match inner {
        Frontend::ClusterIp { svc, port } => cluster_ip(cluster, probe, svc, port)?,
        Frontend::External { svc, port, kind, node } => external(cluster, probe, svc, port, *kind, node)?,
        _ => None,
    };
    let prediction = match choice {
        // Where IPVS mode's path ends where the contract's does, the contract is the basis.
        Some(Prediction::Expected(e)) => match paths::expect(cluster, probe, front.clone()) {
            Ok(contract) if contract.outcome == e.outcome => Prediction::Expected(contract),
            _ => Prediction::Expected(Expectation { basis: Basis::Choice(Profile::KubeProxyIpvs), ..e }),
        },
        Some(open) => open,
        None => Prediction::Expected(paths::expect(cluster, probe, front)?),
    };
    Ok(persistence(probe, prediction))
}

/// kube-proxy's `UsesClusterEndpoints` (pkg/proxy/serviceport.go): a Local internal policy
/// still needs the Cluster set when the Service is reachable from outside.
fn uses_cluster_endpoints(svc: &Service, port: &ServicePort) -> bool {
    let node_port = port.node_port.is_some()
        && matches!(svc.service_type, ServiceType::NodePort | ServiceType::LoadBalancer);
    let externally_accessible =
        node_port || !svc.load_balancer_ips.is_empty() || !svc.external_ips.is_empty();
    svc.internal_traffic_policy == TrafficPolicy::Cluster || externally_accessible
}

/// internalTrafficPolicy Local on a node without local endpoints.
fn cluster_ip(
    cluster: &Cluster,
    probe: &Probe,
    svc: &Service,
    port: &ServicePort,
) -> Result<Option<Prediction>, String> {
    if svc.internal_traffic_policy != TrafficPolicy::Local || cluster_wide(port).is_empty() {
        return Ok(None);
    }
    let routed = cluster.routed_through(&probe.from, svc.cluster_ip());
    // No node to translate: the contract's path says why.
    let Some(client_node) = cluster.source_node(&probe.from).or(routed) else { return Ok(None) };
    if !local_to(port, &client_node.name).is_empty() {
        return Ok(None);
    }
    let name = format!(
        "ClusterIP {}, internalTrafficPolicy Local, no endpoint on {}",
        describe(svc, port),
        client_node.name
    );
    if !uses_cluster_endpoints(svc, port) {
        return Ok(Some(Prediction::Expected(rejected(format!(
            "{name}: IPVS mode's virtual server has no real servers (syncEndpoint has no Cluster set to \
             fall back to), and the kernel answers ICMP port unreachable (ip_vs_leave)"
        )))));
    }
    let fallback = cluster_wide_on(cluster, svc, port, &client_node.name);
    let masquerade = super::local::masquerades_cluster_ip(cluster, &probe.from, client_node);
    let seen = |e: &Endpoint| {
        if !masquerade && !is_hairpin(probe, e) {
            client_source(cluster, &probe.from)
        } else {
            masqueraded_toward(cluster, client_node, e)
        }
    };
    let because = format!(
        "{name}: IPVS mode falls back to the {} Cluster endpoints (syncEndpoint, kubernetes#97081)",
        fallback.len()
    );
    answered(probe, svc, &fallback, seen, client_node, because).map(|e| Some(Prediction::Expected(e)))
}

/// Node ports, external IPs and load-balancer IPs.
fn external(
    cluster: &Cluster,
    probe: &Probe,
    svc: &Service,
    port: &ServicePort,
    kind: ExternalKind,
    node: &Node,
) -> Result<Option<Prediction>, String> {
    let name = format!("{} of {} on {}", kind.describe(), describe(svc, port), node.name);
    let dst = cluster.target_address(&probe.to).expect("classified from this address").ip();
    // loadBalancerSourceRanges drop before any endpoint choice, as the contract's path says,
    // and on every node alike (so whichever node answered ARP for the address drops it).
    // A node sending to an address bound on itself sends from that address.
    let source = cluster.source_ip_to(&probe.from, dst).expect("validated source");
    if kind == ExternalKind::LoadBalancer && !source_ranges_admit(svc, source, node.ip()) {
        return Ok(None);
    }
    if let Some(reason) = arp_race(cluster, probe, kind, dst) {
        return Ok(Some(Prediction::Open(format!("{name}: {reason}"))));
    }
    if svc.external_traffic_policy != TrafficPolicy::Local || cluster_wide(port).is_empty() {
        return Ok(None);
    }
    let local = local_to(port, &node.name);
    let (chosen, which) = if local.is_empty() {
        // Externally accessible, so the Cluster set exists (`UsesClusterEndpoints`).
        let all = cluster_wide_on(cluster, svc, port, &node.name);
        let which = format!(
            "no endpoint on {}: IPVS mode falls back to the {} Cluster endpoints (syncEndpoint, kubernetes#97081)",
            node.name,
            all.len()
        );
        (all, which)
    } else {
        (local, "IPVS mode's virtual server holds the node's local endpoints, whoever sends".to_string())
    };
    let because = format!("{name}, externalTrafficPolicy Local, not masqueraded, {which}");
    let seen = |e: &Endpoint| seen_source(cluster, probe, kind, node, dst, e);
    let (returning, lost): (Vec<&Endpoint>, Vec<&Endpoint>) =
        chosen.iter().copied().partition(|e| reply_returns(cluster, node, e, &seen(e)));
    if lost.is_empty() {
        return answered(probe, svc, &returning, seen, node, because).map(|e| Some(Prediction::Expected(e)));
    }
    let names: Vec<String> = lost.iter().map(|e| e.pod.clone()).collect();
    if !returning.is_empty() {
        return Ok(Some(Prediction::Open(format!(
            "{because}: the replies of {} would bypass {} and those of the others would not; \
             IPVS mode's outcome then depends on the endpoint each attempt reaches",
            names.join(", "),
            node.name
        ))));
    }
    let because = format!("{because}; {}", why_unanswered(cluster, node, lost[0], &seen(lost[0])));
    Ok(Some(Prediction::Expected(Expectation::required(
        Outcome::Unanswered { backends: names, translated_by: node.name.clone() },
        because,
    ))))
}

/// Why an endpoint off the translating node never answers: its node drops a packet from an
/// address of its own (a node address, or one bound to every node's `kube-ipvs0`) as martian,
/// or the endpoint replies straight to the source it saw, past the node that translated.
fn why_unanswered(cluster: &Cluster, node: &Node, e: &Endpoint, seen: &SeenSource) -> String {
    let endpoint_node = node_of(cluster, e).and_then(|n| cluster.node(n));
    let (SeenSource::Client { addrs } | SeenSource::Masqueraded { addrs, .. }) = seen;
    let own = |n: &Node| {
        addrs.iter().any(|&ip| {
            n.node_network_ips().any(|a| a == ip)
                || cluster
                    .services
                    .iter()
                    .any(|s| s.external_ips.contains(&ip) || s.load_balancer_ips.contains(&ip))
        })
    };
    if addrs.contains(&e.ip) {
        return format!("{} receives it from its own address {}, which it drops as martian", e.pod, e.ip);
    }
    match endpoint_node {
        Some(n) if own(n) => format!(
            "the flow reaches {} (endpoint {}) from {seen}, an address of {} itself, which drops it as martian",
            n.name, e.pod, n.name
        ),
        _ => format!("{}'s reply to {seen} bypasses {}, so it never reaches the client", e.pod, node.name),
    }
}

/// The source an endpoint sees for externalTrafficPolicy Local traffic in IPVS mode: the
/// client's own, never masqueraded, except a pod reaching itself through its own node (the
/// `KUBE-LOOP-BACK` set holds only this node's endpoints). The node's own process sends to an
/// address bound to `kube-ipvs0` from that very address (a local route's source is itself).
fn seen_source(
    cluster: &Cluster,
    probe: &Probe,
    kind: ExternalKind,
    node: &Node,
    dst: IpAddr,
    e: &Endpoint,
) -> SeenSource {
    if is_hairpin(probe, e) && node_of(cluster, e) == Some(node.name.as_str()) {
        return masqueraded_toward(cluster, node, e);
    }
    let own_node = matches!(&probe.from, Source::Node(n) if *n == node.name);
    let bound = kind != ExternalKind::NodePort && !node.node_network_ips().any(|a| a == dst);
    if own_node && bound {
        return SeenSource::Client { addrs: vec![dst] };
    }
    client_source(cluster, &probe.from)
}

/// Whether an endpoint's reply passes back through the translating node, which undoes the
/// translation: it does from an endpoint on that node (its gateway), and toward an address of
/// that node or of one of its pods; otherwise it goes straight to the source it saw.
fn reply_returns(cluster: &Cluster, node: &Node, e: &Endpoint, seen: &SeenSource) -> bool {
    if node_of(cluster, e) == Some(node.name.as_str()) {
        return true;
    }
    let SeenSource::Client { addrs } = seen else { return true };
    addrs.iter().any(|&ip| {
        node.node_network_ips().any(|a| a == ip)
            || crate::model::bridge_address(&node.pod_cidr()) == ip
            || cluster.pod_by_ip(ip).is_some_and(|p| p.node == node.name)
    })
}

/// An outside host reaching an external or load-balancer IPv4 address on its own network asks
/// ARP for it, and every node answers (IPVS mode binds the address to each node's
/// `kube-ipvs0` and, without `--ipvs-strict-arp`, leaves arp_ignore at 0): the first answer
/// wins (measured: 6 µs apart on 6.12), so which node translates is a race.
fn arp_race(cluster: &Cluster, probe: &Probe, kind: ExternalKind, dst: IpAddr) -> Option<String> {
    let Source::External(host) = &probe.from else { return None };
    let on_link = cluster.node_network.contains(&dst) && dst.is_ipv4();
    (kind != ExternalKind::NodePort && on_link).then(|| {
        format!(
            "{dst} is on the node network, bound to every node's kube-ipvs0, so every node answers {host}'s \
             ARP request for it (no --ipvs-strict-arp): which node receives the traffic is a race, and a \
             node port on the same address and port shares its virtual server"
        )
    })
}

/// How long IPVS keeps a closed connection (the default timeouts of ip_vs_proto_tcp.c,
/// ip_vs_proto_udp.c and ip_vs_proto_sctp.c, which kube-proxy leaves alone unless its
/// `--ipvs-*-timeout` flags are set): TCP lingers in TIME_WAIT, UDP idles out, SCTP closes.
fn lingering(protocol: Protocol) -> Duration {
    match protocol {
        Protocol::Tcp => Duration::from_secs(120),
        Protocol::Udp => Duration::from_secs(300),
        Protocol::Sctp => Duration::from_secs(10),
    }
}

/// ClientIP affinity spaced past `timeoutSeconds`: the persistence template outlives the
/// timeout while a connection it scheduled lingers, so attempts closer together than that
/// stay on one backend; far enough apart they pick afresh; in between it is not judged.
fn persistence(probe: &Probe, prediction: Prediction) -> Prediction {
    let Prediction::Expected(e) = prediction else { return prediction };
    let Outcome::Answered { backends, spread: Spread::AffinityExpires { timeout }, translated_by } =
        e.outcome
    else {
        return Prediction::Expected(e);
    };
    let linger = lingering(probe.protocol);
    let interval = probe.interval.unwrap_or_default();
    let template = "IPVS mode's persistence template lasts while connections it scheduled do \
                    (ip_vs_conn_expire), and a closed";
    if interval < linger {
        return Prediction::Expected(Expectation {
            outcome: Outcome::Answered { backends, spread: Spread::Sticky, translated_by },
            because: format!(
                "{}: {template} {} connection lingers {}s, longer than the {}ms between attempts",
                e.because,
                probe.protocol,
                linger.as_secs(),
                interval.as_millis()
            ),
            basis: Basis::Choice(Profile::KubeProxyIpvs),
        });
    }
    if interval < linger + timeout + Duration::from_secs(1) {
        return Prediction::Open(format!(
            "{}: {template} {} connection lingers {}s, so whether affinity expires after {}ms depends on \
             when the kernel reaps it",
            e.because,
            probe.protocol,
            linger.as_secs(),
            interval.as_millis()
        ));
    }
    Prediction::Expected(Expectation {
        outcome: Outcome::Answered { backends, spread: Spread::AffinityExpires { timeout }, translated_by },
        ..e
    })
}

#[cfg(test)]
#[path = "ipvs_tests.rs"]
mod tests;
