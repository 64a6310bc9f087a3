//! The same content as the JUnit report, as JSON for tools that would rather not parse XML.

use serde::Serialize;

use super::{Finished, destination, expected};
use crate::oracle::Basis;
use crate::runner::Outcome;

#[derive(Serialize)]
struct Run<'a> {
    passed: usize,
    failed: usize,
    skipped: usize,
    errors: usize,
    scenarios: Vec<Scenario<'a>>,
}

#[derive(Serialize)]
struct Scenario<'a> {
    name: &'a str,
    file: String,
    /// `passed`, `failed`, `skipped` or `error`.
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    proxy: Option<&'a str>,
    /// The profile the probes were judged under.
    #[serde(skip_serializing_if = "Option::is_none")]
    profile: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    elapsed_seconds: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    evidence: Option<String>,
    probes: Vec<Probe>,
    not_judged: Vec<NotJudged<'a>>,
}

#[derive(Serialize)]
struct Probe {
    name: String,
    from: String,
    to: String,
    attempts: usize,
    expected: String,
    because: String,
    /// `contract` (Kubernetes requires it) or the profile whose choice it is.
    required_by: String,
    observed: String,
    passed: bool,
    failures: Vec<String>,
}

#[derive(Serialize)]
struct NotJudged<'a> {
    flow: &'a str,
    reason: &'a str,
}

pub fn json_report(finished: &[Finished<'_>]) -> anyhow::Result<String> {
    let scenarios: Vec<Scenario> = finished.iter().map(scenario).collect();
    let count = |status| scenarios.iter().filter(|s| s.status == status).count();
    let run = Run {
        passed: count("passed"),
        failed: count("failed"),
        skipped: count("skipped"),
        errors: count("error"),
        scenarios,
    };
    Ok(serde_json::to_string_pretty(&run)?)
}

fn scenario<'a>(finished: &'a Finished<'a>) -> Scenario<'a> {
    let (s, report) = match finished {
        Finished::Error { scenario, error } => {
            return Scenario {
                name: &scenario.name,
                file: scenario.source.display().to_string(),
                status: "error",
                proxy: None,
                profile: None,
                reason: Some(error.clone()),
                elapsed_seconds: 0.0,
                evidence: None,
                probes: Vec::new(),
                not_judged: Vec::new(),
            };
        }
        Finished::Ran { scenario, report } => (*scenario, *report),
    };
    let (status, reason, probes) = match &report.outcome {
        Outcome::Skipped(reason) => ("skipped", Some(reason.clone()), Vec::new()),
        Outcome::Judged(verdicts) => {
            let probes = verdicts
                .iter()
                .map(|v| Probe {
                    name: v.probe.name.clone(),
                    from: v.probe.from.to_string(),
                    to: destination(&s.cluster, &v.probe.to, v),
                    attempts: v.observed.len(),
                    expected: expected(&v.expected.outcome),
                    because: v.expected.because.clone(),
                    required_by: match v.expected.basis {
                        Basis::Contract => "contract".to_string(),
                        Basis::Choice(profile) => profile.to_string(),
                    },
                    observed: v.observed_summary(),
                    passed: v.passed(),
                    failures: v.failures.clone(),
                })
                .collect();
            (if report.passed() { "passed" } else { "failed" }, None, probes)
        }
    };
    Scenario {
        name: &s.name,
        file: s.source.display().to_string(),
        status,
        proxy: Some(&report.proxy),
        profile: report.profile.map(|p| p.to_string()),
        reason,
        elapsed_seconds: report.elapsed.as_secs_f64(),
        evidence: report.artifacts.as_ref().map(|d| d.display().to_string()),
        probes,
        not_judged: report.unjudged.iter().map(|(flow, reason)| NotJudged { flow, reason }).collect(),
    }
}
