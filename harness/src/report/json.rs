//! A run's report as JSON, for tools that would rather not parse XML. It is also the one
//! shape the JUnit writer reads (`junit.rs`), on the host and from a guest's report read back
//! by the kernel matrix, so the two JUnit reports cannot drift apart.

use serde::{Deserialize, Serialize};

use super::{Finished, destination, expected};
use crate::oracle::Basis;
use crate::runner::Outcome;

#[derive(Serialize)]
struct Run {
    passed: usize,
    failed: usize,
    skipped: usize,
    errors: usize,
    scenarios: Vec<Scenario>,
}

#[derive(Serialize, Deserialize)]
pub(crate) struct Scenario {
    pub name: String,
    pub file: String,
    /// `passed`, `failed`, `skipped` or `error`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) proxy: Option<String>,
    /// The profile the probes were judged under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    profile: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub elapsed_seconds: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<String>,
    pub probes: Vec<Probe>,
    pub not_judged: Vec<NotJudged>,
}

#[derive(Serialize, Deserialize)]
pub(crate) struct Probe {
    pub name: String,
    pub from: String,
    pub to: String,
    attempts: usize,
    pub expected: String,
    pub because: String,
    /// `contract` (Kubernetes requires it) or the profile whose choice it is.
    pub required_by: String,
    pub observed: String,
    pub passed: bool,
    pub failures: Vec<String>,
}

impl Probe {
    /// `the Kubernetes contract` or `kube-proxy-ipvs's choice`, as [`Basis`] shows itself.
    pub(crate) fn basis(&self) -> String {
        match self.required_by.as_str() {
            CONTRACT => Basis::Contract.to_string(),
            profile => format!("{profile}'s choice"),
        }
    }
}

const CONTRACT: &str = "contract";

#[derive(Serialize, Deserialize)]
pub(crate) struct NotJudged {
    pub flow: String,
    pub reason: String,
}

pub fn json_report(finished: &[Finished<'_>]) -> anyhow::Result<String> {
    let scenarios = scenarios(finished);
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

/// Every finished scenario in the report's shape.
pub(crate) fn scenarios(finished: &[Finished<'_>]) -> Vec<Scenario> {
    finished.iter().map(scenario).collect()
}

fn scenario(finished: &Finished<'_>) -> Scenario {
    let (s, report) = match finished {
        Finished::Error { scenario, error } => {
            return Scenario {
                name: scenario.name.clone(),
                file: scenario.source.display().to_string(),
                status: "error".into(),
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
        Outcome::ProxyFailed(reason) => ("failed", Some(format!("the proxy failed: {reason}")), Vec::new()),
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
                        Basis::Contract => CONTRACT.to_string(),
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
        name: s.name.clone(),
        file: s.source.display().to_string(),
        status: status.into(),
        proxy: Some(report.proxy.clone()),
        profile: report.profile.map(|p| p.to_string()),
        reason,
        elapsed_seconds: report.elapsed.as_secs_f64(),
        evidence: report.artifacts.as_ref().map(|d| d.display().to_string()),
        probes,
        not_judged: report
            .unjudged
            .iter()
            .map(|(flow, reason)| NotJudged { flow: flow.clone(), reason: reason.clone() })
            .collect(),
    }
}
