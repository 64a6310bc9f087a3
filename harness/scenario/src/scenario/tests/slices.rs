//! Given EndpointSlices: how they become endpoints, and what is wrong with them.

use super::*;

const SLICE: &str = r#"---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kube-dns-abc
  namespace: kube-system
  labels: {kubernetes.io/service-name: kube-dns}
addressType: IPv4
ports:
  - {name: dns, port: 53, protocol: UDP}
endpoints:
  - addresses: [10.244.1.5]
  - addresses: [10.244.2.7]
    conditions: {ready: false}
  - addresses: [10.244.1.5]
    conditions: {ready: false}
"#;

fn with_slice(edits: &[(&str, &str)]) -> String {
    let mut slice = SLICE.to_string();
    for (old, new) in edits {
        slice = edit(&slice, old, new);
    }
    // The slice decides who serves, so the probe's stated backends would no longer hold.
    let dns = edit(KUBE_DNS, "backends: [coredns-a, coredns-b], ", "");
    format!("{dns}{slice}")
}

#[test]
fn given_slices_replace_derivation() {
    let s = load(&with_slice(&[]));
    let (_, dns) = s.cluster.service_port("kube-dns", "dns").unwrap();
    let endpoints: Vec<(String, bool, bool, bool, Option<&str>)> = dns
        .endpoints
        .iter()
        .map(|e| (e.address().to_string(), e.ready, e.serving, e.terminating, e.node.as_deref()))
        .collect();
    // Deduplicated by address (the first wins); serving defaults to ready; without nodeName an
    // endpoint is local to no node, as kube-proxy reads it.
    assert_eq!(
        endpoints,
        [
            ("10.244.1.5:53".to_string(), true, true, false, None),
            ("10.244.2.7:53".to_string(), false, false, false, None),
        ]
    );
    // The slice has no dns-tcp port, and nothing is derived for a Service that has slices.
    let (_, tcp) = s.cluster.service_port("kube-dns", "dns-tcp").unwrap();
    assert!(tcp.endpoints.is_empty());
    let names: Vec<_> = s.objects.endpoint_slices.iter().filter_map(|e| e.metadata.name.as_deref()).collect();
    assert_eq!(names, ["kube-dns-abc"]);
}

#[test]
fn explicit_conditions_are_kept() {
    let text = with_slice(&[(
        "conditions: {ready: false}\n  - addresses: [10.244.1.5]",
        "conditions: {ready: false, serving: true, terminating: true}\n  - addresses: [10.244.1.5]",
    )]);
    let s = load(&text);
    let e = &s.cluster.service_port("kube-dns", "dns").unwrap().1.endpoints[1];
    assert_eq!((e.ready, e.serving, e.terminating), (false, true, true));
}

#[test]
fn the_service_name_label_is_required_and_must_name_a_service() {
    let text = with_slice(&[("  labels: {kubernetes.io/service-name: kube-dns}\n", "")]);
    assert_only(
        &errors(&text),
        at_in(&text, "  name: kube-dns-abc", "name"),
        "EndpointSlice kube-system/kube-dns-abc: metadata.labels[\"kubernetes.io/service-name\"]",
        "missing label kubernetes.io/service-name: it names the Service this slice belongs to",
    );
    let text = with_slice(&[("service-name: kube-dns}", "service-name: kube-dn}")]);
    assert_only(
        &errors(&text),
        at(&text, "kube-dn}"),
        "EndpointSlice kube-system/kube-dns-abc: metadata.labels[\"kubernetes.io/service-name\"]",
        "no Service named \"kube-dn\" in the scenario (known: kube-dns)",
    );
    let text = with_slice(&[("  namespace: kube-system\n  labels", "  labels")]);
    assert_only(
        &errors(&text),
        at_in(&text, "service-name: kube-dns}", "kube-dns"),
        "EndpointSlice default/kube-dns-abc: metadata.labels[\"kubernetes.io/service-name\"]",
        "Service kube-dns is in namespace kube-system, but this slice is in default: \
         a slice belongs to the Service of its own namespace",
    );
}

#[test]
fn endpoint_addresses_must_be_pods() {
    let text = with_slice(&[("  - addresses: [10.244.2.7]", "  - addresses: [10.244.2.8]")]);
    let errs = errors(&text);
    assert_only(
        &errs,
        at(&text, "10.244.2.8"),
        "EndpointSlice kube-system/kube-dns-abc: endpoints[1].addresses[0]",
        "10.244.2.8 is not the address of any Pod or external host in the scenario (the harness needs one to \
         answer; pods: 10.244.1.20 client, 10.244.1.5 coredns-a, 10.244.2.7 coredns-b)",
    );
    let text = with_slice(&[("  - addresses: [10.244.2.7]", "  - addresses: [10.244.2.7, 10.244.1.20]")]);
    assert_only(
        &errors(&text),
        at(&text, "10.244.1.20]"),
        "EndpointSlice kube-system/kube-dns-abc: endpoints[1].addresses[1]",
        "several addresses in one endpoint are ambiguous (kube-proxy uses only the first): give each its own endpoint",
    );
}

#[test]
fn endpoint_ports_must_be_declared_by_the_pod() {
    let text = with_slice(&[("  - addresses: [10.244.2.7]", "  - addresses: [10.244.1.20]")]);
    assert_only(
        &errors(&text),
        at(&text, "10.244.1.20]"),
        "EndpointSlice kube-system/kube-dns-abc: endpoints[1].addresses[0]",
        "Pod client declares no containerPort 53/UDP; declare it in the Pod's spec.containers[].ports \
         (the harness serves declared container ports only)",
    );
}

#[test]
fn derived_ports_must_be_declared_too() {
    let text = edit(
        KUBE_DNS,
        "        - {name: dns, containerPort: 53, protocol: UDP}\n        - {name: dns-tcp, containerPort: 53, protocol: TCP}\nstatus:\n  podIP: 10.244.2.7",
        "        - {name: dns-tcp, containerPort: 53, protocol: TCP}\nstatus:\n  podIP: 10.244.2.7",
    );
    assert_only(
        &errors(&text),
        at_in(&text, "targetPort: 53", "53"),
        "Service kube-system/kube-dns: spec.ports[0].targetPort",
        "selects Pod coredns-b declares no containerPort 53/UDP; declare it in the Pod's spec.containers[].ports \
         (the harness serves declared container ports only)",
    );
}

#[test]
fn slice_ports_must_match_a_service_port() {
    let text =
        with_slice(&[("{name: dns, port: 53, protocol: UDP}", "{name: dns, port: 53, protocol: TCP}")]);
    assert_only(
        &errors(&text),
        at(&text, "{name: dns, port: 53, protocol: TCP}"),
        "EndpointSlice kube-system/kube-dns-abc: ports[0]",
        "port \"dns\" (TCP) matches no port of Service kube-dns (ports: \"dns\" (53/UDP), \"dns-tcp\" (53/TCP)); \
         slice ports match service ports by name and protocol",
    );
}

#[test]
fn only_slices_of_the_scenarios_family() {
    let text = with_slice(&[("addressType: IPv4", "addressType: IPv6")]);
    assert_only(
        &errors(&text),
        at(&text, "IPv6"),
        "EndpointSlice kube-system/kube-dns-abc: addressType",
        &mixed(&text, "this is"),
    );
    let text = with_slice(&[("addressType: IPv4", "addressType: FQDN")]);
    assert_only(
        &errors(&text),
        at(&text, "FQDN"),
        "EndpointSlice kube-system/kube-dns-abc: addressType",
        "addressType FQDN is not supported (proxies ignore FQDN slices)",
    );
}

#[test]
fn endpoint_node_names_must_agree_with_the_pod() {
    let text = with_slice(&[(
        "    conditions: {ready: false}\n  - addresses: [10.244.1.5]",
        "    nodeName: node-a\n  - addresses: [10.244.1.5]",
    )]);
    assert_only(
        &errors(&text),
        at(&text, "node-a\n  - addresses"),
        "EndpointSlice kube-system/kube-dns-abc: endpoints[1].nodeName",
        "Pod coredns-b at 10.244.2.7 runs on node node-b, not node-a",
    );
    let text = with_slice(&[(
        "    conditions: {ready: false}\n  - addresses: [10.244.1.5]",
        "    nodeName: node-q\n  - addresses: [10.244.1.5]",
    )]);
    assert_only(
        &errors(&text),
        at(&text, "node-q"),
        "EndpointSlice kube-system/kube-dns-abc: endpoints[1].nodeName",
        "no node named \"node-q\" in the scenario (known: node-a, node-b)",
    );
}

#[test]
fn an_endpoint_may_be_an_external_host_local_to_no_node() {
    let host = "  externalHosts:\n    - {name: db, ip: 192.168.50.200}\n";
    let text = with_slice(&[("  - addresses: [10.244.2.7]", "  - addresses: [192.168.50.200]")]);
    let text = edit(&text, "  probes:\n", &format!("{host}  probes:\n"));
    let s = load(&text);
    let (_, dns) = s.cluster.service_port("kube-dns", "dns").unwrap();
    let db = dns.endpoints.iter().find(|e| e.pod == "db").unwrap();
    assert_eq!((db.ip.to_string(), db.node.as_deref()), ("192.168.50.200".into(), None));
}

#[test]
fn an_endpoint_may_be_a_nodes_own_address() {
    let text = with_slice(&[("  - addresses: [10.244.2.7]", "  - addresses: [192.168.50.12]")]);
    let s = load(&text);
    let (_, dns) = s.cluster.service_port("kube-dns", "dns").unwrap();
    let ep = dns.endpoints.iter().find(|e| e.ip.to_string() == "192.168.50.12").unwrap();
    assert_eq!(ep.pod, s.cluster.nodes.iter().find(|n| n.ip() == ep.ip).unwrap().name);
}
