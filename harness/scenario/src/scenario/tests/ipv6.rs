//! Single-stack IPv6: every kind of address accepted in IPv6, and a scenario that mixes the
//! families rejected once, at the first address of the other family.

use super::*;
use crate::model::{IpFamily, Target};

const SHIPPED_CLUSTER_IP: &str = include_str!("../../../../../scenarios/ipv6-cluster-ip.yaml");
const SHIPPED_NODE_PORT: &str = include_str!("../../../../../scenarios/ipv6-node-port.yaml");
const SHIPPED_HAIRPIN_AND_REJECT: &str =
    include_str!("../../../../../scenarios/ipv6-hairpin-and-reject.yaml");

/// An IPv6 NodePort Service with an external IP, a load-balancer ingress IP and source ranges,
/// a node with a secondary IP, an external host, and probes of the address forms.
const V6: &str = r#"apiVersion: packetproof.dev/v1alpha1
kind: Scenario
metadata: {name: v6}
spec:
  cluster:
    podCIDR: "fd00:10:244::/56"
    serviceCIDR: "fd00:10:96::/112"
    nodeNetwork: "fd00:192:168:50::/64"
  proxyConfig:
    nodePortAddresses: ["fd00:192:168:50::/64"]
  nodes:
    - {name: node-a, ip: "fd00:192:168:50::11", podCIDR: "fd00:10:244:1::/64", secondaryIPs: ["fd00:192:168:50::21"]}
    - {name: node-b, ip: "fd00:192:168:50::12", podCIDR: "fd00:10:244:2::/64"}
  externalHosts:
    - {name: outside, ip: "fd00:192:168:50::100"}
  probes:
    - name: outside-to-secondary
      from: {external: outside}
      to: {service: web, port: http, nodePort: node-a, address: "fd00:192:168:50::21"}
    - name: outside-to-lb
      from: {external: outside}
      to: {service: web, port: http, loadBalancer: "fd00:203:0:113::7", via: node-b}
    - name: node-to-raw-cluster-ip
      from: {node: node-a}
      to: {address: "fd00:10:96::20", port: 80}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  type: LoadBalancer
  clusterIP: "fd00:10:96::20"
  clusterIPs: ["fd00:10:96::20"]
  ipFamilies: [IPv6]
  ipFamilyPolicy: SingleStack
  externalIPs: ["fd00:203:0:113::10"]
  loadBalancerSourceRanges: ["fd00:192:168:50::/64"]
  selector: {app: web}
  ports:
    - {name: http, port: 80, targetPort: 8080, nodePort: 30080}
status:
  loadBalancer:
    ingress: [{ip: "fd00:203:0:113::7"}]
---
apiVersion: v1
kind: Pod
metadata: {name: web-a, labels: {app: web}}
spec:
  nodeName: node-a
  containers:
    - name: web
      ports: [{containerPort: 8080}]
status: {podIP: "fd00:10:244:1::10", podIPs: [{ip: "fd00:10:244:1::10"}]}
"#;

/// The error for the first IPv4 value, shown as `this`, in [`V6`]-like text whose first
/// address is its podCIDR `fd00:10:244::/56`.
fn mixed_v4(text: &str, this: &str) -> String {
    let line = at(text, "podCIDR: \"fd00:10:244::/56\"").0;
    format!(
        "{} ({this} IPv4, but the first address, fd00:10:244::/56 at spec.cluster.podCIDR line {line}, is IPv6)",
        crate::scenario::families::DUAL_STACK
    )
}

#[test]
fn every_kind_of_address_is_accepted_in_ipv6() {
    let s = parse(V6);
    let c = &s.cluster;
    assert_eq!(c.ip_family(), IpFamily::V6);
    assert_eq!(
        c.node("node-a").unwrap().secondary_ips,
        ["fd00:192:168:50::21".parse::<std::net::IpAddr>().unwrap()]
    );
    let web = c.service("web").unwrap();
    assert_eq!(web.external_ips, ["fd00:203:0:113::10".parse::<std::net::IpAddr>().unwrap()]);
    assert_eq!(web.load_balancer_ips, ["fd00:203:0:113::7".parse::<std::net::IpAddr>().unwrap()]);
    assert_eq!(web.load_balancer_source_ranges, ["fd00:192:168:50::/64".parse::<ipnet::IpNet>().unwrap()]);
    assert_eq!(c.proxy.node_port_addresses, ["fd00:192:168:50::/64".parse::<ipnet::IpNet>().unwrap()]);
    assert_eq!(web.ports[0].endpoints[0].ip, "fd00:10:244:1::10".parse::<std::net::IpAddr>().unwrap());
    // The derived EndpointSlice is of the Service's family.
    assert_eq!(s.objects.endpoint_slices[0].address_type, "IPv6");
    assert_eq!(
        s.probes[2].to,
        Target::Address("[fd00:10:96::20]:80".parse().unwrap()),
        "a raw IPv6 address target"
    );
}

#[test]
fn the_shipped_ipv6_scenarios_load() {
    for text in [SHIPPED_CLUSTER_IP, SHIPPED_NODE_PORT, SHIPPED_HAIRPIN_AND_REJECT] {
        let s = load(text);
        assert_eq!(s.cluster.ip_family(), IpFamily::V6, "{}", s.name);
        assert!(s.cluster.services.iter().all(|svc| svc.cluster_ip().is_ipv6()), "{}", s.name);
    }
    // The cluster-IP scenario's endpoints come from its own addressType IPv6 slice.
    let s = load(SHIPPED_CLUSTER_IP);
    assert_eq!(s.objects.endpoint_slices.len(), 1);
    assert_eq!(s.objects.endpoint_slices[0].address_type, "IPv6");
    assert_eq!(s.cluster.service("web").unwrap().ports[0].endpoints.len(), 2);
}

#[test]
fn an_address_of_the_other_family_is_reported_once_at_the_first() {
    // A pod IP of IPv4, and a second one further down: one error, at the first.
    let text =
        edit(V6, "podIP: \"fd00:10:244:1::10\", podIPs: [{ip: \"fd00:10:244:1::10\"}]", "podIP: 10.244.1.10");
    let text = edit(&text, "externalIPs: [\"fd00:203:0:113::10\"]", "externalIPs: [203.0.113.10]");
    assert_only(
        &parse_errors(&text),
        at(&text, "203.0.113.10"),
        "Service default/web: spec.externalIPs[0]",
        &mixed_v4(&text, "203.0.113.10 is"),
    );
    let text = edit(V6, "ip: \"fd00:192:168:50::12\"", "ip: 192.168.50.12");
    assert_only(
        &parse_errors(&text),
        at(&text, "192.168.50.12"),
        "spec.nodes[1].ip",
        &mixed_v4(&text, "192.168.50.12 is"),
    );
    // Service CIDR and pod CIDR of different families: the second network is the error.
    let text = edit(V6, "serviceCIDR: \"fd00:10:96::/112\"", "serviceCIDR: 10.96.0.0/12");
    let errs = parse_errors(&text);
    assert_eq!(errs[0].field, "spec.cluster.serviceCIDR", "{errs:?}");
    assert_eq!(errs[0].message, mixed_v4(&text, "10.96.0.0/12 is"));
    assert_eq!(
        errs.iter().filter(|e| e.message.starts_with("the cluster is single-stack")).count(),
        1,
        "{errs:?}"
    );
}

#[test]
fn families_named_in_kubernetes_objects_must_be_the_scenarios() {
    let text = edit(V6, "ipFamilies: [IPv6]", "ipFamilies: [IPv6, IPv4]");
    assert_only(
        &parse_errors(&text),
        at_in(&text, "[IPv6, IPv4]", "IPv4"),
        "Service default/web: spec.ipFamilies[1]",
        &mixed_v4(&text, "this is"),
    );
    let text = edit(V6, "ipFamilies: [IPv6]", "ipFamilies: [IPv7]");
    assert_only(
        &parse_errors(&text),
        at(&text, "IPv7"),
        "Service default/web: spec.ipFamilies[0]",
        "unknown IP family \"IPv7\" (expected IPv4 or IPv6)",
    );
    // A second pod IP (a dual-stack pod lists one per family).
    let text = edit(
        V6,
        "podIPs: [{ip: \"fd00:10:244:1::10\"}]",
        "podIPs: [{ip: \"fd00:10:244:1::10\"}, {ip: 10.244.1.10}]",
    );
    assert_only(
        &parse_errors(&text),
        at(&text, "10.244.1.10"),
        "Pod default/web-a: status.podIPs[1].ip",
        &mixed_v4(&text, "10.244.1.10 is"),
    );
    // A slice's addressType is a family too.
    let slice = "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: web-abc\n  labels: {kubernetes.io/service-name: web}\naddressType: IPv4\nports: [{name: http, port: 8080}]\nendpoints:\n  - addresses: [\"fd00:10:244:1::10\"]\n";
    let text = format!("{V6}{slice}");
    assert_only(
        &parse_errors(&text),
        at_in(&text, "addressType: IPv4", "IPv4"),
        "EndpointSlice default/web-abc: addressType",
        &mixed_v4(&text, "this is"),
    );
    // addressType IPv6 is accepted.
    let text = format!("{V6}{}", slice.replace("addressType: IPv4", "addressType: IPv6"));
    assert_eq!(parse(&text).objects.endpoint_slices[0].address_type, "IPv6");
}

#[test]
fn node_ports_on_loopback_are_ipv4_only() {
    let text = edit(V6, "address: \"fd00:192:168:50::21\"", "address: \"::1\"");
    assert_only(
        &parse_errors(&text),
        at(&text, "\"::1\""),
        "spec.probes[0].to.address",
        "kube-proxy serves no node ports on ::1 (localhost node ports are IPv4 only: 127.0.0.1 in an IPv4 cluster)",
    );
    let text = edit(V6, "address: \"fd00:192:168:50::21\"", "address: 127.0.0.1");
    assert_only(
        &parse_errors(&text),
        at(&text, "127.0.0.1"),
        "spec.probes[0].to.address",
        &mixed_v4(&text, "127.0.0.1 is"),
    );
    // An address that is not the node's names no 127.0.0.1 alternative in IPv6.
    let text = edit(V6, "address: \"fd00:192:168:50::21\"", "address: \"fd00:192:168:50::99\"");
    assert_only(
        &parse_errors(&text),
        at(&text, "\"fd00:192:168:50::99\""),
        "spec.probes[0].to.address",
        "fd00:192:168:50::99 is not an address of node node-a (its addresses: fd00:192:168:50::11, fd00:192:168:50::21)",
    );
}

#[test]
fn ipv6_reserved_and_special_addresses() {
    let text = edit(
        V6,
        "podIP: \"fd00:10:244:1::10\", podIPs: [{ip: \"fd00:10:244:1::10\"}]",
        "podIP: \"fd00:10:244:1::\"",
    );
    assert_only(
        &parse_errors(&text),
        at(&text, "\"fd00:10:244:1::\""),
        "Pod default/web-a: status.podIP",
        "fd00:10:244:1:: is the subnet-router anycast address of the podCIDR fd00:10:244:1::/64 of node node-a, not a host address",
    );
    for (ip, kind) in [
        ("::1", "a loopback address"),
        ("fe80::10", "a link-local address"),
        ("ff02::10", "a multicast address"),
    ] {
        let text = edit(V6, "externalIPs: [\"fd00:203:0:113::10\"]", &format!("externalIPs: [\"{ip}\"]"));
        assert_only(
            &parse_errors(&text),
            at(&text, &format!("\"{ip}\"")),
            "Service default/web: spec.externalIPs[0]",
            &format!("{ip} is {kind}, which cannot be an external IP"),
        );
    }
    let text = edit(V6, "ipFamilyPolicy: SingleStack", "ipFamilyPolicy: RequireDualStack");
    assert_only(
        &parse_errors(&text),
        at(&text, "RequireDualStack"),
        "Service default/web: spec.ipFamilyPolicy",
        &format!("{} (RequireDualStack asks for two)", crate::scenario::families::DUAL_STACK),
    );
}
