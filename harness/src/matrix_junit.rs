//! The kernel matrix's combined JUnit report: every kernel × proxy's scenarios as test suites
//! named `KERNEL (VERSION) PROXY: SCENARIO`, so that a CI system tells the same scenario on two
//! kernels apart, built by quick-junit from the guests' JSON reports (the same fields `run`'s
//! own JUnit report shows: a test case per probe, its failures, skipped with the reason).

use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
use serde_json::Value;

/// One kernel × proxy as the matrix ended it.
pub(crate) struct CellRun<'a> {
    pub kernel: &'a str,
    pub version: &'a str,
    pub proxy: &'a str,
    /// The guest's JSON report of its run, if it wrote one.
    pub report: Option<&'a Value>,
    /// Why the run could not be carried out (no report, or a VM that failed).
    pub error: Option<&'a str>,
}

pub(crate) fn junit(cells: &[CellRun<'_>]) -> anyhow::Result<String> {
    let mut report = Report::new("packetproof matrix");
    for cell in cells {
        let prefix = format!("{} ({}) {}", cell.kernel, cell.version, cell.proxy);
        let scenarios = cell.report.and_then(|r| r["scenarios"].as_array());
        match (scenarios, cell.error) {
            (Some(scenarios), None) => {
                for scenario in scenarios {
                    report.add_test_suite(suite(&prefix, scenario));
                }
            }
            (_, error) => {
                let mut suite = TestSuite::new(prefix.as_str());
                let mut status = TestCaseStatus::non_success(NonSuccessKind::Error);
                status
                    .set_message("the run could not be carried out")
                    .set_description(error.unwrap_or("the guest wrote no report"));
                suite.add_test_case(TestCase::new("run", status));
                report.add_test_suite(suite);
            }
        }
    }
    let xml = report.to_string()?;
    crate::report::junit_root_without_skipped(&xml)
}

fn text<'v>(value: &'v Value, key: &str) -> &'v str {
    value[key].as_str().unwrap_or_default()
}

/// A scenario of one kernel × proxy, as `run`'s JUnit report shows it.
fn suite(prefix: &str, scenario: &Value) -> TestSuite {
    let name = text(scenario, "name");
    let mut suite = TestSuite::new(format!("{prefix}: {name}"));
    if let Some(seconds) = scenario["elapsed_seconds"].as_f64() {
        suite.set_time(std::time::Duration::from_secs_f64(seconds.max(0.0)));
    }
    let classname = format!("{prefix}::{}::{name}", text(scenario, "file"));
    let mut add = |case_name: &str, status: TestCaseStatus| {
        let mut case = TestCase::new(case_name, status);
        case.set_classname(classname.as_str());
        suite.add_test_case(case);
    };
    match text(scenario, "status") {
        "skipped" => {
            let mut status = TestCaseStatus::skipped();
            status.set_message(text(scenario, "reason"));
            add("scenario", status);
        }
        "error" => {
            let mut status = TestCaseStatus::non_success(NonSuccessKind::Error);
            status.set_message("the scenario could not be set up").set_description(text(scenario, "reason"));
            add("setup", status);
        }
        _ => {
            for probe in scenario["probes"].as_array().into_iter().flatten() {
                let status = if probe["passed"].as_bool() == Some(true) {
                    TestCaseStatus::success()
                } else {
                    let failures: Vec<&str> = probe["failures"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .collect();
                    let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
                    status.set_message(failures.first().copied().unwrap_or("failed")).set_description(
                        format!(
                            "from {} to {}\nexpected: {} ({}; by {})\nobserved: {}\n{}{}",
                            text(probe, "from"),
                            text(probe, "to"),
                            text(probe, "expected"),
                            text(probe, "because"),
                            text(probe, "required_by"),
                            text(probe, "observed"),
                            failures.iter().map(|f| format!("✗ {f}\n")).collect::<String>(),
                            scenario["evidence"]
                                .as_str()
                                .map(|e| format!("evidence (in the guest): {e}\n"))
                                .unwrap_or_default(),
                        ),
                    );
                    status
                };
                add(text(probe, "name"), status);
            }
            for flow in scenario["not_judged"].as_array().into_iter().flatten() {
                let mut status = TestCaseStatus::skipped();
                status.set_message(format!("not judged: {}", text(flow, "reason")));
                add(text(flow, "flow"), status);
            }
        }
    }
    suite
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> Value {
        serde_json::json!({
            "passed": 1, "failed": 1, "skipped": 1, "errors": 0,
            "scenarios": [
                {"name": "sctp", "file": "scenarios/sctp.yaml", "status": "passed", "elapsed_seconds": 7.0,
                 "probes": [{"name": "pod-to-cluster-ip", "passed": true, "failures": []}], "not_judged": []},
                {"name": "hairpin", "file": "scenarios/hairpin.yaml", "status": "failed", "elapsed_seconds": 3.0,
                 "evidence": "/share/builtin-iptables/artifacts/hairpin",
                 "probes": [{"name": "self", "passed": false, "from": "pod a", "to": "svc web",
                             "failures": ["conntrack on node-a: no entry"]}], "not_judged": []},
                {"name": "ipvs-only", "file": "scenarios/x.yaml", "status": "skipped",
                 "reason": "needs kernel 5.15 or newer (minKernel); this kernel is 5.10.0-32-amd64", "probes": []},
            ]
        })
    }

    #[test]
    fn suites_are_named_by_kernel_proxy_and_scenario() {
        let report = report();
        let cells = [
            CellRun {
                kernel: "5.10",
                version: "5.10.262-1",
                proxy: "builtin-iptables",
                report: Some(&report),
                error: None,
            },
            CellRun {
                kernel: "7.3",
                version: "7.3.4-1",
                proxy: "builtin-iptables",
                report: None,
                error: Some("qemu exited with 1"),
            },
        ];
        let xml = junit(&cells).unwrap();
        assert!(
            xml.contains(r#"<testsuite name="5.10 (5.10.262-1) builtin-iptables: sctp" tests="1""#),
            "{xml}"
        );
        assert!(xml.contains(r#"name="5.10 (5.10.262-1) builtin-iptables: hairpin" tests="1" skipped="0" errors="0" failures="1""#), "{xml}");
        assert!(xml.contains(r#"<failure message="conntrack on node-a: no entry""#), "{xml}");
        assert!(xml.contains(r#"<skipped message="needs kernel 5.15 or newer (minKernel); this kernel is 5.10.0-32-amd64"/>"#), "{xml}");
        assert!(
            xml.contains(
                r#"<testsuite name="7.3 (7.3.4-1) builtin-iptables" tests="1" skipped="0" errors="1""#
            ),
            "{xml}"
        );
        assert!(xml.contains("qemu exited with 1"), "{xml}");
        assert!(
            xml.contains(r#"<testsuites name="packetproof matrix" tests="4" failures="1" errors="1">"#),
            "no skipped count on the root: {xml}"
        );
    }
}
