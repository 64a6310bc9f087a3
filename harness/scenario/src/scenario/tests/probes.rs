//! Probe sources, targets, protocols and stated expectations.

use super::*;
use crate::scenario::target_form::FORMS;

#[test]
fn unknown_source_lists_the_known_names() {
    let text = edit(KUBE_DNS, "from: {pod: client}", "from: {pod: clinet}");
    assert_only(
        &errors(&text),
        at(&text, "clinet"),
        "spec.probes[0].from.pod",
        "no Pod named \"clinet\" in the scenario (known: client, coredns-a, coredns-b)",
    );
    let text = edit(WEB, "from: {node: node-a}", "from: {node: node-z}");
    assert_only(
        &errors(&text),
        at(&text, "node-z"),
        "spec.probes[2].from.node",
        "no node named \"node-z\" in the scenario (known: node-a, node-b)",
    );
    let text = edit(WEB, "from: {external: outside}", "from: {external: inside}");
    assert_only(
        &errors(&text),
        at(&text, "inside"),
        "spec.probes[1].from.external",
        "no external host named \"inside\" in the scenario (known: outside)",
    );
}

#[test]
fn source_needs_exactly_one_key() {
    let text = edit(KUBE_DNS, "from: {pod: client}", "from: {}");
    assert_only(
        &errors(&text),
        at(&text, "{}"),
        "spec.probes[0].from",
        "give exactly one of pod, pods, node, external (got none)",
    );
    let text = edit(KUBE_DNS, "from: {pod: client}", "from: {pod: client, node: node-a}");
    assert_only(
        &errors(&text),
        at(&text, "{pod: client, node"),
        "spec.probes[0].from",
        "give exactly one of pod, pods, node, external (got pod and node)",
    );
}

#[test]
fn several_clients_make_a_part_each() {
    let text = edit(WEB, "from: {pod: client}", "from: {pods: [client, web-a]}");
    // web-a reaches itself through the Service masqueraded (a hairpin): the oracle's error
    // names the entry in the file, whichever part it is about.
    assert_only(
        &errors(&text),
        at(&text, "{verdict: answered, source: client}"),
        "spec.probes[0].expect",
        "the scenario expects source Client at web-a, not masq node-a 10.244.1.1, but Kubernetes semantics say \
         web-a|web-b (ClusterIP default/web:http, 2 usable endpoints)",
    );
    let s = parse(&text);
    let parts: Vec<(&str, String, Option<u32>)> = s
        .probes
        .iter()
        .filter(|p| p.clients.as_ref().is_some_and(|c| c.probe == "pod-to-web"))
        .map(|p| (p.name.as_str(), p.from.to_string(), p.clients.as_ref().map(|c| c.count)))
        .collect();
    assert_eq!(
        parts,
        [
            ("pod-to-web[client]", "pod client".to_string(), Some(2)),
            ("pod-to-web[web-a]", "pod web-a".to_string(), Some(2)),
        ]
    );
    assert_eq!(s.probes.len(), 4, "the other probes stay as they are");
}

#[test]
fn several_clients_are_distinct_pods_and_plain_requests() {
    let text = edit(WEB, "from: {pod: client}", "from: {pods: [client]}");
    assert_only(
        &errors(&text),
        at(&text, "[client]"),
        "spec.probes[0].from.pods",
        "`pods` names 2 to 64 clients, not 1 (one client is `pod`)",
    );
    let text = edit(WEB, "from: {pod: client}", "from: {pods: [client, client]}");
    assert_only(
        &errors(&text),
        at_nth(&text, "client", 1),
        "spec.probes[0].from.pods[1]",
        "pod \"client\" is already a client (spec.probes[0].from.pods[0])",
    );
    let text = edit(WEB, "from: {pod: client}", "from: {pods: [client, clinet]}");
    assert_only(
        &errors(&text),
        at(&text, "clinet"),
        "spec.probes[0].from.pods[1]",
        "no Pod named \"clinet\" in the scenario (known: client, web-a, web-b)",
    );
    let text = edit(WEB, "from: {pod: client}", "from: {pods: [client, web-a]}\n      sourcePort: 5000");
    assert_only(
        &errors(&text),
        at(&text, "5000"),
        "spec.probes[0].sourcePort",
        "`sourcePort` is not for a probe from several clients (`from: {pods: [...]}`): give each client a probe of its own",
    );
    // A part's name is a probe name like any other.
    let text = edit(
        WEB,
        "    - from: {node: node-a}\n",
        "    - name: pod-to-web[web-a]\n      from: {node: node-a}\n",
    );
    let text = edit(&text, "from: {pod: client}", "from: {pods: [client, web-a]}");
    assert!(
        show(&errors(&text)).contains("duplicate probe name \"pod-to-web[web-a]\""),
        "{}",
        show(&errors(&text))
    );
}

#[test]
fn target_needs_service_health_check_or_address() {
    let text = edit(KUBE_DNS, "to: {service: kube-dns, port: dns}", "to: {port: dns}");
    assert_only(
        &errors(&text),
        at(&text, "{port: dns}"),
        "spec.probes[0].to",
        &format!("no target: give one of {FORMS}"),
    );
    let text = edit(
        KUBE_DNS,
        "to: {service: kube-dns, port: dns}",
        "to: {service: kube-dns, address: 10.96.0.10, port: dns}",
    );
    assert_only(
        &errors(&text),
        at(&text, "address: 10.96.0.10"),
        "spec.probes[0].to.address",
        &format!("address does not go with {{service, port}}; the target forms are {FORMS}"),
    );
}

#[test]
fn unknown_service() {
    let text = edit(WEB, "to: {service: web, port: http}", "to: {service: web2, port: http}");
    assert_only(
        &errors(&text),
        at(&text, "web2"),
        "spec.probes[0].to.service",
        "no Service named \"web2\" in the scenario (known: web)",
    );
}

#[test]
fn unknown_or_ambiguous_service_port() {
    let text = edit(KUBE_DNS, "port: dns}", "port: dnss}");
    assert_only(
        &errors(&text),
        at(&text, "dnss"),
        "spec.probes[0].to.port",
        "Service kube-dns has no port \"dnss\" (known: dns (53/UDP), dns-tcp (53/TCP))",
    );
    let text = edit(KUBE_DNS, "to: {service: kube-dns, port: dns}", "to: {service: kube-dns}");
    assert_only(
        &errors(&text),
        at(&text, "{service: kube-dns}"),
        "spec.probes[0].to.port",
        "Service kube-dns has 2 ports: name one (known: dns (53/UDP), dns-tcp (53/TCP))",
    );
    let text = edit(KUBE_DNS, "port: dns}", "port: 53}");
    assert_only(
        &errors(&text),
        at(&text, "53}"),
        "spec.probes[0].to.port",
        "port 53 of Service kube-dns is ambiguous: name one, or give protocol (known: dns (53/UDP), dns-tcp (53/TCP))",
    );
    let text = edit(KUBE_DNS, "port: dns}", "port: 70000}");
    assert_only(
        &errors(&text),
        at(&text, "70000"),
        "spec.probes[0].to.port",
        "invalid value: integer `70000`, expected a port name or a port number (1-65535)",
    );
}

#[test]
fn node_port_targets() {
    let text = edit(WEB, "nodePort: node-b}", "nodePort: node-c}");
    assert_only(
        &errors(&text),
        at(&text, "node-c"),
        "spec.probes[1].to.nodePort",
        "no node named \"node-c\" in the scenario (known: node-a, node-b)",
    );
    let text = edit(
        KUBE_DNS,
        "to: {service: kube-dns, port: dns}",
        "to: {service: kube-dns, port: dns, nodePort: node-a}",
    );
    assert_only(
        &errors(&text),
        at(&text, "node-a}"),
        "spec.probes[0].to.nodePort",
        "port dns of Service kube-dns has no nodePort (the Service is not of type NodePort or LoadBalancer, \
         or it sets allocateLoadBalancerNodePorts: false)",
    );
}

#[test]
fn protocol_must_match_the_service_port() {
    let text = edit(KUBE_DNS, "      count: 40", "      protocol: TCP\n      count: 40");
    assert_only(
        &errors(&text),
        at(&text, "TCP\n      count"),
        "spec.probes[0].protocol",
        "protocol TCP does not match port dns of Service kube-dns, which is UDP",
    );
    let text = edit(KUBE_DNS, "      count: 40", "      protocol: ICMP\n      count: 40");
    assert_only(
        &errors(&text),
        at(&text, "ICMP"),
        "spec.probes[0].protocol",
        "unknown variant `ICMP`, expected one of `TCP`, `UDP`, `SCTP`",
    );
}

#[test]
fn address_targets() {
    let text = edit(WEB, "to: {address: 10.96.0.99, port: 80}", "to: {address: 10.96.0.99, port: http}");
    assert_only(
        &errors(&text),
        at_in(&text, "10.96.0.99, port: http", "http"),
        "spec.probes[2].to.port",
        "an address target needs a port number, not a name",
    );
    let text = edit(WEB, "to: {address: 10.96.0.99, port: 80}", "to: {address: fd00::99, port: 80}");
    assert_only(
        &errors(&text),
        at(&text, "fd00::99"),
        "spec.probes[2].to.address",
        &mixed(&text, "fd00::99 is"),
    );
    let text = edit(WEB, "to: {address: 10.96.0.99, port: 80}", "to: {address: 10.96.0.99}");
    assert_only(
        &errors(&text),
        at(&text, "{address: 10.96.0.99}"),
        "spec.probes[2].to.port",
        "required field `port` is missing",
    );
    let text = edit(
        WEB,
        "      to: {address: 10.96.0.99, port: 80}\n",
        "      to: {address: 10.96.0.99, port: 80}\n      protocol: UDP\n",
    );
    assert_eq!(load(&text).probes[2].protocol, crate::model::Protocol::Udp);
}

#[test]
fn expected_backends_must_be_pods() {
    let text = edit(KUBE_DNS, "backends: [coredns-a, coredns-b]", "backends: [coredns-a, coredns-c]");
    assert_only(
        &errors(&text),
        at(&text, "coredns-c"),
        "spec.probes[0].expect.backends[1]",
        "no Pod named \"coredns-c\" in the scenario (known: client, coredns-a, coredns-b)",
    );
}

#[test]
fn backends_and_source_only_go_with_answered() {
    let text = edit(KUBE_DNS, "verdict: answered", "verdict: rejected");
    let errs = errors(&text);
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert_has(
        &errs,
        at(&text, "[coredns-a"),
        "spec.probes[0].expect.backends",
        "backends only go with verdict: answered",
    );
    assert_has(
        &errs,
        at_in(&text, "source: client", "client"),
        "spec.probes[0].expect.source",
        "source only goes with verdict: answered",
    );
    let text = edit(
        KUBE_DNS,
        "expect: {verdict: answered, backends: [coredns-a, coredns-b], source: client}",
        "expect: {backends: [coredns-a]}",
    );
    assert_only(
        &errors(&text),
        at(&text, "{backends"),
        "spec.probes[0].expect.verdict",
        "required field `verdict` is missing",
    );
}

#[test]
fn count_range() {
    let text = edit(KUBE_DNS, "count: 40", "count: 0");
    assert_only(
        &errors(&text),
        at_in(&text, "count: 0", "0"),
        "spec.probes[0].count",
        "count must be between 1 and 10000, not 0",
    );
    let text = edit(KUBE_DNS, "count: 40", "count: 10001");
    assert_only(
        &errors(&text),
        at(&text, "10001"),
        "spec.probes[0].count",
        "count must be between 1 and 10000, not 10001",
    );
}

#[test]
fn probe_names_are_unique() {
    let text =
        edit(WEB, "    - from: {node: node-a}\n", "    - name: pod-to-web\n      from: {node: node-a}\n");
    assert_only(
        &errors(&text),
        at_nth(&text, "pod-to-web", 1),
        "spec.probes[2].name",
        "duplicate probe name \"pod-to-web\" (also spec.probes[0])",
    );
    // A given name may not take a default one either.
    let text = edit(WEB, "    - name: pod-to-web\n", "    - name: probe[2]\n");
    assert_only(
        &errors(&text),
        at(&text, "from: {node"),
        "spec.probes[2].name",
        "duplicate probe name \"probe[2]\" (also spec.probes[0])",
    );
}

#[test]
fn at_least_one_probe() {
    let start = KUBE_DNS.find("  probes:\n").unwrap();
    let end = KUBE_DNS.find("---\n").unwrap();
    let text = format!("{}  probes: []\n{}", &KUBE_DNS[..start], &KUBE_DNS[end..]);
    assert_only(
        &errors(&text),
        at(&text, "[]"),
        "spec.probes",
        "at least one probe is required (or generate them with flows: {all: true})",
    );
}

#[test]
fn a_name_shared_by_two_kinds_of_backend_is_refused_where_it_is_defined_second() {
    let text = edit(WEB, "{name: outside, ip", "{name: web-a, ip");
    let text = edit(&text, "from: {external: outside}", "from: {external: web-a}");
    let errors = parse_errors(&text);
    let host_line = at(&text, "{name: web-a, ip").0;
    assert_only(
        &errors,
        at_in(&text, "metadata: {name: web-a,", "web-a"),
        "Pod web-a: name",
        &format!(
            "\"web-a\" is also the name of the external host on line {host_line}: backends answer with their bare name, \
             so an answer from either could not be told apart; rename one"
        ),
    );
}
