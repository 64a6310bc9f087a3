//! The IPVS plan as a truth table: what each kind of Service port gets on one node.

use super::ipset::SetName;
use super::plan::{Breaks, family_plan};
use crate::model::{Cluster, Protocol, Service, ServiceType, SessionAffinity, TrafficPolicy};
use crate::proxy::test_support::{ep, port};

fn web(service_type: ServiceType, etp: TrafficPolicy) -> Service {
    let mut svc = Service::new("default", "web", "10.96.0.10".parse().unwrap());
    svc.service_type = service_type;
    svc.external_traffic_policy = etp;
    let endpoints = vec![ep("10.244.0.5", 8080, Some("node-a")), ep("10.244.1.5", 8080, Some("node-b"))];
    svc.ports = vec![port("", Protocol::Tcp, 80, Some(30080), endpoints)];
    svc
}

fn reals(plan: &super::plan::FamilyPlan, addr: &str) -> Vec<String> {
    let key =
        plan.servers.keys().find(|k| k.address.to_string() == addr).unwrap_or_else(|| panic!("no {addr}"));
    plan.servers[key].reals.keys().map(|r| r.to_string()).collect()
}

#[test]
fn a_node_port_service_gets_virtual_servers_on_the_cluster_ip_and_every_node_address() {
    let cluster = Cluster::example(vec![web(ServiceType::NodePort, TrafficPolicy::Cluster)]);
    let plan = family_plan(&cluster, "node-a", Breaks::default());
    let addresses: Vec<String> = plan.servers.keys().map(|k| k.address.to_string()).collect();
    // The node IP and the pod bridge's gateway; never 127.0.0.1.
    assert_eq!(addresses, ["10.96.0.10:80", "10.244.0.1:30080", "192.168.50.2:30080"]);
    assert_eq!(reals(&plan, "10.96.0.10:80"), ["10.244.0.5:8080", "10.244.1.5:8080"]);
    assert_eq!(plan.bound.iter().map(|ip| ip.to_string()).collect::<Vec<_>>(), ["10.96.0.10"]);
    assert_eq!(plan.sets.entries(SetName::ClusterIp).collect::<Vec<_>>(), ["10.96.0.10,tcp:80"]);
    assert_eq!(plan.sets.entries(SetName::NodePortTcp).collect::<Vec<_>>(), ["30080"]);
    assert_eq!(plan.sets.entries(SetName::LoopBack).collect::<Vec<_>>(), ["10.244.0.5,tcp:8080,10.244.0.5"]);
    let text = plan.rules.render();
    assert!(text.contains("-A KUBE-NODE-PORT -p tcp -m comment --comment \"Kubernetes nodeport TCP port for masquerade purpose\" -m set --match-set KUBE-NODE-PORT-TCP dst -j KUBE-MARK-MASQ"), "{text}");
    assert!(text.contains("-A KUBE-SERVICES ! -s 10.244.0.0/16 -m comment"), "{text}");
}

#[test]
fn local_policy_uses_local_endpoints_and_falls_back_to_all_without_them() {
    let cluster = Cluster::example(vec![web(ServiceType::NodePort, TrafficPolicy::Local)]);
    let a = family_plan(&cluster, "node-a", Breaks::default());
    assert_eq!(reals(&a, "192.168.50.2:30080"), ["10.244.0.5:8080"]);
    assert_eq!(a.sets.entries(SetName::NodePortLocalTcp).collect::<Vec<_>>(), ["30080"]);
    let mut lonely = cluster.clone();
    lonely.services[0].ports[0].endpoints.retain(|e| e.node.as_deref() == Some("node-b"));
    let a = family_plan(&lonely, "node-a", Breaks::default());
    assert_eq!(reals(&a, "192.168.50.2:30080"), ["10.244.1.5:8080"]);
}

#[test]
fn client_ip_affinity_is_persistence_with_the_timeout() {
    let mut svc = web(ServiceType::ClusterIp, TrafficPolicy::Cluster);
    svc.session_affinity = SessionAffinity::ClientIp { timeout_seconds: 30 };
    let plan = family_plan(&Cluster::example(vec![svc]), "node-a", Breaks::default());
    assert!(plan.servers.values().all(|vs| vs.persistent == Some(30)));
    assert_eq!(plan.servers.len(), 1, "no node port on a ClusterIP Service");
}

#[test]
fn ipv6_sets_are_named_kube_6() {
    assert_eq!(
        SetName::LoadBalancerSourceCidr.in_family(crate::model::IpFamily::V6),
        "KUBE-6-LOAD-BALANCER-SOURCE-CID"
    );
    assert_eq!(SetName::ClusterIp.in_family(crate::model::IpFamily::V6), "KUBE-6-CLUSTER-IP");
}

/// The off-cluster masquerade of cluster IPs follows detectLocalMode, through the detector
/// the other modes use (proxy/kube/local_detect.rs), as kube-proxy's IPVS proxier takes its
/// `localDetector` (pkg/proxy/ipvs/proxier.go, `IfNotLocal`).
#[test]
fn the_cluster_ip_masquerade_tells_local_traffic_by_the_detect_local_mode() {
    let mut cluster = Cluster::example(vec![web(ServiceType::NodePort, TrafficPolicy::Cluster)]);
    let node_cidr = cluster.node("node-a").unwrap().pod_cidr().to_string();
    cluster.proxy.detect_local = crate::model::DetectLocal::NodeCidr;
    let text = family_plan(&cluster, "node-a", Breaks::default()).rules.render();
    assert!(text.contains(&format!("-A KUBE-SERVICES ! -s {node_cidr} -m comment")), "{text}");
    cluster.proxy.detect_local = crate::model::DetectLocal::BridgeInterface("cni0".into());
    let text = family_plan(&cluster, "node-a", Breaks::default()).rules.render();
    assert!(text.contains("-A KUBE-SERVICES ! -i cni0 -m comment"), "{text}");
}

/// kubernetes#85422: the addresses leave `kube-ipvs0` while the virtual servers and the sets
/// that name them stay.
#[test]
fn the_unbound_addresses_mutant_empties_the_dummy_link_only() {
    let cluster = Cluster::example(vec![web(ServiceType::NodePort, TrafficPolicy::Cluster)]);
    let breaks = super::mutants::breaks(Some(crate::proxy::Mutant::ServiceAddressesNotBound));
    let plan = family_plan(&cluster, "node-a", breaks);
    assert!(plan.bound.is_empty());
    assert_eq!(plan.sets.entries(SetName::IpvsIps).collect::<Vec<_>>(), ["10.96.0.10"]);
    assert_eq!(reals(&plan, "10.96.0.10:80"), ["10.244.0.5:8080", "10.244.1.5:8080"]);
}

/// A hunt skips a scenario whose every state gets the unbroken proxy's plan from the mutant:
/// rules, sets, virtual servers and bound addresses all compared.
#[test]
fn a_mutant_acts_as_the_unbroken_proxy_where_its_whole_plan_is_the_same() {
    use crate::proxy::{Mutant, Proxy};
    let plain = Cluster::example(vec![web(ServiceType::NodePort, TrafficPolicy::Cluster)]);
    let proxy = |m| super::BuiltinIpvs { mutant: Some(m) };
    // No session affinity: no persistence to leave out.
    assert!(proxy(Mutant::NoAffinity).same_as_unbroken(&plain));
    let mut sticky = web(ServiceType::NodePort, TrafficPolicy::Cluster);
    sticky.session_affinity = SessionAffinity::ClientIp { timeout_seconds: 600 };
    assert!(!proxy(Mutant::NoAffinity).same_as_unbroken(&Cluster::example(vec![sticky])));
    // Only the bound addresses differ; and a bug in the sync itself is never skipped.
    assert!(!proxy(Mutant::ServiceAddressesNotBound).same_as_unbroken(&plain));
    assert!(!proxy(Mutant::AffinityLostOnSync).same_as_unbroken(&plain));
}
