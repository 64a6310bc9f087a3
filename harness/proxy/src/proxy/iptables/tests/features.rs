//! Rule forms beyond what `kube_proxy` reproduces: traffic policies on external IPs and LB
//! IPs, `--masquerade-all`, `--nodeport-addresses`, localhost node ports, and what IPv6 and
//! missing endpoints leave out. The forms follow syncProxyRules in proxier.go.

use super::*;

const NODEPORTS_COMMENT: &str =
    "\"kubernetes service nodeports; NOTE: this must be the last rule in this chain\"";

fn external_filter(rules: &RuleSet) -> Vec<String> {
    lines(&rules.filter, "KUBE-EXTERNAL-SERVICES")
}

#[test]
fn local_policy_on_external_and_lb_ips_drops_without_local_endpoints() {
    let c = cluster(vec![lb_service()]);
    let name = "default/lb:http";
    let (svc, svl, ext, fw) = (
        naming::svc_chain(name, Protocol::Tcp),
        naming::svl_chain(name, Protocol::Tcp),
        naming::ext_chain(name, Protocol::Tcp),
        naming::fw_chain(name, Protocol::Tcp),
    );
    // node-a has a ready endpoint: outside traffic stays local, nothing is dropped.
    let on_a = node_rules(&c, "node-a");
    assert!(external_filter(&on_a).is_empty());
    assert_eq!(
        lines(&on_a.nat, &ext),
        [
            format!(
                "-A {ext} -s 10.244.0.0/16 -m comment --comment \"pod traffic for {name} external destinations\" -j {svc}"
            ),
            format!(
                "-A {ext} -m comment --comment \"masquerade LOCAL traffic for {name} external destinations\" -m addrtype --src-type LOCAL -j KUBE-MARK-MASQ"
            ),
            format!(
                "-A {ext} -m comment --comment \"route LOCAL traffic for {name} external destinations\" -m addrtype --src-type LOCAL -j {svc}"
            ),
            format!("-A {ext} -j {svl}"),
        ]
    );
    assert_eq!(
        lines(&on_a.nat, "KUBE-SERVICES")[1..3],
        [
            format!(
                "-A KUBE-SERVICES -d 192.168.99.10/32 -p tcp -m comment --comment \"{name} external IP\" -m tcp --dport 80 -j {ext}"
            ),
            format!(
                "-A KUBE-SERVICES -d 203.0.113.10/32 -p tcp -m comment --comment \"{name} loadbalancer IP\" -m tcp --dport 80 -j {fw}"
            ),
        ]
    );
    // A node without endpoints of its own drops outside traffic to all three entry points,
    // after the EXT chain had its chance to short-circuit pods and the node itself.
    let on_c = node_rules(&c, "node-c");
    assert_eq!(
        external_filter(&on_c),
        [
            format!(
                "-A KUBE-EXTERNAL-SERVICES -d 192.168.99.10/32 -p tcp -m comment --comment \"{name} has no local endpoints\" -m tcp --dport 80 -j DROP"
            ),
            format!(
                "-A KUBE-EXTERNAL-SERVICES -d 203.0.113.10/32 -p tcp -m comment --comment \"{name} has no local endpoints\" -m tcp --dport 80 -j DROP"
            ),
            format!(
                "-A KUBE-EXTERNAL-SERVICES -p tcp -m comment --comment \"{name} has no local endpoints\" -m addrtype --dst-type LOCAL -m tcp --dport 30090 -j DROP"
            ),
        ]
    );
    assert_eq!(lines(&on_c.nat, &ext).len(), 3, "short-circuit rules only");
    assert!(!on_c.nat.has_chain(&svl));
    // The firewall still filters: the drop of the rest comes before KUBE-EXTERNAL-SERVICES.
    assert_eq!(lines(&on_c.filter, "KUBE-PROXY-FIREWALL").len(), 1);
}

#[test]
fn firewall_chain_admits_the_vip_when_a_range_holds_the_node_ip() {
    let c = cluster(vec![lb_service()]);
    let fw = naming::fw_chain("default/lb:http", Protocol::Tcp);
    let ext = naming::ext_chain("default/lb:http", Protocol::Tcp);
    let comment = "\"default/lb:http loadbalancer IP\"";
    assert_eq!(
        lines(&node_rules(&c, "node-a").nat, &fw),
        [
            format!("-A {fw} -s 198.51.100.0/24 -m comment --comment {comment} -j {ext}"),
            format!("-A {fw} -s 192.168.50.0/24 -m comment --comment {comment} -j {ext}"),
            format!("-A {fw} -s 203.0.113.10/32 -m comment --comment {comment} -j {ext}"),
            format!(
                "-A {fw} -m comment --comment \"other traffic to default/lb:http will be dropped by KUBE-PROXY-FIREWALL\""
            ),
        ]
    );
    assert_eq!(
        lines(&node_rules(&c, "node-a").filter, "KUBE-PROXY-FIREWALL"),
        [format!(
            "-A KUBE-PROXY-FIREWALL -d 203.0.113.10/32 -p tcp -m comment --comment \"default/lb:http traffic not accepted by {fw}\" -m tcp --dport 80 -j DROP"
        )]
    );
}

#[test]
fn source_ranges_lose_host_bits_and_ipv6_is_left_to_the_other_family() {
    let mut svc = lb_service();
    svc.load_balancer_source_ranges =
        vec!["198.51.100.77/24".parse().unwrap(), "2001:db8::/64".parse().unwrap()];
    svc.load_balancer_ips.push("2001:db8::10".parse().unwrap());
    svc.external_ips.push("2001:db8::20".parse().unwrap());
    let rules = node_rules(&cluster(vec![svc]), "node-a");
    let fw = naming::fw_chain("default/lb:http", Protocol::Tcp);
    let fw_lines = lines(&rules.nat, &fw);
    assert_eq!(fw_lines.len(), 2, "{fw_lines:?}");
    assert!(fw_lines[0].contains(" -s 198.51.100.0/24 "));
    assert!(!rules.render().contains("2001:db8"));

    // Only IPv6 ranges: for IPv4 there are none, and the LB IP is open.
    let mut v6_only = lb_service();
    v6_only.load_balancer_source_ranges = vec!["2001:db8::/64".parse().unwrap()];
    let rules = node_rules(&cluster(vec![v6_only]), "node-a");
    assert!(!rules.nat.has_chain(&fw));
    assert!(lines(&rules.filter, "KUBE-PROXY-FIREWALL").is_empty());
}

#[test]
fn external_ip_with_cluster_policy_masquerades() {
    let c = everything();
    let rules = node_rules(&c, "node-a");
    let ext = naming::ext_chain("default/web-ext", Protocol::Tcp);
    let svc = naming::svc_chain("default/web-ext", Protocol::Tcp);
    assert!(lines(&rules.nat, "KUBE-SERVICES").contains(&format!(
        "-A KUBE-SERVICES -d 192.168.99.20/32 -p tcp -m comment --comment \"default/web-ext external IP\" -m tcp --dport 8000 -j {ext}"
    )));
    assert_eq!(
        lines(&rules.nat, &ext),
        [
            format!(
                "-A {ext} -m comment --comment \"masquerade traffic for default/web-ext external destinations\" -j KUBE-MARK-MASQ"
            ),
            format!("-A {ext} -j {svc}"),
        ]
    );
    assert!(
        !rules
            .nat
            .rules
            .iter()
            .any(|r| r.chain == "KUBE-NODEPORTS" && r.comment() == Some("default/web-ext"))
    );
}

#[test]
fn no_endpoints_reject_on_every_entry_point_and_write_no_nat() {
    // TestNoEndpointsReject: cluster IP, external IP, node port and LB IP all REJECT.
    let mut svc = lb_service();
    svc.external_traffic_policy = TrafficPolicy::Cluster;
    svc.ports[0].endpoints.clear();
    let rules = node_rules(&cluster(vec![svc]), "node-a");
    let reject = "-j REJECT --reject-with icmp-port-unreachable";
    let external = external_filter(&rules);
    assert_eq!(external.len(), 3, "{external:?}");
    assert!(external.iter().all(|l| l.contains("default/lb:http has no endpoints") && l.ends_with(reject)));
    assert!(lines(&rules.filter, "KUBE-SERVICES")[0].ends_with(reject));
    // No FW chain and no firewall drop without endpoints (usesFWChain needs hasEndpoints).
    assert!(lines(&rules.filter, "KUBE-PROXY-FIREWALL").is_empty());
    assert!(rules.nat.chains.iter().all(|c| !c.name.contains("KUBE-FW-") && !c.name.contains("KUBE-EXT-")));
}

#[test]
fn health_check_rule_per_port_of_local_load_balancers_only() {
    let mut two_ports = lb_service();
    let mut second = two_ports.ports[0].clone();
    second.name = "https".into();
    second.port = 443;
    second.node_port = Some(30443);
    two_ports.ports.push(second);
    let mut cluster_policy = lb_service();
    cluster_policy.name = "lb-cluster".into();
    cluster_policy.external_traffic_policy = TrafficPolicy::Cluster;
    cluster_policy.health_check_node_port = Some(32101);
    let mut node_port = nginx(TrafficPolicy::Local);
    node_port.health_check_node_port = Some(32102);
    let rules = node_rules(&cluster(vec![two_ports, cluster_policy, node_port]), "node-c");
    assert_eq!(
        lines(&rules.filter, "KUBE-NODEPORTS"),
        [
            "-A KUBE-NODEPORTS -p tcp -m comment --comment \"default/lb:http health check node port\" -m tcp --dport 32100 -j ACCEPT",
            "-A KUBE-NODEPORTS -p tcp -m comment --comment \"default/lb:https health check node port\" -m tcp --dport 32100 -j ACCEPT",
        ]
    );
}

#[test]
fn masquerade_all_marks_every_cluster_ip_connection() {
    let mut c = everything();
    c.proxy.masquerade_all = true;
    let rules = node_rules(&c, "node-a");
    assert_eq!(
        lines(&rules.nat, "KUBE-SVC-TCOU7JCQXEZGVUNU")[0],
        "-A KUBE-SVC-TCOU7JCQXEZGVUNU -d 10.96.0.10/32 -p udp -m comment --comment \"kube-system/kube-dns:dns cluster IP\" -m udp --dport 53 -j KUBE-MARK-MASQ"
    );
    assert!(!rules.render().contains("! -s 10.244.0.0/16"));
    // Internal Local policy: the rule goes to the SVL chain, on a node that has one.
    let on_b = node_rules(&c, "node-b");
    let svl = naming::svl_chain("default/itp", Protocol::Tcp);
    assert_eq!(
        lines(&on_b.nat, &svl)[0],
        format!(
            "-A {svl} -d 10.96.0.72/32 -p tcp -m comment --comment \"default/itp cluster IP\" -m tcp --dport 80 -j KUBE-MARK-MASQ"
        )
    );
}

#[test]
fn localhost_node_ports_off_keeps_loopback_out_of_the_jump() {
    let mut c = cluster(vec![]);
    c.proxy.localhost_node_ports = false;
    let rules = node_rules(&c, "node-a");
    assert_eq!(
        lines(&rules.nat, "KUBE-SERVICES"),
        [format!(
            "-A KUBE-SERVICES ! -d 127.0.0.0/8 -m comment --comment {NODEPORTS_COMMENT} -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS"
        )]
    );
    // kubelet's localnet guard stays whatever kube-proxy's flag says.
    assert_eq!(lines(&rules.filter, "KUBE-FIREWALL").len(), 1);
}

#[test]
fn node_port_addresses_write_one_jump_per_matching_node_address() {
    let mut c = everything();
    c.proxy.node_port_addresses = vec![
        "192.168.50.0/24".parse().unwrap(),
        "10.244.0.0/24".parse().unwrap(),
        "127.0.0.0/8".parse().unwrap(),
    ];
    let jumps = |c: &Cluster, node: &str| -> Vec<String> {
        node_rules(c, node)
            .nat
            .rules_in("KUBE-SERVICES")
            .filter(|r| r.target() == Some("KUBE-NODEPORTS"))
            .map(|r| r.line())
            .collect()
    };
    let jump = |ip: &str| {
        format!("-A KUBE-SERVICES -d {ip}/32 -m comment --comment {NODEPORTS_COMMENT} -j KUBE-NODEPORTS")
    };
    // node-a: primary and secondary IP, its pod-bridge gateway, loopback.
    assert_eq!(
        jumps(&c, "node-a"),
        [jump("192.168.50.2"), jump("192.168.50.102"), jump("10.244.0.1"), jump("127.0.0.1")]
    );
    // node-b's gateway is outside 10.244.0.0/24.
    assert_eq!(jumps(&c, "node-b"), [jump("192.168.50.3"), jump("127.0.0.1")]);
    // Loopback inside the CIDRs is skipped when localhost node ports are off.
    c.proxy.localhost_node_ports = false;
    assert_eq!(jumps(&c, "node-b"), [jump("192.168.50.3")]);
    // Still last in the chain.
    let rules = node_rules(&c, "node-a");
    let services: Vec<&Rule> = rules.nat.rules_in("KUBE-SERVICES").collect();
    let first_jump = services.iter().position(|r| r.target() == Some("KUBE-NODEPORTS")).unwrap();
    assert!(services[first_jump..].iter().all(|r| r.target() == Some("KUBE-NODEPORTS")));
}

#[test]
fn every_jump_target_is_declared_for_every_form_and_mutant() {
    let mut with_addresses = everything();
    with_addresses.proxy.node_port_addresses = vec!["192.168.50.0/24".parse().unwrap()];
    with_addresses.proxy.masquerade_all = true;
    for c in [everything(), with_addresses] {
        for mutant in std::iter::once(None).chain(Mutant::ALL.map(Some)) {
            for node in ["node-a", "node-b", "node-c"] {
                let rules = node_ruleset(&c, node, mutant);
                for table in rules.tables() {
                    for rule in &table.rules {
                        assert!(table.has_chain(&rule.chain), "{mutant:?} {node}: {}", rule.line());
                        let target = rule.target().unwrap_or_default();
                        if target.starts_with("KUBE-") {
                            assert!(table.has_chain(target), "{mutant:?} {node}: {}", rule.line());
                        }
                    }
                }
            }
        }
    }
}
