//! The desired state as a file a proxy program reads: a Kubernetes `List` of the cluster's
//! Nodes, then its Services, then its EndpointSlices (derived ones included), as the API
//! server would return them. Written as JSON, which is also YAML 1.2: any YAML or JSON reader
//! takes it, and `kubectl` can print it.

use std::path::Path;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::{Node as K8sNode, NodeAddress, NodeSpec, NodeStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};

use crate::model::{Cluster, Node, Objects};

/// The `List` document, with `metadata.resourceVersion` = `generation` (1 at start, +1 on
/// every update) so that a program can report which state it applied.
pub(crate) fn render(cluster: &Cluster, objects: &Objects, generation: u64) -> Result<Vec<u8>> {
    let mut items: Vec<Value> = Vec::new();
    for node in &cluster.nodes {
        items.push(serde_json::to_value(node_object(node)).context("serializing a Node")?);
    }
    for svc in &objects.services {
        items.push(serde_json::to_value(svc).context("serializing a Service")?);
    }
    for slice in &objects.endpoint_slices {
        items.push(serde_json::to_value(slice).context("serializing an EndpointSlice")?);
    }
    let list = json!({
        "apiVersion": "v1",
        "kind": "List",
        "metadata": {"resourceVersion": generation.to_string()},
        "items": items,
    });
    let mut text = serde_json::to_vec_pretty(&list).context("serializing the state List")?;
    text.push(b'\n');
    Ok(text)
}

/// What kubelet and the node controller publish of a node: its InternalIPs (every family) and
/// pod CIDRs.
pub fn node_object(node: &Node) -> K8sNode {
    // The InternalIP of each family first: kube-proxy takes the first of each family as the
    // node's (pkg/util/node GetNodeHostIPs), so no secondary address may precede them.
    let ips = node.all_ips();
    let pod_cidrs: Vec<String> = node.pod_cidrs.iter().map(|c| c.to_string()).collect();
    K8sNode {
        metadata: ObjectMeta {
            name: Some(node.name.clone()),
            labels: Some(
                std::iter::once(("kubernetes.io/hostname".to_string(), node.name.clone()))
                    .chain(node.zone.iter().map(|z| ("topology.kubernetes.io/zone".to_string(), z.clone())))
                    .collect(),
            ),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            pod_cidr: pod_cidrs.first().cloned(),
            pod_cidrs: Some(pod_cidrs),
            ..NodeSpec::default()
        }),
        status: Some(NodeStatus {
            addresses: Some(
                ips.map(|ip| NodeAddress { type_: "InternalIP".into(), address: ip.to_string() })
                    .chain(std::iter::once(NodeAddress {
                        type_: "Hostname".into(),
                        address: node.name.clone(),
                    }))
                    .collect(),
            ),
            ..NodeStatus::default()
        }),
    }
}

/// Replaces `path` with `contents` in one step (a rename), so a program that watches the file
/// never reads half of it.
pub(crate) fn write_atomically(path: &Path, contents: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, contents).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::PerFamily;

    fn node() -> Node {
        Node {
            zone: None,
            name: "node-a".into(),
            ips: PerFamily::dual("192.168.50.11".parse().unwrap(), Some("fd00:50::11".parse().unwrap())),
            secondary_ips: vec!["fd00:50::21".parse().unwrap(), "192.168.50.21".parse().unwrap()],
            pod_cidrs: PerFamily::dual(
                "10.244.1.0/24".parse().unwrap(),
                Some("fd00:10:244:1::/64".parse().unwrap()),
            ),
        }
    }

    #[test]
    fn a_node_carries_its_addresses_and_pod_cidrs() {
        let v = serde_json::to_value(node_object(&node())).unwrap();
        assert_eq!(v["apiVersion"], "v1");
        assert_eq!(v["kind"], "Node");
        assert_eq!(v["metadata"]["name"], "node-a");
        assert_eq!(v["spec"]["podCIDR"], "10.244.1.0/24");
        assert_eq!(v["spec"]["podCIDRs"], json!(["10.244.1.0/24", "fd00:10:244:1::/64"]));
        let addresses: Vec<(String, String)> = v["status"]["addresses"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| (a["type"].as_str().unwrap().into(), a["address"].as_str().unwrap().into()))
            .collect();
        let internal = |ip: &str| ("InternalIP".to_string(), ip.to_string());
        assert_eq!(
            addresses,
            [
                // The first InternalIP of each family is the node's (GetNodeHostIPs): a
                // secondary address of either family comes after both.
                internal("192.168.50.11"),
                internal("fd00:50::11"),
                internal("fd00:50::21"),
                internal("192.168.50.21"),
                ("Hostname".into(), "node-a".into())
            ]
        );
    }

    #[test]
    fn the_list_holds_nodes_then_services_then_slices() {
        let text = r#"
apiVersion: packetproof.dev/v1alpha1
kind: Scenario
metadata: {name: list}
spec:
  cluster: {podCIDR: 10.244.0.0/16, serviceCIDR: 10.96.0.0/12, nodeNetwork: 192.168.50.0/24}
  nodes:
    - {name: node-a, ip: 192.168.50.11, podCIDR: 10.244.1.0/24}
  probes:
    - {name: p, from: {pod: web-0}, to: {service: web}}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  clusterIP: 10.96.0.30
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080, protocol: TCP}]
---
apiVersion: v1
kind: Pod
metadata: {name: web-0, namespace: default, labels: {app: web}}
spec:
  nodeName: node-a
  containers: [{name: web, image: web, ports: [{containerPort: 8080}]}]
status: {podIP: 10.244.1.10}
"#;
        let s = packetproof::admission::load_str(text, Path::new("list.yaml")).unwrap();
        let list: Value = serde_json::from_slice(&render(&s.cluster, &s.objects, 7).unwrap()).unwrap();
        assert_eq!((&list["apiVersion"], &list["kind"]), (&json!("v1"), &json!("List")));
        assert_eq!(list["metadata"]["resourceVersion"], "7");
        let kinds: Vec<&str> =
            list["items"].as_array().unwrap().iter().map(|i| i["kind"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["Node", "Service", "EndpointSlice"]);
        // The slice the harness derived from the selector, as the EndpointSlice controller would.
        let slice = &list["items"][2];
        assert_eq!(slice["metadata"]["labels"]["kubernetes.io/service-name"], "web");
        assert_eq!(slice["endpoints"][0]["addresses"], json!(["10.244.1.10"]));
        assert_eq!(slice["ports"][0]["port"], 8080);
    }
}
