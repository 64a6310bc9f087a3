//! Which traffic kube-proxy on a node counts as local (from a pod), by its detectLocalMode
//! (`kubernetes::local_detect`), and where a probe's packets arrive at that node.

use crate::kubernetes::local_detect;
use crate::model::{Cluster, Node, Source};
use crate::model::{NODE_UPLINK, POD_BRIDGE};

/// Whether `node`'s proxy masquerades the probe's traffic to a cluster IP: with
/// masquerade-all, or when its detector says the traffic is not local (a no-op detector
/// writes no such rule). Hairpin traffic is masqueraded by the endpoint's own rule besides.
pub(super) fn masquerades_cluster_ip(cluster: &Cluster, from: &Source, node: &Node) -> bool {
    cluster.proxy.masquerade_all
        || local_detect::detector(cluster, &node.name).is_some() && !is_local(cluster, from, node)
}

/// Whether `node`'s detector counts the probe's traffic as local: such traffic to an
/// externalTrafficPolicy Local destination is short-circuited to every endpoint.
pub(super) fn is_local(cluster: &Cluster, from: &Source, node: &Node) -> bool {
    let (Some(detector), Some(source)) =
        (local_detect::detector(cluster, &node.name), cluster.source_ip(from))
    else {
        return false;
    };
    detector.matches(source, arrival(cluster, from, node))
}

/// The interface the probe's packets arrive on at `node`, as netfilter sees it: the pods'
/// bridge for the node's own pods (br_netfilter hands netfilter the bridge, not the pod's
/// veth, so a prefix of the veths' names matches nothing on a bridged node), the uplink for
/// everything from other hosts, none for the node's own traffic.
fn arrival(cluster: &Cluster, from: &Source, node: &Node) -> Option<&'static str> {
    match from {
        Source::Node(n) if *n == node.name => None,
        Source::Pod(p) if cluster.pod(p).is_some_and(|p| p.node == node.name) => Some(POD_BRIDGE),
        _ => Some(NODE_UPLINK),
    }
}
