//! What a proxy is served: the file's objects as kube-apiserver would store them, in the first
//! state and in every step's; and what kube-apiserver would refuse, reported where it is written.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::*;

const SHIPPED_DUAL_STACK: &str = include_str!("../../../../../scenarios/dual-stack.yaml");
const LIVE: &str = include_str!("../../../../../scenarios/live-stale-udp-conntrack.yaml");

/// Files that set `ipFamilies` without `clusterIPs`, or leave out a port's `protocol`: a real
/// kube-proxy ignores such a Service, or refuses the node's whole ruleset.
#[test]
fn shipped_services_are_served_with_cluster_ips_families_and_protocols() {
    // Read from their files: the replay's rule dumps are found beside it.
    for file in ["ipv6-node-port.yaml", "ipv6-hairpin-and-reject.yaml", "seed-001-mysql-replay.yaml"] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios").join(file);
        let s = packetproof::admission::load(&path).unwrap_or_else(|e| panic!("{e}"));
        assert!(!s.objects.services.is_empty());
        for service in &s.objects.services {
            let spec = service.spec.as_ref().unwrap();
            let ip = spec.cluster_ip.clone().unwrap();
            assert_eq!(spec.cluster_ips.as_deref(), Some(&[ip.clone()][..]), "{}", s.name);
            let family = if ip.contains(':') { "IPv6" } else { "IPv4" };
            assert_eq!(spec.ip_families.as_deref(), Some(&[family.to_string()][..]), "{}", s.name);
            assert_eq!(spec.ip_family_policy.as_deref(), Some("SingleStack"));
            assert_eq!(spec.session_affinity.as_deref(), Some("None"));
            assert_eq!(spec.internal_traffic_policy.as_deref(), Some("Cluster"));
            for port in spec.ports.iter().flatten() {
                assert!(port.protocol.is_some() && port.target_port.is_some(), "{}: {port:?}", s.name);
            }
        }
        for slice in &s.objects.endpoint_slices {
            for port in slice.ports.iter().flatten() {
                assert!(port.protocol.is_some() && port.name.is_some(), "{}: {port:?}", s.name);
            }
        }
    }
}

#[test]
fn a_dual_stack_service_is_served_with_both_families() {
    let s = load(SHIPPED_DUAL_STACK);
    let web = s.objects.services.iter().find(|o| o.metadata.name.as_deref() == Some("web")).unwrap();
    let spec = web.spec.as_ref().unwrap();
    assert_eq!(spec.ip_families.as_deref().unwrap(), ["IPv4", "IPv6"]);
    assert_eq!(spec.external_traffic_policy.as_deref(), Some("Cluster"));
}

#[test]
fn a_target_port_of_0_or_empty_is_the_port() {
    for unset in ["0", "\"\""] {
        let text = edit(
            KUBE_DNS,
            "protocol: UDP\n      targetPort: 53",
            &format!("protocol: UDP\n      targetPort: {unset}"),
        );
        let s = load(&text);
        let (_, dns) = s.cluster.service_port("kube-dns", "dns").unwrap();
        assert!(dns.endpoints.iter().all(|e| e.port == 53), "{unset}");
        let spec = s.objects.services[0].spec.as_ref().unwrap();
        assert_eq!(spec.ports.as_ref().unwrap()[0].target_port, Some(IntOrString::Int(53)), "{unset}");
    }
}

#[test]
fn objects_a_step_applies_are_served_defaulted_too() {
    let service = "---\napiVersion: v1\nkind: Service\nmetadata: {name: dns}\nspec:\n  clusterIP: 10.96.0.53\n  \
                   sessionAffinity: ClientIP\n  ports:\n    - {name: dns, port: 53, protocol: UDP, targetPort: 5353}\n";
    let s = load(&format!("{LIVE}{service}"));
    let first = s.objects.services[0].spec.as_ref().unwrap();
    assert_eq!(first.session_affinity.as_deref(), Some("None"));
    let step = &s.steps[0];
    let after = &step.objects.services[0];
    assert_eq!(after.metadata.namespace.as_deref(), Some("default"));
    let spec = after.spec.as_ref().unwrap();
    assert_eq!(spec.cluster_ips.as_deref().unwrap(), ["10.96.0.53"]);
    let timeout = spec.session_affinity_config.as_ref().and_then(|c| c.client_ip.as_ref()?.timeout_seconds);
    assert_eq!(timeout, Some(10_800));
    assert!(step.objects.endpoint_slices[0].endpoints.iter().all(|e| e.conditions.is_some()));
}

#[test]
fn what_kube_apiserver_refuses_is_an_error_where_it_is_written() {
    let service = "Service kube-system/kube-dns";
    let with = |extra: &str| {
        edit(KUBE_DNS, "  clusterIP: 10.96.0.10\n", &format!("  clusterIP: 10.96.0.10\n{extra}"))
    };

    let text = with("  externalTrafficPolicy: Cluster\n");
    assert_only(
        &parse_errors(&text),
        at_in(&text, "externalTrafficPolicy: Cluster", "Cluster"),
        &format!("{service}: spec.externalTrafficPolicy"),
        "externalTrafficPolicy may only be set for a Service reachable from outside (type NodePort or \
         LoadBalancer, or with externalIPs): the API server refuses it here",
    );
    let text = with("  allocateLoadBalancerNodePorts: true\n");
    assert_only(
        &parse_errors(&text),
        at_in(&text, "allocateLoadBalancerNodePorts: true", "true"),
        &format!("{service}: spec.allocateLoadBalancerNodePorts"),
        "allocateLoadBalancerNodePorts may only be used when type is LoadBalancer (the API server refuses it)",
    );
    let text = with("  ipFamilies: [IPv4, IPv4]\n");
    assert_only(
        &parse_errors(&text),
        at_in(&text, "[IPv4, IPv4]", "IPv4]"),
        &format!("{service}: spec.ipFamilies[1]"),
        "IPv4 is listed twice: a Service has one family per cluster IP",
    );
    let text = with("  clusterIPs: [10.96.0.10, 10.96.0.11]\n");
    assert_only(
        &parse_errors(&text),
        at(&text, "10.96.0.11"),
        &format!("{service}: spec.clusterIPs[1]"),
        "10.96.0.11 is IPv4 like spec.clusterIP: a Service has at most one cluster IP per family",
    );
}

#[test]
fn ip_families_must_be_those_of_the_cluster_ips_in_order() {
    let text = edit(SHIPPED_DUAL_STACK, "ipFamilies: [IPv4, IPv6]", "ipFamilies: [IPv6, IPv4]");
    let errs = parse_errors(&text);
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert_has(
        &errs,
        at_in(&text, "[IPv6, IPv4]", "IPv6"),
        "Service default/web: spec.ipFamilies[0]",
        "IPv6 does not match spec.clusterIP 10.96.0.80, which is IPv4: ipFamilies lists the family of each \
         cluster IP, in order",
    );
    assert_has(
        &errs,
        at_in(&text, "[IPv6, IPv4]", "IPv4"),
        "Service default/web: spec.ipFamilies[1]",
        "IPv4 does not match spec.clusterIPs[1] fd00:10:96::80, which is IPv6",
    );
    let text = edit(
        SHIPPED_DUAL_STACK,
        "  clusterIPs: [\"fd00:10:96::81\"]\n  ipFamilies: [IPv6]",
        "  clusterIPs: [\"fd00:10:96::81\"]\n  ipFamilies: [IPv6, IPv4]",
    );
    assert_only(
        &parse_errors(&text),
        at_in(
            &text,
            "ipFamilyPolicy: SingleStack\n  selector: {app: web}\n  ports:\n    - {name: http, port: 8081",
            "SingleStack",
        ),
        "Service default/web6: spec.ipFamilyPolicy",
        "a Service with two ipFamilies needs ipFamilyPolicy PreferDualStack or RequireDualStack \
         (SingleStack is the default)",
    );
}
