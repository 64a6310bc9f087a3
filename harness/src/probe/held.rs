//! Held connections: a TCP connection a probe opens (`hold: true`) and keeps, judged like a
//! new connection, and later phases' checks of it (`held: NAME`): a line sent on it must
//! still be answered by the same backend, seeing the same source. A check may first send a
//! hand-made out-of-window segment on the connection's path ([`super::out_of_window`]).
//!
//! A check's witnesses are the wire and conntrack, as for a new connection, but for a flow
//! that already exists. The line sent on it must have reached the backend's interface as the
//! same flow (the source the backend saw when it opened, to the backend's address), and the
//! node that translated it must still hold the connection's entry, established, with the same
//! reply tuple: proof that the answer came through the translation made when the connection
//! opened, not through a new one.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use anyhow::{Context, Result};

use super::out_of_window::OutOfWindow;
use super::{Kind, NewFlow, Shipment, Wire, Witnesses};
use crate::model::{Cluster, Life, Probe, Profile, Target};
use crate::observe::{Flow, L4};
use crate::oracle::{self, Expectation, Outcome, Prediction};
use crate::traffic::held::{self, HeldConnection};
use crate::traffic::{Attempt, Sent};
use crate::verdict::evidence::{self, Evidence};
use crate::verdict::{Failure, Symptom};

/// The connections held so far, and what their openers were expected to do.
#[derive(Default)]
pub(super) struct Held {
    /// The expectation of each judged holding probe, by its name.
    opened: BTreeMap<String, Expectation>,
    /// The connections open, by the name of the probe that opened them.
    connections: BTreeMap<String, Connection>,
}

/// A connection a probe holds open for later phases, and who answered it when it opened:
/// the pod, its address, and the source it saw.
struct Connection {
    connection: HeldConnection,
    pod: String,
    backend: SocketAddr,
    seen: SocketAddr,
}

impl Kind for Held {
    fn claims(&self, probe: &Probe) -> bool {
        matches!(probe.life, Life::Hold | Life::Held { .. })
    }

    fn predict(&mut self, probe: &Probe, cluster: &Cluster, profile: Profile) -> Result<Prediction, String> {
        match &probe.life {
            // A held connection's fate is decided by the state it was opened in and this one.
            Life::Held { opener, out_of_window } => match self.opened.get(opener) {
                // The segment is made from the backend pod's capture and sent from its namespace.
                Some(Expectation { outcome: Outcome::Answered { backends, .. }, .. })
                    if *out_of_window && backends.keys().any(|b| cluster.pod(b).is_none()) =>
                {
                    Ok(Prediction::Open(
                        "an out-of-window segment from a host-network backend is not modelled".into(),
                    ))
                }
                // The hand-made segment is IPv4 only (`out_of_window`).
                Some(Expectation { outcome: Outcome::Answered { backends, .. }, .. })
                    if *out_of_window
                        && backends.keys().any(|b| cluster.pod(b).is_some_and(|p| p.ip().is_ipv6())) =>
                {
                    Ok(Prediction::Open("an out-of-window segment over IPv6 is not modelled".into()))
                }
                Some(at_open) => oracle::live::predict_held(at_open, cluster, probe, profile),
                None => Ok(Prediction::Open(format!("its opener {opener} is not judged"))),
            },
            _ => {
                let prediction = oracle::predict(cluster, probe, profile)?;
                if let Prediction::Expected(expectation) = &prediction {
                    self.opened.insert(probe.name.clone(), expectation.clone());
                }
                Ok(prediction)
            }
        }
    }

    fn send(&mut self, probe: &Probe, _expected: &Expectation, wire: &mut Wire<'_>) -> Result<Shipment> {
        match &probe.life {
            Life::Held { opener, out_of_window } => self.check(probe, opener, *out_of_window, wire),
            _ => self.open(probe, wire),
        }
    }
}

impl Held {
    /// Opens the connection; it is kept if a backend answered.
    fn open(&mut self, probe: &Probe, wire: &mut Wire<'_>) -> Result<Shipment> {
        // The reader refuses it: no connection to hold.
        if matches!(probe.to, Target::Localhost { .. }) {
            anyhow::bail!("probe {}: held connections to a node's 127.0.0.1: not modelled", probe.name);
        }
        let dst = wire.destination(probe)?;
        let (sent, connection) = held::open(wire.prober(&probe.from)?, dst)?;
        if let (Some(connection), Attempt::Answered { pod, seen }) = (connection, &sent.attempt) {
            let backend = backend(wire.cluster, probe, pod)?;
            let held = Connection { connection, pod: pod.clone(), backend, seen: *seen };
            self.connections.insert(probe.name.clone(), held);
        }
        Ok(Shipment { dst, sent: vec![sent], faults: Vec::new(), witnesses: Box::new(NewFlow) })
    }

    /// Sends a line on the connection `opener` holds, after an out-of-window segment if asked.
    fn check(
        &mut self,
        probe: &Probe,
        opener: &str,
        out_of_window: bool,
        wire: &mut Wire<'_>,
    ) -> Result<Shipment> {
        let before = wire.frame_counts();
        let Some(h) = self.connections.get_mut(opener) else {
            let reason = format!("{opener} holds no connection (it was never answered)");
            let sent = Sent { source_port: 0, request: None, attempt: Attempt::Broken { reason } };
            return Ok(Shipment {
                dst: SocketAddr::from(([0, 0, 0, 0], 0)),
                sent: vec![sent],
                faults: Vec::new(),
                witnesses: Box::new(NewFlow),
            });
        };
        let mut faults = Vec::new();
        let poked = if out_of_window { Some(poke(h, wire)?) } else { None };
        let sent = h.connection.check();
        if let (Some(segment), false) = (&poked, matches!(sent.attempt, Attempt::Answered { .. })) {
            let client = wire.frames_since(&before, &evidence::client_capture_points(probe));
            faults.push(Failure::new(
                Symptom::WrongPath,
                format!(
                    "after the hand-made out-of-window segment {segment} from pod {}: {} (a proxy that \
                     drops conntrack-invalid packets stops it on the node)",
                    h.pod,
                    segment.witnessed(&client, h.connection.source_port)
                ),
            ));
        }
        if let Attempt::Answered { pod, seen } = &sent.attempt
            && (*pod != h.pod || *seen != h.seen)
        {
            faults.push(Failure::new(
                Symptom::Other,
                format!(
                    "the held connection moved: opened to {} seeing {}, now answered by {pod} seeing {seen}",
                    h.pod, h.seen
                ),
            ));
        }
        let witnesses = HeldWitnesses { pod: h.pod.clone(), backend: h.backend, seen: h.seen };
        Ok(Shipment { dst: h.connection.dst, sent: vec![sent], faults, witnesses: Box::new(witnesses) })
    }
}

/// Sends an out-of-window segment from `h`'s backend toward its client, made from what the
/// backend's capture holds of the connection.
fn poke(h: &Connection, wire: &Wire<'_>) -> Result<OutOfWindow> {
    let backend = wire.cluster.pods.iter().find(|p| p.name == h.pod);
    let backend = backend.with_context(|| format!("no pod {} in the scenario", h.pod))?;
    let point = format!("pod/{}", h.pod);
    let capture = wire.captures.iter().find(|(k, _)| *k == point).map(|(_, c)| c);
    let frames = capture.with_context(|| format!("no capture at {point}"))?.frames();
    let segment = OutOfWindow::after(&frames, h.seen, backend.ip())?;
    segment.send(wire.topology.pods.get(&h.pod).context("the backend's namespace")?)?;
    Ok(segment)
}

/// The address of the endpoint `pod` that answered a held connection of `probe`.
fn backend(cluster: &Cluster, probe: &Probe, pod: &str) -> Result<SocketAddr> {
    let (Target::ClusterIp { service, port }
    | Target::NodePort { service, port, .. }
    | Target::ExternalIp { service, port, .. }
    | Target::LoadBalancer { service, port, .. }) = &probe.to
    else {
        anyhow::bail!("probe {}: held connections to a raw address or a node: not modelled", probe.name);
    };
    let endpoints =
        cluster.service_port(service, port).map(|(_, p)| p.endpoints.as_slice()).unwrap_or_default();
    let endpoint = endpoints.iter().find(|e| e.pod == pod);
    endpoint
        .map(|e| e.address())
        .with_context(|| format!("probe {}: {pod} is no endpoint of {service}:{port}", probe.name))
}

/// The connection a check is about: the backend that answered it when it opened (its pod and
/// address) and the source that backend saw.
struct HeldWitnesses {
    pod: String,
    backend: SocketAddr,
    seen: SocketAddr,
}

impl Witnesses for HeldWitnesses {
    /// An answered check is witnessed as the connection it was; any other outcome as a new flow.
    fn check(
        &self,
        cluster: &Cluster,
        probe: &Probe,
        dst: SocketAddr,
        outcome: &Outcome,
        sent: &[Sent],
        during: &Evidence,
    ) -> Vec<Failure> {
        let Outcome::Answered { translated_by, .. } = outcome else {
            return NewFlow.check(cluster, probe, dst, outcome, sent, during);
        };
        let flow = HeldFlow {
            dst,
            points: evidence::backend_capture_points(cluster, &self.pod),
            pod: &self.pod,
            backend: self.backend,
            seen: self.seen,
            translated_by: translated_by.as_deref(),
        };
        sent.iter().flat_map(|s| check(&flow, s, during)).collect()
    }
}

/// The connection a check is about: where it was sent, the backend that answered it when it
/// opened (its pod and address) and the source that backend saw.
struct HeldFlow<'a> {
    dst: SocketAddr,
    /// Where the backend's frames are captured (a host-network backend's are its node's).
    points: Vec<String>,
    pod: &'a str,
    backend: SocketAddr,
    seen: SocketAddr,
    translated_by: Option<&'a str>,
}

/// Failures of the witnesses for an answered check (a check that was not answered has
/// failed already).
fn check(flow: &HeldFlow<'_>, sent: &Sent, evidence: &Evidence) -> Vec<Failure> {
    if !matches!(sent.attempt, Attempt::Answered { .. }) {
        return Vec::new();
    }
    let mut faults = Vec::new();
    let (pod, backend, seen) = (flow.pod, flow.backend, flow.seen);
    let frames = flow.points.iter().filter_map(|p| evidence.frames.get(p)).flatten();
    let arrived = frames.filter_map(|f| f.packet.as_ref()).any(|p| {
        p.endpoints() == Some((seen, backend)) && matches!(p.l4, L4::Tcp { syn: false, rst: false, .. })
    });
    if !arrived {
        faults.push(Failure::new(
            Symptom::WrongPath,
            format!("on the wire: the check's line {seen} > {backend} never reached {pod}'s interface"),
        ));
    }
    if let Some(node) = flow.translated_by {
        let entry = evidence.conntrack.get(node).and_then(|flows| {
            flows.iter().find(|f| f.original.dst == flow.dst && f.original.src.port() == sent.source_port)
        });
        if let Some(fault) = entry_fault(node, entry, flow, sent.source_port) {
            faults.push(Failure::new(Symptom::WrongPath, fault));
        }
    }
    faults
}

fn entry_fault(node: &str, entry: Option<&Flow>, flow: &HeldFlow<'_>, source_port: u16) -> Option<String> {
    let Some(entry) = entry else {
        return Some(format!(
            "conntrack on {node}: the held connection's entry (source port {source_port} > {}) is gone",
            flow.dst
        ));
    };
    if entry.reply.src != flow.backend || entry.reply.dst != flow.seen {
        return Some(format!(
            "conntrack on {node}: the held connection's entry changed: expected reply tuple {} > {}, found {entry}",
            flow.backend, flow.seen
        ));
    }
    (entry.state.as_deref() != Some("ESTABLISHED"))
        .then(|| format!("conntrack on {node}: the held connection's entry is not ESTABLISHED: {entry}"))
}
