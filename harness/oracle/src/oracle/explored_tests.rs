//! What `packetproof explore` found the oracle wrong about, each as a truth table (the style of
//! `flow_tests`).
//!
//! Host-network endpoints behind a translating node: masquerade happens in POSTROUTING, which a packet delivered to the node
//! itself never crosses, so an endpoint on the translating node's own host network sees the
//! client's source, whoever sends (a pod, another node, an outside host) — except the node's own
//! process, whose packets leave through POSTROUTING onto `lo` and are masqueraded. Found by
//! `packetproof explore` (scenario `host-network-endpoint-on-the-translating-node`); kube-proxy's
//! masquerade rule sits only in `KUBE-POSTROUTING`, and both built-in modes agree.
//!
//! Two nodes (a: 192.168.50.11, b: 192.168.50.12), pods `client-a` on a and `client-b` on b, an
//! outside host `ext` routed to the service CIDR through a. `api` (NodePort) has one endpoint:
//! node a's own address.

use crate::model::*;
use crate::oracle::{Outcome, Prediction, SeenSource, predict};

fn cluster() -> Cluster {
    let endpoint = Endpoint {
        ip: "192.168.50.11".parse().unwrap(),
        port: 6443,
        ready: true,
        serving: true,
        terminating: false,
        node: Some("a".into()),
        pod: "a".into(),
        zone_hints: Vec::new(),
    };
    let api = Service {
        service_type: ServiceType::NodePort,
        ports: vec![ServicePort {
            name: "https".into(),
            protocol: Protocol::Tcp,
            port: 443,
            node_port: Some(30443),
            endpoints: vec![endpoint],
        }],
        ..Service::new("default", "api", "10.96.1.10".parse().unwrap())
    };
    let pod = |name: &str, ip: &str, node: &str| Pod {
        namespace: "default".into(),
        name: name.into(),
        node: node.into(),
        ips: PerFamily::single(ip.parse().unwrap()),
        labels: Default::default(),
        ports: vec![],
    };
    Cluster {
        external_hosts: vec![ExternalHost {
            name: "ext".into(),
            ips: PerFamily::single("192.168.50.100".parse().unwrap()),
            routes: vec![HostRoute { to: "10.96.0.0/12".parse().unwrap(), via: "a".into() }],
        }],
        pods: vec![pod("client-a", "10.244.1.9", "a"), pod("client-b", "10.244.2.9", "b")],
        ..Cluster::example(vec![api])
            .with_nodes(&[("a", "192.168.50.11", "10.244.1.0/24"), ("b", "192.168.50.12", "10.244.2.0/24")])
    }
}

/// Whether the endpoint (node a) sees the client's source (`false`) or a masquerade (`true`).
fn masqueraded(from: Source, to: Target, profile: Profile) -> bool {
    let probe = Probe::example(from.clone(), to.clone());
    match predict(&cluster(), &probe, profile) {
        Ok(Prediction::Expected(e)) => match &e.outcome {
            Outcome::Answered { backends, .. } => matches!(backends["a"], SeenSource::Masqueraded { .. }),
            other => panic!("{from} -> {to:?}: {other}"),
        },
        other => panic!("{from} -> {to:?}: {other:?}"),
    }
}

#[test]
fn a_host_network_endpoint_on_the_translating_node_sees_the_client() {
    let cluster_ip = || Target::ClusterIp { service: "api".into(), port: "https".into() };
    let node_port = |node: &str| Target::NodePort {
        service: "api".into(),
        port: "https".into(),
        node: node.into(),
        address: None,
    };
    let pod = |n: &str| Source::Pod(n.into());
    let node = |n: &str| Source::Node(n.into());
    let ext = || Source::External("ext".into());
    // (from, to, masqueraded)
    let flows = [
        ("ext routed to the cluster IP through a", ext(), cluster_ip(), false),
        ("ext to a's node port", ext(), node_port("a"), false),
        ("ext to b's node port: b masquerades, the packet leaves b", ext(), node_port("b"), true),
        ("pod on a to a's node port", pod("client-a"), node_port("a"), false),
        ("pod on b to a's node port", pod("client-b"), node_port("a"), false),
        ("node b to a's node port", node("b"), node_port("a"), false),
        ("node a's own process to a's node port", node("a"), node_port("a"), true),
        ("node a's own process to the cluster IP", node("a"), cluster_ip(), true),
        ("node b to the cluster IP: b masquerades", node("b"), cluster_ip(), true),
        ("pod on b to the cluster IP: not masqueraded anyway", pod("client-b"), cluster_ip(), false),
    ];
    for profile in [Profile::KUBE_PROXY_IPTABLES, Profile::KUBE_PROXY_NFTABLES] {
        for (name, from, to, masq) in &flows {
            assert_eq!(masqueraded(from.clone(), to.clone(), profile), *masq, "{profile}: {name}");
        }
    }
}

/// A node's own process to an external or load-balancer IP of a Service without endpoints:
/// kube-proxy's iptables mode lets it out un-translated (its reject sits in
/// KUBE-EXTERNAL-SERVICES, which OUTPUT never reaches), nftables mode rejects it. Not judged
/// until each mode's choice is stated; from a pod (FORWARD) and on an address of the node itself
/// (INPUT over `lo`) it is rejected as before.
#[test]
fn a_node_reaching_an_external_destination_without_endpoints_is_not_judged() {
    let mut cluster = cluster();
    cluster.services[0].ports[0].endpoints.clear();
    cluster.services[0].external_ips =
        vec!["203.0.113.10".parse().unwrap(), "192.168.50.11".parse().unwrap()];
    let external_ip = |ip: &str| Target::ExternalIp {
        service: "api".into(),
        port: "https".into(),
        ip: ip.parse().unwrap(),
        via: None,
    };
    let flows = [
        ("node a to an external IP", Source::Node("a".into()), external_ip("203.0.113.10"), "OPEN"),
        ("pod to an external IP", Source::Pod("client-a".into()), external_ip("203.0.113.10"), "REJECT"),
        (
            "node a to an external IP that is its own address",
            Source::Node("a".into()),
            external_ip("192.168.50.11"),
            "REJECT",
        ),
    ];
    for profile in [Profile::KUBE_PROXY_IPTABLES, Profile::KUBE_PROXY_NFTABLES] {
        for (name, from, to, want) in &flows {
            let got = match predict(&cluster, &Probe::example(from.clone(), to.clone()), profile) {
                Ok(Prediction::Open(_)) => "OPEN".to_string(),
                Ok(Prediction::Expected(e)) => e.outcome.to_string(),
                Err(e) => format!("ERROR {e}"),
            };
            assert_eq!(&got, want, "{profile}: {name}");
        }
    }
}
