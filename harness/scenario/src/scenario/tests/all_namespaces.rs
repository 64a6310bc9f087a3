//! `kubectl get nodes,services,endpointslices,pods -A -o yaml` pasted as it comes: the
//! `kubernetes` Service in front of the control plane's own address, and kube-system's
//! hostNetwork pods, which are their nodes.

use super::*;

const SHIPPED: &str = include_str!("../../../../../scenarios/pasted-all-namespaces.yaml");

#[test]
fn the_shipped_all_namespaces_paste_reads_as_a_user_expects() {
    let s = load(SHIPPED);
    let c = &s.cluster;
    let nodes: Vec<&str> = c.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(nodes, ["kind-control-plane", "kind-worker", "kind-worker2"]);
    // The hostNetwork pods (etcd, the API server, kube-proxy, kindnet...) are their nodes: no
    // pod is built for them.
    let pods: Vec<&str> = c.pods.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        pods,
        [
            "coredns-7db6d8ff4d-4bq2w",
            "coredns-7db6d8ff4d-m9s7x",
            "local-path-provisioner-988d74bc-wj5pl",
            "storefront-6b7f9c8d4-2xk8p",
            "storefront-6b7f9c8d4-v5r9t"
        ]
    );
    // default/kubernetes: the API server's slice names the control plane's own address, a
    // host-network endpoint, without nodeName (local nowhere).
    let kubernetes = c.service("kubernetes").unwrap();
    assert_eq!(kubernetes.namespace, "default");
    let ep = &kubernetes.ports[0].endpoints[0];
    assert_eq!((ep.address().to_string(), ep.pod.as_str()), ("172.18.0.2:6443".into(), "kind-control-plane"));
    assert_eq!(ep.node, None);
    let dns = c.service("kube-dns").unwrap();
    assert_eq!(dns.ports.len(), 3);
    assert!(dns.ports.iter().all(|p| p.endpoints.len() == 2), "{dns:?}");
    // Every object is served as pasted, the hostNetwork pods' included.
    assert_eq!(s.objects.pods.len(), 15);
    assert_eq!(s.objects.services.len(), 3);
}

/// WEB with a hostNetwork pod on node-a labelled `labels`, at `ip`.
fn with_host_network_pod(ip: &str, labels: &str) -> String {
    format!(
        "{WEB}---\napiVersion: v1\nkind: Pod\nmetadata: {{name: agent, namespace: default, labels: {labels}}}\n\
         spec:\n  hostNetwork: true\n  nodeName: node-a\n  containers: [{{name: agent}}]\n\
         status: {{podIP: {ip}, podIPs: [{{ip: {ip}}}]}}\n"
    )
}

#[test]
fn a_host_network_pod_is_its_node() {
    let s = load(&with_host_network_pod("192.168.50.11", "{app: agent}"));
    assert!(s.cluster.pod("agent").is_none());
    assert_eq!(s.objects.pods.len(), 4);
}

#[test]
fn a_host_network_pod_s_address_must_be_its_node_s() {
    let text = with_host_network_pod("192.168.50.12", "{app: agent}");
    let errors = errors(&text);
    assert_only(
        &errors,
        at_in(&text, "podIP: 192.168.50.12", "192.168.50.12"),
        "Pod default/agent: status.podIP",
        "192.168.50.12 is not an address of node node-a (192.168.50.11): a hostNetwork pod's address is its node's",
    );
}

#[test]
fn slices_derived_over_a_host_network_pod_are_refused_with_what_to_paste() {
    let text = with_host_network_pod("192.168.50.11", "{app: web}");
    let errors = errors(&text);
    assert_has(
        &errors,
        at_in(&text, "selector: {app: web}", "{app: web}"),
        "Service default/web: spec.selector",
        "selects the hostNetwork pod default/agent (on node node-a): slices derived over host-network pods are \
         not modelled; paste the Service's EndpointSlices (kubectl get endpointslices -n default)",
    );
}

#[test]
fn a_probe_from_a_host_network_pod_is_told_to_probe_from_its_node() {
    let text = edit(
        &with_host_network_pod("192.168.50.11", "{app: agent}"),
        "from: {pod: client}",
        "from: {pod: agent}",
    );
    assert_only(
        &errors(&text),
        at_in(&text, "from: {pod: agent}", "agent"),
        "spec.probes[0].from.pod",
        "Pod \"agent\" is a hostNetwork pod, on the network of node node-a: no pod is built for it; probe from \
         {node: node-a}",
    );
}

#[test]
fn two_pod_ips_of_one_family_are_refused_in_a_single_stack_cluster() {
    // The API server refuses them (validatePodIPs); the second was silently unused before.
    let text = edit(
        WEB,
        "status: {podIP: 10.244.1.20}",
        "status: {podIP: 10.244.1.20, podIPs: [{ip: 10.244.1.20}, {ip: 10.244.1.21}]}",
    );
    let errors = parse_errors(&text);
    assert_only(
        &errors,
        at(&text, "10.244.1.21"),
        "Pod default/client: status.podIPs[1].ip",
        "10.244.1.21 is IPv4 like status.podIP 10.244.1.20: a pod has one address per family",
    );
}

/// WEB with a pod `pending` whose status is `status`, labelled like web's backends.
fn with_pod_status(status: &str) -> String {
    format!(
        "{WEB}---\napiVersion: v1\nkind: Pod\nmetadata: {{name: pending, namespace: default, labels: {{app: web}}}}\n\
         spec:\n  containers: [{{name: web}}]\n{status}\n"
    )
}

#[test]
fn a_pending_pod_without_an_address_is_not_built_and_serves_nothing() {
    // As `kubectl get pods -A -o yaml` shows a pod not yet scheduled: no nodeName, no podIP.
    let s = load(&with_pod_status(
        "status: {phase: Pending, conditions: [{type: PodScheduled, status: \"False\"}]}",
    ));
    assert!(s.cluster.pod("pending").is_none());
    let web = s.cluster.service("web").unwrap();
    assert!(web.ports[0].endpoints.iter().all(|e| e.pod != "pending"), "{web:?}");
    let text =
        edit(&with_pod_status("status: {phase: Pending}"), "from: {pod: client}", "from: {pod: pending}");
    assert_only(
        &errors(&text),
        at_in(&text, "from: {pod: pending}", "pending"),
        "spec.probes[0].from.pod",
        "Pod \"pending\" is Pending without an address (status.podIP): not built, and no Service's endpoint, as \
         the EndpointSlice controller leaves out pods without addresses",
    );
}

#[test]
fn a_pod_without_an_address_or_a_phase_saying_why_is_still_refused() {
    let text = with_pod_status("status: {}");
    let errors = errors(&text);
    assert!(
        errors.iter().any(|e| e.message.contains("podIP") && e.message.contains("missing")),
        "{errors:?}"
    );
}
