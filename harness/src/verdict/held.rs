//! The witnesses of a check on a held connection: the wire and conntrack, as for a new
//! connection, but for a flow that already exists. The line sent on it must have reached the
//! backend's interface as the same flow (the source the backend saw when it opened, to the
//! backend's address), and the node that translated it must still hold the connection's
//! entry, established, with the same reply tuple: proof that the answer came through the
//! translation made when the connection opened, not through a new one.

use std::net::SocketAddr;

use crate::observe::{Flow, L4};
use crate::traffic::{Attempt, Sent};

use super::evidence::Evidence;

/// The connection a check is about: where it was sent, the backend that answered it when it
/// opened (its pod and address) and the source that backend saw.
pub struct HeldFlow<'a> {
    pub dst: SocketAddr,
    pub pod: &'a str,
    pub backend: SocketAddr,
    pub seen: SocketAddr,
    pub translated_by: Option<&'a str>,
}

/// Failures of the witnesses for an answered check (a check that was not answered has
/// failed already).
pub fn check(flow: &HeldFlow<'_>, sent: &Sent, evidence: &Evidence) -> Vec<String> {
    if !matches!(sent.attempt, Attempt::Answered { .. }) {
        return Vec::new();
    }
    let mut faults = Vec::new();
    let (pod, backend, seen) = (flow.pod, flow.backend, flow.seen);
    let frames = evidence.frames.get(&format!("pod/{pod}")).map(Vec::as_slice).unwrap_or_default();
    let arrived = frames.iter().filter_map(|f| f.packet.as_ref()).any(|p| {
        p.endpoints() == Some((seen, backend)) && matches!(p.l4, L4::Tcp { syn: false, rst: false, .. })
    });
    if !arrived {
        faults.push(format!(
            "on the wire: the check's line {seen} > {backend} never reached {pod}'s interface"
        ));
    }
    if let Some(node) = flow.translated_by {
        let entry = evidence.conntrack.get(node).and_then(|flows| {
            flows.iter().find(|f| f.original.dst == flow.dst && f.original.src.port() == sent.source_port)
        });
        if let Some(fault) = entry_fault(node, entry, flow, sent.source_port) {
            faults.push(fault);
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
