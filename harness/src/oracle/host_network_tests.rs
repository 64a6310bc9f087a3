//! Host-network endpoints behind a translating node, as a truth table (the style of
//! `flow_tests`): masquerade happens in POSTROUTING, which a packet delivered to the node
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
