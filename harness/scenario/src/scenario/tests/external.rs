//! Service frontends besides the cluster IP (external IPs, load-balancer ingress, source
//! ranges, health-check node ports) and session affinity.

use super::*;
use crate::model::{ServiceType, SessionAffinity, TrafficPolicy};

const WEB: &str = "Service default/web";

fn field(path: &str) -> String {
    format!("{WEB}: {path}")
}

/// A second Service, appended to `EXPOSED`.
fn with_service(spec: &str) -> String {
    format!("{EXPOSED}---\napiVersion: v1\nkind: Service\nmetadata: {{name: other}}\nspec:\n{spec}")
}

#[test]
fn every_frontend_of_a_load_balancer_is_read() {
    let s = parse(EXPOSED);
    let web = s.cluster.service("web").unwrap();
    assert_eq!(web.service_type, ServiceType::LoadBalancer);
    assert_eq!(web.external_traffic_policy, TrafficPolicy::Local);
    assert_eq!(web.external_ips, ["203.0.113.10".parse::<std::net::IpAddr>().unwrap()]);
    assert_eq!(web.load_balancer_ips, ["198.51.100.7".parse::<std::net::IpAddr>().unwrap()]);
    // Whitespace around a range is trimmed, as Kubernetes does.
    let ranges: Vec<String> = web.load_balancer_source_ranges.iter().map(|r| r.to_string()).collect();
    assert_eq!(ranges, ["192.168.50.100/32", "10.0.0.0/8"]);
    assert_eq!(web.health_check_node_port, Some(32000));
    assert_eq!(web.session_affinity, SessionAffinity::ClientIp { timeout_seconds: 1 });
    // The objects a real proxy gets keep the fields as written.
    let object = s.objects.services[0].spec.as_ref().unwrap();
    assert_eq!(object.health_check_node_port, Some(32000));
}

#[test]
fn services_without_them_get_the_defaults() {
    let s = parse(KUBE_DNS);
    let dns = s.cluster.service("kube-dns").unwrap();
    assert!(dns.external_ips.is_empty() && dns.load_balancer_ips.is_empty());
    assert!(dns.load_balancer_source_ranges.is_empty());
    assert_eq!(dns.health_check_node_port, None);
    assert_eq!(dns.session_affinity, SessionAffinity::None);
}

#[test]
fn external_ips_may_be_any_address_outside_the_cluster_networks() {
    // On the node network but nobody's, or another public address: both fine.
    let text = edit(EXPOSED, "externalIPs: [203.0.113.10]", "externalIPs: [203.0.113.10, 192.168.50.200]");
    assert_eq!(parse(&text).cluster.services[0].external_ips.len(), 2);
}

#[test]
fn an_external_ip_may_be_a_nodes_own_address_but_a_load_balancer_ip_may_not() {
    // Bare-metal clusters often expose a Service on a node's own address.
    let text = edit(
        EXPOSED,
        "externalIPs: [203.0.113.10]",
        "externalIPs: [203.0.113.10, 192.168.50.12, 192.168.50.21]",
    );
    assert_eq!(parse(&text).cluster.services[0].external_ips.len(), 3);
    let text = edit(EXPOSED, "ingress: [{ip: 198.51.100.7}]", "ingress: [{ip: 192.168.50.12}]");
    let errors = parse_errors(&text);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(
        errors[0].message,
        "192.168.50.12 is already the address of node node-b: a load-balancer IP must not be a node, pod or external-host address"
    );
    // A VIP local to a node (a secondary address of it) may be a load-balancer IP.
    let text = EXPOSED.replace("198.51.100.7", "192.168.50.21");
    assert_eq!(parse(&text).cluster.services[0].load_balancer_ips.len(), 1);
}

#[test]
fn external_ips_outside_the_cluster_and_owned_by_nobody() {
    let cases = [
        (
            "10.96.5.5",
            "10.96.5.5 is inside serviceCIDR 10.96.0.0/12: an external IP must be outside the cluster's service and pod networks (e.g. 203.0.113.10)",
        ),
        (
            "10.244.1.10",
            "10.244.1.10 is inside podCIDR 10.244.0.0/16: an external IP must be outside the cluster's service and pod networks (e.g. 203.0.113.10)",
        ),
        (
            "192.168.50.100",
            "192.168.50.100 is already the address of external host outside: an external IP must not be a pod or external-host address",
        ),
        ("127.0.0.1", "127.0.0.1 is a loopback address, which cannot be an external IP"),
        ("0.0.0.0", "0.0.0.0 is the unspecified address, which cannot be an external IP"),
        ("224.0.0.5", "224.0.0.5 is a multicast address, which cannot be an external IP"),
        ("fd00::10", &mixed(EXPOSED, "fd00::10 is")),
        ("203.0.113.300", "\"203.0.113.300\" is not an IP address"),
    ];
    for (ip, message) in cases {
        let text =
            edit(EXPOSED, "externalIPs: [203.0.113.10]", &format!("externalIPs: [203.0.113.10, \"{ip}\"]"));
        assert_only(
            &parse_errors(&text),
            at(&text, &format!("\"{ip}\"")),
            &field("spec.externalIPs[1]"),
            message,
        );
    }
}

#[test]
fn an_address_is_listed_once_per_service() {
    let text = edit(EXPOSED, "externalIPs: [203.0.113.10]", "externalIPs: [203.0.113.10, 203.0.113.10]");
    assert_only(
        &parse_errors(&text),
        at_in(&text, "[203.0.113.10, 203.0.113.10]", "203.0.113.10]"),
        &field("spec.externalIPs[1]"),
        "203.0.113.10 is already listed at spec.externalIPs[0]",
    );
    let text = edit(EXPOSED, "ingress: [{ip: 198.51.100.7}]", "ingress: [{ip: 203.0.113.10}]");
    assert_only(
        &parse_errors(&text),
        at_in(&text, "[{ip: 203.0.113.10}]", "203"),
        &field("status.loadBalancer.ingress[0].ip"),
        "203.0.113.10 is already listed at spec.externalIPs[0]",
    );
}

#[test]
fn services_share_an_external_address_only_on_different_ports() {
    let other =
        "  clusterIP: 10.96.0.21\n  externalIPs: [203.0.113.10]\n  ports: [{port: 53, protocol: UDP}]\n";
    assert_eq!(parse(&with_service(other)).cluster.services[1].external_ips.len(), 1);
    let text =
        with_service("  clusterIP: 10.96.0.21\n  externalIPs: [203.0.113.10]\n  ports: [{port: 80}]\n");
    assert_only(
        &parse_errors(&text),
        at_in(&text, "externalIPs: [203.0.113.10]\n  ports: [{port: 80}]", "203"),
        "Service default/other: spec.externalIPs[0]",
        "203.0.113.10:80/TCP is already an external IP of Service default/web: \
         one address and port can lead to one Service port only",
    );
}

#[test]
fn load_balancer_ingress_needs_type_load_balancer_and_an_ip() {
    let text = edit(EXPOSED, "  type: LoadBalancer\n", "  type: NodePort\n");
    let text = edit(&text, "  healthCheckNodePort: 32000\n", "");
    let text = edit(&text, "  externalTrafficPolicy: Local\n", "");
    let text = edit(&text, "  loadBalancerSourceRanges: [\" 192.168.50.100/32 \", 10.0.0.0/8]\n", "");
    let errs = parse_errors(&text);
    assert_has(
        &errs,
        at(&text, "[{ip: 198"),
        &field("status.loadBalancer.ingress"),
        "load-balancer ingress only applies to type LoadBalancer (this Service is NodePort)",
    );
    let text = edit(EXPOSED, "ingress: [{ip: 198.51.100.7}]", "ingress: [{hostname: lb.example.com}]");
    assert_only(
        &parse_errors(&text),
        at(&text, "lb.example.com"),
        &field("status.loadBalancer.ingress[0].hostname"),
        "hostname ingress is not supported: give an ip",
    );
    // With both, the ip is used.
    let text = edit(
        EXPOSED,
        "ingress: [{ip: 198.51.100.7}]",
        "ingress: [{ip: 198.51.100.7, hostname: lb.example.com}]",
    );
    assert_eq!(parse(&text).cluster.services[0].load_balancer_ips.len(), 1);
    let text = edit(EXPOSED, "ingress: [{ip: 198.51.100.7}]", "ingress: [{ip: 10.96.7.7}]");
    assert_only(
        &parse_errors(&text),
        at(&text, "10.96.7.7"),
        &field("status.loadBalancer.ingress[0].ip"),
        "10.96.7.7 is inside serviceCIDR 10.96.0.0/12: a load-balancer IP must be outside the cluster's \
         service and pod networks (e.g. 203.0.113.10)",
    );
}

#[test]
fn ingress_ip_mode_proxy_is_left_to_the_load_balancer() {
    let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
    let text = edit(
        EXPOSED,
        "ingress: [{ip: 198.51.100.7}]",
        "ingress: [{ip: 198.51.100.7, ipMode: Proxy}, {ip: 198.51.100.8, ipMode: VIP}]",
    );
    let s = parse(&text);
    let web = &s.cluster.services[0];
    assert_eq!(web.load_balancer_ips, [ip("198.51.100.8")]);
    assert_eq!(web.proxied_load_balancer_ips, [ip("198.51.100.7")]);
    let text =
        edit(EXPOSED, "ingress: [{ip: 198.51.100.7}]", "ingress: [{ip: 198.51.100.7, ipMode: Tunnel}]");
    assert_only(
        &parse_errors(&text),
        at(&text, "Tunnel}"),
        &field("status.loadBalancer.ingress[0].ipMode"),
        "unknown ipMode \"Tunnel\" (expected VIP or Proxy)",
    );
}

#[test]
fn source_ranges_are_cidrs_of_load_balancers() {
    let text = edit(EXPOSED, "\" 192.168.50.100/32 \"", "\" 192.168.50.100/24 \"");
    assert_only(
        &parse_errors(&text),
        at(&text, "\" 192.168.50.100/24 \""),
        &field("spec.loadBalancerSourceRanges[0]"),
        "192.168.50.100/24 has host bits set (did you mean 192.168.50.0/24?)",
    );
    let text = edit(EXPOSED, "10.0.0.0/8]", "10.0.0.1]");
    assert_only(
        &parse_errors(&text),
        at(&text, "10.0.0.1]"),
        &field("spec.loadBalancerSourceRanges[1]"),
        "\"10.0.0.1\" is an address; a CIDR is expected here (e.g. 10.244.0.0/16)",
    );
    let text = edit(
        WEB_NODEPORT,
        "  type: NodePort\n",
        "  type: NodePort\n  loadBalancerSourceRanges: [10.0.0.0/8]\n",
    );
    assert_only(
        &parse_errors(&text),
        at(&text, "[10.0.0.0/8]"),
        &field("spec.loadBalancerSourceRanges"),
        "loadBalancerSourceRanges only apply to type LoadBalancer (this Service is NodePort)",
    );
}

/// The `WEB` fixture of the other tests (a NodePort Service).
const WEB_NODEPORT: &str = super::WEB;

#[test]
fn health_check_node_port_goes_with_load_balancer_and_local_policy() {
    let text = edit(WEB_NODEPORT, "  type: NodePort\n", "  type: NodePort\n  healthCheckNodePort: 32000\n");
    assert_only(
        &parse_errors(&text),
        at(&text, "32000"),
        &field("spec.healthCheckNodePort"),
        "healthCheckNodePort only applies to type LoadBalancer with externalTrafficPolicy Local (this Service is NodePort)",
    );
    let text = edit(EXPOSED, "  externalTrafficPolicy: Local\n", "");
    assert_only(
        &parse_errors(&text),
        at(&text, "32000"),
        &field("spec.healthCheckNodePort"),
        "healthCheckNodePort only applies with externalTrafficPolicy Local (this Service's is Cluster)",
    );
    // The API server always allocates one; the harness allocates none.
    let text = edit(EXPOSED, "  healthCheckNodePort: 32000\n", "");
    assert_only(
        &parse_errors(&text),
        at(&text, "type: LoadBalancer"),
        &field("spec.healthCheckNodePort"),
        "required for type LoadBalancer with externalTrafficPolicy Local: the API server would allocate one, \
         and the harness does not allocate ports",
    );
    let text = edit(EXPOSED, "healthCheckNodePort: 32000", "healthCheckNodePort: 0");
    assert_only(
        &parse_errors(&text),
        at_in(&text, "healthCheckNodePort: 0", "0"),
        &field("spec.healthCheckNodePort"),
        "0 is not a port number (1-65535)",
    );
}

#[test]
fn health_check_node_ports_are_unique_against_every_node_port() {
    let text = edit(EXPOSED, "healthCheckNodePort: 32000", "healthCheckNodePort: 30080");
    assert_only(
        &parse_errors(&text),
        at_in(&text, "healthCheckNodePort: 30080", "30080"),
        &field("spec.healthCheckNodePort"),
        "healthCheckNodePort 30080 is already node port 30080/TCP of Service default/web",
    );
    // A later Service's node port, of any protocol, can't take it either.
    let text = with_service(
        "  type: NodePort\n  clusterIP: 10.96.0.21\n  ports: [{port: 53, protocol: UDP, nodePort: 32000}]\n",
    );
    assert_only(
        &parse_errors(&text),
        at_nth(&text, "32000", 1),
        "Service default/other: spec.ports[0].nodePort",
        "node port 32000/UDP is already the healthCheckNodePort of Service default/web",
    );
}

#[test]
fn session_affinity_with_kubernetes_defaults_and_limits() {
    let text = edit(EXPOSED, "  sessionAffinityConfig: {clientIP: {timeoutSeconds: 1}}\n", "");
    assert_eq!(
        parse(&text).cluster.services[0].session_affinity,
        SessionAffinity::ClientIp { timeout_seconds: 10800 }
    );
    let text = edit(EXPOSED, "timeoutSeconds: 1}", "timeoutSeconds: 86400}");
    assert_eq!(
        parse(&text).cluster.services[0].session_affinity,
        SessionAffinity::ClientIp { timeout_seconds: 86400 }
    );
    for bad in ["0", "86401", "-5"] {
        let text = edit(EXPOSED, "timeoutSeconds: 1}", &format!("timeoutSeconds: {bad}}}"));
        assert_only(
            &parse_errors(&text),
            at_in(&text, &format!("timeoutSeconds: {bad}"), bad),
            &field("spec.sessionAffinityConfig.clientIP.timeoutSeconds"),
            &format!("timeoutSeconds must be between 1 and 86400 (one day), not {bad}"),
        );
    }
    let text = edit(EXPOSED, "sessionAffinity: ClientIP", "sessionAffinity: None");
    assert_only(
        &parse_errors(&text),
        at(&text, "{clientIP"),
        &field("spec.sessionAffinityConfig"),
        "sessionAffinityConfig only applies with sessionAffinity: ClientIP (the API server would drop it)",
    );
    let text = edit(EXPOSED, "sessionAffinity: ClientIP", "sessionAffinity: Cookie");
    assert_has(
        &parse_errors(&text),
        at(&text, "Cookie"),
        &field("spec.sessionAffinity"),
        "unknown sessionAffinity \"Cookie\" (expected None or ClientIP)",
    );
}

#[test]
fn a_load_balancer_goes_without_node_ports_only_when_it_allocates_none() {
    let text = edit(EXPOSED, ", nodePort: 30080}", "}");
    assert_only(
        &parse_errors(&text),
        at(&text, "{name: http"),
        &field("spec.ports[0].nodePort"),
        "required for type LoadBalancer: the harness does not allocate node ports \
         (or set allocateLoadBalancerNodePorts: false for a load balancer without them)",
    );
    let text = edit(
        &text,
        "  type: LoadBalancer\n",
        "  type: LoadBalancer\n  allocateLoadBalancerNodePorts: false\n",
    );
    // Probes of its node port now have nothing to reach.
    assert_has(
        &parse_errors(&text),
        at_in(&text, "nodePort: node-a, address: 192.168.50.21", "node-a"),
        "spec.probes[3].to.nodePort",
        "port http of Service web has no nodePort (the Service is not of type NodePort or LoadBalancer, \
         or it sets allocateLoadBalancerNodePorts: false)",
    );
    let probes =
        |to: &str| format!("      to: {{service: web, port: http, nodePort: node-a, address: {to}}}\n");
    let text = edit(&text, &probes("192.168.50.21"), "      to: {service: web, port: http}\n");
    let text = edit(&text, &probes("127.0.0.1"), "      to: {service: web, port: http}\n");
    let s = parse(&text);
    assert_eq!(s.cluster.services[0].ports[0].node_port, None);
    // The health-check node port is allocated regardless (the test fixture gives it).
    assert_eq!(s.cluster.services[0].health_check_node_port, Some(32000));
    // Node ports a client gives are kept.
    let text = edit(
        EXPOSED,
        "  type: LoadBalancer\n",
        "  type: LoadBalancer\n  allocateLoadBalancerNodePorts: false\n",
    );
    assert_eq!(parse(&text).cluster.services[0].ports[0].node_port, Some(30080));
}

#[test]
fn external_host_routes_go_through_nodes_outside_the_node_network() {
    let host = "    - {name: outside, ip: 192.168.50.100}\n";
    let routed = |routes: &str| {
        edit(EXPOSED, host, &format!("    - {{name: outside, ip: 192.168.50.100, routes: {routes}}}\n"))
    };
    let s = parse(&routed("[{to: 10.96.0.0/12, via: node-b}, {to: 10.96.0.0/16, via: node-a}]"));
    let outside = s.cluster.external_host("outside").unwrap();
    // The longest prefix wins, as in the host's routing table.
    let via = |ip: &str| outside.route_to(ip.parse().unwrap()).map(|r| r.via.as_str());
    assert_eq!(
        (via("10.96.0.20"), via("10.100.0.1"), via("10.244.1.1")),
        (Some("node-a"), Some("node-b"), None)
    );
    for (routes, needle, field, message) in [
        ("[{to: 10.96.0.0/12, via: node-z}]", "node-z", "via", "no node named \"node-z\""),
        ("[{to: 10.96.0.1/12, via: node-a}]", "10.96.0.1/12", "to", "has host bits set"),
        (
            "[{to: 192.168.0.0/16, via: node-a}]",
            "192.168.0.0/16",
            "to",
            "overlaps the node network 192.168.50.0/24",
        ),
        ("[{to: fd00::/64, via: node-a}]", "fd00::/64", "to", "this host has no IPv6 address"),
    ] {
        let text = routed(routes);
        assert_has(
            &parse_errors(&text),
            at(&text, needle),
            &format!("spec.externalHosts[0].routes[0].{field}"),
            message,
        );
    }
}
