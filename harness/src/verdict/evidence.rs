//! The second and third witnesses of every attempt, after the client's own classification:
//! the frames captured on the wire, and the translating node's conntrack table.
//!
//! - Answered: a frame from the source the backend reported to the backend's own address and
//!   target port reached the backend's interface; and the node that translated the flow holds
//!   a conntrack entry whose original tuple is client → frontend and whose reply tuple is
//!   backend → the source the backend saw.
//! - Rejected (by a rule on a node): an ICMP error for the flow came back from a node (or from
//!   an address nobody holds), never a TCP RST, which only a host's own stack sends.
//! - Closed (refused by a host's own stack): an RST or ICMP port unreachable came back.
//! - Dropped: the client sent it, nothing came back, and nothing of the flow left the node: no
//!   pod or other host received it, no frame of it left a node's uplink, and no node that had
//!   to drop it holds a conntrack entry for it. (An ARP request or neighbour solicitation
//!   carries no flow: it only names the next hop in a message.)
//! - Forwarded (un-translated, unanswered): a node sent it on, shown by one of those frames or
//!   entries, and nothing but an ICMP host unreachable (the node's neighbour resolution giving
//!   up) came back.
//!
//! Every check reads the frames of its own flow only (by source port), so probes whose
//! windows overlap (a phase's silent probes, sent together) cannot vouch for one another.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

use super::{Failure, Faults, Symptom};
use crate::model::{Cluster, Probe, Target};
use crate::observe::{Flow, Frame, L4, Packet};
use crate::oracle::{Outcome, SeenSource};
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
/// Where a backend's frames are captured: a backend is a pod, an external host or a node
/// (host-network) that is an endpoint.
pub(crate) fn backend_capture_points(cluster: &Cluster, backend: &str) -> Vec<String> {
    if cluster.pod(backend).is_some() {
        vec![format!("pod/{backend}")]
    } else if cluster.node(backend).is_some() {
        vec![format!("node/{backend}"), format!("node/{backend}/lo"), format!("bridge/{backend}")]
    } else {
        vec![format!("external/{backend}")]
    }
}

pub(crate) fn client_capture_points(probe: &Probe) -> Vec<String> {
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
) -> Vec<Failure> {
    let mut faults = Faults::default();
    let client_frames: Vec<&Frame> =
        client_capture_points(probe).iter().filter_map(|k| evidence.frames.get(k)).flatten().collect();
    for s in sent {
        let flow = FlowOf { probe, source_port: s.source_port, dst };
        let fault = match (&s.attempt, outcome) {
            (Attempt::Answered { pod, seen }, Outcome::Answered { translated_by, backends, .. }) => {
                let attempt = AnsweredAttempt { source_port: s.source_port, pod, seen: *seen };
                let masqueraded = matches!(backends.get(pod.as_str()), Some(SeenSource::Masqueraded { .. }));
                answered(cluster, probe, dst, &attempt, translated_by.as_deref(), masqueraded, evidence)
            }
            (Attempt::Refused { .. }, Outcome::Rejected) => {
                rejected(cluster, &flow, &client_frames, evidence)
            }
            (Attempt::Refused { .. }, Outcome::Closed { host }) => {
                closed(&flow, host, &client_frames, evidence)
            }
            (Attempt::Silent | Attempt::Refused { .. }, Outcome::Dropped) => {
                dropped(cluster, &flow, &s.attempt, &client_frames, evidence)
            }
            (Attempt::Silent | Attempt::Refused { .. }, Outcome::Forwarded) => {
                forwarded_unanswered(cluster, &flow, &client_frames, evidence)
            }
            (Attempt::Silent, Outcome::Unanswered { backends, translated_by }) => {
                unanswered(cluster, &flow, backends, translated_by, &client_frames, evidence)
            }
            // A wrong classification is already a failure of its own; no second opinion needed.
            _ => None,
        };
        faults.add(fault);
    }
    faults.counted(sent.len())
}

/// The attempts (positions in `sent`, in order) whose request never left the client, by the
/// client's own capture: no packet of their flow went out of its interface. A pod's or an
/// external host's packet leaves it before any node, whatever a proxy does, so such an attempt
/// proves nothing about the proxy: its socket and its capture disagree about what was sent. (A
/// node's own traffic may be dropped in OUTPUT, before any interface, and a host's traffic to
/// its own address stays on its loopback: neither is ever set apart.)
pub fn never_left(
    cluster: &Cluster,
    probe: &Probe,
    dst: SocketAddr,
    sent: &[Sent],
    evidence: &Evidence,
) -> Vec<usize> {
    let to_itself = match &probe.from {
        crate::model::Source::Node(_) => return Vec::new(),
        crate::model::Source::Pod(p) => cluster.pod(p).is_some_and(|p| p.ips.contains(&dst.ip())),
        crate::model::Source::External(h) => {
            cluster.external_hosts.iter().any(|x| x.name == *h && x.ips.contains(&dst.ip()))
        }
    };
    if to_itself || dst.ip().is_loopback() {
        return Vec::new();
    }
    let points = client_capture_points(probe);
    if points.iter().any(|k| !evidence.frames.contains_key(k)) {
        return Vec::new();
    }
    let left: std::collections::BTreeSet<u16> = points
        .iter()
        .filter_map(|k| evidence.frames.get(k))
        .flatten()
        .filter(|f| f.outgoing)
        .filter_map(|f| f.packet.as_ref())
        .filter(|p| same_protocol(p, probe.protocol))
        .filter_map(|p| p.l4.ports().map(|(sp, _)| sp))
        .collect();
    sent.iter().enumerate().filter(|(_, s)| !left.contains(&s.source_port)).map(|(i, _)| i).collect()
}

/// Of the attempts at `ports`, those whose request left the client only after the probe's
/// `window` had closed, by the client's own capture (`evidence`: the whole run's): the client
/// was kept from sending in time, so they say nothing of the proxy either.
/// A probe with a fixed source port has none: its later phases' attempts share the port.
pub fn left_late(probe: &Probe, ports: &[u16], evidence: &Evidence, window: &Window) -> BTreeSet<u16> {
    if probe.source_port.is_some() {
        return BTreeSet::new();
    }
    client_capture_points(probe)
        .iter()
        .filter_map(|k| Some((evidence.frames.get(k)?, window.frames.get(k)?.end)))
        .flat_map(|(frames, end)| frames.get(end..).unwrap_or_default())
        .filter(|f| f.outgoing)
        .filter_map(|f| f.packet.as_ref())
        .filter(|p| same_protocol(p, probe.protocol))
        .filter_map(|p| p.l4.ports().map(|(sp, _)| sp))
        .filter(|sp| ports.contains(sp))
        .collect()
}

/// Whether `p` is of `protocol` (TCP, UDP, SCTP; never an ICMP error about one).
fn same_protocol(p: &Packet, protocol: crate::model::Protocol) -> bool {
    matches!(
        (&p.l4, protocol),
        (L4::Tcp { .. }, crate::model::Protocol::Tcp)
            | (L4::Udp { .. }, crate::model::Protocol::Udp)
            | (L4::Sctp { .. }, crate::model::Protocol::Sctp)
    )
}

/// A witness contradicting the client: the packets took another path than the outcome's.
fn wrong_path(message: String) -> Failure {
    Failure::new(Symptom::WrongPath, message)
}

/// The flow went on past a node that should have stopped it.
fn leaked(message: String) -> Failure {
    Failure::new(Symptom::Leaked, message)
}

/// One attempt's flow: the probe's protocol from `source_port` to `dst`. Source ports are
/// never reused within a scenario, so the port alone names the flow's packets wherever they
/// are seen, translated or not (masquerade keeps the port unless two flows collide).
struct FlowOf<'a> {
    probe: &'a Probe,
    source_port: u16,
    dst: SocketAddr,
}

impl FlowOf<'_> {
    /// A packet of the flow going forward (not a reply, not an ICMP error about it).
    fn is_forward(&self, p: &Packet) -> bool {
        same_protocol(p, self.probe.protocol) && p.l4.ports().is_some_and(|(sp, _)| sp == self.source_port)
    }

    /// A conntrack entry of the flow: its source port and destination before NAT.
    fn is_entry(&self, f: &Flow) -> bool {
        f.ip_protocol == ip_protocol(self.probe.protocol)
            && f.original.src.port() == self.source_port
            && f.original.dst == self.dst
    }

    fn describe(&self) -> String {
        format!(":{} > {}", self.source_port, self.dst)
    }
}

/// Who holds `ip` in the cluster: `node NAME`, `pod NAME` or `external host NAME`.
fn holder(cluster: &Cluster, ip: std::net::IpAddr) -> Option<String> {
    if let Some(n) = cluster
        .nodes
        .iter()
        .find(|n| n.node_network_ips().any(|a| a == ip) || crate::model::bridge_address(&n.pod_cidr()) == ip)
    {
        return Some(format!("node {}", n.name));
    }
    if let Some(p) = cluster.pod_by_ip(ip) {
        return Some(format!("pod {}", p.name));
    }
    let host = cluster.external_hosts.iter().find(|h| h.ips.contains(&ip))?;
    Some(format!("external host {}", host.name))
}

/// Evidence that the flow went on past the node it entered, if there is any: it reached a pod
/// or another external host, a frame of it left a node, or a node holds a confirmed conntrack
/// entry for it (named with the ARP request or neighbour solicitation for its destination the
/// node sent, if it sent one: the next hop it was forwarding toward). Each reads as
/// "forwarded …: what was seen, and where". An ARP request alone proves nothing about this
/// flow: a straggling packet of another flow to the same address can cause it.
fn forwarding(cluster: &Cluster, flow: &FlowOf<'_>, evidence: &Evidence) -> Option<String> {
    let client_point = client_capture_points(flow.probe);
    // A node's own process sends the flow out of that node as addressed: that is the client
    // sending, not forwarding, unless the destination is an address nobody holds, which a
    // rule had to catch.
    let dst_holder = holder(cluster, flow.dst.ip());
    let held = dst_holder.is_some();
    let seen = |key: &str, f: &Frame| -> Option<String> {
        let own = client_point.iter().any(|c| c == key);
        if own && !key.starts_with("node/") {
            return None;
        }
        // A node routing the flow, as addressed, toward the node that holds its destination
        // (a pod's node on the way to another node's node port) brings it to where it is
        // dropped, not past it.
        let toward_holder = key.strip_prefix("node/").is_some_and(|n| {
            dst_holder.as_deref().and_then(|h| h.strip_prefix("node ")).is_some_and(|h| h != n)
        });
        let as_sent = |p: &&Packet| (own || toward_holder) && held && p.dst == flow.dst.ip();
        if let Some(p) = f.packet.as_ref().filter(|p| flow.is_forward(p) && !as_sent(p)) {
            if let Some(pod) = key.strip_prefix("pod/").filter(|_| !f.outgoing) {
                return Some(format!("forwarded: pod {pod} received {p} (seen on {key})"));
            }
            if let Some(host) = key.strip_prefix("external/").filter(|_| !f.outgoing) {
                return Some(format!("forwarded: external host {host} received {p} (seen on {key})"));
            }
            if let Some(node) = key.strip_prefix("node/").filter(|k| !k.contains('/') && f.outgoing) {
                let next = holder(cluster, p.dst).unwrap_or_else(|| "nobody in the cluster".into());
                return Some(format!(
                    "forwarded: {p} left node {node} toward {} ({next}) (seen on {key}, outgoing)",
                    p.dst
                ));
            }
        }
        None
    };
    if let Some(found) =
        evidence.frames.iter().find_map(|(key, frames)| frames.iter().find_map(|f| seen(key, f)))
    {
        return Some(found);
    }
    // A flow that a node dropped leaves no confirmed conntrack entry there (a dropped packet
    // never confirms its entry); one the node let through does, keyed by this attempt's own
    // source port. The client's own node passing traffic on to a held address is the client
    // sending; the node that holds the address, or any node for an address nobody holds, must
    // have dropped it.
    let dst_holder = holder(cluster, flow.dst.ip());
    let (node, entry) = evidence.conntrack.iter().find_map(|(node, flows)| {
        let relevant = dst_holder.as_ref().is_none_or(|h| *h == format!("node {node}"));
        let entry = flows.iter().find(|f| flow.is_entry(f)).filter(|_| relevant)?;
        Some((node, entry))
    })?;
    let asked = evidence.frames.get(&format!("node/{node}")).and_then(|frames| {
        frames
            .iter()
            .filter(|f| f.outgoing)
            .filter_map(Frame::neighbour_request)
            .find(|r| r.target == flow.dst.ip())
    });
    let next_hop = match asked {
        Some(r) => format!(", and sent {r} (seen on node/{node}): it forwarded the flow toward {}", r.target),
        None => String::new(),
    };
    Some(format!(
        "forwarded, unanswered: node {node} let it through (its conntrack table holds {entry}){next_hop}"
    ))
}

/// What came back to the client for its flow that refuses it: an RST or an ICMP error.
fn refusal<'f>(client_frames: &[&'f Frame], flow: &FlowOf<'_>) -> Option<&'f Packet> {
    client_frames.iter().filter_map(|f| f.packet.as_ref()).find(|p| {
        answers_flow(p, flow.source_port, flow.dst)
            && matches!(p.l4, L4::IcmpError { .. } | L4::Tcp { rst: true, .. })
    })
}

/// Where the client's capture took `p`, for messages: `external/outside`.
fn seen_at(evidence: &Evidence, flow: &FlowOf<'_>, p: &Packet) -> String {
    client_capture_points(flow.probe)
        .into_iter()
        .find(|k| {
            evidence
                .frames
                .get(k)
                .is_some_and(|fs| fs.iter().any(|f| f.packet.as_ref().is_some_and(|q| std::ptr::eq(q, p))))
        })
        .unwrap_or_else(|| "the client".into())
}

/// An ICMP error that says a router or the sender's own neighbour resolution gave up on the
/// destination: the packet was forwarded, not rejected by a rule.
fn is_unreachable_host(p: &Packet) -> bool {
    matches!(&p.l4, L4::IcmpError { kind, .. } if kind == "host unreachable" || kind == "address unreachable")
}

/// Rejected by a rule on a node: an ICMP error (kube-proxy's REJECT never resets) from a node
/// (or from an address nobody holds), and the flow went no further.
fn rejected(
    cluster: &Cluster,
    flow: &FlowOf<'_>,
    client_frames: &[&Frame],
    evidence: &Evidence,
) -> Option<Failure> {
    let Some(p) = refusal(client_frames, flow) else {
        return Some(wrong_path(format!(
            "on the wire: refused, but no RST or ICMP error for {} reached the client",
            flow.describe()
        )));
    };
    let by = holder(cluster, p.src);
    let at = seen_at(evidence, flow, p);
    if matches!(p.l4, L4::Tcp { .. }) {
        let host = by.unwrap_or_else(|| format!("the host at {}", p.src));
        return Some(Failure::new(
            Symptom::RefusedByHost,
            format!(
                "reset by a host, not rejected by a rule: {p} came back (seen on {at}), so {host}'s own \
                 stack received the SYN un-translated (a REJECT rule answers with an ICMP error)"
            ),
        ));
    }
    if is_unreachable_host(p) {
        let by = by.unwrap_or_else(|| p.src.to_string());
        return Some(leaked(format!(
            "forwarded, not rejected: {p} came back (seen on {at}): {by} forwarded the flow and its \
             neighbour resolution for the destination failed"
        )));
    }
    if let Some(host) = by.as_deref().filter(|h| !h.starts_with("node ")) {
        return Some(Failure::new(
            Symptom::RefusedByHost,
            format!(
                "refused by {host}'s own stack, not rejected by a rule on a node: {p} came back (seen on {at})"
            ),
        ));
    }
    forwarding(cluster, flow, evidence).map(|f| leaked(format!("rejected to the client, yet {f}")))
}

/// Refused by `host`'s own stack: an RST or ICMP port unreachable came back, not a sign of
/// forwarding gone wrong.
fn closed(flow: &FlowOf<'_>, host: &str, client_frames: &[&Frame], evidence: &Evidence) -> Option<Failure> {
    match refusal(client_frames, flow) {
        None => Some(wrong_path(format!(
            "on the wire: refused, but no RST or ICMP error for {} reached the client",
            flow.describe()
        ))),
        Some(p) if is_unreachable_host(p) => Some(Failure::new(
            Symptom::Other,
            format!(
                "{p} came back (seen on {}): the flow never reached {host}, whose closed port had to refuse it",
                seen_at(evidence, flow, p)
            ),
        )),
        Some(_) => None,
    }
}

/// Dropped: the client sent it, nothing came back, and nothing of it left the node.
fn dropped(
    cluster: &Cluster,
    flow: &FlowOf<'_>,
    attempt: &Attempt,
    client_frames: &[&Frame],
    evidence: &Evidence,
) -> Option<Failure> {
    if let Some(f) = forwarding(cluster, flow, evidence) {
        return Some(leaked(format!("not dropped: {f}")));
    }
    if matches!(attempt, Attempt::Silent)
        && let Some(p) = silent(client_frames, flow.source_port, flow.dst)
    {
        return Some(p);
    }
    let from_node = matches!(flow.probe.from, crate::model::Source::Node(_));
    let left_client = client_frames
        .iter()
        .filter(|f| f.outgoing)
        .filter_map(|f| f.packet.as_ref())
        .any(|p| flow.is_forward(p));
    // A node's own traffic is dropped in OUTPUT, before any interface sees it.
    // (`never_left` sets such attempts apart before they are judged; this stays for callers
    // that judge attempts directly.)
    (!from_node && !left_client).then(|| {
        Failure::witnesses_disagree(format!(
            "the client's capture shows no packet {} leaving it: nothing to drop",
            flow.describe()
        ))
    })
}

/// Forwarded un-translated and unanswered: a node sent it on (a frame of it left, or the node
/// asked for its destination's link address), and nothing but the node's own "host
/// unreachable" came back.
fn forwarded_unanswered(
    cluster: &Cluster,
    flow: &FlowOf<'_>,
    client_frames: &[&Frame],
    evidence: &Evidence,
) -> Option<Failure> {
    if let Some(p) = refusal(client_frames, flow).filter(|p| !is_unreachable_host(p)) {
        return Some(wrong_path(format!(
            "expected forwarded un-translated, but {p} came back (seen on {}): something refused it",
            seen_at(evidence, flow, p)
        )));
    }
    if forwarding(cluster, flow, evidence).is_none() {
        return Some(wrong_path(format!(
            "expected forwarded un-translated, but no frame of {} left any node and no node asked for \
             {}'s link address: it was dropped",
            flow.describe(),
            flow.dst.ip()
        )));
    }
    None
}

/// Forwarded to an endpoint, unanswered: a frame of the flow, translated to the address of
/// one of `backends` with the client's own source port (not masqueraded), left the translating
/// node or reached that backend's interface, and nothing for the flow came back to the client.
fn unanswered(
    cluster: &Cluster,
    flow: &FlowOf<'_>,
    backends: &[String],
    translated_by: &str,
    client_frames: &[&Frame],
    evidence: &Evidence,
) -> Option<Failure> {
    if let Some(p) = silent(client_frames, flow.source_port, flow.dst) {
        return Some(p);
    }
    let sent_on = backends.iter().any(|pod| {
        let Some(addr) = backend_address(cluster, flow.probe, flow.dst, pod) else { return false };
        let toward = |p: &Packet| {
            flow.is_forward(p) && p.dst == addr.ip() && p.l4.ports().is_some_and(|(_, d)| d == addr.port())
        };
        let left = evidence
            .frames
            .get(&format!("node/{translated_by}"))
            .into_iter()
            .flatten()
            .filter(|f| f.outgoing);
        let arrived = [format!("pod/{pod}"), format!("node/{pod}")]
            .into_iter()
            .filter_map(|k| evidence.frames.get(&k))
            .flatten()
            .filter(|f| !f.outgoing);
        left.chain(arrived).filter_map(|f| f.packet.as_ref()).any(toward)
    });
    (!sent_on).then(|| {
        wrong_path(format!(
            "expected forwarded to {} and unanswered, but no frame of {} translated to them left node {translated_by} \
             or reached them",
            backends.join("|"),
            flow.describe()
        ))
    })
}

/// One answered attempt: its client's source port, the backend that answered and the source
/// address and port that backend saw.
struct AnsweredAttempt<'a> {
    source_port: u16,
    pod: &'a str,
    seen: SocketAddr,
}

fn answered(
    cluster: &Cluster,
    probe: &Probe,
    dst: SocketAddr,
    attempt: &AnsweredAttempt<'_>,
    translated_by: Option<&str>,
    masqueraded: bool,
    evidence: &Evidence,
) -> Option<Failure> {
    let AnsweredAttempt { source_port, pod, seen } = *attempt;
    // Missing evidence is a failure: a witness that was never asked cannot vouch for anything.
    let Some(backend) = backend_address(cluster, probe, dst, pod) else {
        return Some(Failure::new(
            Symptom::WrongBackend,
            format!("{pod} answered, but it backs no endpoint of this destination"),
        ));
    };
    let points = backend_capture_points(cluster, pod);
    let frames: Vec<&Frame> = points.iter().filter_map(|p| evidence.frames.get(p)).flatten().collect();
    if points.iter().all(|p| !evidence.frames.contains_key(p)) {
        return Some(wrong_path(format!("on the wire: nothing was captured at {pod}")));
    }
    let host_network = cluster.node(pod).is_some();
    // A host-network endpoint's own node may give the flow another source port after every
    // capture point (NAT clash resolution: its null binding, or the DNAT of a node port it
    // translates itself, finds the reply tuple taken): the frame then carries the port the flow
    // arrived with, which that node's entry pairs with the one the backend saw.
    let arrived: Vec<SocketAddr> = match evidence.conntrack.get(pod).filter(|_| host_network) {
        Some(flows) => std::iter::once(seen)
            .chain(
                flows
                    .iter()
                    .filter(|g| remapped(g, ip_protocol(probe.protocol), backend, seen))
                    .map(|g| g.original.src),
            )
            .collect(),
        None => vec![seen],
    };
    let opened = |to: SocketAddr| {
        frames
            .iter()
            .filter_map(|f| f.packet.as_ref())
            .any(|p| arrived.iter().any(|&from| opens_flow(p, from, to)))
    };
    // A host-network endpoint on the very node that translates: IPVS rewrites the destination
    // in LOCAL_IN, after every capture point, and hands the packet to the node's own stack, so
    // the translated packet crosses no interface. The flow entering that node for the frontend
    // is the wire's witness there; the conntrack entry below names the backend.
    let own_node_backend = host_network && translated_by == Some(pod);
    if !opened(backend) && (!own_node_backend || !opened(dst)) {
        // Every way into a pod or a node crosses a captured interface: an answer whose request
        // none of them saw is the capture's failure, whatever the proxy did.
        return Some(Failure::witnesses_disagree(format!(
            "{pod} answered {seen}, yet no packet {seen} > {backend} reached {pod}'s interface"
        )));
    }
    // Traffic sent straight to a pod is translated nowhere.
    let node = translated_by?;
    let Some(flows) = evidence.conntrack.get(node) else {
        return Some(wrong_path(format!("conntrack on {node} was not read")));
    };
    let entry = flows.iter().find(|f| f.original.dst == dst && f.original.src.port() == source_port);
    let fault = match entry {
        None => Some(format!("conntrack on {node}: no entry for source port {source_port} > {dst}")),
        Some(f) if f.reply.src != backend || !reaches_seen(evidence, node, f, seen) => {
            Some(format!("conntrack on {node}: expected reply tuple {backend} > {seen}, found entry {f}"))
        }
        // The address a backend saw can coincide with a masquerade's (a node's own address);
        // the translating node's entry still tells: without source NAT its reply goes back to
        // the address the flow came from.
        Some(f) if !masqueraded && f.reply.dst.ip() != f.original.src.ip() => Some(format!(
            "conntrack on {node}: source NAT where none is due: the flow from {} is answered to {}",
            f.original.src, f.reply.dst
        )),
        Some(_) => None,
    };
    fault.map(wrong_path)
}

/// Whether the translating node's entry `f` leads to the source the backend saw: its reply
/// goes to `seen`, or to `seen`'s address at a port another node's kernel then remapped to
/// `seen`'s. NAT clash resolution may do that on any node the flow crosses (its null binding
/// picks a free port when the tuple is taken), so the flow's identity is its address and the
/// entry of the node that remapped it, not one port.
fn reaches_seen(evidence: &Evidence, node: &str, f: &Flow, seen: SocketAddr) -> bool {
    if f.reply.dst == seen {
        return true;
    }
    let backend = f.reply.src;
    f.reply.dst.ip() == seen.ip()
        && evidence.conntrack.iter().filter(|(other, _)| other.as_str() != node).any(|(_, flows)| {
            flows.iter().any(|g| {
                remapped(g, f.ip_protocol, backend, seen)
                    && g.original.src == f.reply.dst
                    && g.original.dst == backend
            })
        })
}

/// Whether `g` is the entry of a node that remapped a flow's source port (NAT clash
/// resolution, which keeps the address): its reply goes from `backend` to `seen`, the source
/// the backend saw, from the address the flow came from.
fn remapped(g: &Flow, protocol: u8, backend: SocketAddr, seen: SocketAddr) -> bool {
    g.ip_protocol == protocol
        && g.reply.src == backend
        && g.reply.dst == seen
        && g.original.src.ip() == seen.ip()
}

/// The IP protocol number conntrack records for `protocol`.
fn ip_protocol(protocol: crate::model::Protocol) -> u8 {
    match protocol {
        crate::model::Protocol::Tcp => 6,
        crate::model::Protocol::Udp => 17,
        crate::model::Protocol::Sctp => 132,
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
            if cluster.pod(pod).is_some_and(|p| p.ip() == dst.ip()) {
                return Some(dst);
            }
            cluster.services.iter().flat_map(|s| s.ports.iter().map(move |p| (s, p))).find_map(|(s, p)| {
                let frontend =
                    (s.cluster_ip() == dst.ip() && p.port == dst.port()) || p.node_port == Some(dst.port());
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

fn silent(client_frames: &[&Frame], source_port: u16, dst: SocketAddr) -> Option<Failure> {
    let answer =
        client_frames.iter().filter_map(|f| f.packet.as_ref()).find(|p| answers_flow(p, source_port, dst));
    answer.map(|p| {
        wrong_path(format!("on the wire: silent to the client's socket, yet the client's capture took {p}"))
    })
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
    const BACKEND_IP: &str = "10.244.2.7";

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn cluster() -> Cluster {
        let text = include_str!("../../../scenarios/kube-dns-udp.yaml");
        crate::admission::load_str(text, std::path::Path::new("kube-dns-udp.yaml")).unwrap().cluster
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
            request: None,
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
            .into_iter()
            .map(|f| f.message)
            .collect()
    }

    #[test]
    fn all_witnesses_agree() {
        let e = evidence(vec![frame(udp(CLIENT, BACKEND))], vec![flow(BACKEND)]);
        assert_eq!(run(&e, &answered_outcome(), &answered_sent()), Vec::<String>::new());
    }

    #[test]
    fn an_answer_whose_request_no_capture_saw_arrive_is_a_harness_fault() {
        // The backend answered, yet its capture holds the packet still addressed to the VIP:
        // a pod cannot answer what never reached it, so the capture, not the proxy, failed.
        let e = evidence(vec![frame(udp(CLIENT, VIP))], vec![flow(BACKEND)]);
        let failures = check(&cluster(), &probe(), addr(VIP), &answered_outcome(), &answered_sent(), &e);
        assert_eq!(
            failures,
            ["witnesses disagree: coredns-b answered 10.244.1.20:20000, yet no packet 10.244.1.20:20000 > \
                 10.244.2.7:53 reached coredns-b's interface (1 of 1 attempts)"]
        );
        assert!(failures[0].is_harness_fault());
    }

    #[test]
    fn attempts_that_never_left_the_client_are_told_apart() {
        let sent: Vec<Sent> = [20000, 20001, 20002]
            .map(|port| Sent { source_port: port, request: None, attempt: Attempt::Silent })
            .into();
        let left = |port: u16| outgoing(udp(&format!("10.244.1.20:{port}"), VIP));
        let e = at(vec![("pod/client", vec![left(20001)])]);
        assert_eq!(never_left(&cluster(), &probe(), addr(VIP), &sent, &e), [0, 2]);
        // Without the client's capture nothing can be told; a node's own traffic never is.
        assert!(never_left(&cluster(), &probe(), addr(VIP), &sent, &at(vec![])).is_empty());
        let mut from_node = probe();
        from_node.from = Source::Node("node-a".into());
        let on_node = at(vec![("node/node-a", vec![])]);
        assert!(never_left(&cluster(), &from_node, addr(VIP), &sent, &on_node).is_empty());
    }

    #[test]
    fn attempts_whose_request_left_after_the_window_are_told_apart_as_late() {
        let left = |port: u16| outgoing(udp(&format!("10.244.1.20:{port}"), VIP));
        let e = at(vec![("pod/client", vec![left(20001), left(20002)])]);
        let window = Window { frames: [("pod/client".to_string(), 0..1)].into() };
        let late = left_late(&probe(), &[20000, 20002], &e, &window);
        assert_eq!(late.into_iter().collect::<Vec<_>>(), [20002]);
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

    /// A backend seeing an address a masquerade could also give (a node's own, here the
    /// client's) is not enough where no masquerade is due: the translating node's entry must
    /// answer the flow at the address it came from.
    #[test]
    fn source_nat_where_none_is_due_fails() {
        let masq = "192.168.50.2:31000";
        let snat = Flow { reply: Tuple { src: addr(BACKEND), dst: addr(masq) }, ..flow(BACKEND) };
        let sent = vec![Sent {
            source_port: 20000,
            request: None,
            attempt: Attempt::Answered { pod: "coredns-b".into(), seen: addr(masq) },
        }];
        let e = evidence(vec![frame(udp(masq, BACKEND))], vec![snat]);
        let failures = run(&e, &answered_outcome(), &sent);
        assert_eq!(
            failures,
            [
                "conntrack on node-a: source NAT where none is due: the flow from 10.244.1.20:20000 is answered to \
              192.168.50.2:31000 (1 of 1 attempts)"
            ]
        );
        // The same entry where a masquerade is due passes.
        let Outcome::Answered { spread, translated_by, .. } = answered_outcome() else { unreachable!() };
        let seen = SeenSource::Masqueraded { node: "node-a".into(), addrs: vec![addr(masq).ip()] };
        let masqueraded =
            Outcome::Answered { backends: [("coredns-b".into(), seen)].into(), spread, translated_by };
        assert_eq!(run(&e, &masqueraded, &sent), Vec::<String>::new());
    }

    /// The false failure of `all-flows` (hairpin through another node's node port, nftables):
    /// node-a masqueraded the flow to port 20403, and the kernel of the node it crossed next
    /// remapped the port to 9869 (NAT clash resolution), which the backend saw. The entry of
    /// the node that remapped it proves the flow is one; without that entry it fails.
    #[test]
    fn a_port_remapped_on_another_node_is_the_same_flow() {
        let (masq, remapped) = ("192.168.50.2:20403", "192.168.50.2:9869");
        let translated = Flow { reply: Tuple { src: addr(BACKEND), dst: addr(masq) }, ..flow(BACKEND) };
        let remap = Flow {
            ip_protocol: 17,
            original: Tuple { src: addr(masq), dst: addr(BACKEND) },
            reply: Tuple { src: addr(BACKEND), dst: addr(remapped) },
            state: None,
            seen_reply: true,
        };
        let sent = vec![Sent {
            source_port: 20000,
            request: None,
            attempt: Attempt::Answered { pod: "coredns-b".into(), seen: addr(remapped) },
        }];
        let Outcome::Answered { spread, translated_by, .. } = answered_outcome() else { unreachable!() };
        let seen = SeenSource::Masqueraded { node: "node-a".into(), addrs: vec![addr(masq).ip()] };
        let outcome =
            Outcome::Answered { backends: [("coredns-b".into(), seen)].into(), spread, translated_by };
        let mut e = evidence(vec![frame(udp(remapped, BACKEND))], vec![translated]);
        let failures = run(&e, &outcome, &sent);
        assert!(failures[0].starts_with("conntrack on node-a: expected reply tuple"), "{failures:?}");
        e.conntrack.insert("node-b".into(), vec![remap]);
        assert_eq!(run(&e, &outcome, &sent), Vec::<String>::new());
    }

    #[test]
    fn missing_evidence_fails() {
        let e = Evidence::default();
        assert!(
            run(&e, &answered_outcome(), &answered_sent())[0].contains("nothing was captured at coredns-b")
        );
    }

    fn outgoing(packet: Packet) -> Frame {
        Frame { outgoing: true, ..frame(packet) }
    }

    fn at(points: Vec<(&str, Vec<Frame>)>) -> Evidence {
        Evidence {
            frames: points.into_iter().map(|(k, f)| (k.to_string(), f)).collect(),
            ..Default::default()
        }
    }

    fn icmp(kind: &str, from: &str) -> Packet {
        Packet {
            src: from.parse().unwrap(),
            dst: addr(CLIENT).ip(),
            l4: L4::IcmpError { kind: kind.into(), original: Some(Box::new(udp(CLIENT, VIP))) },
        }
    }

    /// `node-a` asking for `target`'s link address on its uplink.
    fn arp_request(target: [u8; 4]) -> Frame {
        use etherparse::{ArpHardwareId, ArpOperation, ArpPacket, EtherType, PacketBuilder};
        let request = ArpPacket::new(
            ArpHardwareId::ETHERNET,
            EtherType::IPV4,
            ArpOperation::REQUEST,
            &[2, 0, 0, 0, 0, 1],
            &[192, 168, 50, 11],
            &[0; 6],
            &target,
        )
        .unwrap();
        let mut data = Vec::new();
        PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [0xff; 6]).arp(request).write(&mut data).unwrap();
        Frame { timestamp: SystemTime::UNIX_EPOCH, data, packet: None, outgoing: true }
    }

    fn silent() -> Vec<Sent> {
        vec![Sent { source_port: 20000, request: None, attempt: Attempt::Silent }]
    }

    fn refused() -> Vec<Sent> {
        vec![Sent { source_port: 20000, request: None, attempt: Attempt::Refused { reason: "x".into() } }]
    }

    #[test]
    fn refusal_needs_an_rst_or_icmp_error_and_silence_needs_nothing_back() {
        let sent = outgoing(udp(CLIENT, VIP));
        let port_unreachable = icmp("port unreachable", "10.244.1.1");
        let e = at(vec![("pod/client", vec![sent.clone(), frame(port_unreachable.clone())])]);
        assert!(run(&e, &Outcome::Rejected, &refused()).is_empty());
        assert_eq!(
            run(&at(vec![("pod/client", vec![sent.clone()])]), &Outcome::Rejected, &refused()).len(),
            1
        );
        assert!(run(&at(vec![("pod/client", vec![sent.clone()])]), &Outcome::Dropped, &silent()).is_empty());
        assert_eq!(run(&e, &Outcome::Dropped, &silent()).len(), 1);
        // Silent, but the client never sent anything: there was nothing to drop.
        assert_eq!(run(&at(vec![("pod/client", vec![])]), &Outcome::Dropped, &silent()).len(), 1);
    }

    #[test]
    fn a_rule_rejects_with_an_icmp_error_and_a_host_resets() {
        let sent = outgoing(udp(CLIENT, VIP));
        let from_a_pod =
            at(vec![("pod/client", vec![sent.clone(), frame(icmp("port unreachable", BACKEND_IP))])]);
        assert_eq!(
            run(&from_a_pod, &Outcome::Rejected, &refused()),
            [
                "refused by pod coredns-b's own stack, not rejected by a rule on a node: ICMP port unreachable \
              from 10.244.2.7 for 10.244.1.20:20000 > 10.96.0.10:53 UDP came back (seen on pod/client) (1 of 1 attempts)"
            ]
        );
        let unreachable =
            at(vec![("pod/client", vec![sent.clone(), frame(icmp("host unreachable", "10.244.1.1"))])]);
        let failures = run(&unreachable, &Outcome::Rejected, &refused());
        assert!(
            failures[0].starts_with("forwarded, not rejected: ICMP host unreachable from 10.244.1.1"),
            "{failures:?}"
        );
        // The same host unreachable is what forwarding to an address nobody holds ends in.
        assert!(
            run(&unreachable, &Outcome::Closed { host: "node-b".into() }, &refused())[0]
                .contains("never reached node-b")
        );
    }

    #[test]
    fn a_tcp_reset_is_a_hosts_not_a_rules() {
        let tcp = |src: &str, dst: &str, syn, rst| {
            let (s, d) = (addr(src), addr(dst));
            Packet {
                src: s.ip(),
                dst: d.ip(),
                l4: L4::Tcp { src_port: s.port(), dst_port: d.port(), syn, ack: rst, rst, fin: false },
            }
        };
        let node_port = "192.168.50.12:30053";
        let probe = Probe { protocol: Protocol::Tcp, ..probe() };
        let e = at(vec![(
            "pod/client",
            vec![outgoing(tcp(CLIENT, node_port, true, false)), frame(tcp(node_port, CLIENT, false, true))],
        )]);
        let failures = check(&cluster(), &probe, addr(node_port), &Outcome::Rejected, &refused(), &e);
        assert_eq!(
            failures,
            [
                "reset by a host, not rejected by a rule: 192.168.50.12:30053 > 10.244.1.20:20000 TCP [R.] came back (seen on pod/client), \
              so node node-b's own stack received the SYN un-translated (a REJECT rule answers with an ICMP error) \
              (1 of 1 attempts)"
            ]
        );
        let closed = Outcome::Closed { host: "node-b".into() };
        assert!(check(&cluster(), &probe, addr(node_port), &closed, &refused(), &e).is_empty());
    }

    /// An un-translated, unanswered conntrack entry for source port `port` to the VIP.
    fn unanswered(port: u16) -> Flow {
        let client = SocketAddr::new(addr(CLIENT).ip(), port);
        Flow {
            ip_protocol: 17,
            original: Tuple { src: client, dst: addr(VIP) },
            reply: Tuple { src: addr(VIP), dst: client },
            state: None,
            seen_reply: false,
        }
    }

    #[test]
    fn a_node_that_let_the_flow_through_forwarded_it() {
        let sent = outgoing(udp(CLIENT, VIP));
        let arp = ("node/node-a", vec![arp_request([10, 96, 0, 10])]);
        let passed = Evidence {
            conntrack: [("node-a".to_string(), vec![unanswered(20000)])].into(),
            ..at(vec![("pod/client", vec![sent.clone()]), arp.clone()])
        };
        assert_eq!(
            run(&passed, &Outcome::Dropped, &silent()),
            ["not dropped: forwarded, unanswered: node node-a let it through (its conntrack table holds \
              udp src=10.244.1.20 dst=10.96.0.10 sport=20000 dport=53 [UNREPLIED] src=10.96.0.10 dst=10.244.1.20 \
              sport=53 dport=20000), \
              and sent ARP who-has 10.96.0.10 tell 192.168.50.11 (seen on node/node-a): it forwarded the flow \
              toward 10.96.0.10 (1 of 1 attempts)"]
        );
        assert!(run(&passed, &Outcome::Forwarded, &silent()).is_empty());
        // Once the node's neighbour resolution gives up, host unreachable comes back: still forwarded.
        let later = Evidence {
            conntrack: passed.conntrack.clone(),
            ..at(vec![
                ("pod/client", vec![sent.clone(), frame(icmp("host unreachable", "10.244.1.1"))]),
                arp.clone(),
            ])
        };
        assert!(run(&later, &Outcome::Forwarded, &refused()).is_empty());
        assert_eq!(run(&later, &Outcome::Dropped, &refused()).len(), 1);
        // An ARP request for the address, caused by another flow (another source port), proves
        // nothing about this one; nor do the node's incoming frames.
        let other = Evidence {
            conntrack: [("node-a".to_string(), vec![unanswered(20001)])].into(),
            ..at(vec![
                ("pod/client", vec![sent.clone()]),
                ("node/node-a", vec![arp.1[0].clone(), frame(udp(CLIENT, VIP))]),
            ])
        };
        assert!(run(&other, &Outcome::Dropped, &silent()).is_empty());
        assert!(run(&other, &Outcome::Forwarded, &silent())[0].contains("it was dropped"));
        // A frame of the flow leaving a node is forwarding too.
        let left = at(vec![("pod/client", vec![sent]), ("node/node-a", vec![outgoing(udp(CLIENT, VIP))])]);
        assert!(run(&left, &Outcome::Dropped, &silent())[0].contains("left node node-a toward 10.96.0.10"));
    }

    #[test]
    fn routing_toward_the_node_that_drops_it_is_not_forwarding() {
        // A pod's flow to node-b's node port leaves node-a on its way there; leaving node-b
        // (the node that holds the address) it would have gone past it.
        let to_b = "192.168.50.12:30053";
        let to = Target::NodePort {
            service: "kube-dns".into(),
            port: "dns".into(),
            node: "node-b".into(),
            address: None,
        };
        let probe = Probe { protocol: Protocol::Udp, ..Probe::example(Source::Pod("client".into()), to) };
        let run = |at_node: &str| {
            let e = at(vec![
                ("pod/client", vec![outgoing(udp(CLIENT, to_b))]),
                (at_node, vec![outgoing(udp(CLIENT, to_b))]),
            ]);
            check(&cluster(), &probe, addr(to_b), &Outcome::Dropped, &silent(), &e)
        };
        assert!(run("node/node-a").is_empty(), "{:?}", run("node/node-a"));
        assert!(run("node/node-b")[0].message.contains("left node node-b toward 192.168.50.12"));
    }

    #[test]
    fn another_probes_flow_with_the_same_address_and_port_does_not_count() {
        // A masqueraded flow of an earlier probe reused the client's address and port.
        let earlier = frame(udp(CLIENT, BACKEND));
        let mut e = evidence(vec![earlier], vec![]);
        e.frames.insert("pod/client".into(), vec![]);
        assert_eq!(run(&e, &Outcome::Dropped, &silent()).len(), 1, "without a window it would count");
        let mut after_it: BTreeMap<String, std::ops::Range<usize>> =
            e.frames.iter().map(|(k, f)| (k.clone(), f.len()..f.len())).collect();
        e.frames.get_mut("pod/client").unwrap().push(outgoing(udp(CLIENT, VIP)));
        after_it.insert("pod/client".into(), 0..1);
        let during = e.during(&Window { frames: after_it });
        assert!(check(&cluster(), &probe(), addr(VIP), &Outcome::Dropped, &silent(), &during).is_empty());
    }

    #[test]
    fn a_drop_that_reached_a_pod_fails() {
        let mut e = evidence(vec![frame(udp(CLIENT, BACKEND))], vec![]);
        e.frames.insert("pod/client".into(), vec![outgoing(udp(CLIENT, VIP))]);
        let failures = run(&e, &Outcome::Dropped, &silent());
        assert_eq!(
            failures,
            [
                "not dropped: forwarded: pod coredns-b received 10.244.1.20:20000 > 10.244.2.7:53 UDP (seen on pod/coredns-b) \
              (1 of 1 attempts)"
            ]
        );
    }

    #[test]
    fn unanswered_needs_the_translated_flow_sent_on_and_nothing_back() {
        let outcome =
            Outcome::Unanswered { backends: vec!["coredns-b".into()], translated_by: "node-a".into() };
        // Left the translating node toward the backend, or reached it, with the client's port.
        let left = at(vec![("node/node-a", vec![outgoing(udp(CLIENT, BACKEND))])]);
        assert!(run(&left, &outcome, &silent()).is_empty());
        let reached = at(vec![("pod/coredns-b", vec![frame(udp(CLIENT, BACKEND))])]);
        assert!(run(&reached, &outcome, &silent()).is_empty());
        // Never sent on, or sent on masqueraded (another source port): not this outcome.
        assert!(run(&Evidence::default(), &outcome, &silent())[0].contains("no frame of :20000"));
        let masqueraded = at(vec![("node/node-a", vec![outgoing(udp("192.168.50.11:41000", BACKEND))])]);
        assert_eq!(run(&masqueraded, &outcome, &silent()).len(), 1);
        // Something came back to the client's capture.
        let mut answered = left;
        answered.frames.insert("pod/client".into(), vec![frame(udp(VIP, CLIENT))]);
        assert!(run(&answered, &outcome, &silent())[0].contains("silent to the client's socket"));
    }

    #[test]
    fn a_host_network_endpoint_on_the_translating_node_is_witnessed_by_the_flow_entering_it() {
        let text = include_str!("../../../scenarios/kubernetes-host-network-endpoints.yaml");
        let path = std::path::Path::new("kubernetes-host-network-endpoints.yaml");
        let cluster = crate::admission::load_str(text, path).unwrap().cluster;
        let to = Target::ClusterIp { service: "kubernetes".into(), port: "https".into() };
        let probe = Probe::example(Source::Pod("operator-0".into()), to);
        let (client, vip, backend) =
            (addr("10.244.1.70:20001"), addr("10.96.0.1:443"), addr("192.168.50.11:6443"));
        let syn = Packet {
            src: client.ip(),
            dst: vip.ip(),
            l4: L4::Tcp {
                src_port: client.port(),
                dst_port: vip.port(),
                syn: true,
                ack: false,
                rst: false,
                fin: false,
            },
        };
        let entry = Flow {
            ip_protocol: 6,
            original: Tuple { src: client, dst: vip },
            reply: Tuple { src: backend, dst: client },
            state: None,
            seen_reply: true,
        };
        let sent = vec![Sent {
            source_port: 20001,
            request: None,
            attempt: Attempt::Answered { pod: "control-plane-a".into(), seen: client },
        }];
        let outcome = |node: &str| Outcome::Answered {
            backends: [("control-plane-a".to_string(), SeenSource::Client { addrs: vec![client.ip()] })]
                .into(),
            spread: Spread::Uniform,
            translated_by: Some(node.into()),
        };
        let e = Evidence {
            frames: [("bridge/control-plane-a".to_string(), vec![frame(syn)])].into(),
            conntrack: [("control-plane-a".to_string(), vec![entry])].into(),
        };
        assert!(check(&cluster, &probe, vip, &outcome("control-plane-a"), &sent, &e).is_empty());
        // Translated elsewhere, the translated packet must have crossed control-plane-a's interface.
        let elsewhere = check(&cluster, &probe, vip, &outcome("control-plane-b"), &sent, &e);
        assert!(
            elsewhere[0].message.contains("no packet 10.244.1.70:20001 > 192.168.50.11:6443"),
            "{elsewhere:?}"
        );
    }
}
