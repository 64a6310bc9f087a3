//! Topology-aware routing as the reader takes it: node zones, zone hints of given slices, the
//! hints annotation, hints the controller derives for `trafficDistribution: PreferClose`, and
//! the `ServiceTrafficDistribution` gate.

use super::*;

const KUBECTL: &str = include_str!("kubectl.yaml");

/// `WEB` with node-a in zone-a and node-b in zone-b.
fn zoned(text: &str) -> String {
    let text = edit(text, "podCIDR: 10.244.1.0/24}", "podCIDR: 10.244.1.0/24, zone: zone-a}");
    edit(&text, "podCIDR: 10.244.2.0/24}", "podCIDR: 10.244.2.0/24, zone: zone-b}")
}

fn hints(s: &Scenario) -> Vec<Vec<String>> {
    s.cluster.services[0].ports[0].endpoints.iter().map(|e| e.zone_hints.clone()).collect()
}

#[test]
fn given_hints_the_annotation_and_node_zones_reach_the_model() {
    let text = edit(
        KUBECTL,
        "  nodeName: node-a\n  targetRef:",
        "  nodeName: node-a\n  hints:\n    forZones:\n    - name: zone-a\n  targetRef:",
    );
    let text = edit(
        &text,
        "  creationTimestamp: \"2024-05-01T10:00:00Z\"\n  labels:\n    app: web\n",
        "    service.kubernetes.io/topology-mode: Auto\n  creationTimestamp: \"2024-05-01T10:00:00Z\"\n  labels:\n    app: web\n",
    );
    let text = edit(&text, "podCIDR: 10.244.1.0/24}", "podCIDR: 10.244.1.0/24, zone: zone-a}");
    let s = load(&text);
    assert_eq!(s.cluster.nodes[0].zone.as_deref(), Some("zone-a"));
    assert_eq!(s.cluster.services[0].hints_annotation.as_deref(), Some("Auto"));
    assert_eq!(hints(&s), [["zone-a"]]);
}

#[test]
fn the_deprecated_annotation_wins_over_topology_mode() {
    let text = edit(
        KUBECTL,
        "  creationTimestamp: \"2024-05-01T10:00:00Z\"\n  labels:\n    app: web\n",
        "    service.kubernetes.io/topology-mode: Auto\n    service.kubernetes.io/topology-aware-hints: disabled\n  creationTimestamp: \"2024-05-01T10:00:00Z\"\n  labels:\n    app: web\n",
    );
    assert_eq!(load(&text).cluster.services[0].hints_annotation.as_deref(), Some("disabled"));
}

#[test]
fn prefer_close_hints_derived_endpoints_for_their_nodes_zones() {
    let text =
        edit(&zoned(WEB), "  type: NodePort\n", "  type: NodePort\n  trafficDistribution: PreferClose\n");
    let s = load(&text);
    assert_eq!(hints(&s), [["zone-a"], ["zone-b"]]);
    // Proxies that read objects see the same hints (one slice per pod here: their ports differ).
    let zones: Vec<String> = s
        .objects
        .endpoint_slices
        .iter()
        .flat_map(|slice| slice.endpoints.iter())
        .flat_map(|e| e.hints.iter().flat_map(|h| h.for_zones.iter().flatten()).map(|z| z.name.clone()))
        .collect();
    assert_eq!(zones, ["zone-a", "zone-b"]);
    // A node without a zone leaves its endpoints unhinted (and kube-proxy then ignores hints).
    let text = edit(&text, ", zone: zone-b}", "}");
    assert_eq!(hints(&load(&text)), [vec!["zone-a".to_string()], vec![]]);
    // Without trafficDistribution nothing is hinted.
    assert_eq!(hints(&load(&zoned(WEB))), [Vec::<String>::new(), vec![]]);
}

#[test]
fn the_annotation_on_derived_slices_is_refused() {
    let text = edit(
        WEB,
        "metadata: {name: web}",
        "metadata: {name: web, annotations: {service.kubernetes.io/topology-mode: Auto}}",
    );
    let errs = errors(&text);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].field, "Service default/web: metadata.annotations");
    assert!(errs[0].message.contains("not modelled"), "{}", errs[0]);
    // Disabled derives nothing and is accepted.
    load(&edit(
        WEB,
        "metadata: {name: web}",
        "metadata: {name: web, annotations: {service.kubernetes.io/topology-mode: Disabled}}",
    ));
}

#[test]
fn the_traffic_distribution_gate_is_the_only_one_modelled() {
    let with = |gates: &str| {
        edit(WEB, "  externalHosts:", &format!("  proxyConfig:\n    featureGates: {gates}\n  externalHosts:"))
    };
    assert!(load(&with("{ServiceTrafficDistribution: true}")).cluster.proxy.service_traffic_distribution);
    assert!(!load(WEB).cluster.proxy.service_traffic_distribution);
    let text = with("{TopologyAwareHints: false}");
    assert_only(
        &errors(&text),
        at(&text, "TopologyAwareHints"),
        "spec.proxyConfig.featureGates.TopologyAwareHints",
        "the feature gate TopologyAwareHints is not modelled (only ServiceTrafficDistribution is)",
    );
}
