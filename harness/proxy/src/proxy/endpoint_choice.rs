//! The endpoints a built-in generator builds one service port's rules on: kube-proxy's choice
//! (`kubernetes::endpoints`, which the oracle shares), and the ways a mutant departs from it.
//! The departures live here, with the proxies, so that the contract the oracle reads holds no
//! bug switch.

use crate::kubernetes::endpoints::{
    PortPolicy, Selection, SetChoice, kube_proxy_set, ready, select_with, serving_terminating,
};
use crate::kubernetes::topology::{self, Context, ZoneChoice, available, node_zone, zone_filter};
use crate::model::{Cluster, Endpoint, IpFamily, Service, ServicePort};

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

/// How a generator treats topology hints: kube-proxy's way, or one of the bugs mutants switch on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Hints {
    /// kube-proxy's rules ([`zone_filter`]).
    #[default]
    Honoured,
    /// Hints never filter endpoints.
    Ignored,
    /// Hints filter endpoints even when some ready endpoint has none (such an endpoint is
    /// then never used).
    UsedWhenIncomplete,
    /// `canUseTopology` counts unready endpoints too (kube-proxy before
    /// <https://github.com/kubernetes/kubernetes/pull/106507>): a zone whose hinted endpoints
    /// are all unready is still narrowed to them, and keeps no ready endpoint.
    CountsUnready,
}

impl Hints {
    fn choice(self) -> ZoneChoice {
        match self {
            Hints::Honoured => zone_filter,
            Hints::Ignored => ignored,
            Hints::UsedWhenIncomplete => used_when_incomplete,
            Hints::CountsUnready => counts_unready,
        }
    }
}

fn ignored<'a>(_: &[&Endpoint], _: Context<'a>) -> Option<&'a str> {
    None
}

/// Some ready endpoint is hinted for this zone: whether every one is hinted does not matter.
fn used_when_incomplete<'a>(endpoints: &[&Endpoint], cx: Context<'a>) -> Option<&'a str> {
    let zone = node_zone(cx)?;
    endpoints.iter().any(|e| e.ready && available(e, zone)).then_some(zone)
}

/// [`zone_filter`] over every endpoint, ready or not.
fn counts_unready<'a>(endpoints: &[&Endpoint], cx: Context<'a>) -> Option<&'a str> {
    let zone = node_zone(cx)?;
    let complete = endpoints.iter().all(|e| !e.zone_hints.is_empty());
    (complete && endpoints.iter().any(|e| available(e, zone))).then_some(zone)
}

impl Terminating {
    fn choice(self) -> SetChoice {
        match self {
            Terminating::FallBack => kube_proxy_set,
            Terminating::AlwaysUsed => {
                |set| set.into_iter().filter(|ep| ready(ep) || serving_terminating(ep)).collect()
            }
            Terminating::NeverUsed => |set| set.into_iter().filter(|ep| ready(ep)).collect(),
        }
    }
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

/// Ways the generator departs from kube-proxy on purpose (all off by default), for mutants
/// whose bug is a wrong choice of endpoints rather than a wrong rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Deviations {
    /// When serving-and-terminating endpoints are used.
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
        let mut eps = select_with(port, policy, node, self.terminating.choice(), topo, hints.choice());
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
            eps = select_with(port, policy, node, self.terminating.choice(), topo, hints.choice());
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
    use crate::model::{ServiceType, TrafficPolicy};

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

    fn ips(eps: &[&Endpoint]) -> Vec<String> {
        eps.iter().map(|e| e.ip.to_string()).collect()
    }

    #[test]
    fn terminating_modes_of_the_mutants() {
        let p = port(vec![ep("10.0.0.1", "a", true, true, false), ep("10.0.0.2", "a", false, true, true)]);
        let always =
            select_with(&p, CLUSTER, "a", Terminating::AlwaysUsed.choice(), Default::default(), zone_filter);
        assert_eq!(ips(&always.cluster), ["10.0.0.1", "10.0.0.2"]);
        let only_terminating = port(vec![ep("10.0.0.2", "a", false, true, true)]);
        let never = select_with(
            &only_terminating,
            CLUSTER,
            "a",
            Terminating::NeverUsed.choice(),
            Default::default(),
            zone_filter,
        );
        assert!(never.cluster.is_empty());
        assert!(!never.has_any, "with no usable endpoint the port rejects");
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

    /// A node in zone-a, the Service annotated `Auto` (v1.30, the gate off).
    const AUTO_IN_ZONE_A: Context<'static> = Context {
        annotation: Some("Auto"),
        zone: Some("zone-a"),
        traffic_distribution_gate: false,
        annotation_needed: true,
    };

    fn hinted(ip: &str, ready: bool, zones: &[&str]) -> Endpoint {
        Endpoint {
            ready,
            zone_hints: zones.iter().map(|z| z.to_string()).collect(),
            ..Endpoint::example(ip, 80, Some("n"))
        }
    }

    #[test]
    fn ignored_hints_never_narrow() {
        let eps = [hinted("10.1.2.3", true, &["zone-a"])];
        let refs: Vec<&Endpoint> = eps.iter().collect();
        let cx = AUTO_IN_ZONE_A;
        assert_eq!(zone_filter(&refs, cx), Some("zone-a"));
        assert_eq!(ignored(&refs, cx), None);
    }

    #[test]
    fn the_incomplete_hints_mutant_filters_anyway() {
        let eps = [hinted("10.1.2.3", true, &["zone-a"]), hinted("10.1.2.4", true, &[])];
        let refs: Vec<&Endpoint> = eps.iter().collect();
        let cx = AUTO_IN_ZONE_A;
        assert_eq!(zone_filter(&refs, cx), None);
        assert_eq!(used_when_incomplete(&refs, cx), Some("zone-a"));
    }

    #[test]
    fn the_unready_hints_mutant_narrows_to_an_unready_zone() {
        // zone-a's only hinted endpoint is unready: kube-proxy ignores the hints there.
        let eps = [hinted("10.1.2.3", false, &["zone-a"]), hinted("10.1.2.4", true, &["zone-b"])];
        let refs: Vec<&Endpoint> = eps.iter().collect();
        let cx = AUTO_IN_ZONE_A;
        assert_eq!(zone_filter(&refs, cx), None);
        assert_eq!(counts_unready(&refs, cx), Some("zone-a"));
        // An unready endpoint without hints makes them incomplete when unready ones count.
        let eps = [hinted("10.1.2.3", true, &["zone-a"]), hinted("10.1.2.4", false, &[])];
        let refs: Vec<&Endpoint> = eps.iter().collect();
        assert_eq!(zone_filter(&refs, cx), Some("zone-a"));
        assert_eq!(counts_unready(&refs, cx), None);
    }
}
