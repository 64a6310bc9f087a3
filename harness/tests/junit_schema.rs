//! Our JUnit XML is what CI systems accept: reports of every kind a run produces (passed,
//! failed, skipped, not judged, a setup error) go through the real writer and must validate
//! against Jenkins' JUnit schema (`tests/data/junit-10.xsd`, see `tests/data/README.md`) with
//! `xmllint --schema`. Without xmllint the tests say so and pass, except in CI
//! (`PACKETPROOF_REQUIRE_PRIVILEGES=1`), where `ci/install-deps.sh` installs it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use packetproof::model::Profile;
use packetproof::model::Scenario;
use packetproof::oracle::{Expectation, Outcome as Expected};
use packetproof::proxy::Mutant;
use packetproof::proxy::iptables::BuiltinIptables;
use packetproof::report::{self, Finished};
use packetproof::results::{Outcome, ScenarioReport};
use packetproof::runner::{self, RunOptions};
use packetproof::traffic::Attempt;
use packetproof::{admission, commands, verdict};

fn schema() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/junit-10.xsd")
}

fn load(name: &str) -> Scenario {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../scenarios/{name}.yaml"));
    admission::load(&file).unwrap_or_else(|e| panic!("{e}"))
}

/// Whether xmllint is here; without it a test is skipped, except in CI.
fn have_xmllint() -> bool {
    let found = Command::new("xmllint").arg("--version").output().is_ok_and(|o| o.status.success());
    packetproof::privileges::tool_or_skip(
        found,
        "xmllint is missing: run ci/install-deps.sh (package libxml2-utils)",
    )
}

/// Validates `xml` against the schema; `Err` carries xmllint's own message.
fn validate(xml: &str) -> Result<(), String> {
    let mut child = Command::new("xmllint")
        .args(["--noout", "--schema"])
        .arg(schema())
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting xmllint");
    child.stdin.take().expect("xmllint's stdin").write_all(xml.as_bytes()).expect("feeding xmllint");
    let out = child.wait_with_output().expect("waiting for xmllint");
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("xmllint ({}): {}", out.status, String::from_utf8_lossy(&out.stderr)))
    }
}

fn assert_valid(xml: &str) {
    if let Err(message) = validate(xml) {
        let numbered: String = xml.lines().enumerate().map(|(i, l)| format!("{:4} {l}\n", i + 1)).collect();
        panic!("our JUnit XML does not validate against junit-10.xsd:\n{message}\n{numbered}");
    }
}

/// The document must hold every element it is meant to prove, or a valid file proves little.
fn assert_covers(xml: &str, fragments: &[&str]) {
    for fragment in fragments {
        assert!(xml.contains(fragment), "the JUnit XML lacks {fragment:?}:\n{xml}");
    }
}

#[test]
fn the_schema_rejects_what_jenkins_would_reject() {
    if !have_xmllint() {
        return;
    }
    // A test case without a name and a suite without its counts: both required by the schema.
    let broken =
        r#"<?xml version="1.0"?><testsuites><testsuite name="x"><testcase/></testsuite></testsuites>"#;
    let message = validate(broken).expect_err("xmllint accepted an invalid report");
    assert!(message.contains("name"), "{message}");
    assert_valid(
        r#"<testsuites><testsuite name="x" tests="1" failures="0" errors="0"><testcase name="y"/></testsuite></testsuites>"#,
    );
}

/// Reports built from judged verdicts, without running anything: passed, failed with text that
/// needs escaping, skipped, not judged, and a setup error.
#[test]
fn reports_of_every_kind_validate() {
    if !have_xmllint() {
        return;
    }
    let judged = load("kube-dns-udp");
    let probe = &judged.probes[0];
    let destination = "10.96.0.10:53".parse().expect("an address");
    let rejected = Expectation::required(Expected::Rejected, "ClusterIP <no endpoints> & \"quoted\"");
    let refused = || Attempt::Refused { reason: "ICMP port unreachable".into() };
    let passed = verdict::judge(probe, destination, &rejected, vec![refused(), refused()]);
    // What a misbehaving program might send back: markup, quotes, an escape sequence, a NUL.
    let odd = "HTTP/1.1 500 <b>oops</b> & \"more\" \u{1b}[31mred\u{1b}[0m \u{0}end";
    let failed = verdict::judge(
        probe,
        destination,
        &rejected,
        vec![refused(), Attempt::Silent, Attempt::Broken { reason: odd.into() }],
    );
    assert!(passed.passed() && !failed.passed());
    let ran = ScenarioReport {
        scenario: judged.name.clone(),
        source: judged.source.clone(),
        proxy: "builtin-iptables".into(),
        outcome: Outcome::Judged(vec![passed, failed]),
        elapsed: Duration::from_millis(1234),
        artifacts: Some(PathBuf::from("artifacts/kube-dns-udp")),
        unjudged: vec![("client-to-node-localhost".into(), "Kubernetes leaves it open".into())],
        profile: Some(Profile::KUBERNETES),
        coverage: None,
        timings: Default::default(),
    };
    let skipped_scenario = load("sctp");
    let skipped = ScenarioReport::skipped(&skipped_scenario, "builtin-iptables", "no SCTP sockets".into());
    let broken_scenario = load("hairpin");
    let finished = [
        Finished::Ran { scenario: &judged, report: &ran },
        Finished::Ran { scenario: &skipped_scenario, report: &skipped },
        Finished::Error { scenario: &broken_scenario, error: format!("programming node-a: {odd}") },
    ];
    let xml = report::junit_report(&finished).expect("writing JUnit XML");
    assert_covers(&xml, &["<testsuites", "<testcase", "<failure", "<skipped", "<error", "not judged"]);
    assert_valid(&xml);
}

/// Reports of real runs: a passing scenario, the same kind of scenario failing under a mutant,
/// a scenario skipped as on a host without privileges, and flows a profile leaves unjudged.
#[test]
fn reports_of_real_runs_validate() {
    if !have_xmllint() {
        return;
    }
    if !packetproof::privileges::scenarios_can_run() {
        return;
    }
    let options = RunOptions { timeout: Duration::from_millis(300), ..RunOptions::default() };
    let correct = BuiltinIptables { mutant: None };
    let broken = BuiltinIptables { mutant: Some(Mutant::NoHairpinMasq) };

    let pass = load("kube-dns-udp");
    // With rule coverage measured: the report gains its coverage suite.
    let traced = RunOptions { coverage: true, ..options.clone() };
    let pass_report = runner::run(&pass, &correct, &traced).expect("kube-dns-udp runs");
    assert!(pass_report.passed(), "{}", report::scenario_line(&pass_report));

    let fail = load("hairpin");
    let fail_report = runner::run(&fail, &broken, &options).expect("hairpin runs under the mutant");
    assert!(matches!(fail_report.outcome, Outcome::Judged(_)) && !fail_report.passed());

    let skip = load("pod-same-node");
    let skip_report =
        commands::run_one(&skip, None, &options, Some("needs root (pretend)")).expect("skipping");

    let open = load("localhost-node-port");
    let kubernetes = RunOptions { profile: Some(Profile::KUBERNETES), ..options.clone() };
    let open_report = runner::run(&open, &correct, &kubernetes).expect("localhost-node-port runs");
    assert!(!open_report.unjudged.is_empty(), "the kubernetes profile judged every flow of {}", open.name);

    let finished = [
        Finished::Ran { scenario: &pass, report: &pass_report },
        Finished::Ran { scenario: &fail, report: &fail_report },
        Finished::Ran { scenario: &skip, report: &skip_report },
        Finished::Ran { scenario: &open, report: &open_report },
    ];
    let xml = report::junit_report(&finished).expect("writing JUnit XML");
    assert_covers(&xml, &["<failure", "<skipped", "not judged", "rule-coverage", "templates covered"]);
    assert_valid(&xml);
}
