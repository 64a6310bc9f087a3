//! The desired state as the API objects a proxy watches: a `v1.Node` per node (built from
//! the model: InternalIPs and pod CIDRs, as kubelet and the node IPAM controller set them),
//! and the scenario's Services and EndpointSlices as they are.

use anyhow::{Context, Result};
use serde_json::{Value, json};

use crate::apiserver::selector::Selector;
use crate::apiserver::{Kind, Store};
use crate::model::{Cluster, Node};
use crate::proxy::State;
use crate::proxy::reference::PROXY_LABEL_SELECTOR;

use super::sync::Families;

/// The Node object kubelet would register for `node`: every node address an InternalIP, the
/// zone label the model gives it (pasted Node objects' `topology.kubernetes.io/zone`).
pub fn node_object(node: &Node) -> Value {
    // The node's IP of each family first, primary first: kube-proxy takes the first InternalIP
    // as the primary and the first of the other family as the second (pkg/util/node
    // GetNodeHostIPs), so a secondary address of either family must follow both.
    let mut addresses: Vec<Value> =
        node.all_ips().map(|ip| json!({"type": "InternalIP", "address": ip.to_string()})).collect();
    let pod_cidrs: Vec<String> = node.pod_cidrs.iter().map(|c| c.to_string()).collect();
    addresses.push(json!({"type": "Hostname", "address": node.name}));
    let mut labels = json!({"kubernetes.io/hostname": node.name});
    if let Some(zone) = &node.zone {
        labels["topology.kubernetes.io/zone"] = json!(zone);
    }
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "labels": labels},
        "spec": {"podCIDR": pod_cidrs[0], "podCIDRs": pod_cidrs},
        "status": {"addresses": addresses},
    })
}

/// The ServiceCIDR kube-apiserver makes from `--service-cluster-ip-range` when the
/// MultiCIDRServiceAllocator gate is on (v1.30 pkg/controlplane/controller/defaultservicecidr:
/// named `kubernetes`, the range's CIDRs, condition Ready). kube-proxy's nftables mode drops
/// traffic to unallocated addresses inside these (pkg/proxy/nftables/proxier.go
/// OnServiceCIDRsChanged), and reads them only behind the same gate.
pub(crate) fn service_cidr_object(cluster: &Cluster) -> Value {
    let mut cidrs = vec![cluster.service_cidr.to_string()];
    if let Some(second) = &cluster.second_family {
        cidrs.push(second.service_cidr.to_string());
    }
    json!({
        "apiVersion": "networking.k8s.io/v1alpha1",
        "kind": "ServiceCIDR",
        "metadata": {"name": "kubernetes"},
        "spec": {"cidrs": cidrs},
        "status": {"conditions": [{
            "type": "Ready", "status": "True", "reason": "",
            "message": "Kubernetes Service CIDR is ready", "lastTransitionTime": "2024-01-01T00:00:00Z",
        }]},
    })
}

/// The annotation the endpointslice controller sets on every slice it writes: when the change
/// that made it write happened, as RFC 3339 with nanoseconds (k8s.io/api core/v1
/// `EndpointsLastChangeTriggerTime`; pkg/controller/endpointslice's reconciler `finalize`).
/// kube-proxy observes the time from it to the sync that programmed the slice.
pub(crate) const TRIGGER_TIME: &str = "endpoints.kubernetes.io/last-change-trigger-time";

/// Makes the store hold exactly `state`; returns how many watch events that made. A slice
/// that changes carries the time of the push as its trigger time, one that does not keeps its
/// own: the controller writes only slices that changed.
pub fn push(store: &Store, state: &State<'_>) -> Result<usize> {
    let mut events = store
        .replace(Kind::ServiceCidr, vec![service_cidr_object(state.cluster)])
        .context("storing the ServiceCIDR")?;
    let nodes = state.cluster.nodes.iter().map(node_object).collect();
    let services = state.objects.services.iter().map(serde_json::to_value).collect::<Result<Vec<_>, _>>();
    let slices =
        state.objects.endpoint_slices.iter().map(serde_json::to_value).collect::<Result<Vec<_>, _>>();
    let slices = slices.map(|slices| stamp_trigger_times(store, slices, &trigger_time_now()));
    events += store.replace(Kind::Node, nodes).context("storing Nodes")?;
    events +=
        store.replace(Kind::Service, services.context("encoding Services")?).context("storing Services")?;
    events += store
        .replace(Kind::EndpointSlice, slices.context("encoding EndpointSlices")?)
        .context("storing EndpointSlices")?;
    Ok(events)
}

fn trigger_time_now() -> String {
    // RFC3339Nano in UTC, as Go's `time.RFC3339Nano` writes it (no trailing zeros).
    k8s_openapi::jiff::Timestamp::now().to_string()
}

/// `slices` with `at` as the trigger time of each that differs from the stored one, and the
/// stored trigger time on each that does not.
fn stamp_trigger_times(store: &Store, slices: Vec<Value>, at: &str) -> Vec<Value> {
    slices
        .into_iter()
        .map(|mut slice| {
            let stored =
                crate::apiserver::store::key_of(&slice).ok().and_then(|k| store.get(Kind::EndpointSlice, &k));
            let kept = stored.filter(|s| as_written(s) == as_written(&slice));
            let time = match &kept {
                Some(s) => s["metadata"]["annotations"][TRIGGER_TIME].as_str().unwrap_or(at),
                None => at,
            };
            slice["metadata"]["annotations"][TRIGGER_TIME] = time.into();
            slice
        })
        .collect()
}

/// A slice as the controller writes it: without the fields the server sets, and without the
/// trigger time.
fn as_written(slice: &Value) -> Value {
    let mut s = slice.clone();
    if let Some(o) = s.as_object_mut() {
        o.remove("kind");
        o.remove("apiVersion");
    }
    if let Some(meta) = s.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in ["resourceVersion", "uid", "creationTimestamp"] {
            meta.remove(field);
        }
        if let Some(annotations) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            annotations.remove(TRIGGER_TIME);
            if annotations.is_empty() {
                meta.remove("annotations");
            }
        }
    }
    s
}

/// How many changes after `resource_version` kube-proxy's programming histogram will count,
/// when it can count them all: only EndpointSlices changed, none was deleted (a deletion is
/// not observed: pkg/proxy/endpointschangetracker.go), and each carries a trigger time and
/// passes kube-proxy's label selector; otherwise 0.
pub(crate) fn programming_expected(store: &Store, resource_version: u64) -> Result<usize> {
    let labels = Selector::parse(PROXY_LABEL_SELECTOR)?;
    let others = [Kind::Service, Kind::Node, Kind::ServiceCidr]
        .into_iter()
        .any(|kind| !store.events_after(kind, resource_version).1.is_empty());
    let slices = store.events_after(Kind::EndpointSlice, resource_version).1;
    let countable = |e: &crate::apiserver::store::Event| {
        e.change != "DELETED"
            && e.object["metadata"]["annotations"][TRIGGER_TIME].is_string()
            && labels.matches_labels(&e.object)
            && e.previous.as_ref().is_none_or(|p| labels.matches_labels(p))
    };
    Ok(if others || !slices.iter().all(countable) { 0 } else { slices.len() })
}

/// The IP families whose kube-proxy proxier the changes after `resource_version` reach, as
/// kube-proxy's metaproxier dispatches them (pkg/proxy/metaproxier/meta_proxier.go): a Service
/// to the families of its cluster IPs, an EndpointSlice to its address type, a Node to both.
/// Objects kube-proxy's label selector leaves out reach none.
pub(crate) fn families_reached(store: &Store, resource_version: u64) -> Result<Families> {
    let labels = Selector::parse(PROXY_LABEL_SELECTOR)?;
    let mut families = Families::default();
    let mut add = |address: &str| match address.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => families.ipv4 = true,
        Ok(std::net::IpAddr::V6(_)) => families.ipv6 = true,
        Err(_) => {}
    };
    for kind in [Kind::Service, Kind::EndpointSlice, Kind::Node] {
        for event in store.events_after(kind, resource_version).1 {
            let object = &event.object;
            if kind != Kind::Node && !labels.matches_labels(object) {
                continue;
            }
            match kind {
                Kind::Service => {
                    let ips = object["spec"]["clusterIPs"].as_array().cloned().unwrap_or_default();
                    let ips = if ips.is_empty() { vec![object["spec"]["clusterIP"].clone()] } else { ips };
                    ips.iter().filter_map(Value::as_str).for_each(&mut add);
                }
                Kind::EndpointSlice => match object["addressType"].as_str() {
                    Some("IPv4") => add("0.0.0.0"),
                    Some("IPv6") => add("::"),
                    _ => {}
                },
                Kind::Node => {
                    add("0.0.0.0");
                    add("::");
                }
                Kind::ServiceCidr => {}
            }
        }
    }
    Ok(families)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::PerFamily;

    /// The node IPs kube-proxy takes from a served Node: the first InternalIP, then the first
    /// InternalIP of the other family (v1.30 pkg/util/node/node.go GetNodeHostIPs; the served
    /// nodes have no ExternalIP).
    fn kube_proxy_node_ips(object: &k8s_openapi::api::core::v1::Node) -> Vec<std::net::IpAddr> {
        let internal: Vec<std::net::IpAddr> = object
            .status
            .iter()
            .flat_map(|s| s.addresses.iter().flatten())
            .filter(|a| a.type_ == "InternalIP")
            .filter_map(|a| a.address.parse().ok())
            .collect();
        let mut ips = vec![internal[0]];
        ips.extend(internal.iter().find(|ip| ip.is_ipv6() != internal[0].is_ipv6()));
        ips
    }

    fn slice(name: &str, ip: &str) -> Value {
        json!({
            "metadata": {"name": name, "namespace": "default", "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4", "endpoints": [{"addresses": [ip]}],
        })
    }

    /// As the endpointslice controller: a slice it rewrites carries the new change's time, one
    /// it leaves alone keeps its own; kube-proxy can count only pushes of slices it will see.
    #[test]
    fn changed_slices_carry_the_push_s_trigger_time_and_unchanged_ones_keep_theirs() {
        let store = Store::default();
        let first = stamp_trigger_times(&store, vec![slice("a", "10.0.0.1"), slice("b", "10.0.0.2")], "T1");
        store.replace(Kind::EndpointSlice, first).unwrap();
        let rv = store.resource_version();
        let second = stamp_trigger_times(&store, vec![slice("a", "10.0.0.1"), slice("b", "10.0.0.3")], "T2");
        assert_eq!(second[0]["metadata"]["annotations"][TRIGGER_TIME], "T1");
        assert_eq!(second[1]["metadata"]["annotations"][TRIGGER_TIME], "T2");
        assert_eq!(store.replace(Kind::EndpointSlice, second).unwrap(), 1, "only b changed");
        assert_eq!(programming_expected(&store, rv).unwrap(), 1);

        let rv = store.resource_version();
        let third = stamp_trigger_times(&store, vec![slice("b", "10.0.0.4")], "T3");
        store.replace(Kind::EndpointSlice, third).unwrap();
        assert_eq!(programming_expected(&store, rv).unwrap(), 0, "a deletion is not observed");

        let rv = store.resource_version();
        let fourth = stamp_trigger_times(&store, vec![slice("b", "10.0.0.5")], "T4");
        store.replace(Kind::EndpointSlice, fourth).unwrap();
        store
            .replace(Kind::Service, vec![json!({"metadata": {"name": "web", "namespace": "default"}})])
            .unwrap();
        assert_eq!(programming_expected(&store, rv).unwrap(), 0, "a Service changed too");
    }

    #[test]
    fn a_node_object_carries_its_internal_ips_and_pod_cidrs() {
        let node = Node::example("node-a", "192.168.50.11", "10.244.1.0/24");
        let object: k8s_openapi::api::core::v1::Node = serde_json::from_value(node_object(&node)).unwrap();
        assert_eq!(kube_proxy_node_ips(&object), [node.ip()]);
        assert_eq!(object.spec.unwrap().pod_cidrs.unwrap(), ["10.244.1.0/24"]);
        assert!(!object.metadata.labels.unwrap().contains_key("topology.kubernetes.io/zone"));
    }

    #[test]
    fn kube_proxy_reads_the_model_s_node_ips_and_zone_from_the_served_node() {
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        let node = Node {
            zone: Some("zone-b".into()),
            name: "node-a".into(),
            ips: PerFamily::dual(ip("fd00:50::11"), Some(ip("192.168.50.11"))),
            // A secondary address of the second family listed first, as a pasted Node may.
            secondary_ips: vec![ip("192.168.50.21"), ip("fd00:50::21")],
            pod_cidrs: PerFamily::dual(
                "fd00:10:244:1::/64".parse().unwrap(),
                Some("10.244.1.0/24".parse().unwrap()),
            ),
        };
        let value = node_object(&node);
        let object: k8s_openapi::api::core::v1::Node = serde_json::from_value(value).unwrap();
        assert_eq!(kube_proxy_node_ips(&object), node.ips.copied().collect::<Vec<_>>());
        let internal: Vec<String> = object
            .status
            .as_ref()
            .unwrap()
            .addresses
            .iter()
            .flatten()
            .filter(|a| a.type_ == "InternalIP")
            .map(|a| a.address.clone())
            .collect();
        // Every address is served, the secondary ones after both node IPs.
        assert_eq!(internal, ["fd00:50::11", "192.168.50.11", "192.168.50.21", "fd00:50::21"]);
        let labels = object.metadata.labels.unwrap();
        // pkg/proxy/topology.go reads v1.LabelTopologyZone from the node kube-proxy runs on.
        assert_eq!(labels.get("topology.kubernetes.io/zone").map(String::as_str), Some("zone-b"));
        assert_eq!(object.spec.unwrap().pod_cidrs.unwrap(), ["fd00:10:244:1::/64", "10.244.1.0/24"]);
    }

    #[test]
    fn the_service_cidr_object_holds_every_family_of_the_service_range() {
        let mut cluster = crate::model::Cluster::example(Vec::new());
        cluster.service_cidr = "10.96.0.0/12".parse().unwrap();
        let single = service_cidr_object(&cluster);
        assert_eq!(single["metadata"]["name"], "kubernetes");
        assert_eq!(single["spec"]["cidrs"], serde_json::json!(["10.96.0.0/12"]));
        assert_eq!(single["status"]["conditions"][0]["type"], "Ready");
        cluster.second_family = Some(crate::model::SecondFamily {
            pod_cidr: "fd00:10:244::/56".parse().unwrap(),
            service_cidr: "fd00:10:96::/112".parse().unwrap(),
            node_network: "fd00:192:168:50::/64".parse().unwrap(),
        });
        let dual = service_cidr_object(&cluster);
        assert_eq!(dual["spec"]["cidrs"], serde_json::json!(["10.96.0.0/12", "fd00:10:96::/112"]));
    }
}
