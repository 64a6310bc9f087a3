//! A run's report as JSON, for tools that would rather not parse XML. It is also the one
//! shape the JUnit writer reads (`junit.rs`), on the host and from a guest's report read back
//! by the kernel matrix, so the two JUnit reports cannot drift apart.

use serde::{Deserialize, Serialize};

use super::known_bugs;
use super::{Finished, destination, expected, headlines_for, known_bug_matches};
use crate::oracle::Basis;
use crate::runner::Outcome;

/// A run's report (`run --json`), as written and as the kernel matrix reads its guests' back.
#[derive(Serialize, Deserialize)]
pub(crate) struct Run {
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
    pub errors: usize,
    /// The known bugs the failures match.
    #[serde(default)]
    known_bugs: Vec<KnownBug>,
    pub scenarios: Vec<Scenario>,
}

/// A known bug the run's failures match, and the failing probes that match it.
#[derive(Serialize, Deserialize)]
struct KnownBug {
    /// The mutant reproducing it (`packetproof run --proxy-option mutant=NAME`).
    name: String,
    upstream: Vec<String>,
    shipped: String,
    fixed: String,
    /// `matches kubernetes/kubernetes#131765, mutant … (in …; fixed in …)`.
    headline: String,
    /// `[scenario, probe]`.
    probes: Vec<(String, String)>,
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
    /// The known bugs whose signature this scenario's failures belong to, as headlines.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub known_bugs: Vec<String>,
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
    /// The kinds of the failures (`verdict::Symptom`), for a failed probe.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub symptoms: Vec<String>,
    /// The known bugs whose signature this failure belongs to, as headlines.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub known_bugs: Vec<String>,
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
    let known_bugs = matches(finished)
        .into_iter()
        .map(|m| KnownBug {
            name: m.bug.name.into(),
            upstream: m.bug.upstream.iter().map(|u| u.to_string()).collect(),
            shipped: m.bug.shipped.into(),
            fixed: m.bug.fixed.into(),
            headline: m.bug.headline(),
            probes: m.probes,
        })
        .collect();
    let run = Run {
        passed: count("passed"),
        failed: count("failed"),
        skipped: count("skipped"),
        errors: count("error"),
        known_bugs,
        scenarios,
    };
    Ok(serde_json::to_string_pretty(&run)?)
}

/// Every finished scenario in the report's shape.
pub(crate) fn scenarios(finished: &[Finished<'_>]) -> Vec<Scenario> {
    let matches = matches(finished);
    finished.iter().map(|f| scenario(f, &matches)).collect()
}

fn matches(finished: &[Finished<'_>]) -> Vec<known_bugs::Match> {
    known_bug_matches(finished.iter().filter_map(|f| match f {
        Finished::Ran { report, .. } => Some(*report),
        Finished::Error { .. } => None,
    }))
}

fn scenario(finished: &Finished<'_>, matches: &[known_bugs::Match]) -> Scenario {
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
                known_bugs: Vec::new(),
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
                    failures: v.failures.iter().map(|f| f.message.clone()).collect(),
                    symptoms: v.symptoms().iter().map(|k| k.to_string()).collect(),
                    known_bugs: headlines_for(matches, &s.name, &v.probe.name),
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
        known_bugs: matches
            .iter()
            .filter(|m| m.probes.iter().any(|(scenario, _)| *scenario == s.name))
            .map(|m| m.bug.headline())
            .collect(),
    }
}
