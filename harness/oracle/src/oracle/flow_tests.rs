//! The core as a truth table, in the style of kube-proxy's `packetFlowTest`
//! (pkg/proxy/iptables/proxier_test.go): one line per flow — name, source, destination, the
//! endpoints that may answer (or `DROP`, `REJECT`, `CLOSED host`), and whether the endpoint sees
//! the client's address or a masqueraded one — for each profile's path.
//!
//! Two nodes (a: 192.168.50.11, pods 10.244.1.0/24; b: 192.168.50.12, pods 10.244.2.0/24), an
//! outside host `ext` (192.168.50.100), pods `client-a` on a and `client-b` on b. Services:
//! `web` (NodePort, endpoints web-a on a and web-b on b), `local` (NodePort,
//! externalTrafficPolicy Local, endpoint web-a), `itp` (internalTrafficPolicy Local,
//! endpoint web-a), `empty` (no endpoints).

use crate::model::*;
use crate::oracle::{Outcome, Prediction, SeenSource, predict};

fn endpoint(pod: &str, ip: &str, node: &str) -> Endpoint {
    Endpoint {
        ip: ip.parse().unwrap(),
        port: 8080,
        ready: true,
        serving: true,
        terminating: false,
        node: Some(node.into()),
        pod: pod.into(),
        zone_hints: Vec::new(),
    }
}

fn service(name: &str, ip: &str, node_port: Option<u16>, endpoints: Vec<Endpoint>) -> Service {
    Service {
        service_type: if node_port.is_some() { ServiceType::NodePort } else { ServiceType::ClusterIp },
        ports: vec![ServicePort {
            name: "http".into(),
            protocol: Protocol::Tcp,
            port: 80,
            node_port,
            endpoints,
        }],
        ..Service::new("default", name, ip.parse().unwrap())
    }
}

fn pod(name: &str, ip: &str, node: &str) -> Pod {
    Pod {
        namespace: "default".into(),
        name: name.into(),
        node: node.into(),
        ips: PerFamily::single(ip.parse().unwrap()),
        labels: Default::default(),
        ports: vec![ContainerPort { name: None, port: 8080, protocol: Protocol::Tcp }],
    }
}

fn cluster() -> Cluster {
    let web_a = || endpoint("web-a", "10.244.1.5", "a");
    let web = service("web", "10.96.0.20", Some(30080), vec![web_a(), endpoint("web-b", "10.244.2.5", "b")]);
    let local = Service {
        external_traffic_policy: TrafficPolicy::Local,
        ..service("local", "10.96.0.21", Some(30081), vec![web_a()])
    };
    let itp = Service {
        internal_traffic_policy: TrafficPolicy::Local,
        ..service("itp", "10.96.0.22", None, vec![web_a()])
    };
    let empty = service("empty", "10.96.0.23", Some(30083), vec![]);
    Cluster {
        external_hosts: vec![ExternalHost {
            name: "ext".into(),
            ips: PerFamily::single("192.168.50.100".parse().unwrap()),
            routes: vec![],
        }],
        pods: vec![
            pod("web-a", "10.244.1.5", "a"),
            pod("web-b", "10.244.2.5", "b"),
            pod("client-a", "10.244.1.9", "a"),
            pod("client-b", "10.244.2.9", "b"),
        ],
        ..Cluster::example(vec![web, local, itp, empty])
            .with_nodes(&[("a", "192.168.50.11", "10.244.1.0/24"), ("b", "192.168.50.12", "10.244.2.0/24")])
    }
}

/// `pod:NAME`, `node:NAME` or `ext`.
fn source(text: &str) -> Source {
    match text.split_once(':') {
        Some(("pod", name)) => Source::Pod(name.into()),
        Some(("node", name)) => Source::Node(name.into()),
        _ if text == "ext" => Source::External("ext".into()),
        _ => panic!("source {text:?}"),
    }
}

/// `SERVICE` (its cluster IP) or `SERVICE@NODE` (its node port on that node).
fn target(text: &str) -> Target {
    match text.split_once('@') {
        Some((service, node)) => Target::NodePort {
            service: service.into(),
            port: "http".into(),
            node: node.into(),
            address: None,
        },
        None => Target::ClusterIp { service: text.into(), port: "http".into() },
    }
}

#[derive(Debug, PartialEq)]
enum Masq {
    Yes,
    No,
    /// Not answered: there is nothing to see.
    Na,
}

/// One flow: name, source, destination, the output (`web-a|web-b`, `DROP`, `REJECT`,
/// `OPEN`), and whether the answering endpoints see a masqueraded source.
struct Flow {
    name: &'static str,
    from: &'static str,
    to: &'static str,
    output: &'static str,
    masq: Masq,
}

fn run(profile: Profile, flows: &[Flow]) {
    run_on(&cluster(), profile, flows)
}

fn run_on(cluster: &Cluster, profile: Profile, flows: &[Flow]) {
    let mut wrong = Vec::new();
    for flow in flows {
        let probe = Probe::example(source(flow.from), target(flow.to));
        let (output, masq) = match predict(cluster, &probe, profile) {
            Err(e) => (format!("ERROR {e}"), Masq::Na),
            Ok(Prediction::Open(_)) => ("OPEN".to_string(), Masq::Na),
            Ok(Prediction::Expected(e)) => match &e.outcome {
                Outcome::Answered { backends, .. } => {
                    let masqueraded: Vec<bool> =
                        backends.values().map(|s| matches!(s, SeenSource::Masqueraded { .. })).collect();
                    let masq = match masqueraded.iter().all(|&m| m) {
                        true => Masq::Yes,
                        false if masqueraded.iter().all(|&m| !m) => Masq::No,
                        false => panic!("{}: some endpoints see the client, some a masquerade", flow.name),
                    };
                    (backends.keys().cloned().collect::<Vec<_>>().join("|"), masq)
                }
                Outcome::Dropped => ("DROP".to_string(), Masq::Na),
                other => (other.to_string(), Masq::Na),
            },
        };
        if output != flow.output || masq != flow.masq {
            wrong.push(format!(
                "{} ({} -> {}): got {output} masquerade {masq:?}, want {} masquerade {:?}",
                flow.name, flow.from, flow.to, flow.output, flow.masq
            ));
        }
    }
    assert!(wrong.is_empty(), "{profile}:\n{}", wrong.join("\n"));
}

macro_rules! flows {
    ($($name:literal, $from:literal, $to:literal, $output:literal, $masq:ident;)*) => {
        &[$(Flow { name: $name, from: $from, to: $to, output: $output, masq: Masq::$masq }),*]
    };
}

#[test]
fn kube_proxy_iptables() {
    run(
        Profile::KUBE_PROXY_IPTABLES,
        flows![
            "pod to cluster IP",                    "pod:client-a", "web",     "web-a|web-b", No;
            "node to cluster IP",                   "node:a",       "web",     "web-a|web-b", Yes;
            "pod to cluster IP without endpoints",  "pod:client-a", "empty",   "REJECT",      Na;
            "ext to node port",                     "ext",          "web@a",   "web-a|web-b", Yes;
            "ext to node port without endpoints",   "ext",          "empty@a", "REJECT",      Na;
            "ext to eTP Local, local endpoint",     "ext",          "local@a", "web-a",       No;
            "ext to eTP Local, no local endpoint",  "ext",          "local@b", "DROP",        Na;
            "pod to eTP Local, short-circuited",    "pod:client-a", "local@a", "web-a",       No;
            "node to eTP Local, short-circuited",   "node:b",       "local@b", "web-a",       Yes;
            "iTP Local, local endpoint",            "pod:client-a", "itp",     "web-a",       No;
            "iTP Local, no local endpoint",         "pod:client-b", "itp",     "DROP",        Na;
        ],
    );
}

/// The same flows where IPVS mode departs (`oracle/profile.rs`: `Choices`): a Local policy
/// falls back to the Cluster endpoints, and eTP Local holds every sender to the local
/// endpoints, unmasqueraded.
#[test]
fn kube_proxy_ipvs() {
    run(
        Profile::KUBE_PROXY_IPVS,
        flows![
            "pod to cluster IP",                    "pod:client-a", "web",     "web-a|web-b", No;
            "node to cluster IP",                   "node:a",       "web",     "web-a|web-b", Yes;
            "pod to cluster IP without endpoints",  "pod:client-a", "empty",   "REJECT",      Na;
            "ext to node port",                     "ext",          "web@a",   "web-a|web-b", Yes;
            "ext to eTP Local, local endpoint",     "ext",          "local@a", "web-a",       No;
            "ext to eTP Local, falls back",         "ext",          "local@b", "FORWARD to web-a, unanswered", Na;
            "pod to eTP Local, falls back",         "pod:client-b", "local@b", "web-a",       No;
            "iTP Local, local endpoint",            "pod:client-a", "itp",     "web-a",       No;
            "iTP Local, nothing to fall back to",   "pod:client-b", "itp",     "REJECT",      Na;
        ],
    );
}

/// kube-proxy without a local-traffic detector (`clusterCIDR: ""`): nothing masquerades
/// traffic to a cluster IP, so an outside host routed through node a gets no answer from an
/// endpoint on node b (its reply goes straight to the host), and a node's own process is seen
/// from its own node address. `web-b-only` has its one endpoint on b; `web` one on each node.
#[test]
fn without_a_local_traffic_detector() {
    let mut cluster = cluster();
    cluster.proxy.cluster_cidrs = Some(Vec::new());
    cluster.external_hosts[0].routes = vec![HostRoute { to: cluster.service_cidr, via: "a".into() }];
    let web_b = endpoint("web-b", "10.244.2.5", "b");
    cluster.services.push(service("web-b-only", "10.96.0.24", None, vec![web_b]));
    for profile in [Profile::KUBE_PROXY_IPTABLES, Profile::KUBE_PROXY_NFTABLES] {
        run_on(
            &cluster,
            profile,
            flows![
                "ext via a, endpoint on a only",       "ext",          "itp",        "web-a",       No;
                "ext via a, endpoint on b only",       "ext",          "web-b-only", "FORWARD to web-b, unanswered", Na;
                "ext via a, endpoints on a and b",     "ext",          "web",        "OPEN",        Na;
                "pod to cluster IP",                   "pod:client-a", "web",        "web-a|web-b", No;
                "node to cluster IP",                  "node:a",       "web",        "web-a|web-b", No;
            ],
        );
    }
}

/// A node's own process reaching a cluster IP unmasqueraded is seen from its node address,
/// the source its route to the service CIDR chose, never from its pod-bridge address: that is
/// what a wrong masquerade toward an endpoint on the node gives.
#[test]
fn a_node_unmasqueraded_is_seen_from_its_node_address_only() {
    let mut cluster = cluster();
    cluster.proxy.cluster_cidrs = Some(Vec::new());
    let probe = Probe::example(source("node:a"), target("web"));
    let Ok(Prediction::Expected(e)) = predict(&cluster, &probe, Profile::KUBE_PROXY_IPTABLES) else {
        panic!("node a to web: expected an outcome");
    };
    let Outcome::Answered { backends, .. } = e.outcome else { panic!("{}", e.outcome) };
    let node_ip: std::net::IpAddr = "192.168.50.11".parse().unwrap();
    let bridge: std::net::IpAddr = "10.244.1.1".parse().unwrap();
    for (pod, seen) in backends {
        assert!(matches!(seen, SeenSource::Client { .. }), "{pod}: {seen}");
        assert!(seen.allows(node_ip) && !seen.allows(bridge), "{pod}: {seen}");
    }
}
