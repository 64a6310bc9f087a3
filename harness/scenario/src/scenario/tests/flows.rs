//! `spec.flows`: a generated probe for every source and frontend.

use std::collections::HashSet;

use super::*;
use crate::model::{Protocol, Source, Target};

/// `text` with `flows` in place of its probes.
fn flows_only(text: &str, flows: &str) -> String {
    let start = text.find("  probes:\n").unwrap();
    let end = text.find("---\n").unwrap();
    format!("{}  flows: {flows}\n{}", &text[..start], &text[end..])
}

fn names(s: &Scenario) -> Vec<&str> {
    s.probes.iter().map(|p| p.name.as_str()).collect()
}

#[test]
fn every_source_reaches_every_frontend() {
    let text = edit(EXPOSED, "  probes:\n", "  flows: {all: true, count: 3}\n  probes:\n");
    let s = parse(&text);
    // 7 given, then per frontend: cluster IP from 3 pods and 2 nodes (5); the node port on
    // 2 nodes from those and the external host (12); the external IP and the load-balancer IP,
    // each from pods and nodes plus the external host via each node (7 + 7); the health check
    // on 2 nodes from 2 nodes and the external host (6).
    assert_eq!(s.probes.len(), 7 + 5 + 12 + 7 + 7 + 6);
    let flows = &s.probes[7..];
    let all: Vec<&str> = flows.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(all.iter().collect::<HashSet<_>>().len(), all.len(), "names are unique");
    assert_eq!(
        &all[..6],
        [
            "flow: pod web-a -> web:http clusterIP",
            "flow: pod web-b -> web:http clusterIP",
            "flow: pod client -> web:http clusterIP",
            "flow: node node-a -> web:http clusterIP",
            "flow: node node-b -> web:http clusterIP",
            "flow: pod web-a -> web:http nodePort@node-a",
        ]
    );
    for name in [
        "flow: external outside -> web:http nodePort@node-b",
        "flow: pod client -> web:http externalIP 203.0.113.10",
        "flow: external outside -> web:http externalIP 203.0.113.10 via node-a",
        "flow: external outside -> web:http loadBalancer 198.51.100.7 via node-b",
        "flow: node node-a -> web:http loadBalancer 198.51.100.7",
        "flow: node node-a -> web healthCheck@node-b",
        "flow: external outside -> web healthCheck@node-a",
    ] {
        assert!(all.contains(&name), "{name} missing from {all:#?}");
    }
    // External hosts have no route to cluster IPs; pods don't probe health checks.
    assert!(!all.iter().any(|n| n.starts_with("flow: external") && n.ends_with("clusterIP")));
    assert!(!all.iter().any(|n| n.starts_with("flow: pod") && n.contains("healthCheck")));

    let by_name = |name: &str| flows.iter().find(|p| p.name == name).unwrap();
    let via = by_name("flow: external outside -> web:http externalIP 203.0.113.10 via node-a");
    assert_eq!(via.from, Source::External("outside".into()));
    assert_eq!(
        via.to,
        Target::ExternalIp {
            service: "web".into(),
            port: "http".into(),
            ip: "203.0.113.10".parse().unwrap(),
            via: Some("node-a".into())
        }
    );
    let health = by_name("flow: external outside -> web healthCheck@node-a");
    assert_eq!(health.to, Target::HealthCheck { service: "web".into(), node: "node-a".into() });
    assert_eq!(health.protocol, Protocol::Tcp);
    assert!(flows.iter().all(|p| p.count == 3 && p.expect.is_none() && p.interval.is_none()));
}

#[test]
fn flows_may_replace_the_probes_and_take_the_port_protocol() {
    let text = flows_only(KUBE_DNS, "{all: true}");
    let s = parse(&text);
    assert_eq!(s.probes.len(), 2 * 5, "two ports, each from 3 pods and 2 nodes");
    let udp = s.probes.iter().find(|p| p.name == "flow: pod client -> kube-dns:dns clusterIP").unwrap();
    assert_eq!((udp.protocol, udp.count), (Protocol::Udp, 10));
    let tcp = s.probes.iter().find(|p| p.name == "flow: node node-b -> kube-dns:dns-tcp clusterIP").unwrap();
    assert_eq!(tcp.protocol, Protocol::Tcp);
}

#[test]
fn an_unnamed_port_is_named_by_its_number() {
    let text = edit(
        WEB,
        "- {name: http, port: 80, targetPort: http, nodePort: 30080}",
        "- {port: 80, targetPort: http, nodePort: 30080}",
    );
    let text = flows_only(&text, "{all: true}");
    let s = parse(&text);
    assert_eq!(s.probes.len(), 5 + 2 * 6);
    assert!(names(&s).contains(&"flow: external outside -> web:80 nodePort@node-a"));
    assert_eq!(s.cluster.target_address(&s.probes[0].to), Some("10.96.0.20:80".parse().unwrap()));
}

#[test]
fn the_whole_load_names_the_flow_the_oracle_objects_to() {
    let text = flows_only(WEB, "{all: true}");
    match load_str(&text, Path::new(FILE)) {
        Ok(s) => assert_eq!(s.probes.len(), 17),
        Err(e) => {
            for error in &e.errors {
                assert_eq!(error.field, "spec.flows", "{error}");
                assert!(error.message.starts_with("flow: "), "{error}");
            }
        }
    }
}

#[test]
fn given_probes_keep_their_names_apart_from_flows() {
    let text = edit(WEB, "  probes:\n", "  flows: {all: true}\n  probes:\n");
    let text =
        edit(&text, "    - name: pod-to-web\n", "    - name: \"flow: pod client -> web:http clusterIP\"\n");
    assert_only(
        &parse_errors(&text),
        at(&text, "\"flow: pod client"),
        "spec.probes[0].name",
        "probe name \"flow: pod client -> web:http clusterIP\" is also the name of a generated flow \
         (spec.flows): rename the probe",
    );
}

#[test]
fn flows_spec_errors() {
    let text = flows_only(WEB, "{all: true, count: 0}");
    assert_only(
        &errors(&text),
        at_in(&text, "count: 0", "0"),
        "spec.flows.count",
        "count must be between 1 and 10000, not 0",
    );
    let text = flows_only(WEB, "{all: true, cnt: 3}");
    assert_only(
        &errors(&text),
        at(&text, "cnt"),
        "spec.flows.cnt",
        "unknown field `cnt`, expected `all` or `count`",
    );
    let text = flows_only(WEB, "{count: 3}");
    assert_only(&errors(&text), at(&text, "{count: 3}"), "spec.flows.all", "required field `all` is missing");
    // `all: false` generates nothing: the probes are missing again.
    let text = flows_only(WEB, "{all: false}");
    assert_only(
        &errors(&text),
        at_in(&text, "spec:\n  cluster", "cluster"),
        "spec.probes",
        "at least one probe is required (or generate them with flows: {all: true})",
    );
}

#[test]
fn flows_need_a_service() {
    let text = flows_only(WEB, "{all: true}");
    let start = text.find("---\napiVersion: v1\nkind: Service").unwrap();
    let end = start + 4 + text[start + 4..].find("---\n").unwrap();
    let text = format!("{}{}", &text[..start], &text[end..]);
    assert_only(
        &errors(&text),
        at(&text, "{all: true}"),
        "spec.flows",
        "flows found nothing to probe: the scenario has no Service",
    );
}

#[test]
fn a_host_routed_to_the_service_cidr_reaches_cluster_ips() {
    let text = edit(
        EXPOSED,
        "    - {name: outside, ip: 192.168.50.100}\n",
        "    - {name: outside, ip: 192.168.50.100, routes: [{to: 10.96.0.0/12, via: node-b}]}\n    - {name: far, ip: 192.168.50.101}\n",
    );
    let s = parse(&flows_only(&text, "{all: true}"));
    let all = names(&s);
    assert!(all.contains(&"flow: external outside -> web:http clusterIP"), "{all:#?}");
    assert!(!all.contains(&"flow: external far -> web:http clusterIP"), "{all:#?}");
}
