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

    fn goes_together(&self, probe: &Probe, expected: &Expectation) -> bool {
        // A part of a probe from several clients: its clients wait out their pauses at once.
        all_at_once(probe, expected) || probe.clients.is_some()
    }

    fn send(&mut self, probe: &Probe, expected: &Expectation, wire: &mut Wire<'_>) -> Result<Shipment> {
        send(probe, expected, wire, Speech::Plain(probe.protocol))
    }
}

/// Sends `probes`, each a [`Request`] that goes out with others (silent, or one client of
/// several), at once: each paced as it would be alone.
pub(super) fn send_together(probes: &[(&Probe, &Expectation)], wire: &mut Wire<'_>) -> Result<Vec<Shipment>> {
    let mut plans = Vec::new();
    for (probe, expected) in probes {
        let dst = wire.destination(probe)?;
        wire.prober(&probe.from)?;
        plans.push((probe.from.clone(), plan(probe, dst, expected, Speech::Plain(probe.protocol))));
    }
    let sent = wire.send_all(&plans).context("sending the probes that go out together")?;
    let shipments = plans.iter().zip(sent).map(|((_, plan), sent)| Shipment {
        dst: plan.dst,
        sent,
        faults: Vec::new(),
        witnesses: Box::new(NewFlow),
    });
    Ok(shipments.collect())
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
    let pace = if all_at_once(probe, expected) {
        Pace::Concurrent
    } else {
        Pace::Sequential { interval: probe.interval }
    };
    Plan { dst, source_port: probe.source_port, count: probe.count, speech, pace }
}

/// Whether every attempt of `probe` waits out a silence, each from a source port of its own.
fn all_at_once(probe: &Probe, expected: &Expectation) -> bool {
    let silent =
        matches!(expected.outcome, Outcome::Dropped | Outcome::Forwarded | Outcome::Unanswered { .. });
    silent && probe.interval.is_none() && probe.source_port.is_none()
}
