//! Topology-aware routing: which endpoints a node's Cluster-policy set keeps, given the
//! EndpointSlice zone hints, the node's zone and the Service's hints annotation.
//!
//! The rules are kube-proxy's (pkg/proxy/topology.go: v1.30-v1.32 `canUseTopology` and
//! `availableForTopology`, v1.33+ `topologyModeFromHints`, the same for zones):
//! - the hints annotation matters only to v1.30 ([`Context::annotation_needed`]): there, with
//!   the `ServiceTrafficDistribution` gate off (its v1.30 default), hints count only when the
//!   Service's hints annotation is set to something other than `""`, `disabled`, `Disabled`;
//!   the gate is on by default from v1.31 and GA (locked on) from v1.33, and then the
//!   annotation is ignored;
//! - the node must have a non-empty zone;
//! - every ready endpoint must carry a zone hint, and at least one ready endpoint must be
//!   hinted for the node's zone.
//!
//! Otherwise every ready endpoint is used. Topology never applies to the Local-policy set,
//! nor to the fallback to serving-terminating endpoints. Node hints (`forNodes`,
//! `PreferSameNode`, v1.33+) are not part of these rules: the scenario reader refuses them.

use crate::model::{Cluster, Endpoint, Service};

/// How the Cluster set is narrowed by zone: kube-proxy's [`zone_filter`], or another rule a
/// caller passes (the proxies' mutants make it a bug).
pub type ZoneChoice = for<'a> fn(&[&Endpoint], Context<'a>) -> Option<&'a str>;

/// What topology filtering sees of one service port on one node (the default: nothing that
/// enables it).
#[derive(Debug, Clone, Copy, Default)]
pub struct Context<'a> {
    /// The Service's hints annotation (`Service::hints_annotation`).
    pub annotation: Option<&'a str>,
    /// The node's `topology.kubernetes.io/zone`.
    pub zone: Option<&'a str>,
    /// The `ServiceTrafficDistribution` feature gate, as the scenario sets it.
    pub traffic_distribution_gate: bool,
    /// The gate is off unless set (kube-proxy v1.30): hints then need the annotation. From
    /// v1.31 the gate is on by default, so newer releases (and the built-in proxies, which
    /// write what the newest does) never need it.
    pub annotation_needed: bool,
}

impl<'a> Context<'a> {
    /// The context of `svc`'s ports on `node` of `cluster`.
    pub fn of(cluster: &'a Cluster, svc: &'a Service, node: &str) -> Context<'a> {
        Context {
            annotation: svc.hints_annotation.as_deref(),
            zone: cluster.node(node).and_then(|n| n.zone.as_deref()),
            traffic_distribution_gate: cluster.proxy.service_traffic_distribution,
            annotation_needed: false,
        }
    }

    /// As kube-proxy v1.30 sees it: the gate off unless the scenario sets it.
    pub fn annotation_needed(self, needed: bool) -> Context<'a> {
        Context { annotation_needed: needed, ..self }
    }
}

/// The zone whose hints filter the Cluster set on this node, or `None` when every ready
/// endpoint is used (`canUseTopology` is false): every ready endpoint is hinted, one of them
/// for this zone.
pub fn zone_filter<'a>(endpoints: &[&Endpoint], cx: Context<'a>) -> Option<&'a str> {
    let zone = node_zone(cx)?;
    let ready = endpoints.iter().filter(|e| e.ready);
    let complete = ready.clone().all(|e| !e.zone_hints.is_empty());
    let hinted_here = ready.clone().any(|e| available(e, zone));
    (complete && hinted_here).then_some(zone)
}

/// The node's zone, when hints may apply at all: the annotation or the gate allows them, and
/// the node has a non-empty zone.
pub fn node_zone(cx: Context<'_>) -> Option<&str> {
    if cx.annotation_needed && !cx.traffic_distribution_gate && !annotation_enabled(cx.annotation) {
        return None;
    }
    cx.zone.filter(|z| !z.is_empty())
}

/// `availableForTopology`: the endpoint is hinted for `zone`.
pub fn available(endpoint: &Endpoint, zone: &str) -> bool {
    endpoint.zone_hints.iter().any(|z| z == zone)
}

/// The annotation asks for topology-aware routing (`Auto`, or any value but the disabled ones).
pub fn annotation_enabled(annotation: Option<&str>) -> bool {
    !matches!(annotation, None | Some("" | "disabled" | "Disabled"))
}

#[cfg(test)]
mod tests {
    use super::*;
    fn ep(ip: &str, port: u16, node: Option<&str>) -> Endpoint {
        Endpoint::example(ip, port, node)
    }

    fn hinted(ip: &str, ready: bool, zones: &[&str]) -> Endpoint {
        Endpoint { ready, zone_hints: zones.iter().map(|z| z.to_string()).collect(), ..ep(ip, 80, Some("n")) }
    }

    /// The cases of kube-proxy's topology_test.go `TestCategorizeEndpoints` that concern
    /// hints, as a table: annotation, gate, node zone, endpoints → the filtering zone.
    #[test]
    fn kube_proxy_v1_30_rules() {
        let a_b = || {
            vec![
                hinted("10.1.2.3", true, &["zone-a"]),
                hinted("10.1.2.4", true, &["zone-b"]),
                hinted("10.1.2.5", true, &["zone-c"]),
            ]
        };
        let one_unhinted = || vec![hinted("10.1.2.3", true, &["zone-a"]), hinted("10.1.2.4", true, &[])];
        let unready_unhinted = || vec![hinted("10.1.2.3", true, &["zone-a"]), hinted("10.1.2.4", false, &[])];
        let multi =
            || vec![hinted("10.1.2.3", true, &["zone-a", "zone-b"]), hinted("10.1.2.4", true, &["zone-c"])];
        let unready_here =
            || vec![hinted("10.1.2.3", false, &["zone-a"]), hinted("10.1.2.4", true, &["zone-b"])];
        type Case = (
            &'static str,
            Option<&'static str>,
            bool,
            Option<&'static str>,
            fn() -> Vec<Endpoint>,
            Option<&'static str>,
        );
        let cases: Vec<Case> = vec![
            ("hints used with Auto", Some("Auto"), false, Some("zone-a"), a_b, Some("zone-a")),
            (
                "hints used with the legacy annotation's other values",
                Some("enabled"),
                false,
                Some("zone-a"),
                a_b,
                Some("zone-a"),
            ),
            ("no annotation, gate off: ignored", None, false, Some("zone-a"), a_b, None),
            ("annotation disabled", Some("disabled"), false, Some("zone-a"), a_b, None),
            ("annotation Disabled", Some("Disabled"), false, Some("zone-a"), a_b, None),
            ("annotation empty", Some(""), false, Some("zone-a"), a_b, None),
            ("gate on: annotation not needed", None, true, Some("zone-a"), a_b, Some("zone-a")),
            ("gate on: Disabled ignored too", Some("Disabled"), true, Some("zone-a"), a_b, Some("zone-a")),
            ("node without zone", Some("Auto"), false, None, a_b, None),
            ("node with empty zone", Some("Auto"), false, Some(""), a_b, None),
            ("no hint for the node's zone", Some("Auto"), false, Some("zone-d"), a_b, None),
            ("a ready endpoint without hints", Some("Auto"), false, Some("zone-a"), one_unhinted, None),
            (
                "an unready endpoint without hints does not count",
                Some("Auto"),
                false,
                Some("zone-a"),
                unready_unhinted,
                Some("zone-a"),
            ),
            (
                "an endpoint hinted for several zones",
                Some("Auto"),
                false,
                Some("zone-b"),
                multi,
                Some("zone-b"),
            ),
            ("only an unready endpoint hinted here", Some("Auto"), false, Some("zone-a"), unready_here, None),
        ];
        for (name, annotation, gate, zone, endpoints, want) in cases {
            let eps = endpoints();
            let refs: Vec<&Endpoint> = eps.iter().collect();
            let cx = Context { annotation, zone, traffic_distribution_gate: gate, annotation_needed: true };
            assert_eq!(zone_filter(&refs, cx), want, "{name}");
            // v1.31+: the gate on by default (GA from v1.33), the annotation never matters.
            let newer = Context { annotation_needed: false, ..cx };
            let gate_on = Context { traffic_distribution_gate: true, ..cx };
            assert_eq!(zone_filter(&refs, newer), zone_filter(&refs, gate_on), "{name} (v1.31+)");
        }
    }
}
