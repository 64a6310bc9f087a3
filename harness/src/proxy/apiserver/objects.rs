//! The desired state as the API objects a proxy watches: a `v1.Node` per node (built from
//! the model: InternalIPs and pod CIDRs, as kubelet and the node IPAM controller set them),
//! and the scenario's Services and EndpointSlices as they are.

use anyhow::{Context, Result};
use serde_json::{Value, json};

use crate::apiserver::selector::{Selector, selects};
use crate::apiserver::{Kind, Store};
use crate::model::{Cluster, Node};
use crate::proxy::State;
use crate::reference_proxy::PROXY_LABEL_SELECTOR;

use super::sync::Families;

/// The Node object kubelet would register for `node`.
pub fn node_object(node: &Node) -> Value {
    let mut addresses = vec![json!({"type": "InternalIP", "address": node.ip.to_string()})];
    let mut pod_cidrs = vec![node.pod_cidr.to_string()];
    if let Some(second) = &node.second {
        addresses.push(json!({"type": "InternalIP", "address": second.ip.to_string()}));
        pod_cidrs.push(second.pod_cidr.to_string());
    }
    addresses.push(json!({"type": "Hostname", "address": node.name}));
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "labels": {"kubernetes.io/hostname": node.name}},
        "spec": {"podCIDR": pod_cidrs[0], "podCIDRs": pod_cidrs},
        "status": {"addresses": addresses},
    })
}

/// Makes the store hold exactly `state`; returns how many watch events that made.
pub fn push(store: &Store, state: &State<'_>) -> Result<usize> {
    let nodes = state.cluster.nodes.iter().map(node_object).collect();
    let services = state.objects.services.iter().map(serde_json::to_value).collect::<Result<Vec<_>, _>>();
    let slices =
        state.objects.endpoint_slices.iter().map(serde_json::to_value).collect::<Result<Vec<_>, _>>();
    let mut events = store.replace(Kind::Node, nodes).context("storing Nodes")?;
    events +=
        store.replace(Kind::Service, services.context("encoding Services")?).context("storing Services")?;
    events += store
        .replace(Kind::EndpointSlice, slices.context("encoding EndpointSlices")?)
        .context("storing EndpointSlices")?;
    Ok(events)
}

/// The IP families whose kube-proxy proxier the changes after `resource_version` reach, as
/// kube-proxy's metaproxier dispatches them (pkg/proxy/metaproxier/meta_proxier.go): a Service
/// to the families of its cluster IPs, an EndpointSlice to its address type, a Node to both.
/// Objects kube-proxy's label selector leaves out reach none.
pub fn families_reached(store: &Store, resource_version: u64) -> Result<Families> {
    let labels = Selector::parse(PROXY_LABEL_SELECTOR)?;
    let fields = Selector::parse("")?;
    let mut families = Families::default();
    let mut add = |address: &str| match address.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => families.ipv4 = true,
        Ok(std::net::IpAddr::V6(_)) => families.ipv6 = true,
        Err(_) => {}
    };
    for kind in [Kind::Service, Kind::EndpointSlice, Kind::Node] {
        for event in store.events_after(kind, resource_version).1 {
            let object = &event.object;
            if kind != Kind::Node && !selects(&labels, &fields, object) {
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
            }
        }
    }
    Ok(families)
}

/// `--cluster-cidr`/`--service-cluster-ip-range` values: the primary family's CIDR, then the
/// second family's in a dual-stack cluster, comma-separated as kube-proxy takes them.
pub fn cidrs(cluster: &Cluster) -> (String, String) {
    match &cluster.second_family {
        Some(s) => (
            format!("{},{}", cluster.pod_cidr, s.pod_cidr),
            format!("{},{}", cluster.service_cidr, s.service_cidr),
        ),
        None => (cluster.pod_cidr.to_string(), cluster.service_cidr.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_object_carries_its_internal_ips_and_pod_cidrs() {
        let node = Node {
            name: "node-a".into(),
            ip: "192.168.50.11".parse().unwrap(),
            secondary_ips: vec![],
            pod_cidr: "10.244.1.0/24".parse().unwrap(),
            second: None,
            zone: None,
        };
        let object: k8s_openapi::api::core::v1::Node = serde_json::from_value(node_object(&node)).unwrap();
        let status = object.status.unwrap();
        let internal: Vec<_> = status
            .addresses
            .unwrap()
            .into_iter()
            .filter(|a| a.type_ == "InternalIP")
            .map(|a| a.address)
            .collect();
        assert_eq!(internal, ["192.168.50.11"]);
        assert_eq!(object.spec.unwrap().pod_cidrs.unwrap(), ["10.244.1.0/24"]);
    }
}
