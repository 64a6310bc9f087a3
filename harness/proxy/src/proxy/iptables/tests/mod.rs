//! Whole-node generation checked against real kube-proxy dumps (../shared/seeds, quoted here
//! so the tests stand alone), against kube-proxy's own unit tests (`kube_proxy`), for every
//! rule form (`features`), against the rules each mutant must break (`mutants`), and in the
//! kernel (`kernel`, root only).

mod features;
mod ipv6;
mod kernel;
mod kube_proxy;
mod mutants;

use super::ruleset::{Rule, RuleSet, Table};
use super::*;
use crate::model::{Endpoint, Protocol, Service, ServiceType, TrafficPolicy};
use crate::proxy::test_support::{diff_lines, ep, port, service};

fn cluster(services: Vec<Service>) -> Cluster {
    Cluster::example(services)
}

fn kube_dns() -> Service {
    // Listed out of order on purpose: kube-proxy sorts endpoints by address string.
    let eps = vec![ep("10.244.0.7", 53, Some("node-a")), ep("10.244.0.5", 53, Some("node-b"))];
    service(
        "kube-system",
        "kube-dns",
        ServiceType::ClusterIp,
        "10.96.0.10",
        vec![port("dns", Protocol::Udp, 53, None, eps)],
    )
}

/// Seed 004's nginx: NodePort 30783, one endpoint on node-b.
fn nginx(etp: TrafficPolicy) -> Service {
    let mut svc = service(
        "default",
        "nginx",
        ServiceType::NodePort,
        "10.32.0.61",
        vec![port("", Protocol::Tcp, 80, Some(30783), vec![ep("10.64.2.4", 80, Some("node-b"))])],
    );
    svc.external_traffic_policy = etp;
    svc
}

/// The table's rules as `iptables-save` prints them, restricted to `chains`, grouped by chain
/// (stable, so the order inside a chain is kept).
fn saved(table: &Table, chains: &[&str]) -> Vec<String> {
    let mut rules: Vec<&Rule> = table.rules.iter().filter(|r| chains.contains(&r.chain.as_str())).collect();
    rules.sort_by(|a, b| a.chain.cmp(&b.chain));
    rules.iter().map(|r| r.saved_line()).collect()
}

fn lines(table: &Table, chain: &str) -> Vec<String> {
    table.rules_in(chain).map(|r| r.line()).collect()
}

/// `-A` lines grouped by chain, keeping the order inside each chain.
fn sorted_by_chain<S: AsRef<str>>(lines: &[S]) -> Vec<String> {
    let mut v: Vec<String> = lines.iter().map(|s| s.as_ref().to_string()).collect();
    v.sort_by_key(|l| l.split(' ').nth(1).unwrap_or_default().to_string());
    v
}

#[test]
fn kube_dns_matches_seed_000() {
    // Seed 000, an `iptables-save` excerpt of a kube-dns UDP service with two endpoints.
    let seed = [
        "-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000",
        "-A KUBE-SEP-232DQYSHL5HNRYWJ -s 10.244.0.7/32 -m comment --comment \"kube-system/kube-dns:dns\" -j KUBE-MARK-MASQ",
        "-A KUBE-SEP-232DQYSHL5HNRYWJ -p udp -m comment --comment \"kube-system/kube-dns:dns\" -m udp -j DNAT --to-destination 10.244.0.7:53",
        "-A KUBE-SEP-LPGSDLJ3FDW46N4W -s 10.244.0.5/32 -m comment --comment \"kube-system/kube-dns:dns\" -j KUBE-MARK-MASQ",
        "-A KUBE-SEP-LPGSDLJ3FDW46N4W -p udp -m comment --comment \"kube-system/kube-dns:dns\" -m udp -j DNAT --to-destination 10.244.0.5:53",
        "-A KUBE-SERVICES -d 10.96.0.10/32 -p udp -m comment --comment \"kube-system/kube-dns:dns cluster IP\" -m udp --dport 53 -j KUBE-SVC-TCOU7JCQXEZGVUNU",
        "-A KUBE-SVC-TCOU7JCQXEZGVUNU ! -s 10.244.0.0/16 -d 10.96.0.10/32 -p udp -m comment --comment \"kube-system/kube-dns:dns cluster IP\" -m udp --dport 53 -j KUBE-MARK-MASQ",
        "-A KUBE-SVC-TCOU7JCQXEZGVUNU -m comment --comment \"kube-system/kube-dns:dns -> 10.244.0.5:53\" -m statistic --mode random --probability 0.50000000000 -j KUBE-SEP-LPGSDLJ3FDW46N4W",
        "-A KUBE-SVC-TCOU7JCQXEZGVUNU -m comment --comment \"kube-system/kube-dns:dns -> 10.244.0.7:53\" -j KUBE-SEP-232DQYSHL5HNRYWJ",
        "-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN",
        "-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0",
        "-A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE --random-fully",
    ];
    let rules = node_rules(&cluster(vec![kube_dns()]), "node-a");
    let chains = [
        "KUBE-MARK-MASQ",
        "KUBE-SEP-232DQYSHL5HNRYWJ",
        "KUBE-SEP-LPGSDLJ3FDW46N4W",
        "KUBE-SVC-TCOU7JCQXEZGVUNU",
        "KUBE-POSTROUTING",
    ];
    let mut ours = saved(&rules.nat, &chains);
    // KUBE-SERVICES also ends with the node-port catch-all, which the excerpt left out.
    ours.extend(saved(&rules.nat, &["KUBE-SERVICES"]).into_iter().filter(|l| l.contains("kube-dns")));
    assert_eq!(sorted_by_chain(&ours), sorted_by_chain(&seed));
}

#[test]
fn nodeport_cluster_policy_matches_seed_004() {
    let rules = node_rules(&cluster(vec![nginx(TrafficPolicy::Cluster)]), "node-a");
    let nat = &rules.nat;
    assert_eq!(
        lines(nat, "KUBE-NODEPORTS"),
        [
            "-A KUBE-NODEPORTS -p tcp -m comment --comment \"default/nginx\" -m tcp --dport 30783 -j KUBE-EXT-2CMXP7HKUVJN7L6M"
        ]
    );
    assert_eq!(
        lines(nat, "KUBE-EXT-2CMXP7HKUVJN7L6M"),
        [
            "-A KUBE-EXT-2CMXP7HKUVJN7L6M -m comment --comment \"masquerade traffic for default/nginx external destinations\" -j KUBE-MARK-MASQ",
            "-A KUBE-EXT-2CMXP7HKUVJN7L6M -j KUBE-SVC-2CMXP7HKUVJN7L6M",
        ]
    );
    // The seed's cluster ran without --cluster-cidr, so it lacks our `! -s` rule (first).
    assert_eq!(
        lines(nat, "KUBE-SVC-2CMXP7HKUVJN7L6M")[1..],
        [
            "-A KUBE-SVC-2CMXP7HKUVJN7L6M -m comment --comment \"default/nginx -> 10.64.2.4:80\" -j KUBE-SEP-YVT6EXXEKT4LDXBC"
        ]
    );
    assert_eq!(
        lines(nat, "KUBE-SEP-YVT6EXXEKT4LDXBC"),
        [
            "-A KUBE-SEP-YVT6EXXEKT4LDXBC -s 10.64.2.4/32 -m comment --comment \"default/nginx\" -j KUBE-MARK-MASQ",
            "-A KUBE-SEP-YVT6EXXEKT4LDXBC -p tcp -m comment --comment \"default/nginx\" -m tcp -j DNAT --to-destination 10.64.2.4:80",
        ]
    );
    assert_eq!(
        lines(nat, "KUBE-SERVICES"),
        [
            "-A KUBE-SERVICES -d 10.32.0.61/32 -p tcp -m comment --comment \"default/nginx cluster IP\" -m tcp --dport 80 -j KUBE-SVC-2CMXP7HKUVJN7L6M",
            "-A KUBE-SERVICES -m comment --comment \"kubernetes service nodeports; NOTE: this must be the last rule in this chain\" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS",
        ]
    );
    assert_eq!(
        lines(&rules.filter, "INPUT"),
        [
            "-A INPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes load balancer firewall\" -j KUBE-PROXY-FIREWALL",
            "-A INPUT -m comment --comment \"kubernetes health check service ports\" -j KUBE-NODEPORTS",
            "-A INPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes externally-visible service portals\" -j KUBE-EXTERNAL-SERVICES",
            "-A INPUT -j KUBE-FIREWALL",
        ]
    );
    assert_eq!(lines(&rules.filter, "KUBE-EXTERNAL-SERVICES"), Vec::<String>::new());
}

#[test]
fn nodeport_local_policy_matches_seed_004() {
    let c = cluster(vec![nginx(TrafficPolicy::Local)]);
    // node-b holds the endpoint.
    let with_local = node_rules(&c, "node-b");
    assert_eq!(
        lines(&with_local.nat, "KUBE-EXT-2CMXP7HKUVJN7L6M"),
        [
            // The seed's cluster had no local-traffic detector, so it lacks this first rule.
            "-A KUBE-EXT-2CMXP7HKUVJN7L6M -s 10.244.0.0/16 -m comment --comment \"pod traffic for default/nginx external destinations\" -j KUBE-SVC-2CMXP7HKUVJN7L6M",
            "-A KUBE-EXT-2CMXP7HKUVJN7L6M -m comment --comment \"masquerade LOCAL traffic for default/nginx external destinations\" -m addrtype --src-type LOCAL -j KUBE-MARK-MASQ",
            "-A KUBE-EXT-2CMXP7HKUVJN7L6M -m comment --comment \"route LOCAL traffic for default/nginx external destinations\" -m addrtype --src-type LOCAL -j KUBE-SVC-2CMXP7HKUVJN7L6M",
            "-A KUBE-EXT-2CMXP7HKUVJN7L6M -j KUBE-SVL-2CMXP7HKUVJN7L6M",
        ]
    );
    assert_eq!(
        lines(&with_local.nat, "KUBE-SVL-2CMXP7HKUVJN7L6M"),
        [
            "-A KUBE-SVL-2CMXP7HKUVJN7L6M -m comment --comment \"default/nginx -> 10.64.2.4:80\" -j KUBE-SEP-YVT6EXXEKT4LDXBC"
        ]
    );
    assert_eq!(lines(&with_local.filter, "KUBE-EXTERNAL-SERVICES"), Vec::<String>::new());

    let without = node_rules(&c, "node-a");
    assert_eq!(
        lines(&without.filter, "KUBE-EXTERNAL-SERVICES"),
        [
            "-A KUBE-EXTERNAL-SERVICES -p tcp -m comment --comment \"default/nginx has no local endpoints\" -m addrtype --dst-type LOCAL -m tcp --dport 30783 -j DROP"
        ]
    );
    // Short-circuit rules stay; there is no KUBE-SVL chain and no final jump to one.
    assert_eq!(lines(&without.nat, "KUBE-EXT-2CMXP7HKUVJN7L6M").len(), 3);
    assert!(!without.nat.has_chain("KUBE-SVL-2CMXP7HKUVJN7L6M"));
    assert!(without.nat.has_chain("KUBE-SVC-2CMXP7HKUVJN7L6M"));
}

#[test]
fn internal_local_policy_uses_svl_or_drops() {
    let mut svc = kube_dns();
    svc.internal_traffic_policy = TrafficPolicy::Local;
    let c = cluster(vec![svc]);
    let on_a = node_rules(&c, "node-a");
    let services = lines(&on_a.nat, "KUBE-SERVICES");
    assert!(services[0].ends_with("-j KUBE-SVL-TCOU7JCQXEZGVUNU"), "{services:?}");
    assert!(!on_a.nat.has_chain("KUBE-SVC-TCOU7JCQXEZGVUNU"));
    assert_eq!(lines(&on_a.nat, "KUBE-SVL-TCOU7JCQXEZGVUNU").len(), 2, "masquerade rule and one endpoint");

    let elsewhere = node_rules(&c, "node-c");
    assert_eq!(
        lines(&elsewhere.filter, "KUBE-SERVICES"),
        [
            "-A KUBE-SERVICES -d 10.96.0.10/32 -p udp -m comment --comment \"kube-system/kube-dns:dns has no local endpoints\" -m udp --dport 53 -j DROP"
        ]
    );
    assert_eq!(lines(&elsewhere.nat, "KUBE-SERVICES").len(), 1, "only the node-port catch-all");
}

#[test]
fn seven_endpoint_ladder() {
    let eps: Vec<Endpoint> = (1..=7).map(|i| ep(&format!("10.244.1.{i}"), 8080, Some("node-b"))).collect();
    let svc = service(
        "default",
        "web",
        ServiceType::ClusterIp,
        "10.96.0.20",
        vec![port("http", Protocol::Tcp, 80, None, eps)],
    );
    let rules = node_rules(&cluster(vec![svc]), "node-a");
    let chain = naming::svc_chain("default/web:http", Protocol::Tcp);
    let ladder: Vec<&Rule> =
        rules.nat.rules_in(&chain).filter(|r| r.target().unwrap().starts_with("KUBE-SEP-")).collect();
    let probabilities: Vec<Option<&str>> = ladder.iter().map(|r| r.value_of("--probability")).collect();
    assert_eq!(
        probabilities,
        [
            Some("0.1428571429"),
            Some("0.1666666667"),
            Some("0.2000000000"),
            Some("0.2500000000"),
            Some("0.3333333333"),
            Some("0.5000000000"),
            None,
        ]
    );
    assert!(!ladder[6].has("statistic"));
}

#[test]
fn node_port_catch_all_is_last_in_nat_services() {
    let c = cluster(vec![nginx(TrafficPolicy::Cluster), kube_dns(), nginx(TrafficPolicy::Local)]);
    let rules = node_rules(&c, "node-a");
    let last = rules.nat.rules_in("KUBE-SERVICES").last().unwrap();
    assert_eq!(last.target(), Some("KUBE-NODEPORTS"));
    assert_eq!(
        rules.nat.rules_in("KUBE-SERVICES").filter(|r| r.target() == Some("KUBE-NODEPORTS")).count(),
        1
    );
}

fn no_endpoints() -> Service {
    service(
        "default",
        "empty",
        ServiceType::NodePort,
        "10.96.0.30",
        vec![port("web", Protocol::Tcp, 80, Some(30080), vec![])],
    )
}

#[test]
fn no_endpoints_rejects_and_has_no_nat_chains() {
    let rules = node_rules(&cluster(vec![no_endpoints()]), "node-a");
    assert_eq!(
        lines(&rules.filter, "KUBE-SERVICES"),
        [
            "-A KUBE-SERVICES -d 10.96.0.30/32 -p tcp -m comment --comment \"default/empty:web has no endpoints\" -m tcp --dport 80 -j REJECT --reject-with icmp-port-unreachable"
        ]
    );
    assert_eq!(
        lines(&rules.filter, "KUBE-EXTERNAL-SERVICES"),
        [
            "-A KUBE-EXTERNAL-SERVICES -p tcp -m comment --comment \"default/empty:web has no endpoints\" -m addrtype --dst-type LOCAL -m tcp --dport 30080 -j REJECT --reject-with icmp-port-unreachable"
        ]
    );
    let svc = naming::svc_chain("default/empty:web", Protocol::Tcp);
    assert!(!rules.nat.has_chain(&svc));
    assert!(rules.nat.rules.iter().all(|r| r.comment().is_none_or(|c| !c.contains("default/empty"))));
}

#[test]
fn not_ready_endpoints_count_as_none() {
    let mut svc = no_endpoints();
    let mut e = ep("10.244.1.9", 80, Some("node-b"));
    e.ready = false;
    e.serving = false;
    svc.ports[0].endpoints.push(e);
    let rules = node_rules(&cluster(vec![svc]), "node-a");
    assert_eq!(lines(&rules.filter, "KUBE-SERVICES").len(), 1);
    assert!(!rules.nat.chains.iter().any(|c| c.name.starts_with("KUBE-SEP-")));
}

#[test]
fn sctp_and_unnamed_ports() {
    let svc = service(
        "default",
        "sig",
        ServiceType::ClusterIp,
        "10.96.0.40",
        vec![port("", Protocol::Sctp, 3868, None, vec![ep("10.244.1.4", 3868, Some("node-b"))])],
    );
    let rules = node_rules(&cluster(vec![svc]), "node-a");
    let sep = naming::sep_chain("default/sig", Protocol::Sctp, "10.244.1.4:3868".parse().unwrap());
    assert_eq!(
        lines(&rules.nat, &sep)[1],
        format!(
            "-A {sep} -p sctp -m comment --comment \"default/sig\" -m sctp -j DNAT --to-destination 10.244.1.4:3868"
        )
    );
}

#[test]
fn fixed_rules_and_no_mark_drop() {
    let rules = node_rules(&cluster(vec![]), "node-a");
    let text = rules.render();
    assert!(!text.contains("KUBE-MARK-DROP"));
    assert_eq!(
        lines(&rules.filter, "KUBE-FORWARD"),
        [
            "-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP",
            "-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding rules\" -m mark --mark 0x4000/0x4000 -j ACCEPT",
            "-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding conntrack rule\" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
        ]
    );
    assert_eq!(
        lines(&rules.filter, "KUBE-FIREWALL"),
        [
            "-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment \"block incoming localnet connections\" -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP"
        ]
    );
    assert_eq!(
        lines(&rules.nat, "PREROUTING"),
        ["-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES"]
    );
    assert_eq!(
        lines(&rules.nat, "POSTROUTING"),
        ["-A POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING"]
    );
    // Rules never name a chain the table does not declare.
    for table in rules.tables() {
        for rule in &table.rules {
            assert!(table.has_chain(&rule.chain), "{}", rule.line());
        }
    }
}

#[test]
fn every_jump_target_is_declared() {
    let c = cluster(vec![kube_dns(), nginx(TrafficPolicy::Local), no_endpoints()]);
    for node in ["node-a", "node-b"] {
        let rules = node_rules(&c, node);
        for table in rules.tables() {
            for rule in &table.rules {
                let target = rule.target().unwrap_or_default();
                if target.starts_with("KUBE-") {
                    assert!(table.has_chain(target), "{node}: {}", rule.line());
                }
            }
        }
    }
}

/// A load balancer with every feature: externalTrafficPolicy Local, an external IP, an LB IP
/// behind source ranges (one holding the nodes' IPs), a health check node port and ClientIP
/// affinity; ready endpoints on node-a and node-b and a serving-terminating one on node-a.
fn lb_service() -> Service {
    let mut draining = ep("10.244.0.6", 8080, Some("node-a"));
    draining.ready = false;
    draining.terminating = true;
    let eps = vec![ep("10.244.1.5", 8080, Some("node-b")), ep("10.244.0.5", 8080, Some("node-a")), draining];
    let mut svc = service(
        "default",
        "lb",
        ServiceType::LoadBalancer,
        "10.96.0.70",
        vec![port("http", Protocol::Tcp, 80, Some(30090), eps)],
    );
    svc.external_traffic_policy = TrafficPolicy::Local;
    svc.external_ips = vec!["192.168.99.10".parse().unwrap()];
    svc.load_balancer_ips = vec!["203.0.113.10".parse().unwrap()];
    svc.load_balancer_source_ranges =
        vec!["198.51.100.0/24".parse().unwrap(), "192.168.50.0/24".parse().unwrap()];
    svc.health_check_node_port = Some(32100);
    svc.session_affinity = crate::model::SessionAffinity::ClientIp { timeout_seconds: 600 };
    svc
}

/// Every rule form the generator writes, on a cluster whose node-a also has a secondary IP.
fn everything() -> Cluster {
    let mut nginx_local = nginx(TrafficPolicy::Local);
    nginx_local.name = "nginx-local".into();
    let mut web_ext = service(
        "default",
        "web-ext",
        ServiceType::ClusterIp,
        "10.96.0.71",
        vec![port(
            "",
            Protocol::Tcp,
            8000,
            None,
            vec![ep("10.244.1.7", 8000, Some("node-b")), ep("10.244.0.7", 8000, Some("node-a"))],
        )],
    );
    web_ext.external_ips = vec!["192.168.99.20".parse().unwrap()];
    let mut itp = service(
        "default",
        "itp",
        ServiceType::ClusterIp,
        "10.96.0.72",
        vec![port("", Protocol::Tcp, 80, None, vec![ep("10.244.1.8", 80, Some("node-b"))])],
    );
    itp.internal_traffic_policy = TrafficPolicy::Local;
    let mut leaving = ep("10.244.1.10", 80, Some("node-b"));
    leaving.ready = false;
    leaving.terminating = true;
    let draining = service(
        "default",
        "draining",
        ServiceType::ClusterIp,
        "10.96.0.73",
        vec![port("", Protocol::Tcp, 80, None, vec![ep("10.244.1.9", 80, Some("node-b")), leaving.clone()])],
    );
    let mut only_leaving = leaving;
    only_leaving.ip = "10.244.1.11".parse().unwrap();
    let terminating_only = service(
        "default",
        "terminating-only",
        ServiceType::ClusterIp,
        "10.96.0.74",
        vec![port("", Protocol::Tcp, 80, None, vec![only_leaving])],
    );
    let mut lb = lb_service();
    lb.proxied_load_balancer_ips = vec!["203.0.113.11".parse().unwrap()];
    let mut c = cluster(vec![
        kube_dns(),
        nginx(TrafficPolicy::Cluster),
        nginx_local,
        no_endpoints(),
        lb,
        web_ext,
        itp,
        draining,
        terminating_only,
    ]);
    c.nodes[0].secondary_ips = vec!["192.168.50.102".parse().unwrap()];
    crate::proxy::test_support::add_zoned_services(&mut c);
    c
}

/// Lines in `before` but not in `after`, and the other way round.
fn diff(before: &RuleSet, after: &RuleSet) -> (Vec<String>, Vec<String>) {
    diff_lines(&before.render(), &after.render())
}
