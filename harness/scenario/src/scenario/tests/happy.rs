//! Valid scenarios and the model they produce.

use std::net::{IpAddr, SocketAddr};

use super::*;
use crate::model::{Protocol, Source, StatedSource, StatedVerdict, Target};
use crate::scenario::discover;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn the_shipped_kube_dns_example_derives_both_coredns_endpoints() {
    let s = load(SHIPPED_KUBE_DNS);
    assert_eq!(s.name, "kube-dns-udp");
    let (_, dns) = s.cluster.service_port("kube-dns", "dns").unwrap();
    let endpoints: Vec<(SocketAddr, Protocol)> =
        dns.endpoints.iter().map(|e| (e.address(), dns.protocol)).collect();
    assert_eq!(
        endpoints,
        [
            ("10.244.1.5:53".parse().unwrap(), Protocol::Udp),
            ("10.244.2.7:53".parse().unwrap(), Protocol::Udp)
        ]
    );
}

#[test]
fn kube_dns_udp_derives_both_coredns_endpoints() {
    let s = load(KUBE_DNS);
    assert_eq!(s.name, "kube-dns-udp");
    assert_eq!(s.source, Path::new(FILE));
    assert_eq!(s.proxy, crate::model::ProxyChoice::named("builtin-iptables"));
    assert_eq!(s.cluster.nodes.len(), 2);
    assert_eq!(s.cluster.pods.len(), 3);

    let (svc, dns) = s.cluster.service_port("kube-dns", "dns").unwrap();
    assert_eq!(svc.namespace, "kube-system");
    assert_eq!(svc.cluster_ip(), ip("10.96.0.10"));
    assert_eq!(dns.protocol, Protocol::Udp);
    let endpoints: Vec<(SocketAddr, &str, Option<&str>)> =
        dns.endpoints.iter().map(|e| (e.address(), e.pod.as_str(), e.node.as_deref())).collect();
    assert_eq!(
        endpoints,
        [
            ("10.244.1.5:53".parse().unwrap(), "coredns-a", Some("node-a")),
            ("10.244.2.7:53".parse().unwrap(), "coredns-b", Some("node-b")),
        ]
    );
    assert!(dns.endpoints.iter().all(|e| e.ready && e.serving && !e.terminating));
    let (_, tcp) = s.cluster.service_port("kube-dns", "dns-tcp").unwrap();
    assert_eq!(tcp.protocol, Protocol::Tcp);
    assert_eq!(tcp.endpoints.len(), 2);

    let probe = &s.probes[0];
    assert_eq!(probe.name, "client-to-dns");
    assert_eq!(probe.from, Source::Pod("client".into()));
    assert_eq!(probe.to, Target::ClusterIp { service: "kube-dns".into(), port: "dns".into() });
    assert_eq!(probe.protocol, Protocol::Udp, "defaults to the service port's protocol");
    assert_eq!(probe.count, 40);
    let expect = probe.expect.as_ref().unwrap();
    assert_eq!(expect.verdict, StatedVerdict::Answered);
    assert_eq!(expect.backends.as_deref(), Some(&["coredns-a".to_string(), "coredns-b".to_string()][..]));
    assert_eq!(expect.source, Some(StatedSource::Client));
    assert_eq!(s.cluster.target_address(&probe.to), Some("10.96.0.10:53".parse().unwrap()));
}

#[test]
fn kube_dns_udp_keeps_objects_and_adds_the_derived_slice() {
    let s = load(KUBE_DNS);
    assert_eq!(s.objects.services.len(), 1);
    assert_eq!(s.objects.pods.len(), 3);
    let [slice] = s.objects.endpoint_slices.as_slice() else { panic!("one derived slice expected") };
    assert_eq!(slice.metadata.name.as_deref(), Some("kube-dns-derived"));
    assert_eq!(slice.metadata.namespace.as_deref(), Some("kube-system"));
    assert_eq!(slice.metadata.labels.as_ref().unwrap()["kubernetes.io/service-name"], "kube-dns");
    assert_eq!(slice.address_type, "IPv4");
    let ports: Vec<(Option<&str>, Option<i32>, Option<&str>)> =
        slice.ports.iter().flatten().map(|p| (p.name.as_deref(), p.port, p.protocol.as_deref())).collect();
    assert_eq!(ports, [(Some("dns"), Some(53), Some("UDP")), (Some("dns-tcp"), Some(53), Some("TCP"))]);
    let ep = &slice.endpoints[0];
    assert_eq!(ep.addresses, ["10.244.1.5"]);
    assert_eq!(ep.node_name.as_deref(), Some("node-a"));
    let target = ep.target_ref.as_ref().unwrap();
    assert_eq!(
        (target.kind.as_deref(), target.namespace.as_deref(), target.name.as_deref()),
        (Some("Pod"), Some("kube-system"), Some("coredns-a"))
    );
    let c = ep.conditions.as_ref().unwrap();
    assert_eq!((c.ready, c.serving, c.terminating), (Some(true), Some(true), Some(false)));
}

#[test]
fn named_target_port_resolves_per_pod_into_one_slice_per_port_set() {
    let s = load(WEB);
    let (svc, http) = s.cluster.service_port("web", "http").unwrap();
    assert_eq!(svc.service_type, crate::model::ServiceType::NodePort);
    assert_eq!(http.node_port, Some(30080));
    let endpoints: Vec<SocketAddr> = http.endpoints.iter().map(|e| e.address()).collect();
    assert_eq!(
        endpoints,
        ["10.244.1.10:8080".parse().unwrap(), "10.244.2.10:9090".parse::<SocketAddr>().unwrap()]
    );
    // Different resolved ports: two slices, as the EndpointSlice controller would make.
    let names: Vec<&str> =
        s.objects.endpoint_slices.iter().filter_map(|e| e.metadata.name.as_deref()).collect();
    assert_eq!(names, ["web-derived-1", "web-derived-2"]);
    assert_eq!(s.objects.endpoint_slices[1].ports.as_ref().unwrap()[0].port, Some(9090));
}

#[test]
fn a_named_target_port_a_pod_lacks_leaves_that_pod_out() {
    let text =
        edit(WEB, "ports: [{name: http, containerPort: 9090}]", "ports: [{name: web, containerPort: 9090}]");
    let s = load(&text);
    let (_, http) = s.cluster.service_port("web", "http").unwrap();
    let pods: Vec<&str> = http.endpoints.iter().map(|e| e.pod.as_str()).collect();
    assert_eq!(pods, ["web-a"]);
}

#[test]
fn targets_and_defaults() {
    let s = load(WEB);
    let nodeport = &s.probes[1];
    assert_eq!(nodeport.from, Source::External("outside".into()));
    assert_eq!(
        nodeport.to,
        Target::NodePort { service: "web".into(), port: "http".into(), node: "node-b".into(), address: None }
    );
    assert_eq!(s.cluster.target_address(&nodeport.to), Some("192.168.50.12:30080".parse().unwrap()));
    assert_eq!(nodeport.count, 10);
    assert_eq!(nodeport.expect, None);
    let raw = &s.probes[2];
    assert_eq!(raw.name, "probe[2]");
    assert_eq!(raw.from, Source::Node("node-a".into()));
    assert_eq!(raw.to, Target::Address("10.96.0.99:80".parse().unwrap()));
    assert_eq!(raw.protocol, Protocol::Tcp);
    assert_eq!(raw.expect.as_ref().unwrap().verdict, StatedVerdict::Forwarded);
    assert_eq!(s.cluster.external_hosts[0].ip(), ip("192.168.50.100"));
}

#[test]
fn ports_by_number_are_stored_as_names_and_protocol_picks_between_equal_numbers() {
    let text = edit(
        KUBE_DNS,
        "to: {service: kube-dns, port: dns}",
        "to: {service: kube-dns, port: 53}\n      protocol: TCP",
    );
    let text =
        edit(&text, "expect: {verdict: answered, backends: [coredns-a, coredns-b], source: client}", "");
    let s = load(&text);
    assert_eq!(s.probes[0].to, Target::ClusterIp { service: "kube-dns".into(), port: "dns-tcp".into() });
    assert_eq!(s.probes[0].protocol, Protocol::Tcp);
}

#[test]
fn an_unnamed_single_port_may_be_left_out() {
    let text = edit(
        WEB,
        "- {name: http, port: 80, targetPort: http, nodePort: 30080}",
        "- {port: 80, targetPort: http, nodePort: 30080}",
    );
    let text = edit(&text, "to: {service: web, port: http}", "to: {service: web}");
    let text = edit(
        &text,
        "to: {service: web, port: http, nodePort: node-b}",
        "to: {service: web, port: 80, nodePort: node-b}",
    );
    let s = load(&text);
    assert_eq!(s.probes[0].to, Target::ClusterIp { service: "web".into(), port: "80".into() });
    assert_eq!(s.cluster.target_address(&s.probes[0].to), Some("10.96.0.20:80".parse().unwrap()));
    assert_eq!(s.cluster.target_address(&s.probes[1].to), Some("192.168.50.12:30080".parse().unwrap()));
    assert_eq!(s.cluster.services[0].ports[0].endpoints.len(), 2);
}

#[test]
fn derived_conditions_follow_pod_readiness_and_termination() {
    let text = edit(
        WEB,
        "status: {podIP: 10.244.1.10}",
        "status:\n  podIP: 10.244.1.10\n  conditions: [{type: Ready, status: \"False\"}]",
    );
    let text = edit(
        &text,
        "metadata: {name: web-b, labels: {app: web}}",
        "metadata: {name: web-b, labels: {app: web}, deletionTimestamp: \"2024-05-01T10:00:00Z\"}",
    );
    let s = load(&text);
    let (_, http) = s.cluster.service_port("web", "http").unwrap();
    let conditions: Vec<(&str, bool, bool, bool)> =
        http.endpoints.iter().map(|e| (e.pod.as_str(), e.ready, e.serving, e.terminating)).collect();
    assert_eq!(conditions, [("web-a", false, false, false), ("web-b", false, true, true)]);
}

#[test]
fn finished_pods_and_other_namespaces_are_not_selected() {
    let text = edit(WEB, "status: {podIP: 10.244.1.10}", "status: {podIP: 10.244.1.10, phase: Succeeded}");
    let text = edit(
        &text,
        "metadata: {name: web-b, labels: {app: web}}",
        "metadata: {name: web-b, namespace: other, labels: {app: web}}",
    );
    let text = edit(&text, "expect: {verdict: answered, source: client}", "");
    let s = load(&text);
    assert!(s.cluster.services[0].ports[0].endpoints.is_empty());
    assert!(s.objects.endpoint_slices.is_empty());
}

#[test]
fn empty_documents_are_ignored() {
    let text = format!("---\n{KUBE_DNS}---\n\n---\n# trailing\n");
    assert_eq!(load(&text).cluster.pods.len(), 3);
}

#[test]
fn load_reads_the_file() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/kube-dns-udp.yaml");
    let s = packetproof::admission::load(&path).unwrap();
    assert_eq!(s.source, path);
    let missing = packetproof::admission::load(Path::new("/nonexistent/x.yaml")).unwrap_err();
    assert!(missing.to_string().starts_with("/nonexistent/x.yaml:1:1: cannot read the file"), "{missing}");
}

#[test]
fn discover_expands_directories_into_sorted_yaml_files() {
    let dir = std::env::temp_dir().join(format!("packetproof-discover-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    for f in ["b.yaml", "a.yml", "c.txt", "sub/d.yaml"] {
        std::fs::write(dir.join(f), "").unwrap();
    }
    let single = dir.join("c.txt");
    let found = discover(&[dir.clone(), single.clone()]).unwrap();
    assert_eq!(found, [dir.join("a.yml"), dir.join("b.yaml"), single]);
    let err = discover(&[dir.join("nope.yaml")]).unwrap_err();
    assert!(err.to_string().contains("nope.yaml: no such file or directory"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
