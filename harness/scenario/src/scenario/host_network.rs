//! Pods with `spec.hostNetwork: true` (kube-proxy, the CNI's agent, the control plane's static
//! pods: every `kubectl get pods -A` has them). Such a pod has no network of its own: its
//! address is its node's, and traffic to it is traffic to the node. So the harness builds no
//! pod for it; it checks that the pod's addresses are its node's, and an EndpointSlice address
//! of it is a host-network endpoint, served in the node's namespace (`endpoints.rs`).
//!
//! What cannot be modelled that way is refused: a probe from such a pod (probe from its node),
//! and slices the harness would derive over it (paste the Service's EndpointSlices instead).

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Pod as K8sPod;

use crate::model::Node;

use super::error::Diagnostics;
use super::net::ip_at;
use super::objects::Parsed;
use super::registry::{Lookup, Registry};
use super::selectors::ByLabel;
use super::services::ServiceEntry;
use super::yaml::FieldPath;

/// A host-network pod: enough to say which node it is and whom a selector picks.
pub(crate) struct HostNetworkPod {
    pub namespace: String,
    pub name: String,
    pub node: String,
    pub labels: BTreeMap<String, String>,
}

pub(crate) fn is_host_network(p: &Parsed<'_, K8sPod>) -> bool {
    p.object.spec.as_ref().and_then(|s| s.host_network) == Some(true)
}

/// Checks a host-network pod: on a known node, its `podIP`/`podIPs` (when given) addresses of
/// that node. `None` (reported, or its node broken) when it is not usable.
pub(crate) fn read(
    p: &Parsed<'_, K8sPod>,
    nodes: &Registry<Node>,
    diag: &mut Diagnostics,
) -> Option<HostNetworkPod> {
    let site = &p.site;
    let spec = p.object.spec.as_ref()?;
    let node = match spec.node_name.as_deref() {
        None => {
            let message = "required field `nodeName` is missing: a hostNetwork pod is its node, named here";
            diag.value(site, &FieldPath::parse("spec.nodeName"), message);
            return None;
        }
        Some(name) => match nodes.get(name) {
            Lookup::Found(node) => node,
            Lookup::Broken => return None,
            Lookup::Missing => {
                diag.value(site, &FieldPath::parse("spec.nodeName"), nodes.missing_message(name));
                return None;
            }
        },
    };
    let status = p.object.status.as_ref();
    let mut given: Vec<(FieldPath, &str)> = Vec::new();
    if let Some(ip) = status.and_then(|s| s.pod_ip.as_deref()) {
        given.push((FieldPath::parse("status.podIP"), ip));
    }
    for (k, ip) in status.and_then(|s| s.pod_ips.as_ref()).into_iter().flatten().enumerate() {
        // podIPs[0] repeats podIP: one report is enough.
        if !given.iter().any(|(_, text)| *text == ip.ip) {
            given.push((FieldPath::parse("status.podIPs").index(k).key("ip"), ip.ip.as_str()));
        }
    }
    let mut usable = true;
    for (at, text) in given {
        let Some(ip) = ip_at(site, &at, text, diag) else {
            usable = false;
            continue;
        };
        if !node.all_ips().any(|a: IpAddr| a == ip) {
            let own: Vec<String> = node.all_ips().map(|a| a.to_string()).collect();
            diag.value(
                site,
                &at,
                format!(
                    "{ip} is not an address of node {} ({}): a hostNetwork pod's address is its node's",
                    node.name,
                    own.join(", ")
                ),
            );
            usable = false;
        }
    }
    usable.then(|| HostNetworkPod {
        namespace: p.namespace.clone(),
        name: p.name.clone(),
        node: node.name.clone(),
        labels: p.object.metadata.labels.clone().unwrap_or_default(),
    })
}

/// Refuses a Service whose slices the harness would derive (it has a selector and the file
/// gives none of its slices) when its selector picks a host-network pod: the EndpointSlice
/// controller would list the node's address, which derivation does not model.
pub(crate) fn refuse_derived(
    entry: &ServiceEntry<'_>,
    pods: &ByLabel<'_, HostNetworkPod>,
    diag: &mut Diagnostics,
) -> bool {
    let Some(selector) = &entry.selector else { return false };
    let service = &entry.service;
    let Some(pod) = pods.selected(&service.namespace, selector).next() else { return false };
    diag.value(
        &entry.site,
        &FieldPath::parse("spec.selector"),
        format!(
            "selects the hostNetwork pod {}/{} (on node {}): slices derived over host-network pods are not \
             modelled; paste the Service's EndpointSlices (kubectl get endpointslices -n {}), whose node \
             addresses are served on the nodes",
            pod.namespace, pod.name, pod.node, service.namespace
        ),
    );
    true
}
