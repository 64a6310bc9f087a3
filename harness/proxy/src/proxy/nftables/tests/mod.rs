//! Generation checked against kube-proxy's own test fixtures (`kube_proxy`), each mutant
//! against the rules it must break (`mutants`), and in the kernel (`kernel`, root only).

mod kernel;
mod kube_proxy;
mod mutants;

use super::*;
use crate::model::{
    Endpoint, Node, PerFamily, Protocol, SecondFamily, Service, ServiceType, SessionAffinity, TrafficPolicy,
};
use crate::proxy::test_support::{diff_lines, ep, port, service};

fn cluster(services: Vec<Service>) -> Cluster {
    Cluster::example(services)
}

/// Every rule form: cluster IP with two endpoints, a NodePort with Local policy, a
/// LoadBalancer with external and LB IPs, source ranges and affinity, internal Local policy,
/// a port without endpoints, terminating endpoints beside ready ones and alone.
fn everything() -> Cluster {
    let web = service(
        "default",
        "web",
        ServiceType::NodePort,
        "10.96.0.10",
        vec![port(
            "http",
            Protocol::Tcp,
            80,
            Some(30080),
            vec![ep("10.244.1.5", 8080, Some("node-b")), ep("10.244.0.5", 8080, Some("node-a"))],
        )],
    );
    let mut local = service(
        "default",
        "local",
        ServiceType::NodePort,
        "10.96.0.11",
        vec![port("", Protocol::Tcp, 80, Some(30081), vec![ep("10.244.1.6", 80, Some("node-b"))])],
    );
    local.external_traffic_policy = TrafficPolicy::Local;
    let mut draining = ep("10.244.0.8", 8443, Some("node-a"));
    draining.ready = false;
    draining.terminating = true;
    let mut lb = service(
        "default",
        "lb",
        ServiceType::LoadBalancer,
        "10.96.0.12",
        vec![port(
            "https",
            Protocol::Tcp,
            443,
            Some(30443),
            vec![ep("10.244.1.7", 8443, Some("node-b")), ep("10.244.0.7", 8443, Some("node-a")), draining],
        )],
    );
    lb.external_traffic_policy = TrafficPolicy::Local;
    lb.external_ips = vec!["192.168.99.10".parse().unwrap()];
    lb.load_balancer_ips = vec!["203.0.113.10".parse().unwrap()];
    lb.proxied_load_balancer_ips = vec!["203.0.113.11".parse().unwrap()];
    lb.load_balancer_source_ranges =
        vec!["198.51.100.0/24".parse().unwrap(), "192.168.50.0/24".parse().unwrap()];
    lb.health_check_node_port = Some(32100);
    lb.session_affinity = SessionAffinity::ClientIp { timeout_seconds: 600 };
    let mut itp = service(
        "default",
        "itp",
        ServiceType::ClusterIp,
        "10.96.0.13",
        vec![port("", Protocol::Tcp, 80, None, vec![ep("10.244.1.8", 80, Some("node-b"))])],
    );
    itp.internal_traffic_policy = TrafficPolicy::Local;
    let empty = service(
        "default",
        "empty",
        ServiceType::NodePort,
        "10.96.0.14",
        vec![port("web", Protocol::Tcp, 80, Some(30084), vec![])],
    );
    let mut only_terminating = ep("10.244.1.9", 80, Some("node-b"));
    only_terminating.ready = false;
    only_terminating.terminating = true;
    let leaving = service(
        "default",
        "leaving",
        ServiceType::ClusterIp,
        "10.96.0.15",
        vec![port("", Protocol::Tcp, 80, None, vec![only_terminating])],
    );
    let mut c = cluster(vec![web, local, lb, itp, empty, leaving]);
    c.nodes[0].secondary_ips = vec!["192.168.50.102".parse().unwrap()];
    crate::proxy::test_support::add_zoned_services(&mut c);
    c
}

/// [`everything`] as a dual-stack cluster: every Service also has an IPv6 cluster IP and
/// endpoint twins.
fn dual_stack() -> Cluster {
    let mut c = everything();
    c.second_family = Some(SecondFamily {
        pod_cidr: "fd00:10:244::/56".parse().unwrap(),
        service_cidr: "fd00:10:96::/112".parse().unwrap(),
        node_network: "fd00:192:168:50::/64".parse().unwrap(),
    });
    for (i, n) in c.nodes.iter_mut().enumerate() {
        n.ips = PerFamily::dual(n.ip(), Some(format!("fd00:192:168:50::{}", i + 2).parse().unwrap()));
        n.pod_cidrs = PerFamily::dual(n.pod_cidr(), Some(format!("fd00:10:244:{i}::/64").parse().unwrap()));
    }
    for (i, svc) in c.services.iter_mut().enumerate() {
        svc.cluster_ips =
            PerFamily::dual(svc.cluster_ip(), Some(format!("fd00:10:96::{}", 10 + i).parse().unwrap()));
        for p in &mut svc.ports {
            let twins: Vec<Endpoint> = p
                .endpoints
                .iter()
                .map(|e| {
                    let v4 = e.ip.to_string();
                    let last = v4.rsplit('.').next().unwrap();
                    let third = v4.split('.').nth(2).unwrap();
                    Endpoint { ip: format!("fd00:10:244:{third}::{last}").parse().unwrap(), ..e.clone() }
                })
                .collect();
            p.endpoints.extend(twins);
        }
    }
    c
}

/// Lines in `before` but not in `after`, and the other way round.
fn diff(before: &RuleSet, after: &RuleSet) -> (Vec<String>, Vec<String>) {
    diff_lines(&before.render(), &after.render())
}

#[test]
fn nftables_mode_defaults_node_port_addresses_to_the_primary_node_ips() {
    let c = dual_stack();
    let effective = effective_cluster(&c, "node-a");
    let shown: Vec<String> = effective.proxy.node_port_addresses.iter().map(|n| n.to_string()).collect();
    assert_eq!(shown, ["192.168.50.2/32", "fd00:192:168:50::2/128"]);
    // Given CIDRs are kept as they are, also when only one family has some.
    let mut given = c.clone();
    given.proxy.node_port_addresses = vec!["192.168.50.0/24".parse().unwrap()];
    assert_eq!(
        effective_cluster(&given, "node-a").proxy.node_port_addresses,
        given.proxy.node_port_addresses
    );
    let v6 = &node_rulesets(&given, "node-a", None)[1];
    assert!(!v6.sets.iter().any(|s| s.name == generate::NODEPORT_IPS), "IPv6 answers on every address");
}

#[test]
fn node_ports_answer_on_the_primary_ip_only_by_default() {
    let rules = &node_rulesets(&everything(), "node-a", None)[0];
    let ips: Vec<&str> = rules.elements_of(generate::NODEPORT_IPS).map(|e| e.key[0].as_str()).collect();
    // Not the secondary 192.168.50.102, not the pod bridge, never loopback.
    assert_eq!(ips, ["192.168.50.2"]);
    let mut all = everything();
    all.proxy.node_port_addresses = vec!["0.0.0.0/0".parse().unwrap()];
    let rules = &node_rulesets(&all, "node-a", None)[0];
    let services: Vec<&str> = rules.rules_in(generate::SERVICES).map(|r| r.text.as_str()).collect();
    assert_eq!(
        services[1],
        "fib daddr type local ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @service-nodeports"
    );
    let mut loopback = everything();
    loopback.proxy.node_port_addresses = vec!["127.0.0.0/8".parse().unwrap()];
    let rules = &node_rulesets(&loopback, "node-a", None)[0];
    assert_eq!(
        rules.elements_of(generate::NODEPORT_IPS).count(),
        0,
        "localhost node ports are not supported"
    );
}

#[test]
fn dual_stack_nodes_get_one_table_per_family() {
    let tables = node_rulesets(&dual_stack(), "node-a", None);
    assert_eq!(tables.len(), 2);
    let text = render_node(&dual_stack(), "node-a", None);
    assert!(text.starts_with("add table ip kube-proxy"));
    assert!(text.contains("add table ip6 kube-proxy"));
    let v6 = &tables[1];
    assert!(v6.rules.iter().all(|r| !r.text.contains("ip daddr") && !r.text.contains("ip saddr")));
    assert!(v6.rules.iter().any(|r| r.text == "meta l4proto tcp dnat to [fd00:10:244:1::5]:8080"));
    assert!(v6.elements_of(generate::CLUSTER_IPS).any(|e| e.key[0] == "fd00:10:96::10"));
    let load = load_text(&dual_stack(), "node-a", None, Layout::default());
    assert!(load.starts_with("add table ip kube-proxy\ndelete table ip kube-proxy\n"));
    assert!(load.contains("add table ip6 kube-proxy\ndelete table ip6 kube-proxy\n"));
}

#[test]
fn every_jump_and_goto_target_is_a_chain_and_every_set_exists() {
    for node in ["node-a", "node-b"] {
        for rules in node_rulesets(&dual_stack(), node, None) {
            let text: Vec<&str> = rules.rules.iter().map(|r| r.text.as_str()).collect();
            let values = rules.elements.iter().filter_map(|e| e.value.as_deref());
            let text = text.into_iter().chain(values).collect::<Vec<_>>().join(" ");
            for word in text.split_whitespace().collect::<Vec<_>>().windows(2) {
                if word[0] == "jump" || word[0] == "goto" {
                    assert!(rules.has_chain(word[1]), "{} is no chain", word[1]);
                }
                if let Some(set) = word[1].strip_prefix('@') {
                    assert!(rules.sets.iter().any(|s| s.name == set), "{set} is no set");
                }
            }
        }
    }
}

#[test]
fn local_policy_without_local_endpoints_drops_outside_traffic_and_short_circuits_the_rest() {
    let rules = &node_rulesets(&everything(), "node-a", None)[0];
    let chains = naming::PortChains::new(&everything().services[1], &everything().services[1].ports[0]);
    let ext: Vec<String> = rules.rules_in(&chains.external).map(super::ruleset::rule_line).collect();
    let e = &chains.external;
    let svc = &chains.cluster;
    assert_eq!(
        ext,
        [
            format!("{e} ip saddr 10.244.0.0/16 goto {svc} comment \"short-circuit pod traffic\""),
            format!("{e} fib saddr type local jump mark-for-masquerade comment \"masquerade local traffic\""),
            format!("{e} fib saddr type local goto {svc} comment \"short-circuit local traffic\""),
        ]
    );
    let drop: Vec<String> =
        rules.elements_of(generate::NO_ENDPOINT_NODEPORTS).map(|e| e.key.join(" . ")).collect();
    assert!(drop.contains(&"tcp . 30081".to_string()), "{drop:?}");
    // The port without endpoints rejects its cluster IP and node port.
    let empty = rules.elements_of(generate::NO_ENDPOINT_SERVICES).find(|e| e.key[0] == "10.96.0.14").unwrap();
    assert_eq!(empty.value.as_deref(), Some("goto reject-chain"));
    assert_eq!(empty.comment.as_deref(), Some("default/empty:web"));
    // The internal-Local service without endpoints here drops its cluster IP.
    let itp = rules.elements_of(generate::NO_ENDPOINT_SERVICES).find(|e| e.key[0] == "10.96.0.13").unwrap();
    assert_eq!(itp.value.as_deref(), Some("drop"));
}
