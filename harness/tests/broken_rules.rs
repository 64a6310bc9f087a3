//! The checks can fail: each test breaks one generated rule the way real proxies have broken
//! it, runs the scenario that covers that rule with real packets, and requires a readable
//! failure that names the probe and what went wrong.

use std::path::Path;
use std::time::Duration;

use packetproof::model::Scenario;
use packetproof::proxy::Mutant;
use packetproof::proxy::iptables::BuiltinIptables;
use packetproof::results::Outcome;
use packetproof::runner::{self, RunOptions};
use packetproof::{admission, report};

/// Runs `scenario_name` against the built-in proxy broken by `mutant`; returns the failure
/// table, or `None` when this host cannot run scenarios.
fn failure_table(scenario_name: &str, mutant: Mutant) -> Option<String> {
    if !packetproof::privileges::scenarios_can_run() {
        return None;
    }
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios")
        .canonicalize()
        .expect("scenarios/ exists")
        .join(format!("{scenario_name}.yaml"));
    let s: Scenario = admission::load(&file).unwrap_or_else(|e| panic!("{e}"));
    let proxy = BuiltinIptables { mutant: Some(mutant) };
    // Drops are the point of some mutants: a short wait keeps this test quick, and the
    // assertions below name what must be seen, so a slow answer cannot pass for a kill.
    let options = RunOptions { timeout: Duration::from_millis(300), ..RunOptions::default() };
    let report = runner::run(&s, &proxy, &options).expect("the broken proxy still loads");
    let Outcome::Judged(verdicts) = &report.outcome else { panic!("{scenario_name} did not run") };
    assert!(!report.passed(), "mutant {mutant} survived scenario {scenario_name}");
    // A kill is the proxy's failure on witnesses that agree, never the harness's fault: a
    // mutant whose effect is a missing frame (a drop, a REJECT gone silent) still fails.
    assert!(
        report.failed() && !report.faulted(),
        "mutant {mutant} on {scenario_name}: a harness fault, not a failure"
    );
    assert!(verdicts.iter().all(|v| v.harness_faults.is_empty()), "mutant {mutant}: the witnesses disagreed");
    let table = report::flow_table(&s.cluster, verdicts);
    println!("{}\n{table}", report::scenario_line(&report));
    Some(table)
}

fn assert_mentions(table: &str, fragments: &[&str]) {
    for fragment in fragments {
        assert!(table.contains(fragment), "the failure report lacks {fragment:?}:\n{table}");
    }
}

#[test]
fn hairpin_without_masquerade_is_caught() {
    if let Some(table) = failure_table("hairpin", Mutant::NoHairpinMasq) {
        assert_mentions(&table, &["FAIL", "self-via-service-tcp", "self-via-service-udp", "expected"]);
    }
}

#[test]
fn node_port_without_masquerade_is_caught() {
    if let Some(table) = failure_table("external-nodeport-masquerade", Mutant::NoNodePortMasq) {
        assert_mentions(&table, &["FAIL", "outside-via-node-a"]);
    }
}

#[test]
fn a_ladder_that_never_reaches_the_last_endpoint_is_caught() {
    if let Some(table) = failure_table("seven-endpoints", Mutant::LastEndpointNeverChosen) {
        assert_mentions(&table, &["FAIL", "answered 0 of 140", "equally likely backends"]);
    }
}

#[test]
fn dropping_instead_of_rejecting_is_caught() {
    if let Some(table) = failure_table("no-endpoints-reject", Mutant::DropInsteadOfReject) {
        assert_mentions(&table, &["FAIL", "attempts were not refused", "silent"]);
    }
}

#[test]
fn dnat_to_the_service_port_is_caught() {
    if let Some(table) = failure_table("pod-to-clusterip-cross-node", Mutant::DnatToServicePort) {
        assert_mentions(&table, &["FAIL", "frontend-to-api", "refused"]);
    }
}

// The whole Service contract: each behaviour's scenario catches the bug real proxies shipped.

#[test]
fn local_policy_masquerading_outsiders_is_caught() {
    if let Some(table) = failure_table("etp-local-nodeport", Mutant::EtpLocalMasquerades) {
        assert_mentions(&table, &["FAIL", "expected client"]);
    }
}

#[test]
fn local_policy_forwarding_to_remote_endpoints_is_caught() {
    if let Some(table) = failure_table("etp-local-nodeport", Mutant::EtpLocalUsesRemoteEndpoints) {
        assert_mentions(&table, &["FAIL", "DROP"]);
    }
}

#[test]
fn local_policy_not_dropping_without_local_endpoints_is_caught() {
    if let Some(table) = failure_table("etp-local-nodeport", Mutant::EtpLocalNoDrop) {
        assert_mentions(&table, &["FAIL", "DROP"]);
    }
}

/// A node that forwards what it must drop: outside traffic to an external IP of a Local-policy
/// Service without local endpoints goes on un-translated toward the external IP. At 300 ms it
/// is as silent as a drop; the failure must name the frame and the entry that prove it left.
#[test]
fn forwarding_instead_of_dropping_is_caught_by_the_frames_that_prove_it() {
    if let Some(table) = failure_table("external-ips-local", Mutant::EtpLocalNoDrop) {
        assert_mentions(
            &table,
            &[
                "FAIL",
                "DROP",
                "not dropped: forwarded, unanswered: node node-b let it through",
                "ARP who-has",
            ],
        );
    }
}

/// A node that lets through what it must reject: a node port of a Service without endpoints
/// reaches the node's own stack, whose TCP reset looks like a refusal to the client. The
/// failure must name the reset and where it was captured, not just "refused".
#[test]
fn letting_a_node_port_through_instead_of_rejecting_is_caught_by_the_reset_that_proves_it() {
    if let Some(table) = failure_table("no-endpoints-reject", Mutant::NodePortWithoutEndpointsNotRejected) {
        assert_mentions(
            &table,
            &[
                "FAIL",
                "external-to-node-port",
                "reset by a host, not rejected by a rule: 192.168.50.11:30080 > 192.168.50.100:",
                "TCP [R.] came back (seen on external/outside), so node node-a's own stack received the SYN",
            ],
        );
    }
}

#[test]
fn internal_local_policy_falling_back_to_remote_endpoints_is_caught() {
    if let Some(table) = failure_table("itp-local", Mutant::ItpLocalFallsBackToRemote) {
        assert_mentions(&table, &["FAIL", "DROP"]);
    }
}

#[test]
fn unenforced_source_ranges_are_caught() {
    if let Some(table) = failure_table("loadbalancer-source-ranges", Mutant::SourceRangesNotEnforced) {
        assert_mentions(&table, &["FAIL", "loadBalancerSourceRanges"]);
    }
}

#[test]
fn affinity_without_its_timeout_is_caught() {
    if let Some(table) = failure_table("session-affinity-timeout", Mutant::AffinityWithoutTimeout) {
        assert_mentions(&table, &["FAIL", "session affinity never expired"]);
    }
}

#[test]
fn missing_affinity_is_caught() {
    if let Some(table) = failure_table("session-affinity", Mutant::NoAffinity) {
        assert_mentions(&table, &["FAIL", "session affinity broken"]);
    }
}

#[test]
fn terminating_endpoints_used_while_ready_ones_exist_is_caught() {
    if let Some(table) = failure_table("terminating-ignored-while-ready", Mutant::TerminatingUsedWhileReady) {
        assert_mentions(&table, &["FAIL", "not a valid backend"]);
    }
}

#[test]
fn no_fallback_to_terminating_endpoints_is_caught() {
    if let Some(table) = failure_table("terminating-fallback", Mutant::TerminatingNeverFallback) {
        assert_mentions(&table, &["FAIL", "refused"]);
    }
}

#[test]
fn node_ports_outside_node_port_addresses_are_caught() {
    if let Some(table) = failure_table("node-port-addresses", Mutant::NodePortOnAllAddresses) {
        assert_mentions(&table, &["FAIL", "CLOSED node-a", "not refused"]);
    }
}

#[test]
fn a_health_check_that_always_says_ok_is_caught() {
    if let Some(table) = failure_table("etp-local-health-check", Mutant::HealthCheckAlwaysOk) {
        assert_mentions(&table, &["FAIL", "HTTP 200, expected 503"]);
    }
}

#[test]
fn a_failing_run_yields_junit_and_json_that_parse_back() {
    if !packetproof::privileges::scenarios_can_run() {
        return;
    }
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/hairpin.yaml");
    let s = admission::load(&file).unwrap_or_else(|e| panic!("{e}"));
    let proxy = BuiltinIptables { mutant: Some(Mutant::NoHairpinMasq) };
    let options = RunOptions { timeout: Duration::from_millis(300), ..RunOptions::default() };
    let report = runner::run(&s, &proxy, &options).expect("runs");
    let finished = [report::Finished::Ran { scenario: &s, report: &report }];

    let xml = report::junit_report(&finished).expect("junit");
    let parsed = quick_junit::Report::deserialize_from_str(&xml).expect("the JUnit report parses back");
    assert_eq!((parsed.tests, parsed.failures, parsed.errors), (2, 2, 0), "{xml}");
    assert!(xml.contains("self-via-service-tcp") && xml.contains("<failure"), "{xml}");

    let json: serde_json::Value =
        serde_json::from_str(&report::json_report(&finished).expect("json")).unwrap();
    assert_eq!(json["failed"], 1);
    assert_eq!(json["scenarios"][0]["probes"][0]["passed"], false);
    assert!(!json["scenarios"][0]["probes"][0]["failures"].as_array().unwrap().is_empty());
}
