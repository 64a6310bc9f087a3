//! Networks, nodes, external hosts, pod placement, unique names and addresses.

use super::*;

#[test]
fn invalid_cidrs() {
    let text = edit(KUBE_DNS, "podCIDR: 10.244.0.0/16", "podCIDR: 10.244.0.0/33");
    assert_only(
        &errors(&text),
        at(&text, "10.244.0.0/33"),
        "spec.cluster.podCIDR",
        "\"10.244.0.0/33\" is not a CIDR (expected e.g. 10.244.0.0/16)",
    );
    let text = edit(KUBE_DNS, "serviceCIDR: 10.96.0.0/12", "serviceCIDR: 10.96.0.1/12");
    assert_only(
        &errors(&text),
        at(&text, "10.96.0.1/12"),
        "spec.cluster.serviceCIDR",
        "10.96.0.1/12 has host bits set (did you mean 10.96.0.0/12?)",
    );
    let text = edit(KUBE_DNS, "nodeNetwork: 192.168.50.0/24", "nodeNetwork: fd00::/64");
    assert_only(
        &errors(&text),
        at(&text, "fd00::/64"),
        "spec.cluster.nodeNetwork",
        &mixed(&text, "fd00::/64 is"),
    );
}

#[test]
fn overlapping_cluster_networks() {
    let text = edit(KUBE_DNS, "serviceCIDR: 10.96.0.0/12", "serviceCIDR: 10.240.0.0/12");
    let errs = errors(&text);
    assert_has(
        &errs,
        at(&text, "10.240.0.0/12"),
        "spec.cluster.serviceCIDR",
        "10.240.0.0/12 overlaps podCIDR 10.244.0.0/16",
    );
}

#[test]
fn invalid_node_ip() {
    let text = edit(KUBE_DNS, "ip: 192.168.50.12", "ip: 192.168.50.300");
    assert_only(
        &errors(&text),
        at(&text, "192.168.50.300"),
        "spec.nodes[1].ip",
        "\"192.168.50.300\" is not an IP address",
    );
    let text = edit(KUBE_DNS, "ip: 192.168.50.12", "ip: fd00::12");
    assert_only(&errors(&text), at(&text, "fd00::12"), "spec.nodes[1].ip", &mixed(&text, "fd00::12 is"));
}

#[test]
fn node_ip_outside_node_network() {
    let text = edit(KUBE_DNS, "ip: 192.168.50.12", "ip: 192.168.51.12");
    assert_only(
        &errors(&text),
        at(&text, "192.168.51.12"),
        "spec.nodes[1].ip",
        "192.168.51.12 is not inside nodeNetwork 192.168.50.0/24",
    );
    let text = edit(KUBE_DNS, "ip: 192.168.50.12", "ip: 192.168.50.255");
    assert_only(
        &errors(&text),
        at(&text, "192.168.50.255"),
        "spec.nodes[1].ip",
        "192.168.50.255 is the broadcast address of nodeNetwork 192.168.50.0/24, not a host address",
    );
}

#[test]
fn node_pod_cidr_outside_cluster_or_overlapping() {
    let text = edit(KUBE_DNS, "podCIDR: 10.244.2.0/24", "podCIDR: 10.245.2.0/24");
    // The pod on that node is not also reported: its node's podCIDR is the problem.
    let errs = errors(&text);
    assert_has(
        &errs,
        at(&text, "10.245.2.0/24"),
        "spec.nodes[1].podCIDR",
        "10.245.2.0/24 is not inside the cluster podCIDR 10.244.0.0/16",
    );
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert_has(
        &errs,
        at(&text, "10.244.2.7"),
        "Pod kube-system/coredns-b: status.podIP",
        "not inside the podCIDR 10.245.2.0/24 of node node-b",
    );

    let text = edit(KUBE_DNS, "podCIDR: 10.244.2.0/24", "podCIDR: 10.244.0.0/23");
    assert_has(
        &errors(&text),
        at(&text, "10.244.0.0/23"),
        "spec.nodes[1].podCIDR",
        "10.244.0.0/23 overlaps the podCIDR 10.244.1.0/24 of node node-a",
    );
}

#[test]
fn pod_ip_missing_or_outside_its_node() {
    let text = edit(KUBE_DNS, "status:\n  podIP: 10.244.1.20\n", "status: {}\n");
    assert_only(
        &errors(&text),
        at(&text, "{}\n"),
        "Pod default/client: status.podIP",
        "required field `podIP` is missing: the harness gives each pod the address written here",
    );
    let text = edit(KUBE_DNS, "podIP: 10.244.1.20", "podIP: 10.244.2.20");
    assert_only(
        &errors(&text),
        at(&text, "10.244.2.20"),
        "Pod default/client: status.podIP",
        "10.244.2.20 is not inside the podCIDR 10.244.1.0/24 of node node-a",
    );
    let text = edit(KUBE_DNS, "podIP: 10.244.1.20", "podIP: 10.244.1.1");
    assert_only(
        &errors(&text),
        at(&text, "10.244.1.1\n"),
        "Pod default/client: status.podIP",
        "10.244.1.1 is already the address of the pod bridge of node node-a",
    );
}

#[test]
fn pod_node_name_missing_or_unknown() {
    let text = edit(KUBE_DNS, "  nodeName: node-b\n", "");
    let pos = at(&text, "spec:\n  containers:\n    - name: coredns");
    assert_only(
        &errors(&text),
        (pos.0 + 1, 3),
        "Pod kube-system/coredns-b: spec.nodeName",
        "required field `nodeName` is missing: the harness runs each pod on the node named here",
    );
    let text = edit(KUBE_DNS, "nodeName: node-b", "nodeName: node-c");
    assert_only(
        &errors(&text),
        at(&text, "node-c"),
        "Pod kube-system/coredns-b: spec.nodeName",
        "no node named \"node-c\" in the scenario (known: node-a, node-b)",
    );
}

#[test]
fn a_broken_node_does_not_cascade_into_its_pods() {
    let text = edit(
        KUBE_DNS,
        "    - name: node-b\n      ip: 192.168.50.12\n",
        "    - name: node-b\n      ip: 192.168.50.12\n      region: z\n",
    );
    let errs = errors(&text);
    assert_only(
        &errs,
        at(&text, "region"),
        "spec.nodes[1].region",
        "unknown field `region`, expected one of `name`, `ip`, `ips`, `secondaryIPs`, `podCIDR`, `podCIDRs`, `zone`",
    );
}

#[test]
fn external_host_ip_outside_node_network() {
    let text = edit(WEB, "ip: 192.168.50.100", "ip: 10.0.0.100");
    assert_only(
        &errors(&text),
        at(&text, "10.0.0.100"),
        "spec.externalHosts[0].ip",
        "10.0.0.100 is not inside nodeNetwork 192.168.50.0/24",
    );
}

#[test]
fn duplicate_names() {
    let text = edit(KUBE_DNS, "    - name: node-b\n", "    - name: node-a\n");
    let errs = errors(&text);
    assert_has(
        &errs,
        at_nth(&text, "node-a", 1),
        "spec.nodes[1].name",
        "duplicate node name \"node-a\" (first defined at line 16)",
    );

    // Pods in different namespaces still need different names: probes use bare names.
    let text =
        edit(KUBE_DNS, "  name: client\n  namespace: default", "  name: coredns-a\n  namespace: default");
    let errs = errors(&text);
    assert_has(
        &errs,
        at_in(&text, "name: coredns-a\n  namespace: default", "coredns-a"),
        "Pod default/coredns-a: metadata.name",
        "duplicate Pod name \"coredns-a\" (first defined at line",
    );

    let text = format!(
        "{WEB}---\napiVersion: v1\nkind: Service\nmetadata: {{name: web, namespace: other}}\nspec:\n  clusterIP: 10.96.0.21\n  ports: [{{port: 80}}]\n"
    );
    assert_only(
        &errors(&text),
        at(&text, "web, namespace: other"),
        "Service other/web: metadata.name",
        &format!(
            "duplicate Service name \"web\" (first defined at line {}); names must be unique across the scenario, \
             whatever the namespace, because probes refer to bare names",
            at(WEB, "web}\nspec:\n  type").0
        ),
    );

    let text = edit(
        WEB,
        "    - {name: outside, ip: 192.168.50.100}\n",
        "    - {name: outside, ip: 192.168.50.100}\n    - {name: outside, ip: 192.168.50.101}\n",
    );
    assert_has(
        &errors(&text),
        at_nth(&text, "outside", 1),
        "spec.externalHosts[1].name",
        "duplicate external host name \"outside\"",
    );
}

#[test]
fn addresses_used_twice() {
    let text = edit(KUBE_DNS, "podIP: 10.244.1.20", "podIP: 10.244.1.5");
    assert_only(
        &errors(&text),
        at_nth(&text, "10.244.1.5", 1),
        "Pod default/client: status.podIP",
        "10.244.1.5 is already the address of Pod kube-system/coredns-a",
    );
    let text = edit(WEB, "ip: 192.168.50.100", "ip: 192.168.50.12");
    assert_only(
        &errors(&text),
        at_nth(&text, "192.168.50.12", 1),
        "spec.externalHosts[0].ip",
        "192.168.50.12 is already the address of node node-b",
    );
}

#[test]
fn nodes_and_probes_are_required() {
    let text = edit(KUBE_DNS, "  nodes:\n", "  nodes: []\n  old:\n");
    assert!(errors(&text).iter().any(|e| e.field == "spec.old"));
    let start = KUBE_DNS.find("  nodes:\n").unwrap();
    let end = KUBE_DNS.find("  probes:\n").unwrap();
    let text = format!("{}  nodes: []\n{}", &KUBE_DNS[..start], &KUBE_DNS[end..]);
    let errs = errors(&text);
    // The pods' nodes are missing too, but only the empty list is the cause worth reporting first.
    assert_has(&errs, at(&text, "[]"), "spec.nodes", "at least one node is required");
}

#[test]
fn secondary_node_ips() {
    let s = parse(EXPOSED);
    let node_a = s.cluster.node("node-a").unwrap();
    assert_eq!(node_a.secondary_ips, ["192.168.50.21".parse::<std::net::IpAddr>().unwrap()]);
    assert!(s.cluster.node("node-b").unwrap().secondary_ips.is_empty());

    // (A probe sends to 192.168.50.21: once that address is gone, it is reported too.)
    let text = edit(EXPOSED, "secondaryIPs: [192.168.50.21]", "secondaryIPs: [192.168.51.21]");
    assert_has(
        &parse_errors(&text),
        at(&text, "192.168.51.21"),
        "spec.nodes[0].secondaryIPs[0]",
        "192.168.51.21 is not inside nodeNetwork 192.168.50.0/24",
    );
    // Unique against every other address: a secondary IP claims it as the node's, and
    // whoever comes later in the file is told.
    let text = edit(EXPOSED, "secondaryIPs: [192.168.50.21]", "secondaryIPs: [192.168.50.11]");
    assert_has(
        &parse_errors(&text),
        at_in(&text, "secondaryIPs: [192.168.50.11]", "192"),
        "spec.nodes[0].secondaryIPs[0]",
        "192.168.50.11 is already the address of node node-a",
    );
    let text = edit(EXPOSED, "secondaryIPs: [192.168.50.21]", "secondaryIPs: [192.168.50.100]");
    assert_has(
        &parse_errors(&text),
        at_in(&text, "{name: outside, ip: 192.168.50.100}", "192"),
        "spec.externalHosts[0].ip",
        "192.168.50.100 is already the address of node node-a",
    );
    let text = edit(EXPOSED, "secondaryIPs: [192.168.50.21]", "secondaryIPs: [192.168.50.21, 192.168.50.21]");
    assert_only(
        &parse_errors(&text),
        at_nth(&text, "192.168.50.21", 1),
        "spec.nodes[0].secondaryIPs[1]",
        "192.168.50.21 is already the address of node node-a",
    );
    let text = edit(EXPOSED, "secondaryIPs: [192.168.50.21]", "secondaryIPs: [fd00::21]");
    assert_only(
        &parse_errors(&text),
        at(&text, "fd00::21"),
        "spec.nodes[0].secondaryIPs[0]",
        &mixed(&text, "fd00::21 is"),
    );
}

#[test]
fn proxy_config_with_kube_proxy_defaults() {
    let config = parse(EXPOSED).cluster.proxy;
    assert!(config.masquerade_all && !config.localhost_node_ports);
    let cidrs: Vec<String> = config.node_port_addresses.iter().map(|c| c.to_string()).collect();
    assert_eq!(cidrs, ["192.168.50.0/24"]);
    assert_eq!(load(KUBE_DNS).cluster.proxy, crate::model::ProxyConfig::default());
    let text = edit(KUBE_DNS, "  cluster:\n", "  proxyConfig: {}\n  cluster:\n");
    let config = load(&text).cluster.proxy;
    assert_eq!(
        (config.masquerade_all, config.node_port_addresses.is_empty(), config.localhost_node_ports),
        (false, true, true)
    );
}

#[test]
fn proxy_config_errors() {
    let text = edit(
        EXPOSED,
        "nodePortAddresses: [192.168.50.0/24]",
        "nodePortAddresses: [192.168.50.1/24, primary]",
    );
    let errs = parse_errors(&text);
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert_has(
        &errs,
        at(&text, "192.168.50.1/24"),
        "spec.proxyConfig.nodePortAddresses[0]",
        "192.168.50.1/24 has host bits set (did you mean 192.168.50.0/24?)",
    );
    assert_has(
        &errs,
        at(&text, "primary]"),
        "spec.proxyConfig.nodePortAddresses[1]",
        "\"primary\" is not supported here: list CIDRs (e.g. 192.168.50.0/24 for the node network)",
    );
    let text = edit(EXPOSED, "masqueradeAll: true", "masqueradeAll: yes");
    assert_only(
        &parse_errors(&text),
        at(&text, "yes"),
        "spec.proxyConfig.masqueradeAll",
        "invalid type: string \"yes\", expected a boolean",
    );
    let text = edit(EXPOSED, "masqueradeAll: true", "masqueradAll: true");
    assert_only(
        &parse_errors(&text),
        at(&text, "masqueradAll"),
        "spec.proxyConfig.masqueradAll",
        "unknown field `masqueradAll`, expected one of `masqueradeAll`, `nodePortAddresses`, `localhostNodePorts`, `featureGates`, `detectLocalMode`, `detectLocal`, `clusterCIDR`",
    );
}
