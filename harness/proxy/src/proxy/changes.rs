//! What changed between two syncs, as kube-proxy's change trackers tell it: the Services whose
//! object or endpoints changed (`UpdatedServices` of `svcPortMap.Update` and
//! `endpointsMap.Update`, pkg/proxy/servicechangetracker.go and endpointschangetracker.go),
//! and whether anything but the Services and pods changed (the node, the flags). Shared by the
//! partial syncs of the built-in iptables and nftables proxies.
//!
//! Decided from the model, as kube-proxy decides it from its trackers, not by comparing rules:
//! so a tracker that misses a change (kubernetes/kubernetes#121362) leaves the Service's old
//! rules in place, as it did in kube-proxy.

use std::any::Any;
use std::collections::{BTreeMap, HashMap, HashSet};

use anyhow::{Context, Result};

use crate::model::{Cluster, IpFamily, Service};

/// What a node's proxy remembers of its last successful sync, per family, in the proxy's own
/// `Last` (what it wrote, for the next sync to write only what changed).
pub(crate) struct Memory<Last> {
    pub families: BTreeMap<IpFamily, Last>,
}

impl<Last: Send + Sync + 'static> Memory<Last> {
    /// The memory kept in a node's `NodeState::memory`, empty on the first sync.
    pub fn in_state(slot: &mut Option<Box<dyn Any + Send + Sync>>) -> Result<&mut Memory<Last>> {
        slot.get_or_insert_with(|| Box::new(Memory::<Last> { families: BTreeMap::new() }))
            .downcast_mut::<Memory<Last>>()
            .context("another proxy's memory")
    }
}

/// A Service's `namespace/name`.
pub(crate) fn key(svc: &Service) -> String {
    format!("{}/{}", svc.namespace, svc.name)
}

/// Everything but the Services and pods, as text: a change there means a full sync.
pub(crate) fn shape(cluster: &Cluster) -> String {
    // Built field by field: cloning the whole cluster to empty its Services cost a copy of
    // every Service on every sync.
    let rest = Cluster {
        pod_cidr: cluster.pod_cidr,
        service_cidr: cluster.service_cidr,
        node_network: cluster.node_network,
        nodes: cluster.nodes.clone(),
        external_hosts: cluster.external_hosts.clone(),
        pods: Vec::new(),
        services: Vec::new(),
        proxy: cluster.proxy.clone(),
        second_family: cluster.second_family.clone(),
    };
    format!("{rest:?}")
}

/// The Service without its endpoints: what kube-proxy's service tracker compares.
fn without_endpoints(svc: &Service) -> Service {
    let mut s = svc.clone();
    for port in &mut s.ports {
        port.endpoints.clear();
    }
    s
}

/// The Services added, removed or changed between `before` and `after` (kube-proxy's
/// `serviceChanged ∪ endpointsChanged`), by [`key`]. `endpoints_tracked: false` is the
/// mutant whose tracker misses endpoint changes.
pub(crate) fn changed_services(
    before: &Cluster,
    after: &Cluster,
    endpoints_tracked: bool,
) -> HashSet<String> {
    let old: HashMap<String, &Service> = before.services.iter().map(|s| (key(s), s)).collect();
    let mut changed = HashSet::new();
    for svc in &after.services {
        let k = key(svc);
        let differs = match old.get(&k) {
            None => true,
            // Most Services are unchanged: equal as they are, with no copy made.
            Some(b) if *b == svc => false,
            Some(b) if without_endpoints(b) != without_endpoints(svc) => true,
            Some(_) => endpoints_tracked,
        };
        if differs {
            changed.insert(k);
        }
    }
    let new: HashSet<String> = after.services.iter().map(key).collect();
    changed.extend(old.into_keys().filter(|k| !new.contains(k)));
    changed
}
