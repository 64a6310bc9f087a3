//! The kernel matrix's combined JUnit report: every kernel × proxy's scenarios as test suites
//! named `KERNEL (VERSION) PROXY: SCENARIO`, so that a CI system tells the same scenario on two
//! kernels apart, read back from the guests' JSON reports into the shape `run`'s own reports are written
//! from, and turned into suites by the same function (`report::junit`).

use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};

use super::GuestReport;
use crate::report::{JunitOrigin, ReportedScenario, junit_suite};

/// One kernel × proxy as the matrix ended it.
pub(crate) struct CellRun<'a> {
    pub kernel: &'a str,
    pub version: &'a str,
    pub proxy: &'a str,
    /// The guest's JSON report of its run, if it wrote one.
    pub report: Option<&'a GuestReport>,
    /// Why the run could not be carried out (no report, or a VM that failed).
    pub error: Option<&'a str>,
}

pub(crate) fn junit(cells: &[CellRun<'_>]) -> anyhow::Result<String> {
    let mut report = Report::new("packetproof matrix");
    for cell in cells {
        let run = format!("{} ({}) {}", cell.kernel, cell.version, cell.proxy);
        let read = match cell.error {
            Some(error) => Err(error.to_string()),
            None => scenarios(cell),
        };
        match read {
            Ok(scenarios) => {
                for scenario in scenarios {
                    report.add_test_suite(junit_suite(JunitOrigin::Guest(&run), scenario));
                }
            }
            Err(why) => {
                let mut suite = TestSuite::new(run.as_str());
                let mut status = TestCaseStatus::non_success(NonSuccessKind::Error);
                status.set_message("the run could not be carried out").set_description(why);
                suite.add_test_case(TestCase::new("run", status));
                report.add_test_suite(suite);
            }
        }
    }
    let xml = report.to_string()?;
    crate::report::junit_root_without_skipped(&xml)
}

/// The guest's scenarios, read back in the shape the host's reports are written from.
fn scenarios<'a>(cell: &CellRun<'a>) -> Result<&'a [ReportedScenario], String> {
    match cell.report {
        Some(GuestReport::Run(run)) => Ok(&run.scenarios),
        Some(GuestReport::Hunt(_)) => Err("the guest hunted mutants: its report has no scenarios".into()),
        Some(GuestReport::Diff(_)) => {
            Err("the guest compared two proxies: its report has no scenarios".into())
        }
        None => Err("the guest wrote no report, or one that does not read as a packetproof report".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use serde_json::Value;

    fn probe(name: &str, failures: &[&str]) -> Value {
        serde_json::json!({
            "name": name, "from": "pod a", "to": "svc web", "attempts": 1, "expected": "answered",
            "because": "the contract", "required_by": "contract", "observed": "answered",
            "passed": failures.is_empty(), "failures": failures,
        })
    }

    fn report() -> Value {
        serde_json::json!({
            "passed": 1, "failed": 1, "skipped": 1, "errors": 0,
            "scenarios": [
                {"name": "sctp", "file": "scenarios/sctp.yaml", "status": "passed", "elapsed_seconds": 7.0,
                 "probes": [probe("pod-to-cluster-ip", &[])], "not_judged": []},
                {"name": "hairpin", "file": "scenarios/hairpin.yaml", "status": "failed", "elapsed_seconds": 3.0,
                 "evidence": "/share/builtin-iptables/artifacts/hairpin",
                 "probes": [probe("self", &["conntrack on node-a: no entry"])], "not_judged": []},
                {"name": "ipvs-only", "file": "scenarios/x.yaml", "status": "skipped",
                 "reason": "needs kernel 5.15 or newer (minKernel); this kernel is 5.10.0-32-amd64",
                 "elapsed_seconds": 0.0, "probes": [], "not_judged": []},
            ]
        })
    }

    #[test]
    fn suites_are_named_by_kernel_proxy_and_scenario() {
        let report: GuestReport = serde_json::from_value(report()).unwrap();
        assert!(matches!(report, GuestReport::Run(_)), "a run's report reads as one");
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
        assert!(xml.contains("by the Kubernetes contract"), "{xml}");
        assert!(xml.contains("evidence (in the guest): /share/builtin-iptables/artifacts/hairpin"), "{xml}");
        assert!(
            xml.contains(r#"<testsuites name="packetproof matrix" tests="4" failures="1" errors="1">"#),
            "no skipped count on the root: {xml}"
        );
    }
}
