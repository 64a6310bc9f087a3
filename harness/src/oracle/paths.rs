//! The expectation for each kind of frontend: who may answer, what source they see, how the
//! attempts spread, and where the traffic is translated.

use std::collections::BTreeMap;
use std::time::Duration;

use super::endpoints::{cluster_wide, cluster_wide_on, hints_zone, local_to, ready_local_count};
use super::frontend::{ExternalKind, Frontend};
use super::{Basis, Expectation, Outcome, SeenSource, Spread};
use crate::kubernetes::source_ranges_admit;
use crate::model::{
    Cluster, Endpoint, Node, Pod, Probe, Service, ServicePort, SessionAffinity, Source, TrafficPolicy,
    bridge_address,
};

/// Kernels age `recent` entries in jiffies; an interval this much past the affinity timeout is
/// safely past it.
const AFFINITY_MARGIN: Duration = Duration::from_millis(500);

pub(super) fn expect(cluster: &Cluster, probe: &Probe, front: Frontend<'_>) -> Result<Expectation, String> {
    match front {
        Frontend::ClusterIp { svc, port } => cluster_ip(cluster, probe, svc, port),
        Frontend::External { svc, port, kind, node } => external(cluster, probe, svc, port, kind, node),
        Frontend::HealthCheck { svc, node } => Ok(health_check(svc, node)),
        Frontend::NodeItself { node, why } => {
            Ok(Expectation::required(Outcome::Closed { host: node.name.clone() }, why))
        }
        Frontend::RejectedByRule { why } => Ok(rejected(why)),
        Frontend::PassesThrough { why } => Ok(Expectation::required(Outcome::Forwarded, why)),
        Frontend::Pod(pod) => Ok(direct_to_pod(cluster, probe, pod)),
        Frontend::Martian { node } => Ok(dropped(format!(
            "127.0.0.1 arriving at node {} from outside is martian: dropped by the kernel, or with \
             route_localnet by kube-proxy's KUBE-FIREWALL rule (CVE-2020-8558)",
            node.name
        ))),
        Frontend::Nowhere { why } => Ok(dropped(why)),
        Frontend::Chosen { frontend, by } => {
            expect(cluster, probe, *frontend).map(|e| Expectation { basis: Basis::Choice(by), ..e })
        }
    }
}

pub(super) fn describe(svc: &Service, port: &ServicePort) -> String {
    if port.name.is_empty() {
        svc.namespaced_name()
    } else {
        format!("{}:{}", svc.namespaced_name(), port.name)
    }
}

fn cluster_ip(
    cluster: &Cluster,
    probe: &Probe,
    svc: &Service,
    port: &ServicePort,
) -> Result<Expectation, String> {
    let name = format!("ClusterIP {}", describe(svc, port));
    // An external host reaches a cluster IP only through a node its routes name, which
    // handles it as any traffic from outside the pod CIDR.
    let routed = cluster.routed_through(&probe.from, svc.cluster_ip());
    let Some(client_node) = cluster.source_node(&probe.from).or(routed) else {
        return Err(format!(
            "{} has no route to cluster IPs: only pods, nodes and external hosts with a route \
             through a node (routes: [{{to: SERVICE_CIDR, via: NODE}}]) can reach {name}",
            probe.from
        ));
    };
    let all = cluster_wide(port);
    if all.is_empty() {
        return Ok(rejected(format!("{name} has no endpoints")));
    }
    let zone_note = hints_note(cluster, svc, port, &client_node.name);
    let (chosen, policy) = match svc.internal_traffic_policy {
        TrafficPolicy::Cluster => {
            (cluster_wide_on(cluster, svc, port, &client_node.name), zone_note.as_str())
        }
        TrafficPolicy::Local => (local_to(port, &client_node.name), ", internalTrafficPolicy Local"),
    };
    if chosen.is_empty() {
        return Ok(dropped(format!("{name}{policy}, no endpoint on {}", client_node.name)));
    }
    // Traffic the node's local-traffic detector counts as from its pods keeps its source.
    let masquerade = super::local::masquerades_cluster_ip(cluster, &probe.from, client_node);
    let seen = |e: &Endpoint| {
        if !masquerade && !is_hairpin(probe, e) {
            client_source(cluster, &probe.from)
        } else {
            masqueraded_toward(cluster, client_node, e)
        }
    };
    answered(
        probe,
        svc,
        &chosen,
        seen,
        client_node,
        format!("{name}, {} usable endpoints{policy}", chosen.len()),
    )
}

/// Node ports, external IPs and load-balancer IPs: the "external destinations" of a Service.
fn external(
    cluster: &Cluster,
    probe: &Probe,
    svc: &Service,
    port: &ServicePort,
    kind: ExternalKind,
    node: &Node,
) -> Result<Expectation, String> {
    let name = format!("{} of {} on {}", kind.describe(), describe(svc, port), node.name);
    if kind == ExternalKind::LoadBalancer {
        // A node sending to an address bound on itself sends from that address.
        let dst = cluster.target_address(&probe.to).expect("classified from this address").ip();
        let source = cluster.source_ip_to(&probe.from, dst).expect("validated source");
        if !source_ranges_admit(svc, source, node.ip()) {
            return Ok(dropped(format!("{name}: source {source} is outside loadBalancerSourceRanges")));
        }
    }
    if cluster_wide(port).is_empty() {
        return Ok(rejected(format!("{name} has no endpoints")));
    }
    // Traffic not kept local goes to the Cluster set the receiving node chooses.
    let all = cluster_wide_on(cluster, svc, port, &node.name);
    // With policy Local, only traffic from outside is kept local: what the receiving node's
    // local-traffic detector counts as pod traffic (by default: pods anywhere), and the
    // node's own processes, are short-circuited to every endpoint.
    let short_circuit = super::local::is_local(cluster, &probe.from, node);
    undefined_local_node_port(cluster, probe, svc, kind, node, &all, short_circuit)?;
    let from_receiving_node = matches!(&probe.from, Source::Node(n) if *n == node.name);
    if svc.external_traffic_policy == TrafficPolicy::Local && !short_circuit && !from_receiving_node {
        let local = local_to(port, &node.name);
        let detected = detection_note(cluster, probe);
        if local.is_empty() {
            return Ok(dropped(format!(
                "{name}, externalTrafficPolicy Local, no endpoint on {}{detected}",
                node.name
            )));
        }
        let because =
            format!("{name}, externalTrafficPolicy Local, {} local endpoints{detected}", local.len());
        // A pod of this node that is an endpoint itself is masqueraded by its endpoint's
        // hairpin rule.
        let seen = |e: &Endpoint| {
            if is_hairpin(probe, e) {
                masqueraded_toward(cluster, node, e)
            } else {
                client_source(cluster, &probe.from)
            }
        };
        return answered(probe, svc, &local, seen, node, because);
    }
    let keep_pod_source = svc.external_traffic_policy == TrafficPolicy::Local && short_circuit;
    let seen = |e: &Endpoint| {
        if keep_pod_source && !is_hairpin(probe, e) {
            client_source(cluster, &probe.from)
        } else {
            masqueraded_toward(cluster, node, e)
        }
    };
    let zone_note = hints_note(cluster, svc, port, &node.name);
    answered(probe, svc, &all, seen, node, format!("{name}, {} usable endpoints{zone_note}", all.len()))
}

/// `, detectLocalMode M does not count pod P as local there` when a pod's traffic is held to
/// a Local policy because the node's detector does not count it as pod traffic.
fn detection_note(cluster: &Cluster, probe: &Probe) -> String {
    match (&probe.from, &cluster.proxy.detect_local) {
        (Source::Pod(pod), mode) => {
            format!(", not counted as pod traffic there by detectLocalMode {mode} (pod {pod})")
        }
        _ => String::new(),
    }
}

/// `, topology hints for zone Z` when hints narrow the Cluster set on `node`.
fn hints_note(cluster: &Cluster, svc: &Service, port: &ServicePort, node: &str) -> String {
    hints_zone(cluster, svc, port, node).map(|z| format!(", topology hints for zone {z}")).unwrap_or_default()
}

/// A pod reaching another node's node port of a Local-policy Service is short-circuited there
/// without masquerade, so an endpoint on any node but that one replies straight to the pod
/// and the connection breaks (kubernetes/kubernetes#74383). Kubernetes intends it to work;
/// kube-proxy does not make it work. Until profiles say which to hold a proxy to, the harness
/// refuses to guess.
fn undefined_local_node_port(
    cluster: &Cluster,
    probe: &Probe,
    svc: &Service,
    kind: ExternalKind,
    node: &Node,
    endpoints: &[&Endpoint],
    short_circuit: bool,
) -> Result<(), String> {
    let Source::Pod(pod) = &probe.from else { return Ok(()) };
    let pod_node = cluster.pod(pod).map(|p| p.node.as_str());
    // The pod's own endpoint is hairpin-masqueraded, so its reply does come back through the node.
    let off_node = endpoints
        .iter()
        .any(|e| e.pod != *pod && super::endpoints::node_of(cluster, e) != Some(node.name.as_str()));
    // Only where the receiving node counts the pod's traffic as local (not with
    // detectLocalMode NodeCIDR, or an interface mode: there it is held to the node's own
    // endpoints, which reply through it).
    if kind == ExternalKind::NodePort
        && svc.external_traffic_policy == TrafficPolicy::Local
        && short_circuit
        && pod_node != Some(node.name.as_str())
        && off_node
    {
        return Err(format!(
            "no defined outcome: pod {pod} reaching node {}'s node port of {} (externalTrafficPolicy Local) \
             is not masqueraded there, so endpoints off {} reply past it (kubernetes/kubernetes#74383); \
             probe the cluster IP or the node port on the pod's own node",
            node.name,
            svc.namespaced_name(),
            node.name
        ));
    }
    Ok(())
}

fn health_check(svc: &Service, node: &Node) -> Expectation {
    let local = ready_local_count(&svc.ports, &node.name);
    let status = if local > 0 { 200 } else { 503 };
    Expectation::required(
        Outcome::Http { status, local_endpoints: local },
        format!("health check of {} on {}: {local} ready local endpoints", svc.namespaced_name(), node.name),
    )
}

fn direct_to_pod(cluster: &Cluster, probe: &Probe, pod: &Pod) -> Expectation {
    let dst = cluster.target_address(&probe.to).expect("classified from this address");
    let serves = pod.ports.iter().any(|p| p.port == dst.port() && p.protocol == probe.protocol);
    if !serves {
        return Expectation::required(
            Outcome::Closed { host: pod.name.clone() },
            format!("pod {} does not listen on {}/{}", pod.name, dst.port(), probe.protocol),
        );
    }
    let backends = BTreeMap::from([(pod.name.clone(), client_source(cluster, &probe.from))]);
    Expectation::required(
        Outcome::Answered { backends, spread: Spread::Uniform, translated_by: None },
        format!("directly to pod {}", pod.name),
    )
}

pub(super) fn answered(
    probe: &Probe,
    svc: &Service,
    chosen: &[&Endpoint],
    seen: impl Fn(&Endpoint) -> SeenSource,
    translated_by: &Node,
    because: String,
) -> Result<Expectation, String> {
    let backends = chosen.iter().map(|e| (e.pod.clone(), seen(e))).collect();
    let spread = spread(svc, probe)?;
    if let (Spread::AffinityExpires { .. }, k @ 2..) = (spread, chosen.len()) {
        // All attempts on one backend by chance: k^(1-n). Too few attempts and the check that
        // affinity expired could never fail.
        let needed = attempts_to_see_expiry(k);
        if probe.count < needed {
            return Err(format!(
                "count {} is too small to see affinity expire over {k} backends: use at least {needed}",
                probe.count
            ));
        }
    }
    let because = match spread {
        Spread::Uniform => because,
        Spread::Sticky => format!("{because}, sessionAffinity ClientIP"),
        Spread::AffinityExpires { timeout } => {
            format!(
                "{because}, sessionAffinity ClientIP expiring after {}s between attempts",
                timeout.as_secs()
            )
        }
    };
    Ok(Expectation::required(
        Outcome::Answered { backends, spread, translated_by: Some(translated_by.name.clone()) },
        because,
    ))
}

/// The fewest attempts `n` with `k^(1-n)` ≤ the verdict's false-failure rate.
fn attempts_to_see_expiry(k: usize) -> u32 {
    let rate = super::FALSE_FAILURE_RATE;
    (1..).find(|&n| (k as f64).powi(1 - n as i32) <= rate).unwrap_or(u32::MAX)
}

fn spread(svc: &Service, probe: &Probe) -> Result<Spread, String> {
    let SessionAffinity::ClientIp { timeout_seconds } = svc.session_affinity else {
        return Ok(Spread::Uniform);
    };
    let timeout = Duration::from_secs(timeout_seconds.into());
    match probe.interval {
        Some(interval) if interval >= timeout + AFFINITY_MARGIN => Ok(Spread::AffinityExpires { timeout }),
        Some(interval) if interval > timeout => Err(format!(
            "interval {interval:?} is too close to the affinity timeout {timeout:?} to say whether it expired: \
             make it at least {:?}",
            timeout + AFFINITY_MARGIN
        )),
        _ => Ok(Spread::Sticky),
    }
}

pub(super) fn is_hairpin(probe: &Probe, e: &Endpoint) -> bool {
    matches!(&probe.from, Source::Pod(p) if *p == e.pod)
}

pub(super) fn rejected(because: String) -> Expectation {
    Expectation::required(Outcome::Rejected, because)
}

fn dropped(because: String) -> Expectation {
    Expectation::required(Outcome::Dropped, because)
}

/// The client's own addresses: a node may send from its node address or its bridge address,
/// depending on the route to the backend.
pub(super) fn client_source(cluster: &Cluster, source: &Source) -> SeenSource {
    match source {
        Source::Node(n) => {
            SeenSource::Client { addrs: node_addresses(cluster.node(n).expect("validated source")) }
        }
        other => SeenSource::Client { addrs: vec![cluster.source_ip(other).expect("validated source")] },
    }
}

/// Masquerade takes the address of the interface toward the backend: `node`'s pod-bridge
/// gateway for an endpoint on `node`, its node-network address for one elsewhere. So a node's
/// own process reaching a local endpoint through a cluster IP arrives from the bridge address
/// when masqueraded, and from the node IP (the source its route to the cluster IP chose) when not.
pub(super) fn masqueraded_toward(cluster: &Cluster, node: &Node, e: &Endpoint) -> SeenSource {
    let addrs = match super::endpoints::node_of(cluster, e) {
        // The node's own address: masquerade on `lo` takes any of the node's addresses.
        _ if super::endpoints::host_network_node(cluster, e) == Some(node.name.as_str()) => {
            node_addresses(node)
        }
        Some(n) if n == node.name => vec![bridge_address(&node.pod_cidr())],
        Some(_) => node_network_addresses(node),
        None => node_addresses(node),
    };
    SeenSource::Masqueraded { node: node.name.clone(), addrs }
}

/// Every address a node's own process may send from: its node-network address, or its
/// pod-bridge gateway toward a pod on the same node. IPv4 takes the interface's primary
/// address; IPv6 chooses by source address selection (RFC 6724: the longest prefix in common
/// with the destination wins), which may pick any of the node's addresses on the node network.
fn node_addresses(node: &Node) -> Vec<std::net::IpAddr> {
    let mut addrs = node_network_addresses(node);
    addrs.push(bridge_address(&node.pod_cidr()));
    addrs
}

/// The node's address on the node network: the primary for IPv4, any of them for IPv6.
fn node_network_addresses(node: &Node) -> Vec<std::net::IpAddr> {
    let mut addrs = vec![node.ip()];
    if node.ip().is_ipv6() {
        addrs.extend(&node.secondary_ips);
    }
    addrs
}
