//! kube-proxy-ipvs's choices as a table of flows, each beside what the contract says of it.
//! Two nodes (a: 192.168.50.11, b: 192.168.50.12); every Service's one endpoint is web-a on a.

use std::time::Duration;

use crate::model::Profile;
use crate::model::*;
use crate::oracle::{Basis, Outcome, Prediction, SeenSource, Spread, predict};

const IPVS: Profile = Profile::KUBE_PROXY_IPVS;
const CONTRACT: Profile = Profile::KUBERNETES;

fn service(name: &str, ip: &str, node_port: Option<u16>) -> Service {
    let endpoint = Endpoint {
        ip: "10.244.1.5".parse().unwrap(),
        port: 8080,
        ready: true,
        serving: true,
        terminating: false,
        node: Some("a".into()),
        pod: "web-a".into(),
        zone_hints: Vec::new(),
    };
    Service {
        service_type: if node_port.is_some() { ServiceType::NodePort } else { ServiceType::ClusterIp },
        ports: vec![ServicePort {
            name: "http".into(),
            protocol: Protocol::Tcp,
            port: 80,
            node_port,
            endpoints: vec![endpoint],
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
    // ETP Local node port and external IPs (one routed, one on the node network).
    let web = Service {
        external_traffic_policy: TrafficPolicy::Local,
        external_ips: vec!["203.0.113.25".parse().unwrap(), "192.168.50.200".parse().unwrap()],
        ..service("web", "10.96.0.20", Some(30080))
    };
    // ITP Local, reachable from inside only: no Cluster set to fall back to.
    let dns = Service { internal_traffic_policy: TrafficPolicy::Local, ..service("dns", "10.96.0.53", None) };
    // ITP Local but a node port too: the Cluster set exists.
    let mixed = Service {
        internal_traffic_policy: TrafficPolicy::Local,
        ..service("mixed", "10.96.0.54", Some(30081))
    };
    let sticky = Service {
        session_affinity: SessionAffinity::ClientIp { timeout_seconds: 1 },
        ..service("sticky", "10.96.0.55", None)
    };
    // A load-balancer IP on the node network that admits only 10.0.0.0/8.
    let portal = Service {
        service_type: ServiceType::LoadBalancer,
        load_balancer_ips: vec!["192.168.50.201".parse().unwrap()],
        load_balancer_source_ranges: vec!["10.0.0.0/8".parse().unwrap()],
        ..service("portal", "10.96.0.56", Some(30443))
    };
    Cluster {
        external_hosts: vec![ExternalHost {
            name: "ext".into(),
            ips: PerFamily::single("192.168.50.100".parse().unwrap()),
            routes: vec![],
        }],
        pods: vec![
            pod("web-a", "10.244.1.5", "a"),
            pod("client-a", "10.244.1.9", "a"),
            pod("client-b", "10.244.2.9", "b"),
        ],
        ..Cluster::example(vec![web, dns, mixed, sticky, portal])
            .with_nodes(&[("a", "192.168.50.11", "10.244.1.0/24"), ("b", "192.168.50.12", "10.244.2.0/24")])
    }
}

fn to(service: &str) -> Target {
    Target::ClusterIp { service: service.into(), port: "http".into() }
}

fn node_port(node: &str) -> Target {
    Target::NodePort { service: "web".into(), port: "http".into(), node: node.into(), address: None }
}

fn external_ip(ip: &str, via: Option<&str>) -> Target {
    Target::ExternalIp {
        service: "web".into(),
        port: "http".into(),
        ip: ip.parse().unwrap(),
        via: via.map(String::from),
    }
}

fn pod_src(name: &str) -> Source {
    Source::Pod(name.into())
}

fn node_src(name: &str) -> Source {
    Source::Node(name.into())
}

fn ext() -> Source {
    Source::External("ext".into())
}

/// What a profile says of a flow, in one line: the outcome, the one backend's seen source
/// (for answers), whether it is the profile's choice; `OPEN` when not judged.
fn says(from: Source, target: Target, profile: Profile) -> String {
    match predict(&cluster(), &Probe::example(from, target), profile).unwrap() {
        Prediction::Open(_) => "OPEN".into(),
        Prediction::Expected(e) => {
            let seen = match &e.outcome {
                Outcome::Answered { backends, .. } => {
                    backends.values().map(|s| format!(" seeing {s}")).collect::<String>()
                }
                Outcome::Unanswered { translated_by, .. } => format!(" via {translated_by}"),
                _ => String::new(),
            };
            let basis = if matches!(e.basis, Basis::Choice(_)) { " (choice)" } else { "" };
            format!("{}{seen}{basis}", e.outcome)
        }
    }
}

#[test]
fn ipvs_mode_flows_beside_the_contract() {
    // (flow, from, to, kube-proxy-ipvs says, the contract says)
    let flows: Vec<(&str, Source, Target, &str, &str)> = vec![
        (
            "ITP Local, no local endpoint, no Cluster set: a virtual server without real servers",
            pod_src("client-b"),
            to("dns"),
            "REJECT (choice)",
            "DROP",
        ),
        (
            "ITP Local, no local endpoint, externally reachable: falls back to the Cluster set",
            pod_src("client-b"),
            to("mixed"),
            "web-a seeing client 10.244.2.9 (choice)",
            "DROP",
        ),
        (
            "ETP Local from outside, local endpoint: the contract's path",
            ext(),
            node_port("a"),
            "web-a seeing client 192.168.50.100",
            "web-a seeing client 192.168.50.100",
        ),
        (
            "ETP Local from outside, no local endpoint: forwarded un-masqueraded, the reply bypasses b",
            ext(),
            node_port("b"),
            "FORWARD to web-a, unanswered via b (choice)",
            "DROP",
        ),
        (
            "the node's own process to its node port: not masqueraded",
            node_src("a"),
            node_port("a"),
            "web-a seeing client 192.168.50.11|10.244.1.1 (choice)",
            "web-a seeing masq a 10.244.1.1",
        ),
        (
            "the node's own process, no local endpoint: falls back, the reply returns to b",
            node_src("b"),
            node_port("b"),
            "web-a seeing client 192.168.50.12|10.244.2.1 (choice)",
            "web-a seeing masq b 192.168.50.12",
        ),
        (
            "another node's process: arrives at a from a's own address, dropped as martian",
            node_src("a"),
            node_port("b"),
            "FORWARD to web-a, unanswered via b (choice)",
            "DROP",
        ),
        (
            "the node's own process to a bound external IP: sent from the external IP itself",
            node_src("a"),
            external_ip("203.0.113.25", None),
            "web-a seeing client 203.0.113.25 (choice)",
            "web-a seeing masq a 10.244.1.1",
        ),
        (
            "the same from b: web-a's node holds the external IP too, and drops it as martian",
            node_src("b"),
            external_ip("203.0.113.25", None),
            "FORWARD to web-a, unanswered via b (choice)",
            "web-a seeing masq b 192.168.50.12",
        ),
        (
            "a pod to another node's Local node port: defined in IPVS mode (held to b's set, b has none)",
            pod_src("client-a"),
            node_port("b"),
            "FORWARD to web-a, unanswered via b (choice)",
            "ERROR",
        ),
        (
            "an outsider to an external IP on the node network: every node answers ARP for it",
            ext(),
            external_ip("192.168.50.200", Some("a")),
            "OPEN",
            "web-a seeing client 192.168.50.100",
        ),
        (
            "the same race, but outside loadBalancerSourceRanges: every node drops it alike",
            ext(),
            Target::LoadBalancer {
                service: "portal".into(),
                port: "http".into(),
                ip: "192.168.50.201".parse().unwrap(),
                via: Some("a".into()),
            },
            "DROP",
            "DROP",
        ),
    ];
    for (flow, from, target, ipvs, contract) in flows {
        assert_eq!(says(from.clone(), target.clone(), IPVS), ipvs, "kube-proxy-ipvs: {flow}");
        let probe = Probe::example(from.clone(), target.clone());
        if contract == "ERROR" {
            assert!(predict(&cluster(), &probe, CONTRACT).is_err(), "contract: {flow}");
        } else {
            assert_eq!(says(from, target, CONTRACT), contract, "contract: {flow}");
        }
    }
}

#[test]
fn the_refusal_of_an_empty_virtual_server_is_ipvs_modes_choice() {
    let probe = Probe::example(pod_src("client-b"), to("dns"));
    let Prediction::Expected(e) = predict(&cluster(), &probe, IPVS).unwrap() else { panic!("judged") };
    assert_eq!(e.basis, Basis::Choice(IPVS));
    assert!(e.because.contains("ip_vs_leave"), "{}", e.because);
}

#[test]
fn persistence_outlives_the_affinity_timeout_while_connections_linger() {
    let spread = |interval: Duration| {
        let probe =
            Probe { count: 6, interval: Some(interval), ..Probe::example(pod_src("client-b"), to("sticky")) };
        match predict(&cluster(), &probe, IPVS).unwrap() {
            Prediction::Expected(e) => match e.outcome {
                Outcome::Answered { spread, .. } => Some((spread, e.basis)),
                other => panic!("answered, not {other}"),
            },
            Prediction::Open(_) => None,
        }
    };
    // 1.5 s apart, past the 1 s timeout: the TCP connection lingers 120 s in TIME_WAIT.
    assert_eq!(spread(Duration::from_millis(1500)), Some((Spread::Sticky, Basis::Choice(IPVS))));
    // Past the lingering but not past lingering and timeout: depends on the kernel's reaping.
    assert_eq!(spread(Duration::from_secs(121)), None);
    let expires = Spread::AffinityExpires { timeout: Duration::from_secs(1) };
    assert_eq!(spread(Duration::from_secs(200)), Some((expires, Basis::Contract)));
    // The contract: expired between attempts.
    let probe = Probe {
        count: 6,
        interval: Some(Duration::from_millis(1500)),
        ..Probe::example(pod_src("client-b"), to("sticky"))
    };
    let Prediction::Expected(e) = predict(&cluster(), &probe, CONTRACT).unwrap() else { panic!("judged") };
    assert!(matches!(e.outcome, Outcome::Answered { spread: Spread::AffinityExpires { .. }, .. }));
}

#[test]
fn unanswered_names_why() {
    let because =
        |from: Source, target: Target| match predict(&cluster(), &Probe::example(from, target), IPVS) {
            Ok(Prediction::Expected(e)) => e.because,
            other => panic!("{other:?}"),
        };
    assert!(because(ext(), node_port("b")).contains("bypasses b"));
    assert!(because(node_src("a"), node_port("b")).contains("martian"));
    let seen = SeenSource::Client { addrs: vec!["203.0.113.25".parse().unwrap()] };
    assert!(because(node_src("b"), external_ip("203.0.113.25", None)).contains(&seen.to_string()));
}
