//! Live behaviour: what must become of a connection held across changes and restarts.
//!
//! A held connection is already established: no rule for new connections decides its fate,
//! only its conntrack entry and what the proxy does to established traffic. So a check goes
//! on to the backend that answered the connection, seeing the same source, whenever:
//! - the change leaves that backend serving the Service port (an unrelated Service changed,
//!   the proxy restarted, an endpoint turned terminating): required by Kubernetes
//!   (KEP-1669: terminating endpoints keep their established connections);
//! - the backend left the Service (removed from its EndpointSlice, not ready, the Service
//!   deleted or scaled to zero): Kubernetes leaves it open; kube-proxy in both modes lets the
//!   connection go on while the pod lives, since it clears conntrack entries of UDP only
//!   (pkg/proxy/conntrack/cleanup.go, v1.30);
//! - an out-of-window segment of the connection crossed the node: kube-proxy's iptables mode
//!   drops conntrack-invalid packets (`KUBE-FORWARD`, pkg/proxy/iptables/proxier.go), so the
//!   client never answers it with a RST that kills the connection (kubernetes/kubernetes#74839);
//!   its nftables mode (v1.30) has no such rule (kubernetes/kubernetes#122663), and Kubernetes
//!   leaves it open.

use std::collections::BTreeMap;

use crate::model::{Cluster, Implementation, Life, Probe, Source, Target};

use super::{Basis, Expectation, Outcome, Prediction, Profile, SeenSource, Spread};

/// What `profile` expects of `check` (a `held` check), given the opener's expectation (made
/// for the state the connection was opened in) and the state at the check.
pub fn predict_held(
    opened: &Expectation,
    now: &Cluster,
    check: &Probe,
    profile: Profile,
) -> Result<Prediction, String> {
    let Life::Held { opener, out_of_window } = &check.life else {
        return Err(format!("probe {} checks no held connection", check.name));
    };
    let Outcome::Answered { backends, translated_by, .. } = &opened.outcome else {
        return Err(format!(
            "probe {opener} is not answered ({}), so it holds no connection to check",
            opened.outcome
        ));
    };
    let outcome = Outcome::Answered {
        backends: backends.clone(),
        spread: Spread::Sticky,
        translated_by: translated_by.clone(),
    };
    let gone: Vec<&str> =
        backends.keys().map(String::as_str).filter(|pod| !still_serving(now, &check.to, pod)).collect();
    if *out_of_window && let Some(node) = answered_to_own_node(now, check, backends) {
        return Ok(Prediction::Open(format!(
            "the out-of-window segment is addressed to {node}, the backend's own node, so that node's stack \
             takes it (INPUT, where no proxy rule drops conntrack-invalid packets) and may reset the connection"
        )));
    }
    if *out_of_window {
        return Ok(match profile.implementation {
            Implementation::KubeProxyIptables => Prediction::Expected(Expectation {
                outcome,
                because: format!(
                    "connection of {opener}, after an out-of-window segment: conntrack-invalid packets are \
                     dropped, so it cannot be reset"
                ),
                basis: Basis::Choice(profile),
            }),
            Implementation::KubeProxyIpvs => Prediction::Open(
                "an out-of-window segment may reset the connection: IPVS mode does not drop \
                 conntrack-invalid packets (no such rule in pkg/proxy/ipvs/proxier.go)"
                    .into(),
            ),
            Implementation::KubeProxyNftables => Prediction::Open(
                "an out-of-window segment may reset the connection: nftables mode does not drop \
                 conntrack-invalid packets (kubernetes/kubernetes#122663)"
                    .into(),
            ),
            Implementation::Kubernetes => {
                Prediction::Open("Kubernetes does not say what an out-of-window segment does".into())
            }
        });
    }
    if gone.is_empty() {
        return Ok(Prediction::Expected(Expectation::required(
            outcome,
            format!("connection of {opener}, still open: its backend still serves the Service"),
        )));
    }
    let because = format!(
        "connection of {opener}, still open: {} left the Service, and TCP conntrack entries are kept",
        gone.join(", ")
    );
    Ok(match profile.implementation {
        Implementation::Kubernetes => Prediction::Open(format!(
            "Kubernetes does not say whether an established connection to a removed endpoint ({}) goes on",
            gone.join(", ")
        )),
        _ => Prediction::Expected(Expectation { outcome, because, basis: Basis::Choice(profile) }),
    })
}

/// The node of a backend whose connection came from that node itself (masqueraded there, or a
/// process of the node): its answers, and a segment made to look like one, go to the node's own
/// stack rather than through its forwarding path (found by `packetproof explore`: a pod's
/// hairpin connection, masqueraded to its node's bridge address).
fn answered_to_own_node(
    now: &Cluster,
    check: &Probe,
    backends: &std::collections::BTreeMap<String, SeenSource>,
) -> Option<String> {
    backends.iter().find_map(|(pod, seen)| {
        let node = now.pod(pod).map(|p| p.node.clone()).or_else(|| now.node(pod).map(|n| n.name.clone()))?;
        let local = match seen {
            SeenSource::Masqueraded { node: by, .. } => *by == node,
            SeenSource::Client { .. } => matches!(&check.from, Source::Node(n) if *n == node),
        };
        local.then_some(node)
    })
}

/// What came between a stream's previous phase and this one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The proxy synced the new state, knowing the one before.
    Sync,
    /// The proxy was stopped and started again: it knows nothing of the state before.
    Restart,
}

/// A UDP stream's expectation in one phase, and which of its backends served then.
#[derive(Debug, Clone)]
pub struct StreamPhase {
    expected: Expectation,
    serving: Vec<String>,
}

impl StreamPhase {
    /// `expected` of `probe` in the phase whose state is `cluster`.
    pub fn of(expected: &Expectation, cluster: &Cluster, probe: &Probe) -> StreamPhase {
        let serving = match &expected.outcome {
            Outcome::Answered { backends, .. } => {
                backends.keys().filter(|pod| still_serving(cluster, &probe.to, pod)).cloned().collect()
            }
            _ => Vec::new(),
        };
        StreamPhase { expected: expected.clone(), serving }
    }
}

/// What a stream's phase comes to: its prediction, and when that is not judged though the
/// stream's entry is known to stay (on a backend that is no endpoint of the port any more),
/// what it carries to the next phase: a stream not judged in one phase may still be held to
/// where it stayed in the next (found by `packetproof explore --seed 26`: a stream kept by a
/// restart onto a port with no endpoint, then judged as a fresh flow one sync later).
#[derive(Debug, Clone)]
pub struct StreamPrediction {
    pub prediction: Prediction,
    pub carried: Option<StreamPhase>,
}

impl From<Prediction> for StreamPrediction {
    fn from(prediction: Prediction) -> StreamPrediction {
        StreamPrediction { prediction, carried: None }
    }
}

/// What `profile` expects of a UDP stream (a probe keeping its source port) in a later phase,
/// given what the same stream was expected to do in the phase before and what a fresh flow
/// would do now. Its conntrack entry outlives the change unless a backend it may be on
/// stopped serving: kube-proxy deletes only the entries of endpoints that served and no longer
/// do (pkg/proxy/endpoints.go `detectStaleConntrackEntries`: "If the old endpoint wasn't
/// Serving, then there can't be stale conntrack entries"), also across a restart, so the
/// stream stays where it was; a stream that may be on either kind is allowed both. An endpoint
/// published ready while its pod is not (`publishNotReadyAddresses`) never served, so its
/// entries are never deleted (found by `packetproof explore --seed 36`: kube-proxy v1.31.14 to
/// v1.36.3 and the built-in proxies alike). Kubernetes says nothing of it.
pub fn predict_stream(
    previous: &StreamPhase,
    now: &Cluster,
    probe: &Probe,
    fresh: Prediction,
    change: Change,
    profile: Profile,
) -> StreamPrediction {
    let Outcome::Answered { backends: before, translated_by, .. } = &previous.expected.outcome else {
        return fresh.into();
    };
    // A fresh flow now dropped or refused (a traffic policy or source range that leaves this
    // client out) is decided for new flows only: the proxies' drops and rejects match new
    // connections (found by `packetproof explore`: `internalTrafficPolicy: Local` set while the
    // stream ran), so the stream stays while its backend serves.
    let fresh_backends = match &fresh {
        Prediction::Expected(Expectation { outcome: Outcome::Answered { backends, .. }, .. }) => {
            Some(backends)
        }
        _ => None,
    };
    let unchanged = fresh_backends.is_some_and(|fresh| before.keys().eq(fresh.keys()));
    if unchanged {
        return fresh.into();
    }
    // The stream is on one of `before`, whichever its first attempt drew: one that stopped
    // serving loses its entry (the stream then goes where a fresh flow goes), one that still
    // serves, or never served, keeps it (found by `packetproof explore --seed 13`: a stream on
    // an endpoint turned terminating stayed, with kube-proxy and the built-in proxies alike).
    // A restarted proxy knows nothing of what served before, and deletes no entry of a port
    // with no serving endpoint: kube-proxy v1.31 deletes nothing at its first sync, and the
    // reconciler of v1.32 on skips such a port (`CleanStaleEntries`,
    // pkg/proxy/conntrack/cleanup.go; found by `packetproof explore --seed 13`).
    let unknowable = change == Change::Restart && !port_serves(now, &probe.to);
    let stopped: Vec<&String> =
        previous.serving.iter().filter(|pod| !unknowable && !still_serving(now, &probe.to, pod)).collect();
    let kept: BTreeMap<String, SeenSource> = before
        .iter()
        .filter(|(pod, _)| !stopped.contains(pod))
        .map(|(p, s)| (p.clone(), s.clone()))
        .collect();
    if kept.is_empty() {
        return fresh.into();
    }
    let names = kept.keys().map(String::as_str).collect::<Vec<_>>().join("|");
    // The witnesses find a backend's address among the port's endpoints now.
    let gone = |pod: &String| port_endpoints(now, &probe.to).is_none_or(|e| !e.iter().any(|e| e.pod == *pod));
    if profile.implementation != Implementation::KubeProxyIpvs && kept.keys().any(gone) {
        let why = if unknowable {
            "a proxy restarted onto a port with no serving endpoint deletes none of its entries"
        } else {
            "no sync since deleted its entry (it never served, or a restart kept it)"
        };
        let open = Prediction::Open(format!(
            "{why}, so a UDP flow stays on {names}; the harness cannot yet check the witnesses of a backend \
             that is no endpoint of the port any more"
        ));
        // Where it stays, for the next phase: no backend of it serves now, so only a restart
        // (or nothing) can come next, never a deletion of its entry.
        let stays = Expectation {
            outcome: Outcome::Answered {
                backends: kept,
                spread: Spread::Sticky,
                translated_by: translated_by.clone(),
            },
            because: format!("a UDP flow from a kept source port stays on {names}"),
            basis: Basis::Choice(profile),
        };
        let carried = StreamPhase::of(&stays, now, probe);
        return StreamPrediction { prediction: open, carried: Some(carried) };
    }
    let prediction = match profile.implementation {
        Implementation::Kubernetes => Prediction::Open(format!(
            "Kubernetes does not say whether a UDP flow keeps its endpoint ({names}) once new flows go elsewhere"
        )),
        // IPVS mode deletes a UDP real server as soon as new flows no longer go to it
        // (`deleteRsFunc`, pkg/proxy/ipvs/graceful_termination.go), and with
        // `expire_nodest_conn` the flow's next packet is scheduled afresh.
        Implementation::KubeProxyIpvs => fresh,
        _ if stopped.is_empty() => Prediction::Expected(Expectation {
            outcome: Outcome::Answered {
                backends: kept,
                spread: Spread::Sticky,
                translated_by: translated_by.clone(),
            },
            because: if unknowable {
                format!(
                    "a UDP flow from a kept source port: a proxy restarted onto a port with no serving endpoint \
                     deletes none of its entries, so it stays on {names}"
                )
            } else {
                format!(
                    "a UDP flow from a kept source port: its conntrack entry stays while {names} serves, or if \
                     it never served"
                )
            },
            basis: Basis::Choice(profile),
        }),
        _ => kept_or_moved(kept, translated_by, &stopped, fresh, profile),
    };
    prediction.into()
}

/// A stream on one of `kept` (still serving, or never served) stays there; one on a backend
/// of `stopped` goes where `fresh` says. Which it is, its first attempt drew at random, so the
/// expectation allows both: any of `kept` as before, or any backend of a fresh flow. When a
/// fresh flow is not answered, or a backend would be seen differently either way, nothing is
/// judged.
fn kept_or_moved(
    kept: BTreeMap<String, SeenSource>,
    translated_by: &Option<String>,
    stopped: &[&String],
    fresh: Prediction,
    profile: Profile,
) -> Prediction {
    let names =
        |pods: &mut dyn Iterator<Item = &String>| pods.map(String::as_str).collect::<Vec<_>>().join("|");
    let (kept_names, stopped_names) = (names(&mut kept.keys()), names(&mut stopped.iter().copied()));
    let open = |why: &str| {
        Prediction::Open(format!(
            "a UDP flow from a kept source port stays on {kept_names} but follows new flows off {stopped_names}, \
             and {why}"
        ))
    };
    let Prediction::Expected(Expectation {
        outcome: Outcome::Answered { backends: moved, translated_by: moved_by, .. },
        ..
    }) = &fresh
    else {
        return open("a new flow is not answered now");
    };
    if moved_by != translated_by {
        return open("a new flow is translated by another node");
    }
    let mut backends = kept;
    for (pod, seen) in moved {
        if backends.get(pod).is_some_and(|was| was != seen) {
            return open(&format!("{pod} would see another source either way"));
        }
        backends.insert(pod.clone(), seen.clone());
    }
    Prediction::Expected(Expectation {
        outcome: Outcome::Answered { backends, spread: Spread::Sticky, translated_by: translated_by.clone() },
        because: format!(
            "a UDP flow from a kept source port: its conntrack entry stays on {kept_names}, which still serves or \
             never served, but not on {stopped_names}, which stopped serving: then it goes where a new flow goes"
        ),
        basis: Basis::Choice(profile),
    })
}

/// A UDP stream's attempts all leave from one source port, so they are one conntrack flow
/// (and one IPVS connection): once a backend is chosen, every attempt goes to it while the
/// entry lives. So attempts a fresh flow would spread are all on one backend, and attempts
/// spaced past an affinity timeout say nothing of the affinity.
pub fn one_flow(prediction: Prediction) -> Prediction {
    let Prediction::Expected(e) = prediction else { return prediction };
    match e.outcome {
        Outcome::Answered { backends, spread: Spread::Uniform, translated_by } => Prediction::Expected(Expectation {
            outcome: Outcome::Answered { backends, spread: Spread::Sticky, translated_by },
            because: format!("{}, every attempt one conntrack flow from a kept source port", e.because),
            ..e
        }),
        Outcome::Answered { spread: Spread::AffinityExpires { .. }, .. } => Prediction::Open(
            "a UDP flow from a kept source port stays on its conntrack entry, which may outlive the affinity \
             timeout"
                .into(),
        ),
        _ => Prediction::Expected(e),
    }
}

/// The endpoints of the Service port `target` names in `cluster`; `None` for a target that
/// names no Service port, or one the state no longer has.
fn port_endpoints<'c>(cluster: &'c Cluster, target: &Target) -> Option<&'c [crate::model::Endpoint]> {
    let (service, port) = match target {
        Target::ClusterIp { service, port }
        | Target::NodePort { service, port, .. }
        | Target::ExternalIp { service, port, .. }
        | Target::LoadBalancer { service, port, .. } => (service, port),
        _ => return None,
    };
    let port = cluster.service(service)?.ports.iter().find(|p| p.name == *port)?;
    Some(&port.endpoints)
}

/// Whether the Service port `target` names has a serving endpoint in `cluster` (a target that
/// names no Service port: whether it is served is not the proxy's to forget).
fn port_serves(cluster: &Cluster, target: &Target) -> bool {
    match target {
        Target::ClusterIp { .. }
        | Target::NodePort { .. }
        | Target::ExternalIp { .. }
        | Target::LoadBalancer { .. } => {
            port_endpoints(cluster, target).is_some_and(|e| e.iter().any(|e| e.serving))
        }
        _ => true,
    }
}

/// Whether `pod` still serves the Service port `target` names in `cluster`.
fn still_serving(cluster: &Cluster, target: &Target, pod: &str) -> bool {
    let (service, port) = match target {
        Target::ClusterIp { service, port }
        | Target::NodePort { service, port, .. }
        | Target::ExternalIp { service, port, .. }
        | Target::LoadBalancer { service, port, .. } => (service, port),
        // A raw address: a Service's frontend serves while the pod backs it; an address of no
        // Service that was one (a deleted Service's cluster IP) serves nothing; straight to a
        // pod, nothing a Service change can take away.
        Target::Address(a) => {
            let frontend =
                cluster.services.iter().flat_map(|s| s.ports.iter().map(move |p| (s, p))).find(|(s, p)| {
                    let ip = a.ip();
                    let at = s.cluster_ips.iter().any(|c| *c == ip)
                        || s.external_ips.contains(&ip)
                        || s.load_balancer_ips.contains(&ip);
                    (at && p.port == a.port()) || p.node_port == Some(a.port())
                });
            return match frontend {
                Some((_, p)) => p.endpoints.iter().any(|e| e.pod == pod && e.serving),
                None => cluster.pods.iter().any(|p| p.ips.iter().any(|ip| *ip == a.ip())),
            };
        }
        Target::HealthCheck { .. } | Target::Localhost { .. } => return true,
    };
    cluster
        .service(service)
        .and_then(|s| s.ports.iter().find(|p| p.name == *port))
        .is_some_and(|p| p.endpoints.iter().any(|e| e.pod == pod && e.serving))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{
        Endpoint, PerFamily, Protocol, Service, ServicePort, ServiceType, SessionAffinity, Source,
        TrafficPolicy,
    };
    use crate::oracle::SeenSource;

    fn cluster(endpoints: &[(&str, bool)]) -> Cluster {
        let endpoints = endpoints
            .iter()
            .enumerate()
            .map(|(i, (pod, serving))| Endpoint {
                ip: format!("10.244.1.{}", 10 + i).parse().unwrap(),
                port: 8080,
                ready: *serving,
                serving: *serving,
                terminating: false,
                node: Some("node-a".into()),
                pod: pod.to_string(),
                zone_hints: vec![],
            })
            .collect();
        Cluster::example(vec![Service {
            namespace: "default".into(),
            name: "web".into(),
            service_type: ServiceType::ClusterIp,
            cluster_ips: PerFamily::single("10.96.0.10".parse().unwrap()),
            external_traffic_policy: TrafficPolicy::Cluster,
            internal_traffic_policy: TrafficPolicy::Cluster,
            ports: vec![ServicePort {
                name: "http".into(),
                protocol: Protocol::Tcp,
                port: 80,
                node_port: None,
                endpoints,
            }],
            external_ips: vec![],
            load_balancer_ips: vec![],
            load_balancer_source_ranges: vec![],
            health_check_node_port: None,
            session_affinity: SessionAffinity::None,
            hints_annotation: None,
            proxied_load_balancer_ips: vec![],
        }])
    }

    fn check(out_of_window: bool) -> Probe {
        let to = Target::ClusterIp { service: "web".into(), port: "http".into() };
        Probe {
            life: Life::Held { opener: "session".into(), out_of_window },
            ..Probe::example(Source::Pod("client".into()), to)
        }
    }

    fn opened() -> Expectation {
        let seen = SeenSource::Client { addrs: vec!["10.244.1.20".parse().unwrap()] };
        let outcome = Outcome::Answered {
            backends: [("web-0".to_string(), seen)].into(),
            spread: Spread::Uniform,
            translated_by: Some("node-a".into()),
        };
        Expectation::required(outcome, "opened")
    }

    fn basis(p: Prediction) -> Option<Basis> {
        match p {
            Prediction::Expected(e) => Some(e.basis),
            Prediction::Open(_) => None,
        }
    }

    /// Each row: the state at the check, out-of-window or not, the profile, and what the
    /// oracle says (`None`: not judged).
    #[test]
    fn held_connections_table() {
        let (kubernetes, iptables, nftables) =
            (Profile::KUBERNETES, Profile::KUBE_PROXY_IPTABLES, Profile::KUBE_PROXY_NFTABLES);
        let kept = cluster(&[("web-0", true)]);
        let removed = cluster(&[("web-1", true)]);
        let not_serving = cluster(&[("web-0", false)]);
        let rows: [(&Cluster, bool, Profile, Option<Basis>); 8] = [
            (&kept, false, kubernetes, Some(Basis::Contract)),
            (&kept, false, nftables, Some(Basis::Contract)),
            (&removed, false, kubernetes, None),
            (&removed, false, iptables, Some(Basis::Choice(iptables))),
            (&not_serving, false, nftables, Some(Basis::Choice(nftables))),
            (&kept, true, iptables, Some(Basis::Choice(iptables))),
            (&kept, true, nftables, None),
            (&kept, true, kubernetes, None),
        ];
        for (i, (now, oow, profile, want)) in rows.into_iter().enumerate() {
            let got = predict_held(&opened(), now, &check(oow), profile).unwrap();
            assert_eq!(basis(got), want, "row {i}");
        }
    }

    #[test]
    fn a_check_of_a_connection_that_was_never_answered_is_an_error() {
        let refused = Expectation::required(Outcome::Rejected, "no endpoints");
        assert!(predict_held(&refused, &cluster(&[]), &check(false), Profile::KUBERNETES).is_err());
    }

    /// kube-proxy deletes a UDP flow's entry only when its endpoint served and stopped:
    /// an endpoint that never served (published ready by `publishNotReadyAddresses`) keeps its
    /// flows, one that stopped loses them to what a fresh flow gets.
    #[test]
    fn a_udp_stream_is_moved_only_off_an_endpoint_that_stopped_serving() {
        let stream = Probe { source_port: Some(15000), ..check(false) };
        let iptables = Profile::KUBE_PROXY_IPTABLES;
        let gone = cluster(&[("web-0", false)]);
        let fresh = || Prediction::Expected(Expectation::required(Outcome::Rejected, "no endpoints"));
        let kept = |p: Prediction| {
            matches!(p, Prediction::Expected(Expectation { outcome: Outcome::Answered { .. }, .. }))
        };
        let served = StreamPhase::of(&opened(), &cluster(&[("web-0", true)]), &stream);
        assert!(
            !kept(predict_stream(&served, &gone, &stream, fresh(), Change::Sync, iptables).prediction),
            "stopped serving: moved"
        );
        let never_served = StreamPhase::of(&opened(), &cluster(&[("web-0", false)]), &stream);
        assert!(
            kept(predict_stream(&never_served, &gone, &stream, fresh(), Change::Sync, iptables).prediction),
            "never served: kept"
        );
    }

    /// A stream that may be on either of two endpoints, one of which stops serving: it stays
    /// if it drew the other, so both that one and where a new flow goes are allowed; when a
    /// new flow is refused, nothing can be said.
    #[test]
    fn a_udp_stream_that_may_be_on_an_endpoint_that_still_serves_may_stay_there() {
        let stream = Probe { source_port: Some(15000), ..check(false) };
        let iptables = Profile::KUBE_PROXY_IPTABLES;
        let seen = SeenSource::Client { addrs: vec!["10.244.1.20".parse().unwrap()] };
        let answered = |pods: &[&str]| Outcome::Answered {
            backends: pods.iter().map(|p| (p.to_string(), seen.clone())).collect(),
            spread: Spread::Uniform,
            translated_by: Some("node-a".into()),
        };
        let before = Expectation::required(answered(&["web-0", "web-1"]), "opened");
        let served = StreamPhase::of(&before, &cluster(&[("web-0", true), ("web-1", true)]), &stream);
        let now = cluster(&[("web-0", false), ("web-1", true), ("web-2", true)]);
        let fresh = Prediction::Expected(Expectation::required(answered(&["web-2"]), "new flows"));
        let Prediction::Expected(e) =
            predict_stream(&served, &now, &stream, fresh, Change::Sync, iptables).prediction
        else {
            panic!("kept or moved: judged")
        };
        let Outcome::Answered { backends, spread, .. } = e.outcome else { panic!("answered") };
        assert_eq!(backends.keys().map(String::as_str).collect::<Vec<_>>(), ["web-1", "web-2"]);
        assert_eq!(spread, Spread::Sticky);
        let refused = Prediction::Expected(Expectation::required(Outcome::Rejected, "no endpoints"));
        assert!(matches!(
            predict_stream(&served, &now, &stream, refused.clone(), Change::Sync, iptables).prediction,
            Prediction::Open(_)
        ));
    }

    /// A proxy restarted onto a port with no serving endpoint deletes none of its entries, so
    /// a stream stays even on an endpoint that stopped serving; after a sync it is moved.
    #[test]
    fn a_restart_onto_a_port_with_no_serving_endpoint_keeps_every_stream() {
        let stream = Probe { source_port: Some(15000), ..check(false) };
        let iptables = Profile::KUBE_PROXY_IPTABLES;
        let served = StreamPhase::of(&opened(), &cluster(&[("web-0", true)]), &stream);
        let gone = cluster(&[("web-0", false)]);
        let refused = || Prediction::Expected(Expectation::required(Outcome::Rejected, "no endpoints"));
        let kept = |p: Prediction| {
            matches!(p, Prediction::Expected(Expectation { outcome: Outcome::Answered { .. }, .. }))
        };
        assert!(kept(
            predict_stream(&served, &gone, &stream, refused(), Change::Restart, iptables).prediction
        ));
        assert!(!kept(predict_stream(&served, &gone, &stream, refused(), Change::Sync, iptables).prediction));
        // Its backend no endpoint of the port at all: its witnesses cannot be checked yet.
        let removed = cluster(&[]);
        let open = predict_stream(&served, &removed, &stream, refused(), Change::Restart, iptables);
        assert!(matches!(open.prediction, Prediction::Open(_)));
        // One sync later, nothing having changed, the entry is still there: not judged as a
        // fresh flow (refused) but carried, and still unjudgeable (explore-26-1065).
        let carried = open.carried.expect("where the stream stays is carried");
        let next = predict_stream(&carried, &removed, &stream, refused(), Change::Sync, iptables);
        assert!(matches!(next.prediction, Prediction::Open(_)), "{:?}", next.prediction);
        assert!(next.carried.is_some());
    }
}
