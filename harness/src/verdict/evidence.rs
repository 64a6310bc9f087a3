//! The second and third witnesses of every attempt, after the client's own classification:
//! the frames captured on the wire, and the translating node's conntrack table.
//!
//! - Answered: a frame from the source the backend reported to the backend's own address and
//!   target port reached the backend's interface; and the node that translated the flow holds
//!   a conntrack entry whose original tuple is client → frontend and whose reply tuple is
//!   backend → the source the backend saw.
//! - Refused: an RST or ICMP error for the flow came back to the client.
//! - Dropped: nothing for the flow came back to the client, and no pod received it (a proxy
//!   that forwards what it must drop often looks silent only because the reply takes a path
//!   the client rejects).

use std::collections::BTreeMap;
use std::net::SocketAddr;

use crate::model::{Cluster, Probe, Target};
use crate::observe::{Flow, Frame, L4, Packet};
use crate::oracle::Outcome;
use crate::traffic::{Attempt, Sent};

/// What was captured during a scenario, by capture point (`pod/NAME`, `node/NAME`,
/// `node/NAME/lo`, `external/NAME`), and each node's conntrack table after the probes.
#[derive(Debug, Default)]
pub struct Evidence {
    pub frames: BTreeMap<String, Vec<Frame>>,
    pub conntrack: BTreeMap<String, Vec<Flow>>,
}

/// Which frames each capture point (by key) took while a probe ran: positions in its list,
/// from the frames read before the probe began to those read once it ended. Positions, not
/// timestamps: a frame whose buffer carried no receive time is stamped when it is read, which
/// can be after the probe ended.
#[derive(Debug, Clone, Default)]
pub struct Window {
    pub frames: BTreeMap<String, std::ops::Range<usize>>,
}

impl Evidence {
    /// The frames captured during `window` (conntrack tables as they are). Other probes' flows
    /// must not count for this one: masquerading picks random source ports, so a flow of an
    /// earlier probe can carry the very address and port this probe's client used.
    pub fn during(&self, window: &Window) -> Evidence {
        let frames = self
            .frames
            .iter()
            .map(|(k, frames)| {
                let range = window.frames.get(k).cloned().unwrap_or_default();
                (k.clone(), frames.get(range).unwrap_or_default().to_vec())
            })
            .collect();
        Evidence { frames, conntrack: self.conntrack.clone() }
    }
}

/// Where a probe's source captures what comes back to it.
pub fn client_capture_points(probe: &Probe) -> Vec<String> {
    match &probe.from {
        crate::model::Source::Pod(p) => vec![format!("pod/{p}")],
        crate::model::Source::External(h) => vec![format!("external/{h}")],
        // A node's own traffic may be refused locally (OUTPUT): the answer then stays on lo.
        crate::model::Source::Node(n) => vec![format!("node/{n}"), format!("node/{n}/lo")],
    }
}

/// Failures found by the capture and conntrack witnesses for one probe.
pub fn check(
    cluster: &Cluster,
    probe: &Probe,
    dst: SocketAddr,
    outcome: &Outcome,
    sent: &[Sent],
    evidence: &Evidence,
) -> Vec<String> {
    let mut faults: BTreeMap<String, u32> = BTreeMap::new();
    let client_frames: Vec<&Frame> =
        client_capture_points(probe).iter().filter_map(|k| evidence.frames.get(k)).flatten().collect();
    for s in sent {
        let fault = match (&s.attempt, outcome) {
            (Attempt::Answered { pod, seen }, Outcome::Answered { translated_by, .. }) => {
                answered(cluster, probe, dst, s.source_port, pod, *seen, translated_by.as_deref(), evidence)
            }
            (Attempt::Refused { .. }, Outcome::Rejected) => refused(&client_frames, s.source_port, dst),
            (Attempt::Silent, Outcome::Dropped) => silent(&client_frames, s.source_port, dst)
                .or_else(|| reached_a_pod(cluster, probe, s.source_port, evidence)),
            // A wrong classification is already a failure of its own; no second opinion needed.
            _ => None,
        };
        if let Some(f) = fault {
            *faults.entry(f).or_default() += 1;
        }
    }
    faults.into_iter().map(|(f, n)| format!("{f} ({n} of {} attempts)", sent.len())).collect()
}

#[allow(clippy::too_many_arguments)]
fn answered(
    cluster: &Cluster,
    probe: &Probe,
    dst: SocketAddr,
    source_port: u16,
    pod: &str,
    seen: SocketAddr,
    translated_by: Option<&str>,
    evidence: &Evidence,
) -> Option<String> {
    // Missing evidence is a failure: a witness that was never asked cannot vouch for anything.
    let Some(backend) = backend_address(cluster, probe, dst, pod) else {
        return Some(format!("{pod} answered, but it backs no endpoint of this destination"));
    };
    let Some(frames) = evidence.frames.get(&format!("pod/{pod}")) else {
        return Some(format!("on the wire: nothing was captured at {pod}"));
    };
    let arrived = frames.iter().filter_map(|f| f.packet.as_ref()).any(|p| opens_flow(p, seen, backend));
    if !arrived {
        return Some(format!("on the wire: no packet {seen} > {backend} reached {pod}'s interface"));
    }
    // Traffic sent straight to a pod is translated nowhere.
    let node = translated_by?;
    let Some(flows) = evidence.conntrack.get(node) else {
        return Some(format!("conntrack on {node} was not read"));
    };
    let entry = flows.iter().find(|f| f.original.dst == dst && f.original.src.port() == source_port);
    match entry {
        None => Some(format!("conntrack on {node}: no entry for source port {source_port} > {dst}")),
        Some(f) if f.reply.src != backend || f.reply.dst != seen => {
            Some(format!("conntrack on {node}: expected reply tuple {backend} > {seen}, found entry {f}"))
        }
        Some(_) => None,
    }
}

/// The address a backend pod is reached at for this probe: its endpoint address for the
/// Service port the probe targets, or the destination itself when sent straight to the pod.
fn backend_address(cluster: &Cluster, probe: &Probe, dst: SocketAddr, pod: &str) -> Option<SocketAddr> {
    let endpoint_of = |svc: &str, port: &str| {
        let (_, sp) = cluster.service_port(svc, port)?;
        sp.endpoints.iter().find(|e| e.pod == pod).map(|e| e.address())
    };
    match &probe.to {
        Target::ClusterIp { service, port }
        | Target::NodePort { service, port, .. }
        | Target::ExternalIp { service, port, .. }
        | Target::LoadBalancer { service, port, .. } => endpoint_of(service, port),
        Target::HealthCheck { .. } | Target::Localhost { .. } => None,
        Target::Address(_) => {
            if cluster.pod(pod).is_some_and(|p| p.ip == dst.ip()) {
                return Some(dst);
            }
            cluster.services.iter().flat_map(|s| s.ports.iter().map(move |p| (s, p))).find_map(|(s, p)| {
                let frontend =
                    (s.cluster_ip == dst.ip() && p.port == dst.port()) || p.node_port == Some(dst.port());
                if frontend && p.protocol == probe.protocol {
                    p.endpoints.iter().find(|e| e.pod == pod).map(|e| e.address())
                } else {
                    None
                }
            })
        }
    }
}

/// The first packet of a flow from `src` to `dst`: a TCP SYN, or any UDP/SCTP datagram.
fn opens_flow(p: &Packet, src: SocketAddr, dst: SocketAddr) -> bool {
    let ours = p.endpoints() == Some((src, dst));
    ours && match p.l4 {
        L4::Tcp { syn, ack, .. } => syn && !ack,
        L4::Udp { .. } | L4::Sctp { .. } => true,
        _ => false,
    }
}

/// Whether a packet came back to the client for its flow `:source_port > dst`: a reply from
/// `dst`, an RST, or an ICMP error about the flow.
fn answers_flow(p: &Packet, source_port: u16, dst: SocketAddr) -> bool {
    if let L4::IcmpError { original: Some(original), .. } = &p.l4 {
        return original.endpoints().is_some_and(|(s, d)| s.port() == source_port && d == dst);
    }
    p.endpoints().is_some_and(|(s, d)| s == dst && d.port() == source_port)
}

fn refused(client_frames: &[&Frame], source_port: u16, dst: SocketAddr) -> Option<String> {
    let refusal = client_frames.iter().filter_map(|f| f.packet.as_ref()).any(|p| {
        answers_flow(p, source_port, dst) && matches!(p.l4, L4::IcmpError { .. } | L4::Tcp { rst: true, .. })
    });
    (!refusal).then(|| {
        format!(
            "on the wire: refused, but no RST or ICMP error for :{source_port} > {dst} reached the client"
        )
    })
}

/// A pod that received the client's flow, if one did: the client's own address and source
/// port arriving at a pod's interface.
fn reached_a_pod(cluster: &Cluster, probe: &Probe, source_port: u16, evidence: &Evidence) -> Option<String> {
    let mut client_ips: Vec<std::net::IpAddr> = cluster.source_ip(&probe.from).into_iter().collect();
    if let crate::model::Source::Node(n) = &probe.from {
        client_ips.extend(cluster.node(n).map(|node| crate::model::bridge_address(&node.pod_cidr)));
    }
    evidence.frames.iter().find_map(|(key, frames)| {
        let pod = cluster.pod(key.strip_prefix("pod/")?)?;
        // Arriving at the pod: the client's own outgoing packets are on its capture too.
        let leaked = frames.iter().filter_map(|f| f.packet.as_ref()).find(|p| {
            p.dst == pod.ip
                && client_ips.contains(&p.src)
                && p.endpoints().is_some_and(|(s, _)| s.port() == source_port)
        })?;
        Some(format!("dropped for the client, yet {} received {leaked}: the proxy forwarded it", pod.name))
    })
}

fn silent(client_frames: &[&Frame], source_port: u16, dst: SocketAddr) -> Option<String> {
    let answer =
        client_frames.iter().filter_map(|f| f.packet.as_ref()).find(|p| answers_flow(p, source_port, dst));
    answer.map(|p| format!("on the wire: silent to the client's socket, yet the client received {p}"))
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;
    use crate::model::{Protocol, Source, Target};
    use crate::observe::Tuple;
    use crate::oracle::{SeenSource, Spread};

    const CLIENT: &str = "10.244.1.20:20000";
    const VIP: &str = "10.96.0.10:53";
    const BACKEND: &str = "10.244.2.7:53";

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn cluster() -> Cluster {
        let text = include_str!("../../../scenarios/kube-dns-udp.yaml");
        crate::scenario::load_str(text, std::path::Path::new("kube-dns-udp.yaml")).unwrap().cluster
    }

    fn probe() -> Probe {
        let to = Target::ClusterIp { service: "kube-dns".into(), port: "dns".into() };
        Probe { protocol: Protocol::Udp, ..Probe::example(Source::Pod("client".into()), to) }
    }

    fn answered_outcome() -> Outcome {
        let seen = SeenSource::Client { addrs: vec![addr(CLIENT).ip()] };
        Outcome::Answered {
            backends: [("coredns-b".to_string(), seen)].into(),
            spread: Spread::Uniform,
            translated_by: Some("node-a".into()),
        }
    }

    fn frame(packet: Packet) -> Frame {
        Frame { timestamp: SystemTime::UNIX_EPOCH, data: Vec::new(), packet: Some(packet), outgoing: false }
    }

    fn udp(src: &str, dst: &str) -> Packet {
        let (s, d) = (addr(src), addr(dst));
        Packet { src: s.ip(), dst: d.ip(), l4: L4::Udp { src_port: s.port(), dst_port: d.port() } }
    }

    fn answered_sent() -> Vec<Sent> {
        vec![Sent {
            source_port: 20000,
            attempt: Attempt::Answered { pod: "coredns-b".into(), seen: addr(CLIENT) },
        }]
    }

    fn flow(reply_src: &str) -> Flow {
        Flow {
            ip_protocol: 17,
            original: Tuple { src: addr(CLIENT), dst: addr(VIP) },
            reply: Tuple { src: addr(reply_src), dst: addr(CLIENT) },
            state: None,
            seen_reply: true,
        }
    }

    fn evidence(backend_frames: Vec<Frame>, flows: Vec<Flow>) -> Evidence {
        Evidence {
            frames: [("pod/coredns-b".to_string(), backend_frames)].into(),
            conntrack: [("node-a".to_string(), flows)].into(),
        }
    }

    fn run(evidence: &Evidence, outcome: &Outcome, sent: &[Sent]) -> Vec<String> {
        check(&cluster(), &probe(), addr(VIP), outcome, sent, evidence)
    }

    #[test]
    fn all_witnesses_agree() {
        let e = evidence(vec![frame(udp(CLIENT, BACKEND))], vec![flow(BACKEND)]);
        assert_eq!(run(&e, &answered_outcome(), &answered_sent()), Vec::<String>::new());
    }

    #[test]
    fn a_packet_that_never_reached_the_backend_fails() {
        // Reached the backend still addressed to the VIP: not translated.
        let e = evidence(vec![frame(udp(CLIENT, VIP))], vec![flow(BACKEND)]);
        let failures = run(&e, &answered_outcome(), &answered_sent());
        assert_eq!(
            failures,
            [
                "on the wire: no packet 10.244.1.20:20000 > 10.244.2.7:53 reached coredns-b's interface (1 of 1 attempts)"
            ]
        );
    }

    #[test]
    fn a_wrong_or_missing_conntrack_entry_fails() {
        let e = evidence(vec![frame(udp(CLIENT, BACKEND))], vec![flow("10.244.1.5:53")]);
        let failures = run(&e, &answered_outcome(), &answered_sent());
        assert!(
            failures[0]
                .starts_with("conntrack on node-a: expected reply tuple 10.244.2.7:53 > 10.244.1.20:20000"),
            "{failures:?}"
        );
        let e = evidence(vec![frame(udp(CLIENT, BACKEND))], vec![]);
        assert!(run(&e, &answered_outcome(), &answered_sent())[0].contains("no entry for source port 20000"));
    }

    #[test]
    fn missing_evidence_fails() {
        let e = Evidence::default();
        assert!(
            run(&e, &answered_outcome(), &answered_sent())[0].contains("nothing was captured at coredns-b")
        );
    }

    #[test]
    fn refusal_needs_an_rst_or_icmp_error_and_silence_needs_nothing_back() {
        let refused = vec![Sent { source_port: 20000, attempt: Attempt::Refused { reason: "x".into() } }];
        let silent = vec![Sent { source_port: 20000, attempt: Attempt::Silent }];
        let at_client = |frames: Vec<Frame>| Evidence {
            frames: [("pod/client".to_string(), frames)].into(),
            ..Default::default()
        };
        let icmp = Packet {
            src: addr(VIP).ip(),
            dst: addr(CLIENT).ip(),
            l4: L4::IcmpError { kind: "port unreachable".into(), original: Some(Box::new(udp(CLIENT, VIP))) },
        };
        assert!(run(&at_client(vec![frame(icmp.clone())]), &Outcome::Rejected, &refused).is_empty());
        assert_eq!(run(&at_client(vec![]), &Outcome::Rejected, &refused).len(), 1);
        assert!(run(&at_client(vec![frame(udp(CLIENT, VIP))]), &Outcome::Dropped, &silent).is_empty());
        assert_eq!(run(&at_client(vec![frame(icmp)]), &Outcome::Dropped, &silent).len(), 1);
    }

    #[test]
    fn another_probes_flow_with_the_same_address_and_port_does_not_count() {
        // A masqueraded flow of an earlier probe reused the client's address and port.
        let earlier = frame(udp(CLIENT, BACKEND));
        let e = evidence(vec![earlier], vec![]);
        let silent = vec![Sent { source_port: 20000, attempt: Attempt::Silent }];
        assert_eq!(run(&e, &Outcome::Dropped, &silent).len(), 1, "without a window it would count");
        let after_it = e.frames.iter().map(|(k, f)| (k.clone(), f.len()..f.len())).collect();
        let during = e.during(&Window { frames: after_it });
        assert!(check(&cluster(), &probe(), addr(VIP), &Outcome::Dropped, &silent, &during).is_empty());
    }

    #[test]
    fn a_drop_that_reached_a_pod_fails() {
        let silent = vec![Sent { source_port: 20000, attempt: Attempt::Silent }];
        let e = evidence(vec![frame(udp(CLIENT, BACKEND))], vec![]);
        let failures = run(&e, &Outcome::Dropped, &silent);
        assert_eq!(failures.len(), 1);
        assert!(
            failures[0].contains("yet coredns-b received 10.244.1.20:20000 > 10.244.2.7:53"),
            "{failures:?}"
        );
    }
}
