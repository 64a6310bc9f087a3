//! Kubernetes semantics, one path at a time, on a two-node cluster with a NodePort Service.

use super::*;
use crate::model::*;

/// Refused by `host`'s own stack.
fn closed(host: &str) -> Outcome {
    Outcome::Closed { host: host.into() }
}

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

fn cluster(endpoints: Vec<Endpoint>, etp: TrafficPolicy) -> Cluster {
    let web = Service {
        service_type: ServiceType::NodePort,
        external_traffic_policy: etp,
        ports: vec![ServicePort {
            name: "http".into(),
            protocol: Protocol::Tcp,
            port: 80,
            node_port: Some(30080),
            endpoints,
        }],
        ..Service::new("default", "web", "10.96.0.20".parse().unwrap())
    };
    Cluster {
        external_hosts: vec![ExternalHost {
            name: "ext".into(),
            ips: PerFamily::single("192.168.50.100".parse().unwrap()),
            routes: vec![],
        }],
        pods: vec![
            pod("web-a", "10.244.1.5", "a"),
            pod("web-b", "10.244.2.5", "b"),
            pod("client", "10.244.1.9", "a"),
        ],
        ..Cluster::example(vec![web])
            .with_nodes(&[("a", "192.168.50.11", "10.244.1.0/24"), ("b", "192.168.50.12", "10.244.2.0/24")])
    }
}

fn both() -> Vec<Endpoint> {
    vec![endpoint("web-a", "10.244.1.5", "a"), endpoint("web-b", "10.244.2.5", "b")]
}

fn probe(from: Source, to: Target) -> Probe {
    Probe::example(from, to)
}

fn to_cluster_ip() -> Target {
    Target::ClusterIp { service: "web".into(), port: "http".into() }
}

fn to_node_port(node: &str) -> Target {
    Target::NodePort { service: "web".into(), port: "http".into(), node: node.into(), address: None }
}

fn backends(e: &Expectation) -> &BTreeMap<String, SeenSource> {
    match &e.outcome {
        Outcome::Answered { backends, .. } => backends,
        other => panic!("expected an answer, got {other}"),
    }
}

#[test]
fn pod_to_cluster_ip_keeps_the_client_address() {
    let c = cluster(both(), TrafficPolicy::Cluster);
    let e = expect(&c, &probe(Source::Pod("client".into()), to_cluster_ip())).unwrap();
    let b = backends(&e);
    assert_eq!(b.len(), 2);
    assert_eq!(b["web-b"], SeenSource::Client { addrs: vec!["10.244.1.9".parse().unwrap()] });
}

#[test]
fn hairpin_is_masqueraded_by_the_pods_node() {
    let c = cluster(both(), TrafficPolicy::Cluster);
    let e = expect(&c, &probe(Source::Pod("web-a".into()), to_cluster_ip())).unwrap();
    let b = backends(&e);
    assert!(matches!(&b["web-a"], SeenSource::Masqueraded { node, .. } if node == "a"));
    assert!(matches!(&b["web-b"], SeenSource::Client { .. }));
}

#[test]
fn node_to_cluster_ip_is_masqueraded() {
    let c = cluster(both(), TrafficPolicy::Cluster);
    let e = expect(&c, &probe(Source::Node("b".into()), to_cluster_ip())).unwrap();
    assert!(backends(&e).values().all(|s| matches!(s, SeenSource::Masqueraded { node, .. } if node == "b")));
}

#[test]
fn masquerade_takes_the_address_toward_the_backend() {
    let c = cluster(both(), TrafficPolicy::Cluster);
    let masq = |addr: &str| SeenSource::Masqueraded { node: "b".into(), addrs: vec![addr.parse().unwrap()] };
    // A node's own process: its bridge gateway toward its own endpoint (not masqueraded, that
    // one would arrive from the node IP), its node IP toward the other node's.
    let e = expect(&c, &probe(Source::Node("b".into()), to_cluster_ip())).unwrap();
    let b = backends(&e);
    assert_eq!(b["web-b"], masq("10.244.2.1"));
    assert_eq!(b["web-a"], masq("192.168.50.12"));
    assert!(!b["web-b"].allows("192.168.50.12".parse().unwrap()));
    // The same for traffic from outside through node b's node port.
    let e = expect(&c, &probe(Source::External("ext".into()), to_node_port("b"))).unwrap();
    let b = backends(&e);
    assert_eq!(b["web-b"], masq("10.244.2.1"));
    assert_eq!(b["web-a"], masq("192.168.50.12"));
}

#[test]
fn external_to_node_port_is_masqueraded_by_the_receiving_node() {
    let c = cluster(both(), TrafficPolicy::Cluster);
    let e = expect(&c, &probe(Source::External("ext".into()), to_node_port("a"))).unwrap();
    let b = backends(&e);
    assert_eq!(b.len(), 2);
    assert!(b.values().all(|s| matches!(s, SeenSource::Masqueraded { node, .. } if node == "a")));
}

#[test]
fn no_endpoints_rejects() {
    let c = cluster(vec![], TrafficPolicy::Cluster);
    let e = expect(&c, &probe(Source::Pod("client".into()), to_cluster_ip())).unwrap();
    assert_eq!(e.outcome, Outcome::Rejected);
    let e = expect(&c, &probe(Source::External("ext".into()), to_node_port("b"))).unwrap();
    assert_eq!(e.outcome, Outcome::Rejected);
}

#[test]
fn terminating_endpoints_serve_only_when_none_is_ready() {
    let mut eps = both();
    eps[0].ready = false;
    eps[0].terminating = true;
    let c = cluster(eps.clone(), TrafficPolicy::Cluster);
    let e = expect(&c, &probe(Source::Pod("client".into()), to_cluster_ip())).unwrap();
    assert_eq!(backends(&e).keys().collect::<Vec<_>>(), vec!["web-b"]);
    eps[1].ready = false;
    eps[1].serving = false;
    let c = cluster(eps, TrafficPolicy::Cluster);
    let e = expect(&c, &probe(Source::Pod("client".into()), to_cluster_ip())).unwrap();
    assert_eq!(backends(&e).keys().collect::<Vec<_>>(), vec!["web-a"]);
}

#[test]
fn local_policy_keeps_external_clients_local_and_drops_without_local_endpoints() {
    let c = cluster(vec![endpoint("web-a", "10.244.1.5", "a")], TrafficPolicy::Local);
    let e = expect(&c, &probe(Source::External("ext".into()), to_node_port("a"))).unwrap();
    assert_eq!(backends(&e)["web-a"], SeenSource::Client { addrs: vec!["192.168.50.100".parse().unwrap()] });
    let e = expect(&c, &probe(Source::External("ext".into()), to_node_port("b"))).unwrap();
    assert_eq!(e.outcome, Outcome::Dropped);
    // Pods are short-circuited to every endpoint.
    let e = expect(&c, &probe(Source::Pod("client".into()), to_node_port("a"))).unwrap();
    assert_eq!(backends(&e).len(), 1);
}

#[test]
fn raw_addresses_are_recognised() {
    let c = cluster(both(), TrafficPolicy::Cluster);
    let to = |a: &str| Target::Address(a.parse().unwrap());
    let from = || Source::Pod("client".into());
    assert_eq!(backends(&expect(&c, &probe(from(), to("10.96.0.20:80"))).unwrap()).len(), 2);
    assert_eq!(backends(&expect(&c, &probe(from(), to("192.168.50.12:30080"))).unwrap()).len(), 2);
    assert_eq!(backends(&expect(&c, &probe(from(), to("10.244.2.5:8080"))).unwrap()).len(), 1);
    assert_eq!(expect(&c, &probe(from(), to("10.244.2.5:9999"))).unwrap().outcome, closed("web-b"));
    assert_eq!(expect(&c, &probe(from(), to("10.96.0.99:80"))).unwrap().outcome, Outcome::Forwarded);
    assert!(expect(&c, &probe(from(), to("8.8.8.8:53"))).is_err());
}

#[test]
fn external_hosts_cannot_reach_cluster_ips() {
    let c = cluster(both(), TrafficPolicy::Cluster);
    assert!(expect(&c, &probe(Source::External("ext".into()), to_cluster_ip())).is_err());
}

#[test]
fn stated_expectations_are_checked() {
    let c = cluster(both(), TrafficPolicy::Cluster);
    let e = expect(&c, &probe(Source::Pod("web-a".into()), to_cluster_ip())).unwrap();
    let stated = |verdict, backends: Option<Vec<&str>>, source| StatedExpectation {
        verdict,
        backends: backends.map(|b| b.into_iter().map(String::from).collect()),
        source,
        http_status: None,
        profile: None,
    };
    assert!(check_stated(&e, &stated(StatedVerdict::Answered, Some(vec!["web-b", "web-a"]), None)).is_ok());
    assert!(check_stated(&e, &stated(StatedVerdict::Rejected, None, None)).is_err());
    assert!(check_stated(&e, &stated(StatedVerdict::Answered, Some(vec!["web-a"]), None)).is_err());
    // Hairpin to web-a is masqueraded, so "client" is wrong for the probe as a whole.
    let err =
        check_stated(&e, &stated(StatedVerdict::Answered, None, Some(StatedSource::Client))).unwrap_err();
    assert!(err.contains("web-a"), "{err}");
}

fn lb_cluster(etp: TrafficPolicy, ranges: &[&str]) -> Cluster {
    let mut c = cluster(vec![endpoint("web-a", "10.244.1.5", "a")], etp);
    let svc = &mut c.services[0];
    svc.service_type = ServiceType::LoadBalancer;
    svc.load_balancer_ips = vec!["203.0.113.10".parse().unwrap()];
    svc.external_ips = vec!["198.51.100.7".parse().unwrap()];
    svc.load_balancer_source_ranges = ranges.iter().map(|r| r.parse().unwrap()).collect();
    c.external_hosts.push(ExternalHost {
        name: "blocked".into(),
        ips: PerFamily::single("192.168.50.200".parse().unwrap()),
        routes: vec![],
    });
    c
}

fn to_lb(via: Option<&str>) -> Target {
    Target::LoadBalancer {
        service: "web".into(),
        port: "http".into(),
        ip: "203.0.113.10".parse().unwrap(),
        via: via.map(String::from),
    }
}

#[test]
fn source_ranges_admit_only_listed_sources_to_the_load_balancer() {
    let c = lb_cluster(TrafficPolicy::Cluster, &["192.168.50.100/32"]);
    let e = expect(&c, &probe(Source::External("ext".into()), to_lb(Some("b")))).unwrap();
    assert!(matches!(&backends(&e)["web-a"], SeenSource::Masqueraded { node, .. } if node == "b"));
    let e = expect(&c, &probe(Source::External("blocked".into()), to_lb(Some("b")))).unwrap();
    assert_eq!(e.outcome, Outcome::Dropped);
    // A pod is outside the ranges too: kube-proxy drops it at the load-balancer IP.
    assert_eq!(
        expect(&c, &probe(Source::Pod("client".into()), to_lb(None))).unwrap().outcome,
        Outcome::Dropped
    );
    // Node ports bypass the ranges.
    let e = expect(&c, &probe(Source::External("blocked".into()), to_node_port("a"))).unwrap();
    assert_eq!(backends(&e).len(), 1);
}

/// A node sending to a load-balancer IP bound on itself (kube-vip, keepalived) sends from
/// that IP, as the kernel picks the source of a local route: with the VIP inside the ranges
/// and the node's own address outside, the node is admitted (issue: the oracle took the node
/// IP and expected a drop, while kube-proxy's `-s` rule and both built-in proxies admit it).
#[test]
fn a_node_reaching_a_vip_bound_on_itself_sends_from_the_vip() {
    let mut c = lb_cluster(TrafficPolicy::Cluster, &["203.0.113.10/32"]);
    let node_b = c.nodes.iter_mut().find(|n| n.name == "b").unwrap();
    node_b.secondary_ips.push("203.0.113.10".parse().unwrap());
    let e = expect(&c, &probe(Source::Node("b".into()), to_lb(None))).unwrap();
    assert!(matches!(e.outcome, Outcome::Answered { .. }), "{e:?}");
    // Node a, without the VIP, sends from its own address: outside the ranges.
    let e = expect(&c, &probe(Source::Node("a".into()), to_lb(None))).unwrap();
    assert_eq!(e.outcome, Outcome::Dropped);
}

#[test]
fn external_hosts_need_a_via_node_for_external_and_load_balancer_ips() {
    let c = lb_cluster(TrafficPolicy::Cluster, &[]);
    assert!(expect(&c, &probe(Source::External("ext".into()), to_lb(None))).unwrap_err().contains("via"));
}

#[test]
fn local_policy_on_a_load_balancer_keeps_outsiders_on_the_entry_node() {
    let c = lb_cluster(TrafficPolicy::Local, &[]);
    let e = expect(&c, &probe(Source::External("ext".into()), to_lb(Some("a")))).unwrap();
    assert!(matches!(&backends(&e)["web-a"], SeenSource::Client { .. }));
    let e = expect(&c, &probe(Source::External("ext".into()), to_lb(Some("b")))).unwrap();
    assert_eq!(e.outcome, Outcome::Dropped);
    // Pods on a node without endpoints are short-circuited and keep their address.
    let mut c = c;
    c.pods.push(pod("far", "10.244.2.9", "b"));
    let e = expect(&c, &probe(Source::Pod("far".into()), to_lb(None))).unwrap();
    assert!(matches!(&backends(&e)["web-a"], SeenSource::Client { .. }));
    // The node itself is short-circuited and masqueraded.
    let e = expect(&c, &probe(Source::Node("b".into()), to_lb(None))).unwrap();
    assert!(matches!(&backends(&e)["web-a"], SeenSource::Masqueraded { node, .. } if node == "b"));
}

#[test]
fn health_check_reports_ready_local_endpoints() {
    let mut c = lb_cluster(TrafficPolicy::Local, &[]);
    c.services[0].health_check_node_port = Some(32000);
    let hc = |node: &str| Target::HealthCheck { service: "web".into(), node: node.into() };
    let e = expect(&c, &probe(Source::External("ext".into()), hc("a"))).unwrap();
    assert_eq!(e.outcome, Outcome::Http { status: 200, local_endpoints: 1 });
    let e = expect(&c, &probe(Source::External("ext".into()), hc("b"))).unwrap();
    assert_eq!(e.outcome, Outcome::Http { status: 503, local_endpoints: 0 });
}

#[test]
fn health_checks_listen_only_where_node_port_addresses_select() {
    let mut c = lb_cluster(TrafficPolicy::Local, &[]);
    c.services[0].health_check_node_port = Some(32000);
    c.nodes[0].secondary_ips = vec!["192.168.50.111".parse().unwrap()];
    c.proxy.node_port_addresses = vec!["192.168.50.11/32".parse().unwrap(), "fd00::/64".parse().unwrap()];
    let ext = || Source::External("ext".into());
    let raw = |addr: &str| Target::Address(std::net::SocketAddr::new(addr.parse().unwrap(), 32000));
    let hc = Target::HealthCheck { service: "web".into(), node: "a".into() };
    let e = expect(&c, &probe(ext(), hc.clone())).unwrap();
    assert_eq!(e.outcome, Outcome::Http { status: 200, local_endpoints: 1 });
    let e = expect(&c, &probe(ext(), raw("192.168.50.111"))).unwrap();
    assert_eq!(e.outcome, closed("a"));
    assert!(e.because.contains("outside nodePortAddresses"), "{}", e.because);
    // The case: only loopback selected, and the check asked on the node IP.
    c.proxy.node_port_addresses = vec!["127.0.0.0/8".parse().unwrap()];
    assert_eq!(expect(&c, &probe(ext(), hc)).unwrap().outcome, closed("a"));
    // Without CIDRs of this family, every address.
    c.proxy.node_port_addresses = vec!["fd00::/64".parse().unwrap()];
    let e = expect(&c, &probe(ext(), raw("192.168.50.111"))).unwrap();
    assert_eq!(e.outcome, Outcome::Http { status: 200, local_endpoints: 1 });
}

#[test]
fn affinity_is_sticky_until_attempts_outlast_the_timeout() {
    let mut c = cluster(both(), TrafficPolicy::Cluster);
    c.services[0].session_affinity = SessionAffinity::ClientIp { timeout_seconds: 1 };
    let mut p = probe(Source::Pod("client".into()), to_cluster_ip());
    let spread = |c: &Cluster, p: &Probe| match expect(c, p).unwrap().outcome {
        Outcome::Answered { spread, .. } => spread,
        other => panic!("{other}"),
    };
    assert_eq!(spread(&c, &p), Spread::Sticky);
    p.interval = Some(std::time::Duration::from_millis(1600));
    // Two backends need 21 attempts before "never expired" stops being plausible luck.
    assert!(expect(&c, &p).unwrap_err().contains("at least 21"));
    p.count = 21;
    assert!(matches!(spread(&c, &p), Spread::AffinityExpires { .. }));
    p.interval = Some(std::time::Duration::from_millis(1200));
    assert!(expect(&c, &p).unwrap_err().contains("too close"));
    // Clients at once share the 20 expiries: 5 clients need 5 attempts each (4 expiries).
    p.interval = Some(std::time::Duration::from_millis(1600));
    p.clients = Some(crate::model::Clients { probe: "p".into(), count: 5 });
    p.count = 4;
    assert!(expect(&c, &p).unwrap_err().contains("count 4 from 5 clients is too small"));
    assert!(expect(&c, &p).unwrap_err().contains("use at least 5"));
    p.count = 5;
    assert!(matches!(spread(&c, &p), Spread::AffinityExpires { .. }));
}

/// Service web's node port on node a, at one of its addresses.
fn node_port_of_a_at(addr: &str) -> Target {
    Target::NodePort {
        service: "web".into(),
        port: "http".into(),
        node: "a".into(),
        address: Some(addr.parse().unwrap()),
    }
}

#[test]
fn node_port_addresses_and_localhost_decide_where_node_ports_answer() {
    let mut c = cluster(both(), TrafficPolicy::Cluster);
    c.nodes[0].secondary_ips = vec!["192.168.50.111".parse().unwrap()];
    let at = node_port_of_a_at;
    let ext = || Source::External("ext".into());
    assert_eq!(backends(&expect(&c, &probe(ext(), at("192.168.50.111"))).unwrap()).len(), 2);
    c.proxy.node_port_addresses = vec!["192.168.50.11/32".parse().unwrap()];
    assert_eq!(expect(&c, &probe(ext(), at("192.168.50.111"))).unwrap().outcome, closed("a"));
    assert_eq!(backends(&expect(&c, &probe(ext(), at("192.168.50.11"))).unwrap()).len(), 2);
    // Localhost node ports: from the node itself, only where enabled and allowed.
    let local = || Source::Node("a".into());
    assert_eq!(expect(&c, &probe(local(), at("127.0.0.1"))).unwrap().outcome, closed("a"));
    c.proxy.node_port_addresses.clear();
    assert_eq!(backends(&expect(&c, &probe(local(), at("127.0.0.1"))).unwrap()).len(), 2);
    c.proxy.localhost_node_ports = false;
    assert_eq!(expect(&c, &probe(local(), at("127.0.0.1"))).unwrap().outcome, closed("a"));
}

#[test]
fn iptables_mode_filters_a_node_port_without_endpoints_outside_node_port_addresses_too() {
    // Found by `packetproof explore` (a second address on every node): KUBE-EXTERNAL-SERVICES
    // matches `--dst-type LOCAL`, not nodePortAddresses; nftables mode's check matches
    // @nodeport-ips.
    let only_b = vec![endpoint("web-b", "10.244.2.5", "b")];
    let mut c = cluster(only_b, TrafficPolicy::Local);
    c.nodes[0].secondary_ips = vec!["192.168.50.111".parse().unwrap()];
    c.proxy.node_port_addresses = vec!["192.168.50.11/32".parse().unwrap()];
    let secondary = probe(Source::External("ext".into()), node_port_of_a_at("192.168.50.111"));
    let outcome = |c: &Cluster, profile| match predict(c, &secondary, profile).unwrap() {
        Prediction::Expected(e) => Some(e.outcome),
        Prediction::Open(_) => None,
    };
    assert_eq!(outcome(&c, Profile::KUBE_PROXY_IPTABLES), Some(Outcome::Dropped));
    assert_eq!(outcome(&c, Profile::KUBE_PROXY_NFTABLES), Some(closed("a")));
    assert_eq!(outcome(&c, Profile::KUBERNETES), None);
    // No endpoint at all: rejected by the rule, which a client reads as the node's own refusal.
    c.services[0].ports[0].endpoints.clear();
    assert_eq!(outcome(&c, Profile::KUBE_PROXY_IPTABLES), Some(Outcome::Rejected));
    // A local endpoint: no filter, so the address is no node port in either mode.
    c.services[0].ports[0].endpoints = both();
    assert_eq!(expect(&c, &secondary).unwrap().outcome, closed("a"));
}

#[test]
fn masquerade_all_masquerades_pods_too() {
    let mut c = cluster(both(), TrafficPolicy::Cluster);
    c.proxy.masquerade_all = true;
    let e = expect(&c, &probe(Source::Pod("client".into()), to_cluster_ip())).unwrap();
    assert!(backends(&e).values().all(|s| matches!(s, SeenSource::Masqueraded { node, .. } if node == "a")));
}

#[test]
fn internal_local_policy_falls_back_to_local_terminating_endpoints_only() {
    let mut eps = both();
    eps[0].ready = false;
    eps[0].terminating = true;
    let mut c = cluster(eps, TrafficPolicy::Cluster);
    c.services[0].internal_traffic_policy = TrafficPolicy::Local;
    // On node a, the only local endpoint is terminating but serving: it is used, although a
    // ready endpoint exists on node b.
    let e = expect(&c, &probe(Source::Pod("client".into()), to_cluster_ip())).unwrap();
    assert_eq!(backends(&e).keys().collect::<Vec<_>>(), vec!["web-a"]);
}

#[test]
fn a_pod_at_another_nodes_local_node_port_has_no_defined_outcome() {
    // kubernetes/kubernetes#74383: short-circuited without masquerade, the reply bypasses b.
    let c = cluster(vec![endpoint("web-a", "10.244.1.5", "a")], TrafficPolicy::Local);
    let err = expect(&c, &probe(Source::Pod("client".into()), to_node_port("b"))).unwrap_err();
    assert!(err.contains("74383"), "{err}");
    // Its own node's node port, and the endpoint reaching itself anywhere, are well defined.
    assert!(expect(&c, &probe(Source::Pod("client".into()), to_node_port("a"))).is_ok());
    assert!(expect(&c, &probe(Source::Pod("web-a".into()), to_node_port("b"))).is_ok());
}

/// The cluster of [`cluster`] in IPv6: `10.244.N.x` → `fd00:10:244:N::x`, nodes and the
/// external host on `fd00:192:168:50::/64`, the Service at `fd00:10:96::20`.
fn v6_cluster(endpoints: Vec<Endpoint>, etp: TrafficPolicy) -> Cluster {
    let mut c = cluster(endpoints, etp);
    let v6 = |ip: &str| -> std::net::IpAddr { ip.parse().unwrap() };
    c.pod_cidr = "fd00:10:244::/56".parse().unwrap();
    c.service_cidr = "fd00:10:96::/112".parse().unwrap();
    c.node_network = "fd00:192:168:50::/64".parse().unwrap();
    c.nodes[0].ips = crate::model::PerFamily::single(v6("fd00:192:168:50::11"));
    c.nodes[0].pod_cidrs = crate::model::PerFamily::single("fd00:10:244:1::/64".parse().unwrap());
    c.nodes[1].ips = crate::model::PerFamily::single(v6("fd00:192:168:50::12"));
    c.nodes[1].pod_cidrs = crate::model::PerFamily::single("fd00:10:244:2::/64".parse().unwrap());
    c.external_hosts[0].ips = crate::model::PerFamily::single(v6("fd00:192:168:50::100"));
    for (pod, ip) in c.pods.iter_mut().zip(["fd00:10:244:1::5", "fd00:10:244:2::5", "fd00:10:244:1::9"]) {
        pod.ips = crate::model::PerFamily::single(v6(ip));
    }
    c.services[0].cluster_ips = crate::model::PerFamily::single(v6("fd00:10:96::20"));
    for ep in &mut c.services[0].ports[0].endpoints {
        ep.ip = if ep.pod == "web-a" { v6("fd00:10:244:1::5") } else { v6("fd00:10:244:2::5") };
    }
    c
}

fn v6_both() -> Vec<Endpoint> {
    vec![endpoint("web-a", "fd00:10:244:1::5", "a"), endpoint("web-b", "fd00:10:244:2::5", "b")]
}

#[test]
fn ipv6_paths_are_the_ipv4_ones() {
    let c = v6_cluster(v6_both(), TrafficPolicy::Cluster);
    let e = expect(&c, &probe(Source::Pod("client".into()), to_cluster_ip())).unwrap();
    assert_eq!(
        backends(&e)["web-b"],
        SeenSource::Client { addrs: vec!["fd00:10:244:1::9".parse().unwrap()] }
    );
    let e = expect(&c, &probe(Source::External("ext".into()), to_node_port("a"))).unwrap();
    let masq = |addr: &str| SeenSource::Masqueraded { node: "a".into(), addrs: vec![addr.parse().unwrap()] };
    assert_eq!(backends(&e)["web-a"], masq("fd00:10:244:1::1"));
    assert_eq!(backends(&e)["web-b"], masq("fd00:192:168:50::11"));
    let c = v6_cluster(vec![], TrafficPolicy::Cluster);
    assert_eq!(
        expect(&c, &probe(Source::Pod("client".into()), to_cluster_ip())).unwrap().outcome,
        Outcome::Rejected
    );
}

#[test]
fn ipv6_masquerade_may_use_any_node_network_address() {
    // IPv6 source address selection may pick a secondary address of the interface.
    let mut c = v6_cluster(v6_both(), TrafficPolicy::Cluster);
    c.nodes[0].secondary_ips = vec!["fd00:192:168:50::21".parse().unwrap()];
    let e = expect(&c, &probe(Source::External("ext".into()), to_node_port("a"))).unwrap();
    let SeenSource::Masqueraded { addrs, .. } = &backends(&e)["web-b"] else { panic!("{e:?}") };
    assert!(addrs.contains(&"fd00:192:168:50::21".parse().unwrap()), "{addrs:?}");
    // IPv4 masquerades to the primary address only.
    let mut c = cluster(both(), TrafficPolicy::Cluster);
    c.nodes[0].secondary_ips = vec!["192.168.50.21".parse().unwrap()];
    let e = expect(&c, &probe(Source::External("ext".into()), to_node_port("a"))).unwrap();
    let SeenSource::Masqueraded { addrs, .. } = &backends(&e)["web-b"] else { panic!("{e:?}") };
    assert!(!addrs.contains(&"192.168.50.21".parse().unwrap()), "{addrs:?}");
}

#[test]
fn no_node_ports_on_ipv6_loopback_and_ipv6_node_port_addresses() {
    let mut c = v6_cluster(v6_both(), TrafficPolicy::Cluster);
    let at = |addr: &str| Target::Address(addr.parse().unwrap());
    // ::1 is the node itself, whose own stack refuses: kube-proxy excludes ::1/128.
    let e = expect(&c, &probe(Source::Node("a".into()), at("[::1]:30080"))).unwrap();
    assert_eq!(e.outcome, closed("a"));
    assert!(e.because.contains("no node ports on ::1"), "{}", e.because);
    // IPv4 CIDRs in nodePortAddresses are the other proxier's: all IPv6 addresses still serve.
    c.proxy.node_port_addresses = vec!["192.168.50.0/24".parse().unwrap()];
    let ext = || Source::External("ext".into());
    assert_eq!(backends(&expect(&c, &probe(ext(), to_node_port("a"))).unwrap()).len(), 2);
    c.proxy.node_port_addresses.push("fd00:192:168:50::12/128".parse().unwrap());
    assert_eq!(expect(&c, &probe(ext(), to_node_port("a"))).unwrap().outcome, closed("a"));
    assert_eq!(backends(&expect(&c, &probe(ext(), to_node_port("b"))).unwrap()).len(), 2);
}

#[test]
fn a_node_port_shadowed_by_an_external_ip_on_the_same_address_is_refused_as_ambiguous() {
    let mut c = cluster(both(), TrafficPolicy::Cluster);
    let mut legacy = c.services[0].clone();
    legacy.name = "legacy".into();
    legacy.cluster_ips = crate::model::PerFamily::single("10.96.0.21".parse().unwrap());
    legacy.service_type = ServiceType::ClusterIp;
    legacy.external_ips = vec!["192.168.50.11".parse().unwrap()];
    legacy.ports[0].port = 30080;
    legacy.ports[0].node_port = None;
    c.services.push(legacy);
    let err = expect(&c, &probe(Source::External("ext".into()), to_node_port("a"))).unwrap_err();
    assert!(err.contains("Service IPs win over node ports"), "{err}");
    assert!(expect(&c, &probe(Source::External("ext".into()), to_node_port("b"))).is_ok());
}

/// Found by exploration: an external IP on a node's address, without endpoints (or, for outside
/// traffic under externalTrafficPolicy Local, without one on that node), on another Service's
/// node port. kube-proxy writes no DNAT for it, so the node port took the packet in iptables
/// mode where the oracle expected the reject or the drop.
#[test]
fn an_external_ip_without_endpoints_on_another_services_node_port_is_refused_as_ambiguous() {
    let c = cluster(both(), TrafficPolicy::Cluster);
    let node_port = c.services[0].ports[0].node_port.expect("web has a node port");
    let mut legacy = c.services[0].clone();
    legacy.name = "legacy".into();
    legacy.cluster_ips = crate::model::PerFamily::single("10.96.0.21".parse().unwrap());
    legacy.service_type = ServiceType::ClusterIp;
    legacy.external_ips = vec!["192.168.50.11".parse().unwrap()];
    legacy.ports[0].port = node_port;
    legacy.ports[0].node_port = None;
    let to_legacy = |legacy: &crate::model::Service| {
        let mut c = c.clone();
        c.services.push(legacy.clone());
        let target = Target::ExternalIp {
            service: "legacy".into(),
            port: "http".into(),
            ip: "192.168.50.11".parse().unwrap(),
            via: Some("a".into()),
        };
        expect(&c, &probe(Source::External("ext".into()), target))
    };
    assert!(to_legacy(&legacy).is_ok(), "with endpoints the Service IP wins, as KUBE-NODEPORTS comes last");
    let mut without = legacy.clone();
    without.ports[0].endpoints.clear();
    let err = to_legacy(&without).unwrap_err();
    assert!(err.contains("writes no DNAT for the Service IP"), "{err}");
    // Found next: externalTrafficPolicy Local without an endpoint on the receiving node is the
    // same for outside traffic (its chain returns empty).
    legacy.service_type = ServiceType::NodePort;
    legacy.external_traffic_policy = TrafficPolicy::Local;
    legacy.ports[0].node_port = Some(node_port + 1);
    legacy.ports[0].endpoints.retain(|e| e.node.as_deref() != Some("a"));
    assert!(!legacy.ports[0].endpoints.is_empty(), "an endpoint elsewhere");
    let err = to_legacy(&legacy).unwrap_err();
    assert!(err.contains("writes no DNAT for the Service IP"), "{err}");
}

#[test]
fn profiles_choose_where_kubernetes_leaves_the_outcome_open() {
    use super::{Basis, Prediction, Profile, predict};
    let mut c = cluster(both(), TrafficPolicy::Cluster);
    c.nodes[0].secondary_ips = vec!["192.168.50.111".parse().unwrap()];
    let node_port_at = |addr: &str| Target::NodePort {
        service: "web".into(),
        port: "http".into(),
        node: "a".into(),
        address: Some(addr.parse().unwrap()),
    };
    let raw = |addr: &str, port: u16| Target::Address(std::net::SocketAddr::new(addr.parse().unwrap(), port));
    let outcome = |p: &Probe, profile| match predict(&c, p, profile).unwrap() {
        Prediction::Expected(e) => Some((e.outcome, e.basis)),
        Prediction::Open(_) => None,
    };
    let iptables = Profile::KUBE_PROXY_IPTABLES;
    let nftables = Profile::KUBE_PROXY_NFTABLES;

    // A secondary node address: every address in iptables mode, the primary only in nftables mode.
    let secondary = probe(Source::External("ext".into()), node_port_at("192.168.50.111"));
    assert!(
        matches!(outcome(&secondary, iptables), Some((Outcome::Answered { .. }, Basis::Choice(p))) if p == iptables)
    );
    assert_eq!(outcome(&secondary, nftables), Some((closed("a"), Basis::Choice(nftables))));
    assert_eq!(outcome(&secondary, Profile::KUBERNETES), None);
    let primary = probe(Source::External("ext".into()), node_port_at("192.168.50.11"));
    assert!(
        matches!(outcome(&primary, Profile::KUBERNETES), Some((Outcome::Answered { .. }, Basis::Contract))),
        "the primary node IP is the contract"
    );

    // 127.0.0.1 from the node itself: only iptables mode serves it.
    let localhost = probe(Source::Node("a".into()), node_port_at("127.0.0.1"));
    assert!(
        matches!(outcome(&localhost, iptables), Some((Outcome::Answered { .. }, Basis::Choice(p))) if p == iptables)
    );
    assert_eq!(outcome(&localhost, nftables), Some((closed("a"), Basis::Choice(nftables))));
    assert_eq!(outcome(&localhost, Profile::KUBERNETES), None);

    // A cluster IP's unused port passes through iptables mode un-translated; nftables mode
    // rejects it by a rule. An unallocated service address too passes through iptables mode.
    let wrong_port = probe(Source::Pod("client".into()), raw("10.96.0.20", 81));
    assert_eq!(outcome(&wrong_port, iptables), Some((Outcome::Forwarded, Basis::Choice(iptables))));
    assert_eq!(outcome(&wrong_port, nftables), Some((Outcome::Rejected, Basis::Choice(nftables))));
    assert_eq!(outcome(&wrong_port, Profile::KUBERNETES), None);
    let unallocated = probe(Source::Pod("client".into()), raw("10.96.255.254", 80));
    assert_eq!(outcome(&unallocated, nftables), Some((Outcome::Dropped, Basis::Choice(nftables))));
    assert_eq!(outcome(&unallocated, iptables), Some((Outcome::Forwarded, Basis::Choice(iptables))));
    assert_eq!(outcome(&unallocated, Profile::KUBERNETES), None);

    // Before v1.33, nftables mode forwards it as iptables mode does (no ServiceCIDR gate by
    // default); every release of iptables mode forwards it; the unused port is rejected in all.
    let at = |implementation, release| Profile { implementation, release: Some(release) };
    for release in crate::model::Release::KNOWN {
        let nftables_then = at(crate::model::Implementation::KubeProxyNftables, release);
        let dropped = release >= crate::model::Release::V1_33;
        let want = if dropped { Outcome::Dropped } else { Outcome::Forwarded };
        assert_eq!(
            outcome(&unallocated, nftables_then),
            Some((want, Basis::Choice(nftables_then))),
            "{release}"
        );
        assert_eq!(
            outcome(&wrong_port, nftables_then),
            Some((Outcome::Rejected, Basis::Choice(nftables_then)))
        );
        let iptables_then = at(crate::model::Implementation::KubeProxyIptables, release);
        assert_eq!(
            outcome(&unallocated, iptables_then),
            Some((Outcome::Forwarded, Basis::Choice(iptables_then)))
        );
    }
}

#[test]
fn stated_expectations_name_the_profile_whose_choice_they_state() {
    let mut c = cluster(both(), TrafficPolicy::Cluster);
    c.nodes[0].secondary_ips = vec!["192.168.50.111".parse().unwrap()];
    let at = node_port_of_a_at;
    let stated = |verdict, profile| StatedExpectation {
        verdict,
        backends: None,
        source: None,
        http_status: None,
        profile,
    };
    let problems = |to: Target, expect: StatedExpectation| {
        let mut p = probe(Source::External("ext".into()), to);
        p.expect = Some(expect);
        scenario_problems(&c, &[p]).into_iter().map(|(_, _, m)| m).collect::<Vec<_>>()
    };
    let (iptables, nftables) = (Some(Profile::KUBE_PROXY_IPTABLES), Some(Profile::KUBE_PROXY_NFTABLES));
    // A secondary node address is a choice: it must say whose, and agree with that profile.
    let open = problems(at("192.168.50.111"), stated(StatedVerdict::Answered, None));
    assert!(open[0].contains("kube-proxy-nftables chooses CLOSED a"), "{open:?}");
    assert!(problems(at("192.168.50.111"), stated(StatedVerdict::Answered, iptables)).is_empty());
    assert!(problems(at("192.168.50.111"), stated(StatedVerdict::Rejected, nftables)).is_empty());
    let wrong = problems(at("192.168.50.111"), stated(StatedVerdict::Answered, nftables));
    assert!(wrong[0].contains("but kube-proxy-nftables chooses CLOSED a"), "{wrong:?}");
    let none = problems(at("192.168.50.111"), stated(StatedVerdict::Answered, Some(Profile::KUBERNETES)));
    assert!(none[0].contains("expects nothing here"), "{none:?}");
    // The primary address is the contract: no profile needed, and any profile agrees.
    assert!(problems(at("192.168.50.11"), stated(StatedVerdict::Answered, None)).is_empty());
    assert!(problems(at("192.168.50.11"), stated(StatedVerdict::Answered, nftables)).is_empty());
    let contract = problems(at("192.168.50.11"), stated(StatedVerdict::Dropped, None));
    assert!(contract[0].contains("but Kubernetes semantics say"), "{contract:?}");

    // A release profile's choice is checked as that release makes it.
    let unallocated = |expect| {
        let mut p = probe(Source::Pod("client".into()), Target::Address("10.96.255.254:80".parse().unwrap()));
        p.expect = Some(expect);
        scenario_problems(&c, &[p]).into_iter().map(|(_, _, m)| m).collect::<Vec<_>>()
    };
    let v1_30 = Some("kube-proxy-nftables@v1.30".parse().unwrap());
    assert!(unallocated(stated(StatedVerdict::Forwarded, v1_30)).is_empty());
    assert!(unallocated(stated(StatedVerdict::Dropped, nftables)).is_empty());
    let wrong = unallocated(stated(StatedVerdict::Dropped, v1_30));
    assert!(wrong[0].contains("but kube-proxy-nftables@v1.30 chooses FORWARD un-translated"), "{wrong:?}");
}

/// Topology hints as flows: (case, policies, client, target) → backends. Node a is in zone-a
/// and b in zone-b; web-a (on a) is hinted for zone-b and web-b (on b) for zone-a, crossed so
/// that a node's own endpoint is never its zone's.
#[test]
fn topology_hints_narrow_only_the_cluster_set_of_the_translating_node() {
    let crossed = || {
        let mut eps = both();
        eps[0].zone_hints = vec!["zone-b".into()];
        eps[1].zone_hints = vec!["zone-a".into()];
        eps
    };
    let zoned = |eps: Vec<Endpoint>, etp: TrafficPolicy, itp: TrafficPolicy, annotation: Option<&str>| {
        let mut c = cluster(eps, etp);
        c.nodes[0].zone = Some("zone-a".into());
        c.nodes[1].zone = Some("zone-b".into());
        c.services[0].internal_traffic_policy = itp;
        c.services[0].hints_annotation = annotation.map(String::from);
        c
    };
    let (cluster_p, local_p) = (TrafficPolicy::Cluster, TrafficPolicy::Local);
    let client = || Source::Pod("client".into());
    let ext = || Source::External("ext".into());
    type Flow = (&'static str, Cluster, Source, Target, &'static [&'static str]);
    let flows: Vec<Flow> = vec![
        (
            "pod on a, hints used",
            zoned(crossed(), cluster_p, cluster_p, Some("Auto")),
            client(),
            to_cluster_ip(),
            &["web-b"],
        ),
        (
            "node b's host",
            zoned(crossed(), cluster_p, cluster_p, Some("Auto")),
            Source::Node("b".into()),
            to_cluster_ip(),
            &["web-a"],
        ),
        (
            "outside through b's node port",
            zoned(crossed(), cluster_p, cluster_p, Some("Auto")),
            ext(),
            to_node_port("b"),
            &["web-a"],
        ),
        (
            "pod on a through b's node port: b translates",
            zoned(crossed(), cluster_p, cluster_p, Some("Auto")),
            client(),
            to_node_port("b"),
            &["web-a"],
        ),
        (
            "no annotation (gate off)",
            zoned(crossed(), cluster_p, cluster_p, None),
            client(),
            to_cluster_ip(),
            &["web-a", "web-b"],
        ),
        (
            "annotation Disabled",
            zoned(crossed(), cluster_p, cluster_p, Some("Disabled")),
            client(),
            to_cluster_ip(),
            &["web-a", "web-b"],
        ),
        (
            "internalTrafficPolicy Local",
            zoned(crossed(), cluster_p, local_p, Some("Auto")),
            client(),
            to_cluster_ip(),
            &["web-a"],
        ),
        (
            "externalTrafficPolicy Local from outside",
            zoned(crossed(), local_p, cluster_p, Some("Auto")),
            ext(),
            to_node_port("a"),
            &["web-a"],
        ),
        (
            "externalTrafficPolicy Local, pod to cluster IP",
            zoned(crossed(), local_p, cluster_p, Some("Auto")),
            client(),
            to_cluster_ip(),
            &["web-b"],
        ),
    ];
    // The cases of the annotation are kube-proxy v1.30's (`HINTS_WITHOUT_ANNOTATION`).
    let v1_30 = Profile {
        implementation: crate::model::Implementation::KubeProxyIptables,
        release: Some(Release::V1_30),
    };
    let under_v1_30 = |c: &Cluster, p: &Probe| match predict(c, p, v1_30) {
        Ok(Prediction::Expected(e)) => Ok(e),
        Ok(other) => Err(format!("{other:?}")),
        Err(e) => Err(e),
    };
    for (case, c, from, to, want) in flows {
        let e = under_v1_30(&c, &probe(from, to)).unwrap_or_else(|e| panic!("{case}: {e}"));
        assert_eq!(backends(&e).keys().collect::<Vec<_>>(), want.to_vec(), "{case}");
    }
    // From v1.31 (and for the newest profile) hints count without the annotation.
    for annotation in [None, Some("Disabled")] {
        let c = zoned(crossed(), cluster_p, cluster_p, annotation);
        let e = expect(&c, &probe(client(), to_cluster_ip())).unwrap();
        assert_eq!(backends(&e).keys().collect::<Vec<_>>(), ["web-b"], "{annotation:?}, newest");
    }
    // An unhinted endpoint, or a zone no hint names, turns hints off.
    let mut partial = crossed();
    partial[0].zone_hints.clear();
    let c = zoned(partial, cluster_p, cluster_p, Some("Auto"));
    assert_eq!(backends(&expect(&c, &probe(client(), to_cluster_ip())).unwrap()).len(), 2);
    let mut c = zoned(crossed(), cluster_p, cluster_p, Some("Auto"));
    c.nodes[0].zone = Some("zone-c".into());
    assert_eq!(backends(&expect(&c, &probe(client(), to_cluster_ip())).unwrap()).len(), 2);
    // With the ServiceTrafficDistribution gate the annotation is not needed.
    let mut c = zoned(crossed(), cluster_p, cluster_p, None);
    c.proxy.service_traffic_distribution = true;
    assert_eq!(
        backends(&under_v1_30(&c, &probe(client(), to_cluster_ip())).unwrap()).keys().collect::<Vec<_>>(),
        ["web-b"]
    );
}

#[test]
fn a_proxy_mode_load_balancer_ip_is_left_to_the_balancer() {
    let mut c = lb_cluster(TrafficPolicy::Cluster, &[]);
    let svc = &mut c.services[0];
    svc.proxied_load_balancer_ips = std::mem::take(&mut svc.load_balancer_ips);
    for (from, via) in [
        (Source::Pod("client".into()), None),
        (Source::Node("a".into()), None),
        (Source::External("ext".into()), Some("b")),
    ] {
        let e = expect(&c, &probe(from.clone(), to_lb(via))).unwrap();
        assert_eq!(e.outcome, Outcome::Forwarded, "{from}: {}", e.because);
        assert!(e.because.contains("ipMode Proxy"), "{}", e.because);
    }
    let raw = probe(Source::Pod("client".into()), Target::Address("203.0.113.10:80".parse().unwrap()));
    assert_eq!(expect(&c, &raw).unwrap().outcome, Outcome::Forwarded);
}

#[test]
fn a_host_routed_through_a_node_reaches_cluster_ips_masqueraded_by_that_node() {
    let mut c = cluster(both(), TrafficPolicy::Cluster);
    c.external_hosts[0].routes = vec![HostRoute { to: "10.96.0.0/12".parse().unwrap(), via: "b".into() }];
    let e = expect(&c, &probe(Source::External("ext".into()), to_cluster_ip())).unwrap();
    assert_eq!(backends(&e).len(), 2);
    assert!(backends(&e).values().all(|s| matches!(s, SeenSource::Masqueraded { node, .. } if node == "b")));
    assert!(matches!(&e.outcome, Outcome::Answered { translated_by: Some(n), .. } if n == "b"));
    // A route elsewhere is no route to the cluster IP.
    c.external_hosts[0].routes[0].to = "10.200.0.0/16".parse().unwrap();
    assert!(expect(&c, &probe(Source::External("ext".into()), to_cluster_ip())).is_err());
}

#[test]
fn locality_is_the_endpoints_node_name_alone() {
    // web-a runs on node a, but its endpoint names no node: kube-proxy counts it local nowhere.
    let mut unnamed = endpoint("web-a", "10.244.1.5", "a");
    unnamed.node = None;
    let c = cluster(vec![unnamed], TrafficPolicy::Local);
    let e = expect(&c, &probe(Source::External("ext".into()), to_node_port("a"))).unwrap();
    assert_eq!(e.outcome, Outcome::Dropped, "{}", e.because);
}

/// What each detectLocalMode makes of pod client's (node a) flows, as one table: the
/// backends and whether each sees the client's own address.
#[test]
fn detect_local_modes_decide_what_pod_traffic_is() {
    let pod = || Source::Pod("client".into());
    let prefix = |p: &str| DetectLocal::InterfaceNamePrefix(p.into());
    let bridge = DetectLocal::BridgeInterface("cni0".into());
    let only_a = || vec![endpoint("web-a", "10.244.1.5", "a")];
    #[rustfmt::skip]
    let flows: Vec<(DetectLocal, Vec<Endpoint>, TrafficPolicy, Target, &str)> = vec![
        // A pod of another node at b's Local node port: held to b's endpoints, or dropped.
        (DetectLocal::NodeCidr, both(), TrafficPolicy::Local, to_node_port("b"), "web-b client"),
        (DetectLocal::NodeCidr, only_a(), TrafficPolicy::Local, to_node_port("b"), "DROP"),
        (bridge.clone(), both(), TrafficPolicy::Local, to_node_port("b"), "web-b client"),
        (prefix("cni"), only_a(), TrafficPolicy::Local, to_node_port("b"), "DROP"),
        // At its own node, a pod is short-circuited to every endpoint, keeping its address.
        (DetectLocal::NodeCidr, both(), TrafficPolicy::Local, to_node_port("a"), "web-a client, web-b client"),
        (bridge.clone(), both(), TrafficPolicy::Local, to_node_port("a"), "web-a client, web-b client"),
        // Unless the prefix matches no interface its traffic arrives on (the veths are bridged).
        (prefix("veth"), both(), TrafficPolicy::Local, to_node_port("a"), "web-a client"),
        (prefix("veth"), only_a(), TrafficPolicy::Local, to_node_port("b"), "DROP"),
        // Cluster IPs: only traffic that is not local is masqueraded.
        (DetectLocal::NodeCidr, both(), TrafficPolicy::Cluster, to_cluster_ip(), "web-a client, web-b client"),
        (bridge, both(), TrafficPolicy::Cluster, to_cluster_ip(), "web-a client, web-b client"),
        (prefix("cni"), both(), TrafficPolicy::Cluster, to_cluster_ip(), "web-a client, web-b client"),
        (prefix("veth"), both(), TrafficPolicy::Cluster, to_cluster_ip(), "web-a masq, web-b masq"),
    ];
    for (mode, endpoints, etp, to, want) in flows {
        let mut c = cluster(endpoints, etp);
        c.proxy.detect_local = mode.clone();
        let e = expect(&c, &probe(pod(), to.clone())).unwrap_or_else(|e| panic!("{mode} {to:?}: {e}"));
        let got = match &e.outcome {
            Outcome::Answered { backends, .. } => backends
                .iter()
                .map(|(b, s)| {
                    format!("{b} {}", if matches!(s, SeenSource::Client { .. }) { "client" } else { "masq" })
                })
                .collect::<Vec<_>>()
                .join(", "),
            other => other.to_string(),
        };
        assert_eq!(got, want, "{mode} {to:?} ({})", e.because);
    }
    // A node's own traffic is never local: masqueraded under every mode.
    for mode in [DetectLocal::NodeCidr, DetectLocal::BridgeInterface("cni0".into()), prefix("cni")] {
        let mut c = cluster(both(), TrafficPolicy::Cluster);
        c.proxy.detect_local = mode;
        let e = expect(&c, &probe(Source::Node("b".into()), to_cluster_ip())).unwrap();
        assert!(backends(&e).values().all(|s| matches!(s, SeenSource::Masqueraded { .. })));
    }
}
