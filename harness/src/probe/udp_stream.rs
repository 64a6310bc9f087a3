//! A UDP stream: every attempt from one kept source port, as a resolver sends, so every
//! attempt is one conntrack flow, and that flow outlives a change of state: what the stream
//! was expected to do in one phase decides what it must do in the next
//! (`oracle::live::predict_stream`).

use std::collections::BTreeMap;

use anyhow::Result;

use super::{Kind, Shipment, Wire, request};
use crate::model::{Cluster, Probe, Profile, Protocol, Source};
use crate::oracle::live::Change;
use crate::oracle::{self, Expectation, Prediction};
use crate::traffic::Speech;

/// Each stream's expectation in the phase last predicted, and which of its backends served
/// then, by its source and port.
#[derive(Default)]
pub(super) struct UdpStream {
    last_phase: BTreeMap<(Source, u16), oracle::live::StreamPhase>,
    this_phase: BTreeMap<(Source, u16), oracle::live::StreamPhase>,
    /// Whether the phase being predicted starts with a restarted proxy.
    restarted: bool,
}

impl Kind for UdpStream {
    fn claims(&self, probe: &Probe) -> bool {
        probe.protocol == Protocol::Udp && probe.source_port.is_some()
    }

    fn predict(&mut self, probe: &Probe, cluster: &Cluster, profile: Profile) -> Result<Prediction, String> {
        let fresh = oracle::predict(cluster, probe, profile)?;
        let Some(port) = probe.source_port else { return Ok(fresh) };
        let key = (probe.from.clone(), port);
        let predicted = match self.last_phase.get(&key) {
            Some(previous) => {
                let change = if self.restarted { Change::Restart } else { Change::Sync };
                oracle::live::predict_stream(previous, cluster, probe, fresh, change, profile)
            }
            None => fresh.into(),
        };
        let prediction = oracle::live::one_flow(predicted.prediction);
        match (&prediction, predicted.carried) {
            (Prediction::Expected(e), _) => {
                self.this_phase.insert(key, oracle::live::StreamPhase::of(e, cluster, probe));
            }
            (Prediction::Open(_), Some(carried)) => {
                self.this_phase.insert(key, carried);
            }
            (Prediction::Open(_), None) => {}
        }
        Ok(prediction)
    }

    /// An expectation carries to the next phase only: a stream not judged in a phase starts
    /// afresh in the one after, unless the oracle says where its entry stays.
    fn phase_predicted(&mut self) {
        self.last_phase = std::mem::take(&mut self.this_phase);
        self.restarted = false;
    }

    fn proxy_restarts(&mut self) {
        self.restarted = true;
    }

    fn send(&mut self, probe: &Probe, expected: &Expectation, wire: &mut Wire<'_>) -> Result<Shipment> {
        request::send(probe, expected, wire, Speech::Plain(probe.protocol))
    }
}
