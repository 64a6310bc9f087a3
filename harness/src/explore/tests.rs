//! The explorer's pure parts: generation is reproducible and always valid, shrinking only cuts.

use super::*;

fn cases(seed: u64, count: u64) -> Vec<Case> {
    let mut guide = FieldCombinations::default();
    (0..count).map(|n| generate(seed, n, &mut guide)).collect()
}

#[test]
fn the_same_seed_gives_the_same_cases() {
    let first: Vec<String> = cases(1, 40).iter().map(|c| c.render("")).collect();
    let again: Vec<String> = cases(1, 40).iter().map(|c| c.render("")).collect();
    assert_eq!(first, again);
    let other: Vec<String> = cases(2, 40).iter().map(|c| c.render("")).collect();
    assert_ne!(first, other);
}

#[test]
fn every_generated_case_is_a_valid_scenario() {
    for seed in [1, 2] {
        for case in cases(seed, 40) {
            if let Err(e) = prepare(case, "") {
                panic!("seed {seed}: the reader refused a generated case:\n{e}");
            }
        }
    }
}

#[test]
fn a_second_node_address_is_probed_only_through_services_of_its_family() {
    // Seed 41's case 289: a dual-stack cluster whose IPv6-only Service got a node-port probe
    // on the nodes' IPv4 second address, which the reader refused.
    let case = cases(41, 290).pop().expect("a case");
    assert!(case.secondary_ips && case.family == case::Family::Dual);
    if let Err(e) = prepare(case, "") {
        panic!("the reader refused it:\n{e}");
    }
}

#[test]
fn a_second_address_is_not_probed_as_a_node_port_where_a_vip_takes_its_port() {
    // Seed 92's case 2314: a load balancer's VIP on the first node's second address, on a port
    // that is another Service's node port; the second address's node-port probe took that
    // node port, which the reader refused (the Service IP wins there).
    let found = cases(7, 3000).into_iter().find_map(|mut case| {
        let vip = case
            .services
            .iter()
            .position(|s| s.lb_ips_on_nodes && s.kind == case::ServiceType::LoadBalancer)?;
        let other =
            case.services.iter().position(|s| s.has_node_ports() && s.name != case.services[vip].name)?;
        (case.secondary_ips && case.family == case::Family::V4).then(|| {
            let slot = case.services[other].slot;
            case.services[vip].port_on_node_port_of = Some(slot);
            case.services[vip].ports[0].udp = case.services[other].ports[0].udp;
            case
        })
    });
    let case = found.expect("a case with VIPs on the nodes' second addresses");
    if let Err(e) = prepare(case, "") {
        panic!("the reader refused it:\n{e}");
    }
}

#[test]
fn generation_reaches_every_kind_of_field() {
    let mut guide = FieldCombinations::default();
    for n in 0..300 {
        generate(5, n, &mut guide);
    }
    for wanted in [
        "LoadBalancer etp Local",
        "ClientIP affinity",
        "endpoint ready false serving true terminating true",
        "host-network",
        "topology Annotation",
        "topology PreferClose",
        "loadBalancerSourceRanges",
        "LB ingress ipMode Proxy",
        "externalIPs",
        "detectLocal NodeCidr",
        "detectLocal BridgeInterface",
        "detectLocal InterfaceNamePrefix",
        "family Dual",
        "family V6",
        "step restart",
        "step delete Service",
        "step changes",
        "service CIDR routed from outside",
        "selected pod ready false",
        "UDP stream across steps",
        "held connection across steps",
        "held connection, out-of-window checks",
        "step changes a Service while the proxy restarts",
    ] {
        let field = |f: &Feature| matches!(f, Feature::Field(text) if text.contains(wanted));
        assert!(guide.seen.iter().any(field), "never generated: {wanted}");
    }
}

#[test]
fn shrinking_offers_only_smaller_valid_variants() {
    for case in cases(3, 20) {
        let Ok(ready) = prepare(case, "") else { continue };
        for c in shrink::candidates(&ready.case, &[]) {
            assert_ne!(c, ready.case);
            assert!(c.services.len() <= ready.case.services.len());
            assert!(c.pods.len() <= ready.case.pods.len());
            assert!(c.nodes.len() <= ready.case.nodes.len());
            assert!(c.steps.len() <= ready.case.steps.len());
        }
    }
}

#[test]
fn the_coverage_guide_mutates_cases_that_reached_new_rules() {
    let mut guide = features::RuleCoverage::default();
    let rule = |text: &str| BTreeSet::from([Feature::Rule(text.to_string())]);
    let parent = prepare(generate(7, 0, &mut guide), "").expect("a valid case").case;
    // Nothing new reached: no parent, so every case is drawn afresh.
    guide.judged(&parent, &BTreeSet::new());
    let mut rng = rng::Rng::for_case(7, 1);
    assert!(guide.parent(&mut rng).is_none());
    // A new template: the case becomes a parent; the same template again adds none.
    guide.judged(&parent, &rule("ip nat KUBE-SERVICES: -j KUBE-NODEPORTS"));
    guide.judged(&parent, &rule("ip nat KUBE-SERVICES: -j KUBE-NODEPORTS"));
    let mutated: Vec<Case> = (1..40).map(|n| generate(7, n, &mut guide)).collect();
    let children = mutated.iter().filter(|c| c.nodes == parent.nodes && c.family == parent.family).count();
    assert!(children >= 10, "{children} of 39 cases kept the parent's cluster");
    for case in mutated {
        if let Err(e) = prepare(case, "") {
            panic!("the reader refused a mutated case:\n{e}");
        }
    }
}
