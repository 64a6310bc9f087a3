//! Each mutant changes only what its description says, in nftables form.

use super::*;

fn mutated(m: Mutant, node: &str) -> (RuleSet, RuleSet) {
    let mut c = everything();
    crate::proxy::test_support::add_second_lb_ip(&mut c);
    crate::proxy::test_support::add_policy_crossings(&mut c);
    // Ignoring detectLocalMode shows only where the mode is not the default.
    if m == Mutant::DetectLocalModeIgnored {
        c.proxy.detect_local = crate::model::DetectLocal::NodeCidr;
    }
    // `iif` for `iifname` shows only where interfaces are matched by name.
    if m == Mutant::InterfacePrefixMatchedByIndex {
        c.proxy.detect_local = crate::model::DetectLocal::InterfaceNamePrefix("veth".into());
    }
    (node_rulesets(&c, node, None).remove(0), node_rulesets(&c, node, Some(m)).remove(0))
}

#[test]
fn every_mutant_of_the_rules_changes_them() {
    // The others break the loading, the health server, the conntrack cleanup, or exist in
    // iptables mode only.
    let elsewhere = |m: Mutant| !m.only_in_the_rules() || !m.exists_in_nftables();
    for m in Mutant::ALL {
        let changed = ["node-a", "node-b"].iter().any(|n| {
            let (before, after) = mutated(m, n);
            before != after
        });
        assert_eq!(changed, !elsewhere(m), "{m}");
    }
}

#[test]
fn filter_before_dnat_moves_only_the_filter_chains_after_dnat() {
    let (before, after) = mutated(Mutant::EtpLocalFilteredBeforeDnat, "node-b");
    // Only the cluster-IP check moves, to the chain after DNAT.
    let moved: Vec<&str> =
        after.rules.iter().filter(|r| !before.rules.contains(r)).map(|r| r.chain.as_str()).collect();
    assert_eq!(moved, ["filter-output-post-dnat"]);
    let priorities = |r: &RuleSet| -> Vec<(String, i32)> {
        r.chains.iter().filter_map(|c| c.hook.as_ref().map(|h| (c.name.clone(), h.priority))).collect()
    };
    let moved: Vec<(String, i32)> =
        priorities(&after).into_iter().filter(|p| !priorities(&before).contains(p)).collect();
    let names: Vec<&str> = moved.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["filter-forward", "filter-input", "filter-output", "filter-output-post-dnat"]);
    assert_eq!(moved.iter().map(|(_, p)| *p).collect::<Vec<_>>(), [-110, -110, -110, -90]);
}

#[test]
fn interface_prefix_by_index_writes_iif() {
    let (before, after) = mutated(Mutant::InterfacePrefixMatchedByIndex, "node-a");
    let (gone, new) = diff(&before, &after);
    assert!(!gone.is_empty() && gone.iter().all(|r| r.contains("iifname")), "{gone:?}");
    assert!(new.iter().all(|r| r.contains("\"veth*\"") && !r.contains("iifname")), "{new:?}");
    assert_eq!(new, gone.iter().map(|r| r.replace("iifname ", "iif ")).collect::<Vec<_>>());
}

#[test]
fn masquerade_mutants_remove_only_their_chains_marks() {
    for (m, prefixes) in [
        (Mutant::NoHairpinMasq, &["endpoint-"][..]),
        (Mutant::NoNodePortMasq, &["external-"][..]),
        (Mutant::NoOffClusterMasq, &["service-", "local-"][..]),
    ] {
        let (before, after) = mutated(m, "node-b");
        let (gone, new) = diff(&before, &after);
        assert!(!gone.is_empty(), "{m}");
        assert!(new.is_empty(), "{m}: {new:?}");
        for line in &gone {
            let chain = line.split(' ').nth(4).unwrap();
            assert!(prefixes.iter().any(|p| chain.starts_with(p)), "{m}: {line}");
            assert!(line.contains("jump mark-for-masquerade"), "{m}: {line}");
        }
    }
}

#[test]
fn last_endpoint_never_chosen_picks_from_one_fewer() {
    let (before, after) = mutated(Mutant::LastEndpointNeverChosen, "node-a");
    let (gone, new) = diff(&before, &after);
    assert!(!gone.is_empty());
    let expected: Vec<String> =
        gone.iter().map(|l| l.replace("numgen random mod 2 ", "numgen random mod 1 ")).collect();
    assert_eq!(new, expected);
}

#[test]
fn drop_instead_of_reject_changes_the_reject_chain() {
    let (before, after) = mutated(Mutant::DropInsteadOfReject, "node-a");
    assert_eq!(
        diff(&before, &after),
        (
            vec!["add rule ip kube-proxy reject-chain reject".into()],
            vec!["add rule ip kube-proxy reject-chain drop".into()]
        )
    );
}

#[test]
fn dnat_to_service_port_uses_the_port_not_the_target_port() {
    let (before, after) = mutated(Mutant::DnatToServicePort, "node-a");
    let (gone, new) = diff(&before, &after);
    assert!(gone.iter().any(|l| l.ends_with("dnat to 10.244.1.5:8080")));
    assert!(new.iter().any(|l| l.ends_with("dnat to 10.244.1.5:80")));
    assert!(new.iter().all(|l| l.contains(" dnat to ")), "{new:?}");
}

#[test]
fn etp_local_mutants() {
    // node-b has the `local` service's endpoint: its external chain ends in `goto local-…`.
    let (before, after) = mutated(Mutant::EtpLocalMasquerades, "node-b");
    let (gone, new) = diff(&before, &after);
    assert!(gone.is_empty());
    assert!(
        new.iter().all(|l| l.contains(" external-") && l.ends_with("jump mark-for-masquerade")),
        "{new:?}"
    );
    // node-a has none: outside traffic to the node port is dropped, unless the mutant keeps it.
    let (before, after) = mutated(Mutant::EtpLocalNoDrop, "node-a");
    let (gone, new) = diff(&before, &after);
    assert!(new.is_empty());
    assert!(gone.iter().any(|l| l.contains("no-endpoint-nodeports { tcp . 30081")), "{gone:?}");
    assert!(gone.iter().all(|l| l.ends_with(": drop }")), "{gone:?}");
    assert!(!gone.iter().any(|l| l.contains("10.96.0.13")), "the internal-Local drop stays");
    let (before, after) = mutated(Mutant::EtpLocalUsesRemoteEndpoints, "node-a");
    let (gone, new) = diff(&before, &after);
    assert!(gone.iter().any(|l| l.contains("no-endpoint-nodeports { tcp . 30081")), "{gone:?}");
    assert!(new.iter().any(|l| l.contains("external-") && l.contains(" goto service-")), "{new:?}");
}

#[test]
fn source_ranges_not_enforced_removes_the_firewall() {
    let (before, after) = mutated(Mutant::SourceRangesNotEnforced, "node-a");
    let (gone, new) = diff(&before, &after);
    assert!(new.is_empty());
    assert!(gone.iter().all(|l| l.contains("firewall-") && l.contains('/')), "{gone:?}");
    assert!(after.has_chain(generate::FIREWALL_CHECK));
    assert!(gone.iter().any(|l| l.starts_with("add element ip kube-proxy firewall-ips")));
}

#[test]
fn affinity_mutants() {
    let (before, after) = mutated(Mutant::AffinityWithoutTimeout, "node-a");
    let (gone, new) = diff(&before, &after);
    assert_eq!(gone.len(), new.len());
    assert!(gone.iter().all(|l| l.contains("flags dynamic,timeout ; timeout 600s ;")));
    assert!(new.iter().all(|l| l.contains("flags dynamic ;") && !l.contains("timeout")));
    let (before, after) = mutated(Mutant::NoAffinity, "node-a");
    let (gone, new) = diff(&before, &after);
    assert!(new.is_empty());
    assert!(gone.iter().all(|l| l.contains("affinity-")), "{gone:?}");
    assert!(!after.render().contains("affinity"));
}

#[test]
fn node_port_mutants() {
    let (before, after) = mutated(Mutant::NodePortOnAllAddresses, "node-a");
    assert!(!after.sets.iter().any(|s| s.name == generate::NODEPORT_IPS));
    let (_, new) = diff(&before, &after);
    assert!(new.contains(
        &"add rule ip kube-proxy services fib daddr type local ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @service-nodeports".to_string()
    ));
    let (_, after) = mutated(Mutant::NodePortsNotLast, "node-a");
    let services: Vec<&str> = after.rules_in(generate::SERVICES).map(|r| r.text.as_str()).collect();
    assert!(
        services[0].ends_with("@service-nodeports") && services[1].ends_with("@service-ips"),
        "{services:?}"
    );
}

#[test]
fn endpoint_choice_mutants() {
    let (before, after) = mutated(Mutant::ItpLocalFallsBackToRemote, "node-a");
    let (gone, new) = diff(&before, &after);
    assert!(gone.iter().any(|l| l.contains("no-endpoint-services { 10.96.0.13")), "{gone:?}");
    assert!(new.iter().any(|l| l.contains("service-ips { 10.96.0.13")), "{new:?}");
    // The lb service has a serving-terminating endpoint beside two ready ones.
    let (_, after) = mutated(Mutant::TerminatingUsedWhileReady, "node-a");
    assert!(after.render().contains("dnat to 10.244.0.8:8443"));
    assert!(!mutated(Mutant::TerminatingUsedWhileReady, "node-a").0.render().contains("10.244.0.8:8443"));
    // The leaving service has only a serving-terminating endpoint: used, unless never.
    let (before, after) = mutated(Mutant::TerminatingNeverFallback, "node-a");
    assert!(before.render().contains("dnat to 10.244.1.9:80"));
    let rejected = after.elements_of(generate::NO_ENDPOINT_SERVICES).find(|e| e.key[0] == "10.96.0.15");
    assert_eq!(rejected.and_then(|e| e.value.as_deref()), Some("goto reject-chain"));
}

#[test]
fn source_ranges_after_dnat_moves_only_the_firewall_check_jump() {
    let (before, after) = mutated(Mutant::SourceRangesCheckedAfterDnat, "node-a");
    let jumps = |r: &RuleSet| -> Vec<String> {
        r.rules.iter().filter(|r| r.text.ends_with("jump firewall-check")).map(|r| r.chain.clone()).collect()
    };
    assert_eq!(jumps(&before), ["filter-prerouting-pre-dnat", "filter-output-pre-dnat"]);
    assert_eq!(jumps(&after), ["filter-output-pre-dnat", "filter-input", "filter-forward"]);
    let others = |r: &RuleSet| r.rules.iter().filter(|r| !r.text.ends_with("jump firewall-check")).count();
    assert_eq!(others(&before), others(&after));
}

#[test]
fn local_policy_mutants_remove_only_their_rules() {
    let (before, after) = mutated(Mutant::EtpLocalPodsNotShortCircuited, "node-a");
    let (gone, new) = diff(&before, &after);
    assert!(new.is_empty() && !gone.is_empty(), "{gone:?} {new:?}");
    assert!(gone.iter().all(|r| r.contains("short-circuit pod traffic")), "{gone:?}");
    let (before, after) = mutated(Mutant::EtpLocalAffinityIgnored, "node-b");
    let (gone, new) = diff(&before, &after);
    assert!(new.is_empty() && !gone.is_empty(), "{gone:?} {new:?}");
    assert!(gone.iter().all(|r| r.contains("@affinity-") && r.contains(" local-")), "{gone:?}");
}
