//! Which endpoints a service port uses on one node, as kube-proxy decides it
//! (`CategorizeEndpoints` in pkg/proxy/topology.go; the topology-hint part is
//! `kubernetes::topology`).
//!
//! Usable means ready; when no endpoint is ready, serving-and-terminating ones are used
//! instead, separately for the Cluster set and for this node's Local set.

use std::net::IpAddr;

use crate::kubernetes::topology::{self, Hints};
use crate::model::{Cluster, Endpoint, IpFamily, Service, ServicePort, ServiceType, TrafficPolicy};

/// When serving-and-terminating endpoints are used. kube-proxy falls back to them; the other
/// two are bugs that mutants switch on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Terminating {
    /// Only when no endpoint of the set is ready (KEP-1669, kube-proxy since v1.26).
    #[default]
    FallBack,
    /// Alongside ready ones, as if terminating endpoints were ready.
    AlwaysUsed,
    /// Never: a set with only terminating endpoints has none.
    NeverUsed,
}

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

/// What a generator of either mode builds one service port's rules on: its policy, its
/// endpoints on the node, and whether external Local traffic goes to the Cluster set (a
/// deviation).
#[derive(Debug, Clone)]
pub struct Choice<'a> {
    pub policy: PortPolicy,
    pub eps: Selection<'a>,
    pub etp_local_uses_cluster: bool,
    /// Endpoints no set uses that still get an affinity check: a bug (a mutant), else empty.
    pub stale_affinity: Vec<&'a Endpoint>,
}

impl Choice<'_> {
    /// External traffic is kept on this node's endpoints.
    pub fn external_local(&self) -> bool {
        self.policy.external_local && !self.etp_local_uses_cluster
    }

    pub fn has_internal_endpoints(&self) -> bool {
        self.eps.has_any && (!self.policy.internal_local || !self.eps.local.is_empty())
    }

    pub fn has_external_endpoints(&self) -> bool {
        self.eps.has_any && (!self.external_local() || !self.eps.local.is_empty())
    }

    /// The external chain exists even without external endpoints (its short-circuit rules
    /// still serve traffic from this node and its pods).
    pub fn uses_external_chain(&self) -> bool {
        self.eps.has_any && self.policy.externally_accessible
    }
}

fn ready(ep: &Endpoint) -> bool {
    ep.ready
}

fn serving_terminating(ep: &Endpoint) -> bool {
    ep.serving && ep.terminating
}

/// Endpoints matching `wanted`: the ready ones, with serving-terminating ones as `terminating`
/// says (kube-proxy: only when none is ready).
fn usable<'a>(
    candidates: &[&'a Endpoint],
    wanted: impl Fn(&Endpoint) -> bool,
    terminating: Terminating,
) -> Vec<&'a Endpoint> {
    let matching = |keep: fn(&Endpoint) -> bool| -> Vec<&'a Endpoint> {
        candidates.iter().copied().filter(|ep| wanted(ep) && keep(ep)).collect()
    };
    match terminating {
        Terminating::AlwaysUsed => matching(|ep| ready(ep) || serving_terminating(ep)),
        Terminating::NeverUsed => matching(ready),
        Terminating::FallBack => ready_else_terminating(candidates.iter().copied().filter(|ep| wanted(ep))),
    }
}

/// kube-proxy's choice within one set of endpoints (KEP-1669, since v1.26): the ready ones,
/// or, when none is ready, the serving-and-terminating ones. The backends and the oracle both
/// choose by it.
pub fn ready_else_terminating<'a>(set: impl IntoIterator<Item = &'a Endpoint>) -> Vec<&'a Endpoint> {
    let set: Vec<&Endpoint> = set.into_iter().collect();
    let chosen: Vec<&Endpoint> = set.iter().copied().filter(|ep| ready(ep)).collect();
    if chosen.is_empty() { set.into_iter().filter(|ep| serving_terminating(ep)).collect() } else { chosen }
}

/// Whether kube-proxy on `node` counts `ep` as local: by its `nodeName` alone
/// (pkg/proxy/endpointslicecache.go, `isLocal`), wherever the address really is.
pub fn is_local(ep: &Endpoint, node: &str) -> bool {
    ep.node.as_deref() == Some(node)
}

/// kube-proxy's choice of endpoints for `port` on `node` (endpoints of the policy's family only).
pub fn select<'a>(port: &'a ServicePort, policy: PortPolicy, node: &str) -> Selection<'a> {
    select_with(port, policy, node, Terminating::FallBack, topology::Context::default(), Hints::Honoured)
}

/// [`select`], with terminating endpoints used as `terminating` says, and the Cluster set
/// narrowed by topology hints as `hints` says (`topo`: the node's zone and the Service's
/// hints annotation).
pub fn select_with<'a>(
    port: &'a ServicePort,
    policy: PortPolicy,
    node: &str,
    terminating: Terminating,
    topo: topology::Context<'_>,
    hints: Hints,
) -> Selection<'a> {
    let mut all: Vec<&Endpoint> =
        port.endpoints.iter().filter(|ep| IpFamily::of(ep.ip) == policy.family).collect();
    all.sort_by_key(|ep| ep.address().to_string());
    let is_local = |ep: &Endpoint| is_local(ep, node);

    // Only the Cluster set is narrowed by hints; when they apply, some ready endpoint is
    // hinted for this zone, so the fallback to terminating endpoints never sees the filter.
    let cluster = if policy.uses_cluster_endpoints() {
        let zone = topology::zone_filter(&all, topo, hints);
        usable(&all, |ep| zone.is_none_or(|z| topology::available(ep, z)), terminating)
    } else {
        Vec::new()
    };
    let local = if policy.uses_local_endpoints() { usable(&all, is_local, terminating) } else { Vec::new() };
    // Every policy combination uses one of the two sets, and both see the same candidates.
    let has_any = !usable(&all, |_| true, terminating).is_empty();

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

/// Ways the generator departs from kube-proxy on purpose (all off by default), for mutants
/// whose bug is a wrong choice of endpoints rather than a wrong rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Deviations {
    pub terminating: Terminating,
    /// internalTrafficPolicy Local uses the Cluster set on a node without local endpoints.
    pub itp_local_falls_back: bool,
    /// externalTrafficPolicy Local sends outside traffic to the Cluster set (and so never
    /// drops it), keeping the client address.
    pub etp_local_uses_cluster: bool,
    /// How topology hints narrow the Cluster set.
    pub hints: Hints,
    /// ClientIP affinity checks are written for not-ready endpoints too (kube-proxy v1.22).
    pub affinity_to_not_ready: bool,
    /// internalTrafficPolicy Local narrows the endpoints before traffic is told apart
    /// (kube-proxy v1.21-v1.22's `FilterEndpoints`, which returned early for external Local
    /// policy): outside traffic too gets only this node's endpoints, and a node without any
    /// has none at all (every address rejects).
    pub itp_local_filters_all: bool,
    /// externalTrafficPolicy Local skips the internal filtering (the same `FilterEndpoints`):
    /// internalTrafficPolicy Local and topology hints are ignored for internal traffic.
    pub etp_local_skips_filtering: bool,
}

impl Deviations {
    /// The policy and endpoints of `port` on `node` (either mode's generator), with the
    /// endpoint-choice bugs these deviations switch on.
    pub fn choose<'a>(
        self,
        cluster: &Cluster,
        svc: &Service,
        port: &'a ServicePort,
        node: &str,
    ) -> Choice<'a> {
        let mut policy = PortPolicy::of(svc, port);
        let topo = topology::Context::of(cluster, svc, node);
        let mut hints = self.hints;
        if self.etp_local_skips_filtering && policy.external_local {
            // The bug: `FilterEndpoints` returns every endpoint for an external-Local port.
            policy.internal_local = false;
            hints = Hints::Ignored;
        }
        let mut eps = select_with(port, policy, node, self.terminating, topo, hints);
        if self.itp_local_filters_all && policy.internal_local && !policy.external_local {
            // The bug: only this node's endpoints are left for every kind of traffic.
            eps.cluster = eps.local.clone();
            eps.reachable = eps.local.clone();
            eps.has_any &= !eps.local.is_empty();
        }
        if hints == Hints::CountsUnready && policy.uses_cluster_endpoints() && eps.cluster.is_empty() {
            // The zone was narrowed to unready endpoints: the port has none usable here.
            eps.has_any = false;
        }
        if self.itp_local_falls_back && policy.internal_local && eps.local.is_empty() && eps.has_any {
            // The bug: on this node the port behaves as if its internal policy were Cluster.
            policy.internal_local = false;
            eps = select_with(port, policy, node, self.terminating, topo, hints);
        }
        let stale_affinity = if self.affinity_to_not_ready
            && matches!(svc.session_affinity, crate::model::SessionAffinity::ClientIp { .. })
        {
            // The bug: endpoints no set uses still get an affinity check (and a chain to go to).
            let unused = |e: &&Endpoint| {
                IpFamily::of(e.ip) == policy.family
                    && !eps.reachable.iter().any(|r| r.address() == e.address())
            };
            port.endpoints.iter().filter(unused).collect()
        } else {
            Vec::new()
        };
        Choice { policy, eps, etp_local_uses_cluster: self.etp_local_uses_cluster, stale_affinity }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Protocol;

    fn ep(ip: &str, node: &str, ready: bool, serving: bool, terminating: bool) -> Endpoint {
        Endpoint {
            ip: ip.parse().unwrap(),
            port: 80,
            ready,
            serving,
            terminating,
            node: Some(node.into()),
            pod: format!("pod-{ip}"),
            zone_hints: Vec::new(),
        }
    }

    fn port(endpoints: Vec<Endpoint>) -> ServicePort {
        ServicePort {
            name: String::new(),
            protocol: Protocol::Tcp,
            port: 80,
            node_port: Some(30080),
            endpoints,
        }
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
    fn terminating_modes_of_the_mutants() {
        let p = port(vec![ep("10.0.0.1", "a", true, true, false), ep("10.0.0.2", "a", false, true, true)]);
        let always =
            select_with(&p, CLUSTER, "a", Terminating::AlwaysUsed, Default::default(), Hints::Honoured);
        assert_eq!(ips(&always.cluster), ["10.0.0.1", "10.0.0.2"]);
        let only_terminating = port(vec![ep("10.0.0.2", "a", false, true, true)]);
        let never = select_with(
            &only_terminating,
            CLUSTER,
            "a",
            Terminating::NeverUsed,
            Default::default(),
            Hints::Honoured,
        );
        assert!(never.cluster.is_empty());
        assert!(!never.has_any, "with no usable endpoint the port rejects");
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

    /// `FilterEndpoints` of v1.21-v1.22 (kubernetes/kubernetes#105470), as two mutants make it.
    #[test]
    fn the_traffic_policy_deviations_entangle_the_policies() {
        let mut svc = Service {
            service_type: ServiceType::NodePort,
            internal_traffic_policy: TrafficPolicy::Local,
            ports: vec![port(vec![ep("10.0.0.1", "a", true, true, false)])],
            ..Service::new("default", "web", "10.96.0.1".parse().unwrap())
        };
        let cluster = Cluster::example(vec![svc.clone()]);
        let choose = |d: Deviations, svc: &Service, node: &str| {
            let c = d.choose(&cluster, svc, &svc.ports[0], node);
            (ips(&c.eps.cluster), ips(&c.eps.local), c.eps.has_any, c.policy.internal_local)
        };
        let filters_all = Deviations { itp_local_filters_all: true, ..Default::default() };
        // Node b has no local endpoint: outside traffic still has node a's, unless the
        // internal policy narrowed them all away.
        assert_eq!(choose(Deviations::default(), &svc, "b"), (vec!["10.0.0.1".into()], vec![], true, true));
        assert_eq!(choose(filters_all, &svc, "b"), (vec![], vec![], false, true));
        assert_eq!(choose(filters_all, &svc, "a").0, ["10.0.0.1"]);
        // With external Local policy too, the internal Local policy holds, unless skipped.
        svc.external_traffic_policy = TrafficPolicy::Local;
        let skips = Deviations { etp_local_skips_filtering: true, ..Default::default() };
        assert!(choose(Deviations::default(), &svc, "b").3);
        assert!(choose(filters_all, &svc, "b").2, "v1.22 returned early for external Local policy");
        assert!(!choose(skips, &svc, "b").3);
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
