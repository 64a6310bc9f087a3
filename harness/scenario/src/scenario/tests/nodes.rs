//! Node objects in place of `spec.nodes`: addresses as kube-proxy picks them, pod CIDRs, the
//! zone label, and located refusals.

use super::*;
use crate::model::IpFamily;

const SHIPPED: &str = include_str!("../../../../../scenarios/pasted-cluster.yaml");
const DUAL: &str = include_str!("../../../../../scenarios/dual-stack.yaml");

/// A Node as `kubectl get node -o yaml` prints it, minus what nobody reads.
fn node(name: &str, addresses: &[(&str, &str)], pod_cidrs: &[&str], extra: &str) -> String {
    let mut text = format!(
        "---\napiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n  labels:\n    kubernetes.io/hostname: {name}\n\
         {extra}spec:\n"
    );
    if let Some(first) = pod_cidrs.first() {
        text += &format!("  podCIDR: \"{first}\"\n  podCIDRs:\n");
        for c in pod_cidrs {
            text += &format!("  - \"{c}\"\n");
        }
    }
    text += "status:\n  addresses:\n";
    for (kind, address) in addresses {
        text += &format!("  - type: {kind}\n    address: \"{address}\"\n");
    }
    text += &format!("  - type: Hostname\n    address: {name}\n");
    text
}

/// The dual-stack example with its `spec.nodes` replaced by `nodes` (Node objects).
fn dual_with(nodes: &str) -> String {
    let start = DUAL.find("  nodes:\n").unwrap();
    let end = DUAL.find("  externalHosts:").unwrap();
    format!("{}{}{nodes}", &DUAL[..start], &DUAL[end..])
}

/// node-b of the dual-stack example, as a Node object.
fn node_b() -> String {
    node(
        "node-b",
        &[("InternalIP", "192.168.50.12"), ("InternalIP", "fd00:192:168:50::12")],
        &["10.244.2.0/24", "fd00:10:244:2::/64"],
        "",
    )
}

fn dual_nodes() -> String {
    node(
        "node-a",
        &[
            ("InternalIP", "192.168.50.11"),
            ("InternalIP", "fd00:192:168:50::11"),
            ("InternalIP", "192.168.50.21"),
        ],
        &["10.244.1.0/24", "fd00:10:244:1::/64"],
        "    topology.kubernetes.io/zone: zone-a\n",
    ) + &node(
        "node-b",
        // No IPv6 InternalIP: kube-proxy falls back to the ExternalIP of that family.
        &[
            ("ExternalIP", "192.168.50.99"),
            ("InternalIP", "192.168.50.12"),
            ("ExternalIP", "fd00:192:168:50::12"),
        ],
        &["10.244.2.0/24", "fd00:10:244:2::/64"],
        "",
    )
}

#[test]
fn the_shipped_paste_builds_its_nodes_from_node_objects() {
    let s = load(SHIPPED);
    let names: Vec<&str> = s.cluster.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["worker-1", "worker-2"]);
    let n = s.cluster.node("worker-2").unwrap();
    assert_eq!((n.ip().to_string(), n.pod_cidr().to_string()), ("172.18.0.4".into(), "10.244.2.0/24".into()));
    assert_eq!(n.zone.as_deref(), Some("zone-b"));
    assert!(n.secondary_ips.is_empty() && n.ips.second().is_none() && n.pod_cidrs.second().is_none());
    assert_eq!(s.cluster.pods.len(), 3);
}

#[test]
fn dual_stack_node_objects_give_each_family_its_address_and_pod_cidr() {
    let s = load(&dual_with(&dual_nodes()));
    let c = &s.cluster;
    assert_eq!(c.families(), [IpFamily::V4, IpFamily::V6]);
    let a = c.node("node-a").unwrap();
    assert_eq!(a.ip().to_string(), "192.168.50.11");
    assert_eq!(a.secondary_ips.iter().map(ToString::to_string).collect::<Vec<_>>(), ["192.168.50.21"]);
    assert_eq!(
        (a.ips.second().unwrap().to_string(), a.pod_cidrs.second().unwrap().to_string()),
        ("fd00:192:168:50::11".into(), "fd00:10:244:1::/64".into())
    );
    assert_eq!(a.zone.as_deref(), Some("zone-a"));
    let b = c.node("node-b").unwrap();
    // InternalIP before ExternalIP, whatever their order (GetNodeHostIPs).
    assert_eq!(b.ip().to_string(), "192.168.50.12");
    assert_eq!(b.ips.second().unwrap().to_string(), "fd00:192:168:50::12");
    assert_eq!(b.zone, None);
}

#[test]
fn node_objects_may_come_as_a_node_list_and_sit_beside_spec_nodes() {
    let nodes = dual_nodes();
    let (a, b) = nodes[4..].split_once("---\n").unwrap();
    let indent = |doc: &str| -> String {
        doc.lines().enumerate().map(|(i, l)| format!("{}{l}\n", if i == 0 { "- " } else { "  " })).collect()
    };
    let list = format!(
        "---\napiVersion: v1\nkind: NodeList\nitems:\n{}",
        indent(&a.replace("apiVersion: v1\nkind: Node\n", ""))
    );
    let keep_b = DUAL.replace(
        "    - name: node-a\n      ips: [192.168.50.11, \"fd00:192:168:50::11\"]\n      podCIDRs: [10.244.1.0/24, \"fd00:10:244:1::/64\"]\n",
        "",
    );
    let s = load(&format!("{keep_b}{list}"));
    assert_eq!(s.cluster.node("node-a").unwrap().zone.as_deref(), Some("zone-a"));
    assert!(s.cluster.node("node-b").is_some());
    // The same node twice is a duplicate, at the Node's name.
    let text = format!("{DUAL}---\n{b}");
    assert_only(
        &parse_errors(&text),
        at_in(&text, "  name: node-b\n  labels", "node-b"),
        "Node node-b: metadata.name",
        "duplicate node name \"node-b\" (first defined at line 23); names must be unique across the scenario, \
         whatever the namespace, because probes refer to bare names",
    );
}

#[test]
fn a_node_without_an_address_or_pod_cidr_of_a_family_is_refused_at_the_node() {
    let text =
        dual_with(&(node("node-a", &[("InternalIP", "192.168.50.11")], &["10.244.1.0/24"], "") + &node_b()));
    let errs = parse_errors(&text);
    assert_has(
        &errs,
        at_in(&text, "  - type: InternalIP", "type"),
        "Node node-a: status.addresses",
        "Node node-a has no IPv6 InternalIP (nor ExternalIP)",
    );
    assert_has(
        &errs,
        at_in(&text, "spec:\n  podCIDR:", "podCIDR"),
        "Node node-a: spec",
        "Node node-a has no IPv6 pod CIDR",
    );
}

#[test]
fn node_addresses_and_cidrs_are_checked_where_they_are_written() {
    let bad = node(
        "node-a",
        &[("InternalIP", "192.168.60.11"), ("InternalIP", "fd00:192:168:50::11")],
        &["10.245.1.0/24", "fd00:10:244:1::/64"],
        "",
    );
    let text = dual_with(&(bad + &node_b()));
    let errs = parse_errors(&text);
    assert_has(
        &errs,
        at(&text, "\"192.168.60.11\""),
        "Node node-a: status.addresses[0].address",
        "is not inside nodeNetwork 192.168.50.0/24",
    );
    assert_has(
        &errs,
        at_in(&text, "  - \"10.245.1.0/24\"", "\"10.245"),
        "Node node-a: spec.podCIDRs[0]",
        "not inside the cluster podCIDR",
    );
    // podCIDR must be podCIDRs[0].
    let good = node(
        "node-a",
        &[("InternalIP", "192.168.50.11"), ("InternalIP", "fd00:192:168:50::11")],
        &["10.244.1.0/24", "fd00:10:244:1::/64"],
        "",
    );
    let bad = good.replace("podCIDR: \"10.244.1.0/24\"", "podCIDR: \"10.244.9.0/24\"");
    let text = dual_with(&(bad + &node_b()));
    assert_has(
        &parse_errors(&text),
        at(&text, "\"10.244.9.0/24\""),
        "Node node-a: spec.podCIDR",
        "podCIDR 10.244.9.0/24 is not podCIDRs[0] 10.244.1.0/24",
    );
}

#[test]
fn a_node_being_deleted_is_not_modelled() {
    let deleting = node(
        "node-a",
        &[("InternalIP", "192.168.50.11"), ("InternalIP", "fd00:192:168:50::11")],
        &["10.244.1.0/24", "fd00:10:244:1::/64"],
        "  deletionTimestamp: \"2024-05-01T10:00:00Z\"\n",
    );
    let text = dual_with(&(deleting.clone() + &node_b()));
    assert_has(
        &parse_errors(&text),
        at(&text, "deletionTimestamp"),
        "Node node-a: metadata.deletionTimestamp",
        "not modelled",
    );
    let tainted = deleting.replace(
        "  deletionTimestamp: \"2024-05-01T10:00:00Z\"\nspec:\n",
        "spec:\n  taints:\n  - {key: node.kubernetes.io/unschedulable, effect: NoSchedule}\n  - {key: ToBeDeletedByClusterAutoscaler, effect: NoSchedule}\n",
    );
    let text = dual_with(&(tainted + &node_b()));
    let errs = parse_errors(&text);
    assert_only(
        &errs,
        at(&text, "ToBeDeletedByClusterAutoscaler"),
        "Node node-a: spec.taints[1].key",
        "the taint ToBeDeletedByClusterAutoscaler is not modelled: kube-proxy's /healthz then answers 503 so load \
         balancers drain the node (remove it)",
    );
}

#[test]
fn no_node_anywhere_is_an_error() {
    let text = dual_with("");
    assert_has(&parse_errors(&text), at(&text, "cluster:"), "spec.nodes", "at least one node is required");
}
