//! An answered request: each attempt a new connection (or datagram) from a new source port,
//! closed after its answer, over TCP, UDP or SCTP. The kind every probe is unless another
//! claims it.

use std::net::SocketAddr;

use anyhow::{Context, Result};

use super::{Kind, NewFlow, Shipment, Wire};
use crate::model::{Cluster, Probe, Profile};
use crate::oracle::{self, Expectation, Outcome, Prediction};
use crate::traffic::{Pace, Plan, Speech};

pub(super) struct Request;

impl Kind for Request {
    fn claims(&self, _probe: &Probe) -> bool {
        true
    }

    fn predict(&mut self, probe: &Probe, cluster: &Cluster, profile: Profile) -> Result<Prediction, String> {
        oracle::predict(cluster, probe, profile)
    }

    fn send(&mut self, probe: &Probe, expected: &Expectation, wire: &mut Wire<'_>) -> Result<Shipment> {
        send(probe, expected, wire, Speech::Plain(probe.protocol))
    }
}

/// Sends `probe`'s attempts, each saying `speech`, and judges them as new flows.
pub(super) fn send(
    probe: &Probe,
    expected: &Expectation,
    wire: &mut Wire<'_>,
    speech: Speech,
) -> Result<Shipment> {
    let dst = wire.destination(probe)?;
    let prober = wire.prober(&probe.from)?;
    let sent = prober
        .send(plan(probe, dst, expected, speech))
        .with_context(|| format!("sending probe {}", probe.name))?;
    Ok(Shipment { dst, sent, faults: Vec::new(), witnesses: Box::new(NewFlow) })
}

/// How to send a probe. Traffic expected to vanish is sent all at once, so waiting out the
/// silence costs one timeout rather than one per attempt; everything else goes one by one.
fn plan(probe: &Probe, dst: SocketAddr, expected: &Expectation, speech: Speech) -> Plan {
    let pace = match expected.outcome {
        Outcome::Dropped | Outcome::Forwarded | Outcome::Unanswered { .. }
            if probe.interval.is_none() && probe.source_port.is_none() =>
        {
            Pace::Concurrent
        }
        _ => Pace::Sequential { interval: probe.interval },
    };
    Plan { dst, source_port: probe.source_port, count: probe.count, speech, pace }
}
