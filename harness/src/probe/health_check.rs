//! A health check: HTTP `GET /` on a Service's health-check node port, answered by the node's
//! proxy with the number of the Service's local endpoints.

use anyhow::Result;

use super::{Kind, Shipment, Wire, request};
use crate::model::{Cluster, Probe, Profile, Target};
use crate::oracle::{self, Expectation, Prediction};
use crate::traffic::Speech;

pub(super) struct HealthCheck;

impl Kind for HealthCheck {
    fn claims(&self, probe: &Probe) -> bool {
        matches!(probe.to, Target::HealthCheck { .. })
    }

    fn predict(&mut self, probe: &Probe, cluster: &Cluster, profile: Profile) -> Result<Prediction, String> {
        oracle::predict(cluster, probe, profile)
    }

    fn send(&mut self, probe: &Probe, expected: &Expectation, wire: &mut Wire<'_>) -> Result<Shipment> {
        request::send(probe, expected, wire, Speech::HttpGet)
    }
}
