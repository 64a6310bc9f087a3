//! A run's report as JSON, for tools that would rather not parse XML. It is also the one
//! shape the JUnit writer reads (`junit.rs`), on the host and from a guest's report read back
//! by the kernel matrix, so the two JUnit reports cannot drift apart.

use serde::{Deserialize, Serialize};

use super::known_bugs;
use super::{Finished, destination, expected, headlines_for, known_bug_matches};
use crate::oracle::Basis;
use crate::results::Outcome;

/// A run's report (`run --json`), as written and as the kernel matrix and `merge` read it back.
#[derive(Serialize, Deserialize)]
pub(crate) struct Run {
    /// The packetproof release that wrote it: `merge` joins reports of one release only.
    #[serde(default)]
    pub version: String,
    /// The slice of the suite this run was (`run --partition hash:1/3`); absent for a whole suite.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slice: Option<String>,
    /// The kernel it ran on (`uname -r`).
    #[serde(default)]
    pub kernel: String,
    /// For a report `merge` wrote: the reports it joined, one line each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub merged: Vec<String>,
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
    pub errors: usize,
    /// Scenarios the harness failed to observe (status `harness-fault`): the machine's fault.
    #[serde(default)]
    pub harness_faults: usize,
    /// The known bugs the failures match.
    #[serde(default)]
    pub(crate) known_bugs: Vec<KnownBug>,
    pub scenarios: Vec<Scenario>,
    /// Rule coverage, one table per proxy (`run --coverage`); `coverage merge` reads it back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub coverage: Vec<crate::coverage::Table>,
    /// The CPU the run cost, for taking a slow run apart (absent from a merged report).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuSeconds>,
}

/// CPU seconds of the harness's own process and of the programs it ran and waited for
/// (proxies, `iptables-restore`, `nft`, servers), by getrusage.
#[derive(Serialize, Deserialize, Clone, Copy, Default, PartialEq)]
pub(crate) struct CpuSeconds {
    pub harness_user: f64,
    pub harness_system: f64,
    pub programs_user: f64,
    pub programs_system: f64,
}

impl CpuSeconds {
    /// So far, for this process and the children it has waited for.
    pub(crate) fn now() -> Option<CpuSeconds> {
        let usage = |who| {
            // SAFETY: getrusage fills the struct it is given.
            let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
            let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
            (unsafe { libc::getrusage(who, &mut usage) } == 0)
                .then(|| (seconds(usage.ru_utime), seconds(usage.ru_stime)))
        };
        let (harness_user, harness_system) = usage(libc::RUSAGE_SELF)?;
        let (programs_user, programs_system) = usage(libc::RUSAGE_CHILDREN)?;
        Some(CpuSeconds { harness_user, harness_system, programs_user, programs_system })
    }
}

/// This build's release, as reports carry it.
pub(crate) const VERSION: &str = env!("CARGO_PKG_VERSION");

/// A known bug the run's failures match, and the failing probes that match it.
#[derive(Serialize, Deserialize)]
pub(crate) struct KnownBug {
    /// The mutant reproducing it (`packetproof run --proxy-option mutant=NAME`).
    pub name: String,
    upstream: Vec<String>,
    shipped: String,
    fixed: String,
    /// `matches kubernetes/kubernetes#131765, mutant … (in …; fixed in …)`.
    pub headline: String,
    /// `[scenario, probe]`.
    pub probes: Vec<(String, String)>,
}

#[derive(Serialize, Deserialize)]
pub(crate) struct Scenario {
    pub name: String,
    pub file: String,
    /// `passed`, `failed`, `harness-fault` (no probe failed, some could not be observed),
    /// `skipped` or `error`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) proxy: Option<String>,
    /// The profile the probes were judged under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    profile: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub elapsed_seconds: f64,
    /// Where `elapsed_seconds` went, phase by phase (absent for a scenario that never ran).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timings: Option<Timings>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<String>,
    pub probes: Vec<Probe>,
    pub not_judged: Vec<NotJudged>,
    /// The known bugs whose signature this scenario's failures belong to, as headlines.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub known_bugs: Vec<String>,
}

/// [`crate::results::Timings`] in seconds.
#[derive(Serialize, Deserialize, Clone, Copy, Default)]
pub(crate) struct Timings {
    pub build: f64,
    pub start: f64,
    pub probes: f64,
    pub judge: f64,
    pub teardown: f64,
}

impl From<&crate::results::Timings> for Timings {
    fn from(t: &crate::results::Timings) -> Timings {
        Timings {
            build: t.build.as_secs_f64(),
            start: t.start.as_secs_f64(),
            probes: t.probes.as_secs_f64(),
            judge: t.judge.as_secs_f64(),
            teardown: t.teardown.as_secs_f64(),
        }
    }
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
    /// Where the harness failed to observe (its witnesses disagree): never the proxy's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub harness_faults: Vec<String>,
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
    json_report_of_slice(finished, None)
}

/// [`json_report`] of a run that was the slice `slice` of its suite (`hash:1/3`).
pub fn json_report_of_slice(finished: &[Finished<'_>], slice: Option<String>) -> anyhow::Result<String> {
    let scenarios = scenarios(finished);
    let known_bugs = matches(finished).into_iter().map(known_bug).collect();
    let kernel = crate::kernel::KernelVersion::running().map(|(release, _)| release).unwrap_or_default();
    let mut run = Run::counted(VERSION.into(), slice, kernel, known_bugs, scenarios);
    run.coverage = super::coverage_tables(finished);
    run.cpu = CpuSeconds::now();
    Ok(serde_json::to_string_pretty(&run)?)
}

fn known_bug(m: known_bugs::Match) -> KnownBug {
    KnownBug {
        name: m.bug.name.into(),
        upstream: m.bug.upstream.iter().map(|u| u.to_string()).collect(),
        shipped: m.bug.shipped.into(),
        fixed: m.bug.fixed.into(),
        headline: m.bug.headline(),
        probes: m.probes,
    }
}

impl Run {
    /// A report of `scenarios` with their counts.
    fn counted(
        version: String,
        slice: Option<String>,
        kernel: String,
        known_bugs: Vec<KnownBug>,
        scenarios: Vec<Scenario>,
    ) -> Run {
        let count = |status| scenarios.iter().filter(|s: &&Scenario| s.status == status).count();
        Run {
            version,
            slice,
            kernel,
            merged: Vec::new(),
            passed: count("passed"),
            failed: count("failed"),
            skipped: count("skipped"),
            errors: count("error"),
            harness_faults: count("harness-fault"),
            known_bugs,
            scenarios,
            coverage: Vec::new(),
            cpu: None,
        }
    }

    /// One report of `parts` (already checked to be of one release and not to overlap): every
    /// scenario once, counted again, and the known bugs matched again over all of them, as
    /// one run of the whole would match them (per kernel: a bug is a kernel's and proxy's).
    pub(crate) fn merged(parts: Vec<Run>, described: Vec<String>) -> Run {
        let version = parts.first().map(|p| p.version.clone()).unwrap_or_default();
        let mut kernels: Vec<String> = parts.iter().map(|p| p.kernel.clone()).collect();
        kernels.dedup();
        let kernel = if kernels.len() == 1 { kernels.remove(0) } else { String::new() };
        let mut by_kernel: std::collections::BTreeMap<String, Vec<Scenario>> = Default::default();
        let mut coverage = Vec::new();
        for part in parts {
            by_kernel.entry(part.kernel).or_default().extend(part.scenarios);
            coverage.extend(part.coverage);
        }
        let mut known = Vec::new();
        let mut scenarios = Vec::new();
        for (_, group) in by_kernel {
            for m in matches_in_report(&group) {
                known.push(known_bug(m));
            }
            scenarios.extend(group);
        }
        let mut run = Run::counted(version, None, kernel, known, scenarios);
        run.merged = described;
        // One table per proxy, as `coverage merge` joins them.
        run.coverage = crate::coverage::merge(coverage);
        run
    }
}

/// The known bugs the judged scenarios of a report match, from the symptoms it recorded (as
/// [`super::known_bug_matches`] matches a run's).
fn matches_in_report(scenarios: &[Scenario]) -> Vec<known_bugs::Match> {
    use std::collections::{BTreeMap, BTreeSet};
    let mut judged: BTreeMap<(&str, &str), BTreeSet<crate::verdict::Symptom>> = BTreeMap::new();
    for s in scenarios {
        let name = s.name.as_str();
        let read = |symptoms: &[String]| -> BTreeSet<crate::verdict::Symptom> {
            symptoms.iter().filter_map(|k| k.parse().ok()).collect()
        };
        match s.status.as_str() {
            // A failed scenario without probes is one whose proxy failed at its own job.
            "failed" if s.probes.is_empty() && s.reason.is_some() => {
                judged.insert((name, known_bugs::PROXY), [crate::verdict::Symptom::ProxyFailed].into());
            }
            "passed" | "failed" => {
                judged.entry((name, known_bugs::PROXY)).or_default();
                judged.entry((name, known_bugs::ANY)).or_default();
                for p in &s.probes {
                    let symptoms = read(&p.symptoms);
                    judged.entry((name, known_bugs::ANY)).or_default().extend(symptoms.iter().copied());
                    judged.entry((name, p.name.as_str())).or_default().extend(symptoms);
                }
            }
            _ => {}
        }
    }
    known_bugs::matches(|scenario, probe| judged.get(&(scenario, probe)).cloned())
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
                timings: None,
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
                    harness_faults: v.harness_faults.iter().map(|f| f.message.clone()).collect(),
                    symptoms: v.symptoms().iter().map(|k| k.to_string()).collect(),
                    known_bugs: headlines_for(matches, &s.name, &v.probe.name),
                })
                .collect();
            let status = match (report.failed(), report.faulted()) {
                (true, _) => "failed",
                (false, true) => "harness-fault",
                (false, false) => "passed",
            };
            (status, None, probes)
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
        timings: (report.timings != Default::default()).then(|| Timings::from(&report.timings)),
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
