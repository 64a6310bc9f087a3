//! JUnit XML for CI systems: a test suite per scenario and a test case per probe, written by
//! quick-junit (no string formatting of XML here).

use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};

use super::{Finished, destination, expected};
use crate::runner::Outcome;

pub fn junit_report(finished: &[Finished<'_>]) -> anyhow::Result<String> {
    let mut report = Report::new("packetproof");
    for f in finished {
        report.add_test_suite(suite(f));
    }
    Ok(report.to_string()?)
}

fn suite(finished: &Finished<'_>) -> TestSuite {
    match finished {
        Finished::Error { scenario, error } => {
            let mut suite = TestSuite::new(scenario.name.as_str());
            let mut status = TestCaseStatus::non_success(NonSuccessKind::Error);
            status.set_message("the scenario could not be set up").set_description(error.as_str());
            suite.add_test_case(case(scenario, "setup", status));
            suite
        }
        Finished::Ran { scenario, report } => {
            let mut suite = TestSuite::new(scenario.name.as_str());
            suite.set_time(report.elapsed);
            match &report.outcome {
                Outcome::Skipped(reason) => {
                    for probe in &scenario.probes {
                        let mut status = TestCaseStatus::skipped();
                        status.set_message(reason.as_str());
                        suite.add_test_case(case(scenario, &probe.name, status));
                    }
                }
                Outcome::Judged(verdicts) => {
                    for v in verdicts {
                        let status = if v.passed() {
                            TestCaseStatus::success()
                        } else {
                            let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
                            status.set_message(v.failures[0].as_str()).set_description(format!(
                                "from {} to {}\nexpected: {} ({}; by {})\nobserved: {}\n{}{}",
                                v.probe.from,
                                destination(&scenario.cluster, &v.probe.to, v),
                                expected(&v.expected.outcome),
                                v.expected.because,
                                v.expected.basis,
                                v.observed_summary(),
                                v.failures.iter().map(|f| format!("✗ {f}\n")).collect::<String>(),
                                report
                                    .artifacts
                                    .as_ref()
                                    .map(|d| format!("evidence: {}\n", d.display()))
                                    .unwrap_or_default(),
                            ));
                            status
                        };
                        suite.add_test_case(case(scenario, &v.probe.name, status));
                    }
                    for (flow, why) in &report.unjudged {
                        let mut status = TestCaseStatus::skipped();
                        status.set_message(format!("not judged: {why}"));
                        suite.add_test_case(case(scenario, flow, status));
                    }
                }
            }
            suite
        }
    }
}

fn case(scenario: &crate::model::Scenario, name: &str, status: TestCaseStatus) -> TestCase {
    let mut case = TestCase::new(name, status);
    case.set_classname(format!("{}::{}", scenario.source.display(), scenario.name));
    case
}
