//! Each mutant changes only what its description says.

use super::*;
use crate::proxy::endpoint_choice::Deviations;
use crate::proxy::mutant::outside_the_rules;

fn mutated(m: Mutant) -> (RuleSet, RuleSet) {
    let c = cluster(vec![kube_dns(), nginx(TrafficPolicy::Cluster), no_endpoints()]);
    (node_rules(&c, "node-a"), node_ruleset(&c, "node-a", Some(m)))
}

#[test]
fn no_hairpin_masq_removes_only_sep_masquerade() {
    let (before, after) = mutated(Mutant::NoHairpinMasq);
    let (gone, new) = diff(&before, &after);
    assert_eq!(gone.len(), 3, "{gone:?}"); // two kube-dns endpoints, one nginx endpoint
    assert!(gone.iter().all(|l| l.starts_with("-A KUBE-SEP-") && l.ends_with("-j KUBE-MARK-MASQ")));
    assert!(new.is_empty());
}

#[test]
fn no_node_port_masq_removes_only_ext_masquerade() {
    let (before, after) = mutated(Mutant::NoNodePortMasq);
    let (gone, new) = diff(&before, &after);
    assert_eq!(
        gone,
        [
            "-A KUBE-EXT-2CMXP7HKUVJN7L6M -m comment --comment \"masquerade traffic for default/nginx external destinations\" -j KUBE-MARK-MASQ"
        ]
    );
    assert!(new.is_empty());
}

#[test]
fn no_off_cluster_masq_removes_only_svc_masquerade() {
    let (before, after) = mutated(Mutant::NoOffClusterMasq);
    let (gone, new) = diff(&before, &after);
    assert_eq!(gone.len(), 2, "{gone:?}");
    assert!(gone.iter().all(|l| l.starts_with("-A KUBE-SVC-") && l.contains("! -s 10.244.0.0/16")));
    assert!(new.is_empty());
}

#[test]
fn last_endpoint_never_chosen_makes_the_ladder_certain_too_early() {
    let (before, after) = mutated(Mutant::LastEndpointNeverChosen);
    let (gone, new) = diff(&before, &after);
    assert_eq!(gone.len(), 1);
    assert_eq!(new, [gone[0].replace("--probability 0.5000000000", "--probability 1.0000000000")]);

    let eps: Vec<Endpoint> = (1..=4).map(|i| ep(&format!("10.244.1.{i}"), 80, Some("node-b"))).collect();
    let svc = service(
        "default",
        "four",
        ServiceType::ClusterIp,
        "10.96.0.50",
        vec![port("", Protocol::Tcp, 80, None, eps)],
    );
    let rules = node_ruleset(&cluster(vec![svc]), "node-a", Some(Mutant::LastEndpointNeverChosen));
    let chain = naming::svc_chain("default/four", Protocol::Tcp);
    let p: Vec<Option<&str>> =
        rules.nat.rules_in(&chain).skip(1).map(|r| r.value_of("--probability")).collect();
    assert_eq!(p, [Some("0.3333333333"), Some("0.5000000000"), Some("1.0000000000"), None]);
}

#[test]
fn drop_instead_of_reject_changes_only_the_verdict() {
    let (before, after) = mutated(Mutant::DropInsteadOfReject);
    let (gone, new) = diff(&before, &after);
    assert_eq!(gone.len(), 2);
    let expected: Vec<String> =
        gone.iter().map(|l| l.replace("-j REJECT --reject-with icmp-port-unreachable", "-j DROP")).collect();
    assert_eq!(new, expected);
}

#[test]
fn dnat_to_service_port_uses_the_port_not_the_target_port() {
    let eps = vec![ep("10.244.1.5", 8080, Some("node-b"))];
    let svc = service(
        "default",
        "web",
        ServiceType::ClusterIp,
        "10.96.0.60",
        vec![port("", Protocol::Tcp, 80, None, eps)],
    );
    let c = cluster(vec![svc]);
    let (before, after) =
        (node_rules(&c, "node-a"), node_ruleset(&c, "node-a", Some(Mutant::DnatToServicePort)));
    let (gone, new) = diff(&before, &after);
    assert_eq!(gone.len(), 1);
    assert!(gone[0].ends_with("--to-destination 10.244.1.5:8080"));
    assert_eq!(new, [gone[0].replace("10.244.1.5:8080", "10.244.1.5:80")]);
}

#[test]
fn mutant_names_round_trip() {
    for m in Mutant::ALL {
        assert_eq!(m.name().parse::<Mutant>(), Ok(m));
        assert!(!m.description().is_empty());
    }
    let names: std::collections::BTreeSet<&str> = Mutant::ALL.iter().map(|m| m.name()).collect();
    assert_eq!(names.len(), Mutant::ALL.len());
    assert!("nope".parse::<Mutant>().is_err());
}

// --- the mutants of external traffic, affinity, terminating endpoints and node-port addresses ---

/// `everything()` on `node`, as kube-proxy writes it and as `m` breaks it.
fn broken(m: Mutant, node: &str) -> (RuleSet, RuleSet) {
    broken_in(&everything(), m, node)
}

fn broken_in(c: &Cluster, m: Mutant, node: &str) -> (RuleSet, RuleSet) {
    (node_rules(c, node), node_ruleset(c, node, Some(m)))
}

fn chains_of(name: &str) -> (String, String, String, String) {
    (
        naming::svc_chain(name, Protocol::Tcp),
        naming::svl_chain(name, Protocol::Tcp),
        naming::ext_chain(name, Protocol::Tcp),
        naming::fw_chain(name, Protocol::Tcp),
    )
}

#[test]
fn etp_local_masquerades_outside_traffic_just_before_the_local_endpoints() {
    let (before, after) = broken(Mutant::EtpLocalMasquerades, "node-a");
    let (gone, new) = diff(&before, &after);
    let (_, svl, ext, _) = chains_of("default/lb:http");
    assert!(gone.is_empty(), "{gone:?}");
    // nginx-local has no endpoint on node-a, so no final jump to put it before.
    assert_eq!(
        new,
        [format!(
            "-A {ext} -m comment --comment \"masquerade traffic for default/lb:http external destinations\" -j KUBE-MARK-MASQ"
        )]
    );
    let ext_rules = lines(&after.nat, &ext);
    assert_eq!(ext_rules[ext_rules.len() - 2], new[0]);
    assert_eq!(ext_rules[ext_rules.len() - 1], format!("-A {ext} -j {svl}"));
}

#[test]
fn etp_local_uses_remote_endpoints_sends_outside_traffic_to_the_cluster_set() {
    let (before, after) = broken(Mutant::EtpLocalUsesRemoteEndpoints, "node-a");
    let (gone, new) = diff(&before, &after);
    let (svc, svl, ext, _) = chains_of("default/lb:http");
    let (nginx_svc, _, nginx_ext, _) = chains_of("default/nginx-local");
    assert_eq!(
        gone,
        [
            "-A KUBE-EXTERNAL-SERVICES -p tcp -m comment --comment \"default/nginx-local has no local endpoints\" -m addrtype --dst-type LOCAL -m tcp --dport 30783 -j DROP".to_string(),
            format!("-A {ext} -j {svl}"),
        ]
    );
    assert_eq!(new, [format!("-A {nginx_ext} -j {nginx_svc}"), format!("-A {ext} -j {svc}")]);
}

#[test]
fn etp_local_no_drop_removes_only_the_external_drops() {
    // node-c has no endpoint of either Local service: every external drop goes.
    let (before, after) = broken(Mutant::EtpLocalNoDrop, "node-c");
    let (gone, new) = diff(&before, &after);
    assert!(new.is_empty(), "{new:?}");
    assert_eq!(gone.len(), 4, "{gone:?}"); // nginx-local's node port; lb's external IP, LB IP, node port
    assert!(gone.iter().all(|l| l.starts_with("-A KUBE-EXTERNAL-SERVICES ") && l.ends_with("-j DROP")));
    assert!(gone.iter().any(|l| l.contains("-d 203.0.113.10/32 ")));
    // The internal-policy drop of `itp` stays.
    assert!(
        lines(&after.filter, "KUBE-SERVICES")
            .iter()
            .any(|l| l.contains("default/itp has no local endpoints"))
    );
}

#[test]
fn itp_local_falls_back_to_remote_only_where_there_is_no_local_endpoint() {
    let (before, after) = broken(Mutant::ItpLocalFallsBackToRemote, "node-a");
    let (gone, new) = diff(&before, &after);
    let (svc, _, _, _) = chains_of("default/itp");
    let sep = naming::sep_chain("default/itp", Protocol::Tcp, "10.244.1.8:80".parse().unwrap());
    assert_eq!(
        gone,
        [
            "-A KUBE-SERVICES -d 10.96.0.72/32 -p tcp -m comment --comment \"default/itp has no local endpoints\" -m tcp --dport 80 -j DROP"
        ]
    );
    assert_eq!(
        new,
        [
            format!(":{svc} - [0:0]"),
            format!(":{sep} - [0:0]"),
            format!(
                "-A KUBE-SERVICES -d 10.96.0.72/32 -p tcp -m comment --comment \"default/itp cluster IP\" -m tcp --dport 80 -j {svc}"
            ),
            format!(
                "-A {svc} ! -s 10.244.0.0/16 -d 10.96.0.72/32 -p tcp -m comment --comment \"default/itp cluster IP\" -m tcp --dport 80 -j KUBE-MARK-MASQ"
            ),
            format!("-A {svc} -m comment --comment \"default/itp -> 10.244.1.8:80\" -j {sep}"),
            format!("-A {sep} -s 10.244.1.8/32 -m comment --comment \"default/itp\" -j KUBE-MARK-MASQ"),
            format!(
                "-A {sep} -p tcp -m comment --comment \"default/itp\" -m tcp -j DNAT --to-destination 10.244.1.8:80"
            ),
        ]
    );
    let (before, after) = broken(Mutant::ItpLocalFallsBackToRemote, "node-b");
    assert_eq!(before, after, "node-b has the local endpoint");
}

#[test]
fn source_ranges_not_enforced_sends_lb_ips_straight_to_ext() {
    let (before, after) = broken(Mutant::SourceRangesNotEnforced, "node-a");
    let (gone, new) = diff(&before, &after);
    let (_, _, ext, fw) = chains_of("default/lb:http");
    let lb_rule = |target: &str| {
        format!(
            "-A KUBE-SERVICES -d 203.0.113.10/32 -p tcp -m comment --comment \"default/lb:http loadbalancer IP\" -m tcp --dport 80 -j {target}"
        )
    };
    assert_eq!(new, [lb_rule(&ext)]);
    assert!(gone.contains(&lb_rule(&fw)));
    assert!(gone.contains(&format!(":{fw} - [0:0]")));
    // Two ranges, the LB IP (a range holds the node's IP) and the closing comment.
    assert_eq!(gone.iter().filter(|l| l.starts_with(&format!("-A {fw} "))).count(), 4, "{gone:?}");
    assert_eq!(gone.iter().filter(|l| l.starts_with("-A KUBE-PROXY-FIREWALL ")).count(), 1);
    assert_eq!(gone.len(), 1 + 1 + 4 + 1, "{gone:?}");
    assert!(!after.render().contains("KUBE-FW-"));
}

#[test]
fn affinity_without_timeout_drops_seconds_and_reap_only() {
    let (before, after) = broken(Mutant::AffinityWithoutTimeout, "node-a");
    let (gone, new) = diff(&before, &after);
    // KUBE-SVC: both ready endpoints; KUBE-SVL: node-a's.
    assert_eq!(gone.len(), 3, "{gone:?}");
    let expected: Vec<String> = gone.iter().map(|l| l.replace(" --seconds 600 --reap", "")).collect();
    assert_eq!(new, expected);
    assert!(new.iter().all(|l| l.contains("-m recent --rcheck --name KUBE-SEP-")));
}

#[test]
fn no_affinity_removes_the_recent_checks_and_sets() {
    let (before, after) = broken(Mutant::NoAffinity, "node-a");
    let (gone, new) = diff(&before, &after);
    assert_eq!(gone.iter().filter(|l| l.contains("--rcheck")).count(), 3, "{gone:?}");
    let sets: Vec<&String> = gone.iter().filter(|l| l.contains("--set")).collect();
    assert_eq!(sets.len(), 2, "{gone:?}");
    assert_eq!(gone.len(), 5);
    let expected: Vec<String> = sets
        .iter()
        .map(|l| {
            let at = l.find(" -m recent --set").unwrap();
            let end = l.find(" --rsource").unwrap() + " --rsource".len();
            format!("{}{}", &l[..at], &l[end..])
        })
        .collect();
    assert_eq!(new, expected);
    assert!(!after.render().contains("recent"));
}

#[test]
fn terminating_used_while_ready_adds_the_draining_endpoints() {
    let (before, after) = broken(Mutant::TerminatingUsedWhileReady, "node-a");
    let (svc, _, _, _) = chains_of("default/draining");
    let ladder = |rules: &RuleSet| -> Vec<String> {
        rules
            .nat
            .rules_in(&svc)
            .filter_map(|r| r.comment().filter(|c| c.contains("->")).map(String::from))
            .collect()
    };
    assert_eq!(ladder(&before), ["default/draining -> 10.244.1.9:80"]);
    assert_eq!(ladder(&after), ["default/draining -> 10.244.1.10:80", "default/draining -> 10.244.1.9:80"]);
    // lb's local set on node-a takes its draining endpoint too.
    let (_, svl, _, _) = chains_of("default/lb:http");
    assert!(lines(&after.nat, &svl).iter().any(|l| l.contains("-> 10.244.0.6:8080")));
    assert!(!lines(&before.nat, &svl).iter().any(|l| l.contains("-> 10.244.0.6:8080")));
    // Only endpoint choice changes: what was there before is there after, but for the ladders.
    let (gone, _) = diff(&before, &after);
    assert!(gone.iter().all(|l| l.contains("--probability") || l.contains(" -> ")), "{gone:?}");
}

#[test]
fn terminating_never_fallback_rejects_a_port_with_only_terminating_endpoints() {
    let (before, after) = broken(Mutant::TerminatingNeverFallback, "node-a");
    let (svc, _, _, _) = chains_of("default/terminating-only");
    assert!(before.nat.has_chain(&svc));
    assert!(!after.nat.has_chain(&svc));
    let (_, new) = diff(&before, &after);
    assert_eq!(
        new,
        [
            "-A KUBE-SERVICES -d 10.96.0.74/32 -p tcp -m comment --comment \"default/terminating-only has no endpoints\" -m tcp --dport 80 -j REJECT --reject-with icmp-port-unreachable"
        ]
    );
    assert!(!after.render().contains("10.244.1.10"), "draining's terminating endpoint was never used");
}

#[test]
fn node_port_on_all_addresses_ignores_node_port_addresses() {
    let mut c = everything();
    c.proxy.node_port_addresses = vec!["192.168.50.0/24".parse().unwrap()];
    let (before, after) = broken_in(&c, Mutant::NodePortOnAllAddresses, "node-a");
    let (gone, new) = diff(&before, &after);
    let comment = "\"kubernetes service nodeports; NOTE: this must be the last rule in this chain\"";
    assert_eq!(
        gone,
        [
            format!("-A KUBE-SERVICES -d 192.168.50.2/32 -m comment --comment {comment} -j KUBE-NODEPORTS"),
            format!("-A KUBE-SERVICES -d 192.168.50.102/32 -m comment --comment {comment} -j KUBE-NODEPORTS"),
        ]
    );
    assert_eq!(
        new,
        [format!(
            "-A KUBE-SERVICES -m comment --comment {comment} -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS"
        )]
    );
    assert_eq!(after.nat.rules_in("KUBE-SERVICES").last().unwrap().target(), Some("KUBE-NODEPORTS"));
    // Without --nodeport-addresses there is nothing to ignore.
    let (before, after) = broken(Mutant::NodePortOnAllAddresses, "node-a");
    assert_eq!(before, after);
}

#[test]
fn health_check_always_ok_leaves_the_rules_alone() {
    for m in [Mutant::HealthCheckAlwaysOk, Mutant::HealthCheckOnAllAddresses] {
        for node in ["node-a", "node-c"] {
            let (before, after) = broken(m, node);
            assert_eq!(before, after);
        }
        assert!(m.breaks_health_checks());
    }
    assert!(Mutant::ALL.iter().filter(|m| m.breaks_health_checks()).count() == 3);
}

#[test]
fn node_ports_not_last_moves_only_the_jump() {
    let (before, after) = broken(Mutant::NodePortsNotLast, "node-a");
    let order = |rules: &RuleSet| lines(&rules.nat, "KUBE-SERVICES");
    let (b, a) = (order(&before), order(&after));
    assert!(b.last().unwrap().ends_with("-j KUBE-NODEPORTS"));
    assert!(a.first().unwrap().ends_with("-j KUBE-NODEPORTS"));
    assert_eq!(a[1..], b[..b.len() - 1]);
    let mut other_before = before.clone();
    let mut other_after = after.clone();
    other_before.nat.rules.retain(|r| r.chain != "KUBE-SERVICES");
    other_after.nat.rules.retain(|r| r.chain != "KUBE-SERVICES");
    assert_eq!(other_before, other_after);
}

#[test]
fn every_mutant_changes_the_rules_the_health_server_or_the_conntrack_cleanup() {
    let mut c = everything();
    c.proxy.node_port_addresses = vec!["192.168.50.0/24".parse().unwrap()];
    // A mutant that ignores detectLocalMode shows only where the mode is not the default.
    let mut node_cidr = c.clone();
    node_cidr.proxy.detect_local = crate::model::DetectLocal::NodeCidr;
    crate::proxy::test_support::add_second_lb_ip(&mut c);
    crate::proxy::test_support::add_policy_crossings(&mut c);
    for m in Mutant::ALL {
        let changed = [&c, &node_cidr].iter().any(|c| {
            ["node-a", "node-b", "node-c"]
                .iter()
                .any(|node| node_rules(c, node) != node_ruleset(c, node, Some(m)))
        });
        let elsewhere = !m.only_in_the_rules() || m.only_in_ipvs() || m.only_in_nftables();
        assert!(changed || elsewhere, "{m} changes nothing on the fixture");
    }
}

#[test]
fn the_mutants_outside_the_rules_are_the_generators_the_health_servers_and_the_conntrack_cleanups() {
    for m in Mutant::ALL {
        let misreads = m.misread(&everything()).is_some();
        let elsewhere =
            m.deviations() != Deviations::default() || !m.only_in_the_rules() || m.only_in_ipvs() || misreads;
        assert_eq!(matches!(m, outside_the_rules!()), elsewhere, "{m}");
    }
}

/// The endpoints `KUBE-SVC-…` of `name` jumps to on `node` (their `KUBE-SEP-…` chains).
fn svc_targets(rules: &RuleSet, name: &str) -> Vec<String> {
    let (svc, ..) = chains_of(name);
    lines(&rules.nat, &svc).into_iter().filter(|l| l.contains("-j KUBE-SEP-")).collect()
}

#[test]
fn hint_mutants_change_only_which_endpoints_the_cluster_set_keeps() {
    // kube-proxy: node-a keeps zone-a's endpoint of `zoned`, both of `zoned-partial`.
    let (right, ignored) = broken(Mutant::HintsIgnored, "node-a");
    assert_eq!(svc_targets(&right, "default/zoned").len(), 1);
    assert_eq!(svc_targets(&ignored, "default/zoned").len(), 2);
    assert_eq!(svc_targets(&right, "default/zoned-partial").len(), 2);
    let (_, incomplete) = broken(Mutant::HintsUsedWhenIncomplete, "node-a");
    assert_eq!(svc_targets(&incomplete, "default/zoned-partial").len(), 1);
    assert_eq!(svc_targets(&incomplete, "default/zoned"), svc_targets(&right, "default/zoned"));
}

#[test]
fn ip_mode_proxy_ignored_intercepts_the_proxied_ip() {
    let mut svc = lb_service();
    svc.proxied_load_balancer_ips = vec!["203.0.113.11".parse().unwrap()];
    let c = cluster(vec![svc]);
    let (before, after) =
        (node_rules(&c, "node-a"), node_ruleset(&c, "node-a", Some(Mutant::IpModeProxyIgnored)));
    assert!(!before.render().contains("203.0.113.11"));
    let (gone, new) = diff(&before, &after);
    assert!(gone.is_empty(), "{gone:?}");
    assert!(!new.is_empty() && new.iter().all(|l| l.contains("203.0.113.11")), "{new:?}");
}

#[test]
fn source_ranges_node_reaches_first_lb_ip_only_drops_the_second_vip_admission() {
    let mut c = everything();
    crate::proxy::test_support::add_second_lb_ip(&mut c);
    let (before, after) = broken_in(&c, Mutant::SourceRangesNodeReachesFirstLbIpOnly, "node-a");
    let (gone, new) = diff(&before, &after);
    assert_eq!(gone.len(), 1, "{gone:?}");
    assert!(gone[0].starts_with("-A KUBE-FW-") && gone[0].contains("-s 203.0.113.12/32"), "{gone:?}");
    assert!(new.is_empty(), "{new:?}");
}

#[test]
fn affinity_to_not_ready_checks_and_keeps_a_chain_for_the_not_ready_endpoint() {
    // lb's draining endpoint 10.244.0.6 is used by no set while ready ones exist.
    let (before, after) = broken(Mutant::AffinityToNotReady, "node-a");
    let (gone, new) = diff(&before, &after);
    assert!(gone.is_empty(), "{gone:?}");
    assert!(new.iter().any(|l| l.contains("--rcheck") && l.contains("10.244.0.6:8080")), "{new:?}");
    assert!(new.iter().any(|l| l.contains("--to-destination 10.244.0.6:8080")), "{new:?}");
}

/// A hunt skips the scenarios in whose every state a mutant acts as the unbroken proxy: that
/// holds where the mutant's rules come out the same on every node, and never for a bug outside
/// the rules (how they are loaded, health checks, conntrack clean-up).
#[test]
fn the_same_rules_on_every_node_act_as_the_unbroken_proxy() {
    let plain = cluster(vec![kube_dns(), nginx(TrafficPolicy::Cluster)]);
    let proxy = |m| BuiltinIptables { mutant: Some(m) };
    // No Service without endpoints: nothing to reject, so nothing to drop instead.
    assert!(proxy(Mutant::DropInsteadOfReject).same_as_unbroken(&plain));
    let rejecting = cluster(vec![kube_dns(), nginx(TrafficPolicy::Cluster), no_endpoints()]);
    assert!(!proxy(Mutant::DropInsteadOfReject).same_as_unbroken(&rejecting));
    // Every Service masquerades off-cluster traffic.
    assert!(!proxy(Mutant::NoOffClusterMasq).same_as_unbroken(&plain));
    for outside in
        [Mutant::AffinityLostOnSync, Mutant::PartialSyncMissesEndpoints, Mutant::HealthCheckAlwaysOk]
    {
        assert!(!proxy(outside).same_as_unbroken(&plain), "{outside}");
    }
    assert!(!BuiltinIptables { mutant: None }.same_as_unbroken(&plain), "no mutant: nothing to skip");
}
