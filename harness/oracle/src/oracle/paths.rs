//! The expectation for each kind of frontend: who may answer, what source they see, how the
//! attempts spread, and where the traffic is translated. One path for every profile: where an
//! implementation departs from the contract's path, the profile's [`Choices`] say so, and the
//! path takes the departure (kube-proxy's IPVS mode is the one profile with departures; see
//! `profile.rs` for each and its source).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use super::endpoints::{cluster_wide, cluster_wide_on, hints_zone, local_to, node_of, ready_local_count};
use super::frontend::{ExternalKind, Frontend};
use super::profile::Choices;
use super::{Basis, Expectation, Outcome, Prediction, SeenSource, Spread};
use crate::kubernetes::endpoints::PortPolicy;
use crate::kubernetes::source_ranges_admit;
use crate::model::{
    Cluster, Endpoint, Node, Pod, Probe, Profile, Protocol, Service, ServicePort, SessionAffinity, Source,
    TrafficPolicy, bridge_address,
};

/// Kernels age `recent` entries in jiffies; an interval this much past the affinity timeout is
/// safely past it.
const AFFINITY_MARGIN: Duration = Duration::from_millis(500);

/// What `profile` expects of a classified destination: the path with the profile's departures
/// taken. A departure that ends where the contract's path does keeps the contract as its
/// basis (and its reason); one that ends elsewhere is the profile's choice.
pub(super) fn predict(
    cluster: &Cluster,
    probe: &Probe,
    front: Frontend<'_>,
    profile: Profile,
) -> Result<Prediction, String> {
    let choices = Choices::of(profile);
    if choices == Choices::CONTRACT {
        return path(cluster, probe, front, choices);
    }
    let prediction = match path(cluster, probe, front.clone(), choices)? {
        Prediction::Expected(taken) => match path(cluster, probe, front, Choices::CONTRACT) {
            Ok(Prediction::Expected(contract)) if contract.outcome == taken.outcome => {
                Prediction::Expected(contract)
            }
            _ => Prediction::Expected(Expectation { basis: Basis::Choice(profile), ..taken }),
        },
        open => open,
    };
    Ok(match choices.affinity_outlives_connections {
        true => persistence(probe, prediction, profile),
        false => prediction,
    })
}

fn path(
    cluster: &Cluster,
    probe: &Probe,
    front: Frontend<'_>,
    choices: Choices,
) -> Result<Prediction, String> {
    let expected = match front {
        Frontend::ClusterIp { svc, port } => return cluster_ip(cluster, probe, svc, port, choices),
        Frontend::External { svc, port, kind, node } => {
            return external(cluster, probe, svc, port, kind, node, choices);
        }
        Frontend::HealthCheck { svc, node } => health_check(svc, node),
        Frontend::NodeItself { node, why } => {
            Expectation::required(Outcome::Closed { host: node.name.clone() }, why)
        }
        Frontend::RejectedByRule { why } => rejected(why),
        Frontend::PassesThrough { why } => Expectation::required(Outcome::Forwarded, why),
        Frontend::Pod(pod) => direct_to_pod(cluster, probe, pod),
        Frontend::Martian { node } => dropped(format!(
            "127.0.0.1 arriving at node {} from outside is martian: dropped by the kernel, or with \
             route_localnet by kube-proxy's KUBE-FIREWALL rule (CVE-2020-8558)",
            node.name
        )),
        Frontend::Nowhere { why } => dropped(why),
        Frontend::Chosen { frontend, by } => {
            return Ok(match path(cluster, probe, *frontend, choices)? {
                Prediction::Expected(e) => {
                    Prediction::Expected(Expectation { basis: Basis::Choice(by), ..e })
                }
                open => open,
            });
        }
    };
    Ok(Prediction::Expected(expected))
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
    choices: Choices,
) -> Result<Prediction, String> {
    let name = format!("ClusterIP {}", describe(svc, port));
    let expected = |e: Expectation| Ok(Prediction::Expected(e));
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
        return expected(rejected(format!("{name} has no endpoints")));
    }
    let zone_note = hints_note(cluster, svc, port, &client_node.name, choices);
    let (chosen, policy) = match svc.internal_traffic_policy {
        TrafficPolicy::Cluster => (
            cluster_wide_on(cluster, svc, port, &client_node.name, choices.hints_need_annotation),
            zone_note.as_str(),
        ),
        TrafficPolicy::Local => (local_to(port, &client_node.name), ", internalTrafficPolicy Local"),
    };
    let no_local = format!("{name}{policy}, no endpoint on {}", client_node.name);
    let (chosen, because) = match chosen.is_empty() {
        false => {
            let because = format!("{name}, {} usable endpoints{policy}", chosen.len());
            (chosen, because)
        }
        true if !choices.local_falls_back_to_cluster => return expected(dropped(no_local)),
        // kube-proxy's `UsesClusterEndpoints`, as the backends ask it.
        true if !PortPolicy::of(svc, port).uses_cluster_endpoints() => {
            return expected(rejected(format!(
                "{no_local}: IPVS mode's virtual server has no real servers (syncEndpoint has no Cluster set \
                 to fall back to), and the kernel answers ICMP port unreachable (ip_vs_leave)"
            )));
        }
        true => {
            let fallback =
                cluster_wide_on(cluster, svc, port, &client_node.name, choices.hints_need_annotation);
            let because = format!(
                "{no_local}: IPVS mode falls back to the {} Cluster endpoints (syncEndpoint, kubernetes#97081)",
                fallback.len()
            );
            (fallback, because)
        }
    };
    // Traffic the node's local-traffic detector counts as from its pods keeps its source.
    let masquerade = super::local::masquerades_cluster_ip(cluster, &probe.from, client_node);
    let seen = |e: &Endpoint| {
        if !masquerade && !is_hairpin(probe, e) {
            cluster_ip_client_source(cluster, &probe.from)
        } else {
            masqueraded_toward(cluster, &probe.from, client_node, e)
        }
    };
    // Without masquerade (no local-traffic detector), an outside host routed through a node
    // gets no answer from an endpoint on another node: its reply goes straight to the host.
    answered_where_replies_return(cluster, probe, svc, &chosen, seen, client_node, because, "the outcome")
}

/// The client's own address as an endpoint sees it behind a cluster IP nobody masqueraded: a
/// node's own process sends from the address its route to the service CIDR chooses, the
/// node-network one (never its pod-bridge address: that is what masquerade toward a local
/// endpoint would give, so accepting it would let a wrong masquerade pass).
fn cluster_ip_client_source(cluster: &Cluster, source: &Source) -> SeenSource {
    match source {
        Source::Node(n) => {
            SeenSource::Client { addrs: node_network_addresses(cluster.node(n).expect("validated source")) }
        }
        other => client_source(cluster, other),
    }
}

/// Node ports, external IPs and load-balancer IPs: the "external destinations" of a Service.
fn external(
    cluster: &Cluster,
    probe: &Probe,
    svc: &Service,
    port: &ServicePort,
    kind: ExternalKind,
    node: &Node,
    choices: Choices,
) -> Result<Prediction, String> {
    let name = format!("{} of {} on {}", kind.describe(), describe(svc, port), node.name);
    let dst = cluster.target_address(&probe.to).expect("classified from this address").ip();
    if kind == ExternalKind::LoadBalancer {
        // A node sending to an address bound on itself sends from that address. The ranges
        // drop before any endpoint choice, on every node alike.
        let source = cluster.source_ip_to(&probe.from, dst).expect("validated source");
        if !source_ranges_admit(svc, source, node.ip()) {
            let why = format!("{name}: source {source} is outside loadBalancerSourceRanges");
            return Ok(Prediction::Expected(dropped(why)));
        }
    }
    if choices.external_ips_on_every_node
        && let Some(reason) = arp_race(cluster, probe, kind, dst)
    {
        return Ok(Prediction::Open(format!("{name}: {reason}")));
    }
    let own_process = matches!(&probe.from, Source::Node(n) if *n == node.name);
    let bound_here = node.node_network_ips().any(|a| a == dst);
    if cluster_wide(port).is_empty() && own_process && kind != ExternalKind::NodePort && !bound_here {
        // kube-proxy rejects traffic to an external destination without endpoints in the
        // filter chain INPUT and FORWARD reach (iptables mode's KUBE-EXTERNAL-SERVICES), and
        // nftables mode in its output hook too: a node's own packet to an address not its own
        // leaves un-translated in one mode and is rejected, with the ICMP error delivered over
        // `lo`, in the other. Found by `packetproof explore`; stating each mode's choice is
        // left to do.
        return Ok(Prediction::Open(format!(
            "{name} has no endpoints: kube-proxy's iptables mode rejects that only in \
             KUBE-EXTERNAL-SERVICES (from INPUT and FORWARD), so the node's own packet leaves \
             un-translated; its nftables mode rejects it in the output hook"
        )));
    }
    if cluster_wide(port).is_empty() {
        return Ok(Prediction::Expected(rejected(format!("{name} has no endpoints"))));
    }
    if svc.external_traffic_policy == TrafficPolicy::Local && choices.external_local_for_every_sender {
        return local_for_every_sender(cluster, probe, svc, port, kind, node, dst, choices, name);
    }
    external_by_contract(cluster, probe, svc, port, kind, node, name, choices).map(Prediction::Expected)
}

/// externalTrafficPolicy Local where every sender is held to the node's endpoints and none is
/// masqueraded: an endpoint off the translating node then replies past it unless the client's
/// address routes back through it.
#[allow(clippy::too_many_arguments)]
fn local_for_every_sender(
    cluster: &Cluster,
    probe: &Probe,
    svc: &Service,
    port: &ServicePort,
    kind: ExternalKind,
    node: &Node,
    dst: IpAddr,
    choices: Choices,
    name: String,
) -> Result<Prediction, String> {
    let local = local_to(port, &node.name);
    let (chosen, which) = match local.is_empty() {
        false => {
            (local, "IPVS mode's virtual server holds the node's local endpoints, whoever sends".to_string())
        }
        true if !choices.local_falls_back_to_cluster => {
            let why = format!("{name}, externalTrafficPolicy Local, no endpoint on {}", node.name);
            return Ok(Prediction::Expected(dropped(why)));
        }
        true => {
            // Externally accessible, so the Cluster set exists (`UsesClusterEndpoints`).
            let all = cluster_wide_on(cluster, svc, port, &node.name, choices.hints_need_annotation);
            let which = format!(
                "no endpoint on {}: IPVS mode falls back to the {} Cluster endpoints (syncEndpoint, kubernetes#97081)",
                node.name,
                all.len()
            );
            (all, which)
        }
    };
    let because = format!("{name}, externalTrafficPolicy Local, not masqueraded, {which}");
    let seen = |e: &Endpoint| unmasqueraded_source(cluster, probe, kind, node, dst, e);
    answered_where_replies_return(cluster, probe, svc, &chosen, seen, node, because, "IPVS mode's outcome")
}

/// `chosen` answer where each one's reply passes back through `node`, which translated the
/// flow (`reply_returns`). An endpoint whose reply goes straight to the un-masqueraded client
/// instead leaves the client unanswered; when only some of `chosen` do, `whose` outcome
/// depends on the endpoint each attempt reaches, and nothing is judged.
#[allow(clippy::too_many_arguments)]
fn answered_where_replies_return(
    cluster: &Cluster,
    probe: &Probe,
    svc: &Service,
    chosen: &[&Endpoint],
    seen: impl Fn(&Endpoint) -> SeenSource,
    node: &Node,
    because: String,
    whose: &str,
) -> Result<Prediction, String> {
    let (returning, lost): (Vec<&Endpoint>, Vec<&Endpoint>) =
        chosen.iter().copied().partition(|e| reply_returns(cluster, node, e, &seen(e)));
    if lost.is_empty() {
        return answered(probe, svc, &returning, seen, node, because).map(Prediction::Expected);
    }
    let names: Vec<String> = lost.iter().map(|e| e.pod.clone()).collect();
    if !returning.is_empty() {
        return Ok(Prediction::Open(format!(
            "{because}: the replies of {} would bypass {} and those of the others would not; \
             {whose} then depends on the endpoint each attempt reaches",
            names.join(", "),
            node.name
        )));
    }
    let because = format!("{because}; {}", why_unanswered(cluster, node, lost[0], &seen(lost[0])));
    Ok(Prediction::Expected(Expectation::required(
        Outcome::Unanswered { backends: names, translated_by: node.name.clone() },
        because,
    )))
}

/// External destinations as the contract has them, once the source ranges admitted the
/// client and the Service has endpoints (topology hints as `choices` read them).
#[allow(clippy::too_many_arguments)]
fn external_by_contract(
    cluster: &Cluster,
    probe: &Probe,
    svc: &Service,
    port: &ServicePort,
    kind: ExternalKind,
    node: &Node,
    name: String,
    choices: Choices,
) -> Result<Expectation, String> {
    // Traffic not kept local goes to the Cluster set the receiving node chooses.
    let all = cluster_wide_on(cluster, svc, port, &node.name, choices.hints_need_annotation);
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
                masqueraded_toward(cluster, &probe.from, node, e)
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
            masqueraded_toward(cluster, &probe.from, node, e)
        }
    };
    let zone_note = hints_note(cluster, svc, port, &node.name, choices);
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
fn hints_note(cluster: &Cluster, svc: &Service, port: &ServicePort, node: &str, choices: Choices) -> String {
    hints_zone(cluster, svc, port, node, choices.hints_need_annotation)
        .map(|z| format!(", topology hints for zone {z}"))
        .unwrap_or_default()
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
        // All attempts on one backend by chance: k^(1-n); with several clients at once, each
        // client's on one: k^-(sum of n - 1). Too few and the check that affinity expired
        // could never fail.
        let needed = attempts_to_see_expiry(k);
        let clients = probe.clients.as_ref().map_or(1, |c| c.count);
        let expiries = clients.saturating_mul(probe.count.saturating_sub(1));
        if expiries < needed - 1 {
            let per_client = (needed - 1).div_ceil(clients) + 1;
            return Err(if clients > 1 {
                format!(
                    "count {} from {clients} clients is too small to see affinity expire over {k} backends: \
                     use at least {per_client}",
                    probe.count
                )
            } else {
                format!(
                    "count {} is too small to see affinity expire over {k} backends: use at least {needed}",
                    probe.count
                )
            });
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
/// Masquerade happens in POSTROUTING, which a packet delivered to `node` itself never crosses:
/// traffic from elsewhere translated to a host-network endpoint of `node` reaches it with the
/// client's own source (both modes and IPVS alike); only `node`'s own process, whose packets
/// leave through POSTROUTING onto `lo`, is masqueraded.
pub(super) fn masqueraded_toward(cluster: &Cluster, from: &Source, node: &Node, e: &Endpoint) -> SeenSource {
    let own_process = matches!(from, Source::Node(n) if *n == node.name);
    if !own_process && super::endpoints::host_network_node(cluster, e) == Some(node.name.as_str()) {
        return client_source(cluster, from);
    }
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
fn unmasqueraded_source(
    cluster: &Cluster,
    probe: &Probe,
    kind: ExternalKind,
    node: &Node,
    dst: IpAddr,
    e: &Endpoint,
) -> SeenSource {
    if is_hairpin(probe, e) && node_of(cluster, e) == Some(node.name.as_str()) {
        return masqueraded_toward(cluster, &probe.from, node, e);
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
fn persistence(probe: &Probe, prediction: Prediction, profile: Profile) -> Prediction {
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
            basis: Basis::Choice(profile),
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
