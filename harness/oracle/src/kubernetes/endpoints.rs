//! Which endpoints a service port uses on one node, as kube-proxy decides it
//! (`CategorizeEndpoints` in pkg/proxy/topology.go; the topology-hint part is
//! `kubernetes::topology`).
//!
//! Usable means ready; when no endpoint is ready, serving-and-terminating ones are used
//! instead, separately for the Cluster set and for this node's Local set.

use std::net::IpAddr;

use crate::kubernetes::topology::{self, ZoneChoice};
use crate::model::{Endpoint, IpFamily, Service, ServicePort, ServiceType, TrafficPolicy};

/// How one set of endpoints (the Cluster set, or this node's Local set) is narrowed to those
/// used: kube-proxy's [`ready_else_terminating`], or another rule a caller passes (the proxies'
/// mutants make it a bug).
pub type SetChoice = for<'a> fn(Vec<&'a Endpoint>) -> Vec<&'a Endpoint>;

/// The traffic policies of one service port, as kube-proxy's `BaseServicePortInfo` keeps them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortPolicy {
    pub internal_local: bool,
    /// externalTrafficPolicy Local on a NodePort or LoadBalancer service.
    pub external_local: bool,
    /// Reachable from outside (`ExternallyAccessible`): a node port, or an external IP or
    /// load-balancer IP of the Service's family (each proxier sees its own family's).
    pub externally_accessible: bool,
    /// The family of the proxier that handles the port (its cluster IP's): endpoints of the
    /// other family are the other proxier's.
    pub family: IpFamily,
}

impl PortPolicy {
    pub fn of(svc: &Service, port: &ServicePort) -> PortPolicy {
        let external_type = matches!(svc.service_type, ServiceType::NodePort | ServiceType::LoadBalancer);
        let family = IpFamily::of(svc.cluster_ip());
        let has_ours = |ips: &[IpAddr]| ips.iter().any(|ip| IpFamily::of(*ip) == family);
        PortPolicy {
            internal_local: svc.internal_traffic_policy == TrafficPolicy::Local,
            external_local: external_type && svc.external_traffic_policy == TrafficPolicy::Local,
            externally_accessible: (external_type && port.node_port.is_some())
                || has_ours(&svc.external_ips)
                || has_ours(&svc.load_balancer_ips),
            family,
        }
    }

    /// Cluster endpoints are needed for internal Cluster policy, and for any external traffic
    /// (even with external Local policy, to short-circuit traffic from this node).
    pub fn uses_cluster_endpoints(self) -> bool {
        !self.internal_local || self.externally_accessible
    }

    pub fn uses_local_endpoints(self) -> bool {
        self.internal_local || (self.external_local && self.externally_accessible)
    }
}

/// The endpoints of one service port on one node, each list sorted by `ip:port` string as
/// kube-proxy's endpoint cache sorts them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection<'a> {
    /// Behind `KUBE-SVC-…` (Cluster policy).
    pub cluster: Vec<&'a Endpoint>,
    /// Behind `KUBE-SVL-…` (Local policy): this node's endpoints.
    pub local: Vec<&'a Endpoint>,
    /// Every endpoint that gets a `KUBE-SEP-…` chain on this node.
    pub reachable: Vec<&'a Endpoint>,
    /// Whether the port has usable endpoints anywhere in the cluster.
    pub has_any: bool,
}

pub fn ready(ep: &Endpoint) -> bool {
    ep.ready
}

pub fn serving_terminating(ep: &Endpoint) -> bool {
    ep.serving && ep.terminating
}

/// Endpoints matching `wanted`, narrowed by `choose`.
fn usable<'a>(
    candidates: &[&'a Endpoint],
    wanted: impl Fn(&Endpoint) -> bool,
    choose: SetChoice,
) -> Vec<&'a Endpoint> {
    choose(candidates.iter().copied().filter(|ep| wanted(ep)).collect())
}

/// kube-proxy's choice within one set of endpoints (KEP-1669, since v1.26): the ready ones,
/// or, when none is ready, the serving-and-terminating ones. The backends and the oracle both
/// choose by it.
pub fn ready_else_terminating<'a>(set: impl IntoIterator<Item = &'a Endpoint>) -> Vec<&'a Endpoint> {
    let set: Vec<&Endpoint> = set.into_iter().collect();
    let chosen: Vec<&Endpoint> = set.iter().copied().filter(|ep| ready(ep)).collect();
    if chosen.is_empty() { set.into_iter().filter(|ep| serving_terminating(ep)).collect() } else { chosen }
}

/// kube-proxy's [`SetChoice`]: [`ready_else_terminating`].
pub fn kube_proxy_set(set: Vec<&Endpoint>) -> Vec<&Endpoint> {
    ready_else_terminating(set)
}

/// Whether kube-proxy on `node` counts `ep` as local: by its `nodeName` alone
/// (pkg/proxy/endpointslicecache.go, `isLocal`), wherever the address really is.
pub fn is_local(ep: &Endpoint, node: &str) -> bool {
    ep.node.as_deref() == Some(node)
}

/// kube-proxy's choice of endpoints for `port` on `node` (endpoints of the policy's family only).
pub fn select<'a>(port: &'a ServicePort, policy: PortPolicy, node: &str) -> Selection<'a> {
    select_with(port, policy, node, kube_proxy_set, topology::Context::default(), topology::zone_filter)
}

/// [`select`], with each set narrowed by `choose` (kube-proxy's: [`kube_proxy_set`]), and the
/// Cluster set narrowed to the zone `zones` picks (kube-proxy's: [`topology::zone_filter`];
/// `topo`: the node's zone and the Service's hints annotation).
pub fn select_with<'a>(
    port: &'a ServicePort,
    policy: PortPolicy,
    node: &str,
    choose: SetChoice,
    topo: topology::Context<'_>,
    zones: ZoneChoice,
) -> Selection<'a> {
    let mut all: Vec<&Endpoint> =
        port.endpoints.iter().filter(|ep| IpFamily::of(ep.ip) == policy.family).collect();
    all.sort_by_key(|ep| ep.address().to_string());
    let is_local = |ep: &Endpoint| is_local(ep, node);

    // Only the Cluster set is narrowed by hints; when they apply, some ready endpoint is
    // hinted for this zone, so the fallback to terminating endpoints never sees the filter.
    let cluster = if policy.uses_cluster_endpoints() {
        let zone = zones(&all, topo);
        usable(&all, |ep| zone.is_none_or(|z| topology::available(ep, z)), choose)
    } else {
        Vec::new()
    };
    let local = if policy.uses_local_endpoints() { usable(&all, is_local, choose) } else { Vec::new() };
    // Every policy combination uses one of the two sets, and both see the same candidates.
    let has_any = !usable(&all, |_| true, choose).is_empty();

    // Union of both sets; sorted, where kube-proxy's order here is a Go map's (random).
    let mut reachable = cluster.clone();
    for ep in &local {
        if !reachable.iter().any(|r| r.address() == ep.address()) {
            reachable.push(ep);
        }
    }
    reachable.sort_by_key(|ep| ep.address().to_string());
    Selection { cluster, local, reachable, has_any }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(ip: &str, node: &str, ready: bool, serving: bool, terminating: bool) -> Endpoint {
        Endpoint { ready, serving, terminating, ..Endpoint::example(ip, 80, Some(node)) }
    }

    fn port(endpoints: Vec<Endpoint>) -> ServicePort {
        ServicePort::example(endpoints)
    }

    const CLUSTER: PortPolicy = PortPolicy {
        internal_local: false,
        external_local: false,
        externally_accessible: true,
        family: IpFamily::V4,
    };
    const EXT_LOCAL: PortPolicy = PortPolicy {
        internal_local: false,
        external_local: true,
        externally_accessible: true,
        family: IpFamily::V4,
    };

    fn ips(eps: &[&Endpoint]) -> Vec<String> {
        eps.iter().map(|e| e.ip.to_string()).collect()
    }

    #[test]
    fn ready_endpoints_win_and_are_sorted_by_address_string() {
        let p = port(vec![
            ep("10.0.0.9", "a", true, true, false),
            ep("10.0.0.10", "b", true, true, false),
            ep("10.0.0.5", "b", false, true, true),
        ]);
        let sel = select(&p, CLUSTER, "a");
        // String order, as kube-proxy sorts: "10.0.0.10:80" < "10.0.0.9:80".
        assert_eq!(ips(&sel.cluster), ["10.0.0.10", "10.0.0.9"]);
        assert!(sel.local.is_empty());
        assert!(sel.has_any);
    }

    #[test]
    fn falls_back_to_serving_terminating() {
        let p = port(vec![ep("10.0.0.1", "a", false, true, true), ep("10.0.0.2", "a", false, false, true)]);
        let sel = select(&p, CLUSTER, "a");
        assert_eq!(ips(&sel.cluster), ["10.0.0.1"]);
        assert!(sel.has_any);
        let none = port(vec![ep("10.0.0.2", "a", false, false, true)]);
        assert!(!select(&none, CLUSTER, "a").has_any);
    }

    #[test]
    fn external_and_load_balancer_ips_make_a_port_externally_accessible() {
        let mut svc = Service {
            external_traffic_policy: TrafficPolicy::Local,
            ports: vec![],
            ..Service::new("default", "web", "10.96.0.1".parse().unwrap())
        };
        let mut p = port(vec![]);
        p.node_port = None;
        assert!(!PortPolicy::of(&svc, &p).externally_accessible);
        svc.external_ips = vec!["192.168.99.1".parse().unwrap()];
        let policy = PortPolicy::of(&svc, &p);
        // A ClusterIP service's external policy is never Local.
        assert!(policy.externally_accessible && !policy.external_local);
        svc.external_ips = vec!["fd00::1".parse().unwrap()];
        assert!(!PortPolicy::of(&svc, &p).externally_accessible, "IPv6 addresses are the other proxier's");
        // An IPv6 Service's are its own, and the IPv4 ones the other proxier's.
        svc.cluster_ips = crate::model::PerFamily::single("fd00:10:96::1".parse().unwrap());
        assert!(PortPolicy::of(&svc, &p).externally_accessible);
        svc.external_ips = vec!["192.168.99.1".parse().unwrap()];
        assert!(!PortPolicy::of(&svc, &p).externally_accessible);
        svc.cluster_ips = crate::model::PerFamily::single("10.96.0.1".parse().unwrap());
        svc.external_ips.clear();
        svc.service_type = ServiceType::LoadBalancer;
        svc.load_balancer_ips = vec!["203.0.113.7".parse().unwrap()];
        let policy = PortPolicy::of(&svc, &p);
        assert!(policy.externally_accessible && policy.external_local);
    }

    #[test]
    fn local_set_is_this_nodes_and_may_fall_back_alone() {
        let p = port(vec![ep("10.0.0.1", "a", true, true, false), ep("10.0.0.2", "b", false, true, true)]);
        let on_b = select(&p, EXT_LOCAL, "b");
        assert_eq!(ips(&on_b.cluster), ["10.0.0.1"]);
        assert_eq!(ips(&on_b.local), ["10.0.0.2"]);
        assert_eq!(ips(&on_b.reachable), ["10.0.0.1", "10.0.0.2"]);
        let on_c = select(&p, EXT_LOCAL, "c");
        assert!(on_c.local.is_empty());
        assert!(on_c.has_any);
    }
}
