//! Topology-aware routing as the scenario states it: the zone hints the EndpointSlice
//! controller puts on derived slices (the Service's hints annotation is read with the
//! Service, in `services`).

use k8s_openapi::api::discovery::v1::{EndpointHints, ForZone};

use crate::model::Node;

use super::endpoints::SliceEndpoint;
use super::error::Diagnostics;
use super::registry::{Lookup, Registry};
use super::services::ServiceEntry;
use super::yaml::FieldPath;

/// Refuses slices derived for a Service with the topology annotation: the controller's hints
/// for it come from a proportional allocation by each zone's CPU, which the model has no input
/// for, so such a Service needs its slices written out with their hints.
pub(crate) fn refuse_annotated(entry: &ServiceEntry<'_>, diag: &mut Diagnostics) -> bool {
    let annotated =
        crate::kubernetes::topology::annotation_enabled(entry.service.hints_annotation.as_deref());
    if annotated {
        diag.value(
            &entry.site,
            &FieldPath::parse("metadata.annotations"),
            "hints the EndpointSlice controller derives for the topology annotation are not modelled (it \
             allocates them by each zone's CPU): write the Service's EndpointSlices with hints.forZones",
        );
    }
    annotated
}

/// Hints on the derived endpoints of `entry`, as the EndpointSlice controller sets them for
/// `trafficDistribution: PreferClose` (staging/src/k8s.io/endpointslice/trafficdist: each
/// ready endpoint whose node has a zone is hinted for that zone).
pub(crate) fn add(entry: &ServiceEntry<'_>, endpoints: &mut [SliceEndpoint], nodes: &Registry<Node>) {
    if entry.traffic_distribution.as_deref() != Some("PreferClose") {
        return;
    }
    for ep in endpoints.iter_mut().filter(|e| e.ready) {
        if let Some(name) = &ep.node
            && let Lookup::Found(node) = nodes.get(name)
            && let Some(zone) = node.zone.as_ref().filter(|z| !z.is_empty())
        {
            ep.zone_hints = vec![zone.clone()];
        }
    }
}

/// The `hints` of a derived endpoint object.
pub(crate) fn object(zones: &[String]) -> Option<EndpointHints> {
    (!zones.is_empty()).then(|| EndpointHints {
        for_zones: Some(zones.iter().map(|z| ForZone { name: z.clone() }).collect()),
        ..Default::default()
    })
}
