//! Which endpoints receive traffic: kube-proxy's choice, applied to a set of endpoints (the
//! whole cluster's, or one node's).

use crate::kubernetes::endpoints::{is_local, ready_else_terminating};
use crate::kubernetes::topology;
use crate::model::{Cluster, Endpoint, Service, ServicePort};

/// The ready endpoints of `set`, or, when none is ready, its serving terminating ones: the
/// same choice the backends make (`kubernetes::endpoints`).
pub(super) fn usable<'a>(set: impl Iterator<Item = &'a Endpoint>) -> Vec<&'a Endpoint> {
    ready_else_terminating(set)
}

pub(super) fn cluster_wide(port: &ServicePort) -> Vec<&Endpoint> {
    usable(port.endpoints.iter())
}

/// The Cluster-policy endpoints as the proxy on `node` chooses them: topology hints, where
/// they apply (`kubernetes::topology`, kube-proxy's `canUseTopology`), keep the ready
/// endpoints hinted for the node's zone; otherwise [`cluster_wide`]. `annotation_needed`:
/// as kube-proxy v1.30 (`Choices::hints_need_annotation`).
pub(super) fn cluster_wide_on<'a>(
    cluster: &Cluster,
    svc: &Service,
    port: &'a ServicePort,
    node: &str,
    annotation_needed: bool,
) -> Vec<&'a Endpoint> {
    match hints_zone(cluster, svc, port, node, annotation_needed) {
        Some(zone) => port.endpoints.iter().filter(|e| e.ready && topology::available(e, zone)).collect(),
        None => cluster_wide(port),
    }
}

/// The zone whose hints narrow the Cluster set on `node`, if they do.
pub(super) fn hints_zone<'a>(
    cluster: &'a Cluster,
    svc: &'a Service,
    port: &ServicePort,
    node: &str,
    annotation_needed: bool,
) -> Option<&'a str> {
    let all: Vec<&Endpoint> = port.endpoints.iter().collect();
    let cx = topology::Context::of(cluster, svc, node).annotation_needed(annotation_needed);
    topology::zone_filter(&all, cx)
}

/// The usable endpoints among those on `node` (the fallback applies to this set on its own).
pub(super) fn local_to<'a>(port: &'a ServicePort, node: &str) -> Vec<&'a Endpoint> {
    usable(port.endpoints.iter().filter(move |e| is_local(e, node)))
}

/// The node an endpoint's address really is on, for where its traffic goes: its pod's node,
/// or the node itself for a host-network endpoint; none for an address outside the cluster,
/// whatever its `nodeName` says.
pub(super) fn node_of<'a>(cluster: &'a Cluster, e: &'a Endpoint) -> Option<&'a str> {
    cluster.pod(&e.pod).map(|p| p.node.as_str()).or_else(|| host_network_node(cluster, e))
}

/// The node whose own address `e` is (a host-network endpoint).
pub(super) fn host_network_node<'a>(cluster: &'a Cluster, e: &Endpoint) -> Option<&'a str> {
    let node = cluster.node(&e.pod)?;
    node.node_network_ips().any(|ip| ip == e.ip).then_some(node.name.as_str())
}

/// Ready endpoints on `node` across all ports of a Service, counted once per address: what a
/// health-check node port reports.
pub(super) fn ready_local_count(ports: &[ServicePort], node: &str) -> usize {
    let mut addresses: Vec<_> = ports
        .iter()
        .flat_map(|p| p.endpoints.iter())
        .filter(|e| e.ready && is_local(e, node))
        .map(|e| e.ip)
        .collect();
    addresses.sort();
    addresses.dedup();
    addresses.len()
}
