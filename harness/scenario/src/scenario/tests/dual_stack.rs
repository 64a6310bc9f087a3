//! Dual-stack clusters: networks, nodes, hosts, pods and Services with an address of each
//! family, EndpointSlices derived per family, probes that pick a family, and the errors of a
//! scenario that is dual-stack only in part.

use super::*;
use crate::model::IpFamily;

const SHIPPED: &str = include_str!("../../../../../scenarios/dual-stack.yaml");

#[test]
fn the_shipped_scenario_has_both_families_everywhere() {
    let s = load(SHIPPED);
    let c = &s.cluster;
    assert_eq!(c.families(), [IpFamily::V4, IpFamily::V6]);
    let second = c.second_family.as_ref().unwrap();
    assert_eq!(second.service_cidr.to_string(), "fd00:10:96::/112");
    let node = c.node("node-a").unwrap();
    assert_eq!(node.ip().to_string(), "192.168.50.11");
    assert_eq!(node.pod_cidrs.get(IpFamily::V6).unwrap().to_string(), "fd00:10:244:1::/64");
    assert_eq!(
        c.external_host("outside").unwrap().ips.get(IpFamily::V6).unwrap().to_string(),
        "fd00:192:168:50::100"
    );
    assert_eq!(c.pod("web-a").unwrap().ips.get(IpFamily::V6).unwrap().to_string(), "fd00:10:244:1::10");
    let web = c.service("web").unwrap();
    assert_eq!(web.cluster_ips.get(IpFamily::V6).unwrap().to_string(), "fd00:10:96::80");
    // Derived slices: one per family, so each port has an endpoint of each family per pod.
    let ips: Vec<String> = web.ports[0].endpoints.iter().map(|e| e.ip.to_string()).collect();
    assert_eq!(ips, ["10.244.1.10", "10.244.2.10", "fd00:10:244:1::10", "fd00:10:244:2::10"]);
    let types: Vec<&str> = s.objects.endpoint_slices.iter().map(|e| e.address_type.as_str()).collect();
    assert!(types.contains(&"IPv4") && types.contains(&"IPv6"), "{types:?}");
    // A single-stack IPv6 Service: one cluster IP, IPv6 endpoints only.
    let web6 = c.service("web6").unwrap();
    assert_eq!(web6.cluster_ips, crate::model::PerFamily::single("fd00:10:96::81".parse().unwrap()));
    assert!(web6.ports[0].endpoints.iter().all(|e| e.ip.is_ipv6()));
    assert_eq!(s.probes[1].family, Some(IpFamily::V6));
    assert_eq!(c.probe_view(&s.probes[1]).ip_family(), IpFamily::V6);
}

#[test]
fn a_network_given_once_in_a_dual_stack_cluster_is_an_error() {
    let text =
        edit(SHIPPED, "serviceCIDR: [10.96.0.0/12, \"fd00:10:96::/112\"]", "serviceCIDR: 10.96.0.0/12");
    assert_has(
        &parse_errors(&text),
        at_in(&text, "serviceCIDR: 10.96", "10.96"),
        "spec.cluster.serviceCIDR",
        "the cluster is dual-stack",
    );
}

#[test]
fn two_cidrs_of_one_family_and_the_primary_out_of_order_are_errors() {
    let text = edit(
        SHIPPED,
        "podCIDR: [10.244.0.0/16, \"fd00:10:244::/56\"]",
        "podCIDR: [10.244.0.0/16, 10.245.0.0/16]",
    );
    assert_has(
        &parse_errors(&text),
        at(&text, "10.245.0.0/16"),
        "spec.cluster.podCIDR[1]",
        "10.245.0.0/16 is IPv4 like 10.244.0.0/16: a dual-stack cluster lists one CIDR of each family",
    );
    let text = edit(
        SHIPPED,
        "serviceCIDR: [10.96.0.0/12, \"fd00:10:96::/112\"]",
        "serviceCIDR: [\"fd00:10:96::/112\", 10.96.0.0/12]",
    );
    assert_has(
        &parse_errors(&text),
        at_in(&text, "serviceCIDR: [\"fd00", "\"fd00"),
        "spec.cluster.serviceCIDR[0]",
        "but the primary family (the first CIDR of podCIDR) is IPv4: list the primary family first",
    );
}

#[test]
fn a_node_needs_an_address_and_pod_cidr_of_each_family() {
    let text = edit(SHIPPED, "ips: [192.168.50.11, \"fd00:192:168:50::11\"]", "ip: 192.168.50.11");
    assert_has(
        &parse_errors(&text),
        at(&text, "name: node-a"),
        "spec.nodes[0].ips",
        "the cluster is dual-stack: a node needs ips with one entry per family (IPv4 first)",
    );
    let text = edit(
        SHIPPED,
        "podCIDRs: [10.244.2.0/24, \"fd00:10:244:2::/64\"]",
        "podCIDRs: [\"fd00:10:244:2::/64\", 10.244.2.0/24]",
    );
    assert_has(
        &parse_errors(&text),
        at(&text, "\"fd00:10:244:2::/64\", 10"),
        "spec.nodes[1].podCIDRs[0]",
        "fd00:10:244:2::/64 is IPv6, but entry 0 is for the cluster's primary family, IPv4",
    );
    let text = edit(
        SHIPPED,
        "    - name: node-b\n      ips:",
        "    - name: node-b\n      ip: 192.168.50.12\n      ips:",
    );
    assert_has(
        &parse_errors(&text),
        at_in(&text, "ips: [192.168.50.12", "[192"),
        "spec.nodes[1].ips",
        "give ip or ips, not both",
    );
}

#[test]
fn a_pod_of_a_dual_stack_cluster_needs_both_addresses() {
    let text = edit(
        SHIPPED,
        "  podIPs: [{ip: 10.244.1.20}, {ip: \"fd00:10:244:1::20\"}]",
        "  podIPs: [{ip: 10.244.1.20}]",
    );
    assert_has(
        &parse_errors(&text),
        at_in(&text, "podIPs: [{ip: 10.244.1.20}]", "[{ip"),
        "Pod default/client: status.podIPs",
        "the cluster is dual-stack: a pod needs an address of each family",
    );
    let text = edit(SHIPPED, "{ip: \"fd00:10:244:1::20\"}", "{ip: \"fd00:10:244:2::20\"}");
    assert_has(
        &parse_errors(&text),
        at(&text, "\"fd00:10:244:2::20\""),
        "Pod default/client: status.podIPs[1].ip",
        "fd00:10:244:2::20 is not inside the podCIDR fd00:10:244:1::/64 of node node-a",
    );
}

#[test]
fn a_dual_stack_policy_needs_both_cluster_ips_and_two_need_a_dual_stack_policy() {
    let text = edit(SHIPPED, "clusterIPs: [10.96.0.80, \"fd00:10:96::80\"]", "clusterIPs: [10.96.0.80]");
    assert_has(
        &parse_errors(&text),
        at_in(&text, "clusterIPs: [10.96.0.80]", "[10.96"),
        "Service default/web: spec.clusterIPs",
        "PreferDualStack in a dual-stack cluster gives the Service a cluster IP of each family",
    );
    let text = edit(SHIPPED, "ipFamilyPolicy: PreferDualStack", "ipFamilyPolicy: SingleStack");
    assert_has(
        &parse_errors(&text),
        at_in(&text, "ipFamilyPolicy: SingleStack", "SingleStack"),
        "Service default/web: spec.ipFamilyPolicy",
        "needs ipFamilyPolicy PreferDualStack or RequireDualStack",
    );
    let text = edit(SHIPPED, "\"fd00:10:96::80\"]", "10.96.0.81]");
    assert_has(
        &parse_errors(&text),
        at(&text, "10.96.0.81"),
        "Service default/web: spec.clusterIPs[1]",
        "10.96.0.81 is IPv4 like spec.clusterIP",
    );
}

#[test]
fn a_probe_over_a_family_its_target_lacks_is_an_error() {
    // web6 is single-stack IPv6: there is no IPv4 cluster IP to probe.
    let text = edit(
        SHIPPED,
        "to: {service: web6, port: http}\n      family: IPv6",
        "to: {service: web6, port: http}\n      family: IPv4",
    );
    let errs = errors(&text);
    assert!(
        errs.iter().any(|e| e.field == "spec.probes[7].to"
            && e.message == "Service web6 has no IPv4 cluster IP (it is single-stack)"),
        "{errs:?}"
    );
    let text = edit(SHIPPED, "family: IPv4\n      count: 40", "family: IPv5\n      count: 40");
    assert_has(
        &parse_errors(&text),
        at(&text, "IPv5"),
        "spec.probes[0].family",
        "unknown family \"IPv5\" (expected IPv4 or IPv6)",
    );
}

#[test]
fn a_single_stack_cluster_refuses_a_probe_of_the_other_family() {
    let v6 = include_str!("../../../../../scenarios/ipv6-cluster-ip.yaml");
    let text =
        edit(v6, "- name: pod-to-cluster-ip-tcp\n", "- name: pod-to-cluster-ip-tcp\n      family: IPv4\n");
    assert_has(
        &parse_errors(&text),
        at_in(&text, "family: IPv4", "IPv4"),
        "spec.probes[0].family",
        "the cluster is single-stack",
    );
}
