//! The target forms beyond cluster IPs and plain node ports, intervals and HTTP statuses.
//!
//! These check the parser alone (`parse`, `parse_errors`): whether the oracle can predict
//! each probe is its own concern, checked by `the_whole_load_reports_only_oracle_findings`.

use std::net::IpAddr;
use std::time::Duration;

use super::*;
use crate::model::{Protocol, Source, StatedVerdict, Target};
use crate::scenario::target_form::FORMS;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// `EXPOSED` with the `to:` of the probe named `probe` replaced.
fn retarget(probe: &str, to: &str) -> String {
    let start = EXPOSED.find(&format!("- name: {probe}\n")).unwrap_or_else(|| panic!("no probe {probe}"));
    let line = start + EXPOSED[start..].find("      to: ").unwrap();
    let end = line + EXPOSED[line..].find('\n').unwrap();
    format!("{}      to: {to}{}", &EXPOSED[..line], &EXPOSED[end..])
}

#[test]
fn every_form_resolves() {
    let s = parse(EXPOSED);
    let by_name = |name: &str| s.probes.iter().find(|p| p.name == name).unwrap();
    let (service, port) = ("web".to_string(), "http".to_string());
    assert_eq!(
        by_name("outside-to-lb").to,
        Target::LoadBalancer {
            service: service.clone(),
            port: port.clone(),
            ip: ip("198.51.100.7"),
            via: Some("node-b".into())
        }
    );
    assert_eq!(
        by_name("outside-to-external-ip").to,
        Target::ExternalIp {
            service: service.clone(),
            port: port.clone(),
            ip: ip("203.0.113.10"),
            via: Some("node-a".into())
        }
    );
    assert_eq!(
        by_name("client-to-external-ip").to,
        Target::ExternalIp {
            service: service.clone(),
            port: port.clone(),
            ip: ip("203.0.113.10"),
            via: None
        }
    );
    let secondary = &by_name("node-to-secondary").to;
    assert_eq!(
        *secondary,
        Target::NodePort {
            service: service.clone(),
            port: port.clone(),
            node: "node-a".into(),
            address: Some(ip("192.168.50.21"))
        }
    );
    assert_eq!(s.cluster.target_address(secondary), Some("192.168.50.21:30080".parse().unwrap()));
    let localhost = &by_name("node-to-localhost").to;
    assert_eq!(s.cluster.target_address(localhost), Some("127.0.0.1:30080".parse().unwrap()));

    let health = by_name("health-b");
    assert_eq!(health.to, Target::HealthCheck { service: service.clone(), node: "node-b".into() });
    assert_eq!(health.protocol, Protocol::Tcp);
    assert_eq!(s.cluster.target_address(&health.to), Some("192.168.50.12:32000".parse().unwrap()));
    let expect = health.expect.as_ref().unwrap();
    assert_eq!((expect.verdict, expect.http_status), (StatedVerdict::Answered, Some(200)));

    let affinity = by_name("affinity-expires");
    assert_eq!(affinity.interval, Some(Duration::from_millis(1500)));
    assert_eq!(affinity.from, Source::Pod("client".into()));
    assert_eq!(by_name("outside-to-lb").interval, None);
}

#[test]
fn the_whole_load_reports_only_oracle_findings() {
    // The oracle judges every probe after the parser; whatever it makes of them, its findings
    // are about probes, never about the parsed fields.
    match load_str(EXPOSED, Path::new(FILE)) {
        Ok(s) => assert_eq!(s.probes.len(), 7),
        Err(e) => {
            for error in &e.errors {
                let probe_level = error.field.starts_with("spec.probes[")
                    && (error.field.ends_with("].to") || error.field.ends_with("].expect"));
                assert!(probe_level, "not an oracle finding: {error}");
            }
        }
    }
}

#[test]
fn a_target_form_takes_only_its_keys() {
    let text = retarget("outside-to-lb", "{service: web, port: http, nodePort: node-b, via: node-b}");
    assert_only(
        &parse_errors(&text),
        at_in(&text, "via: node-b}", "via"),
        "spec.probes[0].to.via",
        &format!("via does not go with {{service, port, nodePort[, address]}}; the target forms are {FORMS}"),
    );
    let text =
        retarget("outside-to-lb", "{service: web, port: http, nodePort: node-b, loadBalancer: 198.51.100.7}");
    assert_only(
        &parse_errors(&text),
        at(&text, "{service: web, port: http, nodePort: node-b, loadBalancer"),
        "spec.probes[0].to",
        "give at most one of nodePort, externalIP, loadBalancer (got nodePort and loadBalancer)",
    );
    let text = retarget("health-b", "{healthCheck: web, service: web}");
    assert_only(
        &parse_errors(&text),
        at(&text, "{healthCheck: web, service"),
        "spec.probes[5].to",
        &format!("give service or healthCheck, not both (the target forms are {FORMS})"),
    );
    let text = retarget("health-b", "{healthCheck: web, node: node-b, port: 80}");
    assert_only(
        &parse_errors(&text),
        at_in(&text, "node-b, port: 80}", "port"),
        "spec.probes[5].to.port",
        &format!("port does not go with {{healthCheck, node}}; the target forms are {FORMS}"),
    );
    let text = retarget("health-b", "{address: 192.168.50.12, port: 32000, node: node-b}");
    assert_only(
        &parse_errors(&text),
        at_in(&text, "32000, node: node-b}", "node:"),
        "spec.probes[5].to.node",
        &format!("node does not go with {{address, port[, via]}}; the target forms are {FORMS}"),
    );
}

#[test]
fn external_ips_must_be_the_services() {
    let text = retarget("client-to-external-ip", "{service: web, port: http, externalIP: 203.0.113.99}");
    assert_only(
        &parse_errors(&text),
        at(&text, "203.0.113.99"),
        "spec.probes[2].to.externalIP",
        "203.0.113.99 is not an external IP of Service web (its externalIPs: 203.0.113.10)",
    );
    let text = edit(EXPOSED, "  externalIPs: [203.0.113.10]\n", "");
    let errs = parse_errors(&text);
    assert_has(
        &errs,
        at_nth(&text, "203.0.113.10", 1),
        "spec.probes[2].to.externalIP",
        "203.0.113.10 is not an external IP of Service web (it has none: spec.externalIPs is empty)",
    );
}

#[test]
fn load_balancer_ips_must_be_the_services_ingress() {
    let text =
        retarget("outside-to-lb", "{service: web, port: http, loadBalancer: 198.51.100.8, via: node-b}");
    assert_only(
        &parse_errors(&text),
        at(&text, "198.51.100.8"),
        "spec.probes[0].to.loadBalancer",
        "198.51.100.8 is not a load-balancer IP of Service web (its ingress IPs: 198.51.100.7)",
    );
    let text = edit(
        WEB,
        "to: {service: web, port: http}",
        "to: {service: web, port: http, loadBalancer: 198.51.100.7}",
    );
    assert_only(
        &errors(&text),
        at(&text, "198.51.100.7"),
        "spec.probes[0].to.loadBalancer",
        "198.51.100.7 is not a load-balancer IP of Service web (it is not of type LoadBalancer)",
    );
    let text = edit(EXPOSED, "    ingress: [{ip: 198.51.100.7}]\n", "");
    assert_only(
        &parse_errors(&text),
        at(&text, "198.51.100.7"),
        "spec.probes[0].to.loadBalancer",
        "198.51.100.7 is not a load-balancer IP of Service web (it has none: status.loadBalancer.ingress is empty)",
    );
}

#[test]
fn via_is_required_from_external_hosts_and_refused_from_pods_and_nodes() {
    let text = retarget("outside-to-lb", "{service: web, port: http, loadBalancer: 198.51.100.7}");
    assert_only(
        &parse_errors(&text),
        at(&text, "{service: web, port: http, loadBalancer: 198.51.100.7}"),
        "spec.probes[0].to.via",
        "required field `via` is missing: traffic from external host outside enters the cluster at a node; \
         name the node the router sends it to (via: NODE)",
    );
    let text = retarget(
        "client-to-external-ip",
        "{service: web, port: http, externalIP: 203.0.113.10, via: node-a}",
    );
    let (line, column) = at_nth(&text, "via: node-a}", 1);
    assert_only(
        &parse_errors(&text),
        (line, column + "via: ".len()),
        "spec.probes[2].to.via",
        "via only goes with an external host as the source: pods and nodes reach external IPs through their \
         own node (this probe is from pod client)",
    );
    let text =
        retarget("outside-to-lb", "{service: web, port: http, loadBalancer: 198.51.100.7, via: node-c}");
    assert_only(
        &parse_errors(&text),
        at(&text, "node-c"),
        "spec.probes[0].to.via",
        "no node named \"node-c\" in the scenario (known: node-a, node-b)",
    );
}

#[test]
fn node_port_addresses_belong_to_the_node() {
    let text =
        retarget("node-to-secondary", "{service: web, port: http, nodePort: node-b, address: 192.168.50.21}");
    assert_only(
        &parse_errors(&text),
        at_in(&text, "address: 192.168.50.21}", "192"),
        "spec.probes[3].to.address",
        "192.168.50.21 is not an address of node node-b (its addresses: 192.168.50.12; or 127.0.0.1 from the \
         node itself)",
    );
    // The primary address may be written out too.
    let text =
        retarget("node-to-secondary", "{service: web, port: http, nodePort: node-a, address: 192.168.50.11}");
    parse(&text);
}

#[test]
fn localhost_node_ports_only_from_the_node_itself() {
    let text = edit(
        EXPOSED,
        "    - name: node-to-localhost\n      from: {node: node-a}",
        "    - name: node-to-localhost\n      from: {node: node-b}",
    );
    assert_only(
        &parse_errors(&text),
        at(&text, "127.0.0.1"),
        "spec.probes[4].to.address",
        "127.0.0.1 reaches node node-a's node ports only from node node-a itself: localhost is only reachable \
         from the node itself, and this probe is from node node-b",
    );
    let text = edit(
        EXPOSED,
        "    - name: node-to-localhost\n      from: {node: node-a}",
        "    - name: node-to-localhost\n      from: {pod: client}",
    );
    assert_has(
        &parse_errors(&text),
        at(&text, "127.0.0.1"),
        "spec.probes[4].to.address",
        "this probe is from pod client",
    );
}

#[test]
fn health_checks_need_a_health_check_node_port_and_tcp() {
    let text = edit(WEB, "to: {service: web, port: http}", "to: {healthCheck: web, node: node-a}");
    let text = edit(&text, "expect: {verdict: answered, source: client}", "");
    assert_only(
        &errors(&text),
        at_in(&text, "healthCheck: web", "web"),
        "spec.probes[0].to.healthCheck",
        "Service web has no healthCheckNodePort (only type LoadBalancer with externalTrafficPolicy Local has one)",
    );
    let text = retarget("health-b", "{healthCheck: web}");
    assert_only(
        &parse_errors(&text),
        at(&text, "{healthCheck: web}"),
        "spec.probes[5].to.node",
        "required field `node` is missing: a health check asks one node (node: NODE)",
    );
    let text = edit(
        EXPOSED,
        "      to: {healthCheck: web, node: node-b}\n",
        "      to: {healthCheck: web, node: node-b}\n      protocol: UDP\n",
    );
    assert_only(
        &parse_errors(&text),
        at(&text, "UDP"),
        "spec.probes[5].protocol",
        "a health check is HTTP over TCP, not UDP: leave protocol out or write TCP",
    );
}

#[test]
fn http_status_is_for_answered_health_checks() {
    let text = edit(EXPOSED, "httpStatus: 200", "httpStatus: 404");
    assert_only(
        &parse_errors(&text),
        at(&text, "404"),
        "spec.probes[5].expect.httpStatus",
        "httpStatus must be 200 (the node has local endpoints) or 503 (it has none), not 404",
    );
    let text = edit(EXPOSED, "{verdict: answered, httpStatus: 200}", "{verdict: dropped, httpStatus: 503}");
    assert_only(
        &parse_errors(&text),
        at(&text, "503"),
        "spec.probes[5].expect.httpStatus",
        "httpStatus only goes with verdict: answered",
    );
    let text = edit(WEB, "{verdict: answered, source: client}", "{verdict: answered, httpStatus: 200}");
    assert_only(
        &errors(&text),
        at(&text, "200"),
        "spec.probes[0].expect.httpStatus",
        "httpStatus only goes with a healthCheck target",
    );
    let text =
        edit(EXPOSED, "{verdict: answered, httpStatus: 200}", "{verdict: answered, backends: [web-b]}");
    assert_only(
        &parse_errors(&text),
        at(&text, "[web-b]"),
        "spec.probes[5].expect.backends",
        "backends does not apply to a healthCheck target: the proxy on the node answers it (state httpStatus instead)",
    );
}

#[test]
fn intervals_have_units_and_limits() {
    let cases = [
        ("2", "invalid type: integer `2`, expected a duration with a unit, like 1500ms or 2s"),
        ("\"2\"", "\"2\" has no unit: write e.g. 1500ms or 2s"),
        ("1.5s", "\"1.5s\" is not a duration: write a whole number of ms or s, e.g. 1500ms or 2s"),
        ("0ms", "interval must be more than 0"),
        ("61s", "interval 61s is longer than the maximum of 60s"),
    ];
    for (value, message) in cases {
        let text = edit(EXPOSED, "interval: 1500ms", &format!("interval: {value}"));
        assert_only(
            &parse_errors(&text),
            at_in(&text, &format!("interval: {value}"), value),
            "spec.probes[6].interval",
            message,
        );
    }
    let text = edit(EXPOSED, "interval: 1500ms", "interval: 2s");
    assert_eq!(parse(&text).probes[6].interval, Some(Duration::from_secs(2)));
}

#[test]
fn a_nodes_localhost_is_reached_from_outside_only_with_via() {
    let to = "      to: {service: web, port: http, nodePort: node-b}";
    let text = edit(WEB, to, "      to: {address: 127.0.0.1, port: 10248, via: node-a}");
    let s = parse(&text);
    assert_eq!(s.probes[1].to, Target::Localhost { node: "node-a".into(), port: 10248 });
    assert_eq!(s.probes[1].protocol, Protocol::Tcp);

    let text = edit(WEB, to, "      to: {address: 192.168.50.11, port: 10248, via: node-a}");
    let errs = parse_errors(&text);
    assert_has(
        &errs,
        at(&text, "node-a}"),
        "spec.probes[1].to.via",
        "via goes with an address only for 127.0.0.1",
    );

    let text = edit(
        WEB,
        "      to: {address: 10.96.0.99, port: 80}",
        "      to: {address: 127.0.0.1, port: 80, via: node-b}",
    );
    let errs = parse_errors(&text);
    assert_has(
        &errs,
        at_in(&text, "port: 80, via: node-b}", "node-b"),
        "spec.probes[2].to.via",
        "only an external host sends to another node's 127.0.0.1",
    );
}
