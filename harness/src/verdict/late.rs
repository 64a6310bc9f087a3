//! Answers that came after the client stopped waiting. A client's socket waits a bounded
//! time; the wire does not. An attempt the client counted silent whose answer the client's
//! own capture holds was answered, only late: it is judged as the answer it got, never as a
//! drop, so its verdict is the same whatever the client's timeout. (A drop is proven by the
//! captures, in evidence.rs: no answer anywhere.)
//!
//! UDP answers name their attempt: the request carries an id the pod's server echoes
//! (traffic/reply.rs), so among attempts that share a fixed source port each late answer goes
//! to its own attempt. An SCTP association that came up but whose answer the client's stack
//! did not take (seen on 5.10 under emulation: the pod's DATA overtook the COOKIE ACK, was
//! discarded in COOKIE-ECHOED state, and came again after the retransmission timeout, past the
//! probe's) is judged by the DATA chunk its capture holds: each association has its own source
//! port. A TCP reply that came after the client gave up (its connection came up in time, the
//! pod's server was slow to write) is judged by the reply itself, which names the pod and what
//! it saw; each attempt has its own source port unless the probe fixes one. A TCP connection
//! whose SYN-ACK came after the client gave up carries no pod's reply (the client's socket was
//! closed, so its kernel resets it): it is judged by the witnesses
//! that do name the backend — the SYN-ACK in the client's capture, the conntrack entry of its
//! flow (whose reply tuple names the backend's address and the source it saw), and the
//! backend pod's capture, which must hold its SYN-ACK to that source.

use std::net::SocketAddr;

use etherparse::{LaxSlicedPacket, TransportSlice};

use super::evidence::{Evidence, Window, client_capture_points};
use crate::model::{Cluster, Probe, Protocol};
use crate::observe::{Frame, L4, Packet};
use crate::traffic::{Attempt, Sent, reply};

/// `sent` with each silent UDP attempt whose answer reached the client's capture points
/// turned into that answer. An answer that names its request is looked for from the start of
/// the probe's `window` to the end of the capture (it may come after the probe, even after
/// the next began: the id keeps it apart); one that does not, within the window only.
pub fn reconcile(
    cluster: &Cluster,
    probe: &Probe,
    dst: SocketAddr,
    mut sent: Vec<Sent>,
    evidence: &Evidence,
    window: &Window,
) -> Vec<Sent> {
    match probe.protocol {
        Protocol::Sctp => return reconcile_sctp(probe, dst, sent, evidence, window),
        Protocol::Tcp => return reconcile_tcp(cluster, probe, dst, sent, evidence, window),
        Protocol::Udp => {}
    }
    let (named, in_window) =
        (client_frames(probe, evidence, window, true), client_frames(probe, evidence, window, false));
    for s in sent.iter_mut().filter(|s| s.attempt == Attempt::Silent) {
        let frames = if s.request.is_some() { &named } else { &in_window };
        if let Some(answer) = frames.iter().find_map(|f| answer_to(f, dst, s)) {
            s.attempt = Attempt::Answered { pod: answer.pod, seen: answer.seen };
        }
    }
    sent
}

/// The answer `frame` carries to attempt `s`: a UDP datagram from `dst` to the attempt's
/// source port whose payload is a pod's reply to the attempt's request id (or, for an attempt
/// that sent no id, any reply: its source port is its own).
fn answer_to(frame: &Frame, dst: SocketAddr, s: &Sent) -> Option<reply::Answer> {
    let p = frame.packet.as_ref()?;
    let to_attempt =
        matches!(p.l4, L4::Udp { src_port, dst_port } if src_port == dst.port() && dst_port == s.source_port);
    if !to_attempt || p.src != dst.ip() {
        return None;
    }
    let sliced = LaxSlicedPacket::from_ethernet(&frame.data).ok()?;
    let Some(TransportSlice::Udp(udp)) = sliced.transport else { return None };
    let answer = reply::parse(std::str::from_utf8(udp.payload()).ok()?)?;
    (answer.re == s.request).then_some(answer)
}

/// The SCTP form of [`reconcile`]: an association that came up without an answer the client
/// took, whose capture holds a DATA chunk from `dst` to its source port within the probe's
/// window carrying a pod's reply, got that reply.
fn reconcile_sctp(
    probe: &Probe,
    dst: SocketAddr,
    mut sent: Vec<Sent>,
    evidence: &Evidence,
    window: &Window,
) -> Vec<Sent> {
    let frames = client_frames(probe, evidence, window, false);
    for s in sent.iter_mut().filter(|s| matches!(s.attempt, Attempt::Broken { .. } | Attempt::Silent)) {
        if let Some(answer) = frames.iter().find_map(|f| sctp_answer_to(f, dst, s.source_port)) {
            s.attempt = Attempt::Answered { pod: answer.pod, seen: answer.seen };
        }
    }
    sent
}

/// The TCP form of [`reconcile`]: a silent attempt whose SYN-ACK from `dst` reached the
/// client's capture after the probe's window began was answered, late, by the pod that sent
/// it. That pod is the one the flow's conntrack entry (on any node: the one that translated
/// it) names in its reply tuple, and its own capture must hold its SYN-ACK to the source the
/// entry says it saw; without all three witnesses the attempt stays silent.
fn reconcile_tcp(
    cluster: &Cluster,
    probe: &Probe,
    dst: SocketAddr,
    mut sent: Vec<Sent>,
    evidence: &Evidence,
    window: &Window,
) -> Vec<Sent> {
    let unanswered = |a: &Attempt| matches!(a, Attempt::Silent | Attempt::Broken { .. });
    if !sent.iter().any(|s| unanswered(&s.attempt)) {
        return sent;
    }
    let frames = client_frames(probe, evidence, window, true);
    for s in sent.iter_mut().filter(|s| unanswered(&s.attempt)) {
        let port = s.source_port;
        // The connection came up in time (the client counted it broken: connected, no
        // answer) but the pod's reply came after the client's wait, its server starved of
        // CPU: the reply names the pod and what it saw, as UDP's does.
        let own_port = probe.source_port.is_none();
        if let Some(answer) = frames.iter().filter(|_| own_port).find_map(|f| tcp_answer_to(f, dst, port)) {
            s.attempt = Attempt::Answered { pod: answer.pod, seen: answer.seen };
            continue;
        }
        if s.attempt != Attempt::Silent {
            continue;
        }
        let syn_ack_back = frames
            .iter()
            .filter_map(|f| f.packet.as_ref())
            .any(|p| is_syn_ack(p) && p.endpoints() == Some((dst, SocketAddr::new(p.dst, port))));
        if !syn_ack_back {
            continue;
        }
        // Every node the flow crossed may hold an entry of it; the translating node's names a
        // pod whose own capture holds the SYN-ACK.
        let mut entries = evidence.conntrack.values().flatten().filter(|f| {
            f.protocol() == Some(Protocol::Tcp) && f.original.dst == dst && f.original.src.port() == port
        });
        let answer = entries.find_map(|f| {
            let (backend, seen) = (f.reply.src, f.reply.dst);
            let pod = cluster.pod_by_ip(backend.ip())?;
            let frames = evidence.frames.get(&format!("pod/{}", pod.name))?;
            let mut packets = frames.iter().filter_map(|f| f.packet.as_ref());
            packets
                .any(|p| is_syn_ack(p) && p.endpoints() == Some((backend, seen)))
                .then(|| Attempt::Answered { pod: pod.name.clone(), seen })
        });
        if let Some(answer) = answer {
            s.attempt = answer;
        }
    }
    sent
}

/// The pod's reply carried by `frame`, a TCP segment from `dst` to `port`.
fn tcp_answer_to(frame: &Frame, dst: SocketAddr, port: u16) -> Option<reply::Answer> {
    let p = frame.packet.as_ref()?;
    let to_attempt =
        matches!(p.l4, L4::Tcp { src_port, dst_port, .. } if src_port == dst.port() && dst_port == port);
    if !to_attempt || p.src != dst.ip() {
        return None;
    }
    let sliced = LaxSlicedPacket::from_ethernet(&frame.data).ok()?;
    let Some(TransportSlice::Tcp(tcp)) = sliced.transport else { return None };
    reply::parse(std::str::from_utf8(tcp.payload()).ok()?)
}

fn is_syn_ack(p: &Packet) -> bool {
    matches!(p.l4, L4::Tcp { syn: true, ack: true, rst: false, .. })
}

/// The frames of the client's capture points from the start of the probe's `window` to its
/// end, or with `to_the_end` to the end of the capture.
fn client_frames<'e>(
    probe: &Probe,
    evidence: &'e Evidence,
    window: &Window,
    to_the_end: bool,
) -> Vec<&'e Frame> {
    let points = client_capture_points(probe);
    let taken = points.iter().filter_map(|k| Some((evidence.frames.get(k)?, window.frames.get(k)?)));
    taken
        .flat_map(|(frames, range)| {
            let end = if to_the_end { frames.len() } else { range.end.min(frames.len()) };
            frames.get(range.start.min(end)..end).unwrap_or_default()
        })
        .collect()
}

/// The pod's reply in the first DATA chunk of `frame`, an SCTP packet from `dst` to `port`.
fn sctp_answer_to(frame: &Frame, dst: SocketAddr, port: u16) -> Option<reply::Answer> {
    let p = frame.packet.as_ref()?;
    let to_attempt =
        matches!(p.l4, L4::Sctp { src_port, dst_port } if src_port == dst.port() && dst_port == port);
    if !to_attempt || p.src != dst.ip() {
        return None;
    }
    let sliced = LaxSlicedPacket::from_ethernet(&frame.data).ok()?;
    let payload = sliced.net.as_ref()?.ip_payload_ref()?.payload;
    let data = first_data_chunk(payload)?;
    reply::parse(std::str::from_utf8(data).ok()?)
}

/// The user data of the first DATA chunk (type 0) of an SCTP packet (RFC 9260 3.2, 3.3.1): a
/// 12-byte common header, then chunks of type, flags, length, padded to 4 bytes; a DATA
/// chunk's user data follows its 16-byte header.
fn first_data_chunk(packet: &[u8]) -> Option<&[u8]> {
    let mut at = 12;
    while at + 4 <= packet.len() {
        let length = usize::from(u16::from_be_bytes([packet[at + 2], packet[at + 3]]));
        if length < 4 {
            return None;
        }
        if packet[at] == 0 {
            return packet.get(at + 16..at + length);
        }
        at += length.div_ceil(4) * 4;
    }
    None
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;
    use crate::model::{Source, Target};
    use crate::observe::Packet;

    const CLIENT: &str = "10.244.1.20:15353";
    const VIP: &str = "10.96.0.53:53";

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn probe() -> Probe {
        let to = Target::ClusterIp { service: "dns".into(), port: "dns".into() };
        Probe { protocol: Protocol::Udp, ..Probe::example(Source::Pod("resolver".into()), to) }
    }

    /// A UDP frame from `src` to `dst` carrying `payload`, as the capture takes it.
    fn datagram(src: &str, dst: &str, payload: &str, outgoing: bool) -> Frame {
        let (s, d) = (addr(src), addr(dst));
        let (SocketAddr::V4(s4), SocketAddr::V4(d4)) = (s, d) else { unreachable!() };
        let mut data = Vec::new();
        etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4(s4.ip().octets(), d4.ip().octets(), 64)
            .udp(s.port(), d.port())
            .write(&mut data, payload.as_bytes())
            .unwrap();
        let packet = Packet::from_ethernet(&data);
        Frame { timestamp: SystemTime::UNIX_EPOCH, data, packet, outgoing }
    }

    fn sent(request: Option<u64>, attempt: Attempt) -> Sent {
        Sent { source_port: addr(CLIENT).port(), request, attempt }
    }

    fn answered(pod: &str) -> Attempt {
        Attempt::Answered { pod: pod.into(), seen: addr(CLIENT) }
    }

    fn client_capture(frames: Vec<Frame>) -> Evidence {
        Evidence { frames: [("pod/resolver".to_string(), frames)].into(), ..Default::default() }
    }

    /// Judges `attempts` on `frames`, the probe's window holding all of them.
    fn judge(probe: &Probe, attempts: Vec<Sent>, frames: Vec<Frame>) -> Vec<Sent> {
        let window = Window { frames: [("pod/resolver".to_string(), 0..frames.len())].into() };
        reconcile(&Cluster::example(vec![]), probe, addr(VIP), attempts, &client_capture(frames), &window)
    }

    /// The failing run of `live-stale-udp-conntrack` (2026-11-23), with ids: ten attempts from
    /// one source port, the first counted silent because its datagram left only after the
    /// client's wait (its ARP request was lost), all ten answered on the wire.
    #[test]
    fn a_silent_attempt_whose_answer_the_client_capture_holds_was_answered_late() {
        let mut frames = Vec::new();
        for id in 1..=10 {
            frames.push(datagram(CLIENT, VIP, &reply::request(id), true));
            frames.push(datagram(VIP, CLIENT, &reply::encode_answer_to("dns-old", addr(CLIENT), id), false));
        }
        let mut attempts = vec![sent(Some(1), Attempt::Silent)];
        attempts.extend((2..=10).map(|id| sent(Some(id), answered("dns-old"))));
        let judged = judge(&probe(), attempts, frames);
        assert_eq!(judged.iter().filter(|s| s.attempt == answered("dns-old")).count(), 10);
    }

    #[test]
    fn an_answer_goes_to_its_own_attempt_only() {
        // Attempt 2's answer is on the wire; attempt 1's is not: attempt 1 stays silent.
        let frames = vec![
            datagram(CLIENT, VIP, &reply::request(1), true),
            datagram(CLIENT, VIP, &reply::request(2), true),
            datagram(VIP, CLIENT, &reply::encode_answer_to("dns-old", addr(CLIENT), 2), false),
        ];
        let attempts = vec![sent(Some(1), Attempt::Silent), sent(Some(2), answered("dns-old"))];
        let judged = judge(&probe(), attempts.clone(), frames);
        assert_eq!(judged, attempts);
    }

    #[test]
    fn only_an_answer_from_the_destination_counts() {
        // Un-translated (from the backend's own address), another port, or not a pod's reply:
        // the socket rightly never took these, and neither does the evidence.
        let answer = reply::encode_answer_to("dns-old", addr(CLIENT), 1);
        for frame in [
            datagram("10.244.1.10:5353", CLIENT, &answer, false),
            datagram(VIP, "10.244.1.20:15354", &answer, false),
            datagram(VIP, CLIENT, "garbage", false),
        ] {
            let attempts = vec![sent(Some(1), Attempt::Silent)];
            let judged = judge(&probe(), attempts.clone(), vec![frame]);
            assert_eq!(judged, attempts);
        }
        // A silent attempt that sent no id takes any pod's answer to its (own) source port.
        let frames = vec![datagram(VIP, CLIENT, &reply::encode("dns-old", addr(CLIENT)), false)];
        let judged = judge(&probe(), vec![sent(None, Attempt::Silent)], frames);
        assert_eq!(judged, [sent(None, answered("dns-old"))]);
    }

    #[test]
    fn a_named_answer_after_the_probe_still_counts_and_an_unnamed_one_does_not() {
        let frames = vec![
            datagram(CLIENT, VIP, &reply::request(1), true),
            datagram(VIP, CLIENT, &reply::encode_answer_to("dns-old", addr(CLIENT), 1), false),
            datagram(VIP, CLIENT, &reply::encode("dns-old", addr(CLIENT)), false),
        ];
        // The probe's window ends after its request; both answers came later.
        let window = Window { frames: [("pod/resolver".to_string(), 0..1)].into() };
        let e = client_capture(frames);
        let judged = reconcile(
            &Cluster::example(vec![]),
            &probe(),
            addr(VIP),
            vec![sent(Some(1), Attempt::Silent)],
            &e,
            &window,
        );
        assert_eq!(judged, [sent(Some(1), answered("dns-old"))]);
        let judged = reconcile(
            &Cluster::example(vec![]),
            &probe(),
            addr(VIP),
            vec![sent(None, Attempt::Silent)],
            &e,
            &window,
        );
        assert_eq!(judged, [sent(None, Attempt::Silent)]);
    }

    /// A TCP attempt whose SYN-ACK came after the client gave up: the client's capture holds
    /// the SYN-ACK from the VIP, node-a's entry names the backend, and the backend's capture
    /// holds its SYN-ACK to the source it saw. Each witness is needed.
    #[test]
    fn a_late_syn_ack_is_an_answer_from_the_pod_that_sent_it() {
        use crate::model::{PerFamily, Pod};
        use crate::observe::{Flow, Tuple};
        let (client, vip, backend) =
            (addr("10.244.1.20:40000"), addr("10.96.0.80:80"), addr("10.244.2.7:8080"));
        let tcp = |src: SocketAddr, dst: SocketAddr, syn: bool, ack: bool| Frame {
            timestamp: SystemTime::UNIX_EPOCH,
            data: Vec::new(),
            packet: Some(Packet {
                src: src.ip(),
                dst: dst.ip(),
                l4: L4::Tcp { src_port: src.port(), dst_port: dst.port(), syn, ack, rst: false, fin: false },
            }),
            outgoing: false,
        };
        let mut cluster = Cluster::example(vec![]);
        cluster.pods.push(Pod {
            namespace: "default".into(),
            name: "web-b".into(),
            node: "node-b".into(),
            ips: PerFamily::single(backend.ip()),
            labels: Default::default(),
            ports: vec![],
        });
        let to = Target::ClusterIp { service: "web".into(), port: "http".into() };
        let probe = Probe { protocol: Protocol::Tcp, ..Probe::example(Source::Pod("client".into()), to) };
        let entry = Flow {
            ip_protocol: 6,
            original: Tuple { src: client, dst: vip },
            reply: Tuple { src: backend, dst: client },
            state: Some("SYN_RECV".into()),
            seen_reply: true,
        };
        let witnesses = |client_side: bool, conntrack: bool, pod_side: bool| Evidence {
            frames: [
                (
                    "pod/client".to_string(),
                    vec![tcp(client, vip, true, false)]
                        .into_iter()
                        .chain(client_side.then(|| tcp(vip, client, true, true)))
                        .collect(),
                ),
                (
                    "pod/web-b".to_string(),
                    vec![tcp(client, backend, true, false)]
                        .into_iter()
                        .chain(pod_side.then(|| tcp(backend, client, true, true)))
                        .collect(),
                ),
            ]
            .into(),
            conntrack: [("node-a".to_string(), if conntrack { vec![entry.clone()] } else { vec![] })].into(),
        };
        let window = Window { frames: [("pod/client".to_string(), 0..1)].into() };
        let silent = vec![Sent { source_port: client.port(), request: None, attempt: Attempt::Silent }];
        let judge =
            |e: &Evidence| reconcile(&cluster, &probe, vip, silent.clone(), e, &window)[0].attempt.clone();
        assert_eq!(
            judge(&witnesses(true, true, true)),
            Attempt::Answered { pod: "web-b".into(), seen: client }
        );
        for missing in
            [witnesses(false, true, true), witnesses(true, false, true), witnesses(true, true, false)]
        {
            assert_eq!(judge(&missing), Attempt::Silent);
        }
    }
}

#[cfg(test)]
mod sctp_tests {
    use super::first_data_chunk;

    /// A packet as the 5.10 capture held it: common header, then a DATA chunk whose 5-byte
    /// user data is padded to 4 bytes, after a COOKIE ACK (type 11) in front of it.
    #[test]
    fn the_first_data_chunks_user_data_is_found_after_other_chunks() {
        let mut packet = vec![0u8; 12];
        packet.extend([11, 0, 0, 4]);
        packet.extend([0, 3, 0, 21]);
        packet.extend([0; 12]);
        packet.extend(b"hello\0\0\0");
        assert_eq!(first_data_chunk(&packet), Some(&b"hello"[..]));
        assert_eq!(first_data_chunk(&packet[..16]), None, "no DATA chunk");
        assert_eq!(first_data_chunk(&[0u8; 16]), None, "a zero chunk length is refused, not looped on");
    }
}
