//! What a run of one scenario comes to: the contract between the runner that makes it and
//! the engine, the reports, the commands and the tests that read it.

use std::path::PathBuf;
use std::time::Duration;

use crate::coverage::ScenarioCoverage;
use crate::model::{Profile, Scenario};
use crate::verdict::ProbeVerdict;

/// How a scenario ended.
#[derive(Debug)]
pub enum Outcome {
    /// Every probe was judged; some may have failed.
    Judged(Vec<ProbeVerdict>),
    /// The proxy under test failed at its own job (its syncs failed) before its probes
    /// could be judged: the scenario fails, as a probe would.
    ProxyFailed(String),
    /// The scenario could not run here; never counts as passed.
    Skipped(String),
}

#[derive(Debug)]
pub struct ScenarioReport {
    pub scenario: String,
    pub source: PathBuf,
    pub proxy: String,
    pub outcome: Outcome,
    pub elapsed: Duration,
    /// Where this scenario's evidence was written, if it was.
    pub artifacts: Option<PathBuf>,
    /// Probes and generated flows left out because their outcome is undefined (under the
    /// profile), with the reason.
    pub unjudged: Vec<(String, String)>,
    /// The profile the probes were judged under (none for a scenario that did not run).
    pub profile: Option<Profile>,
    /// Which of the proxy's rules the probes matched, when the run measured it (boxed: a
    /// report travels between threads by value).
    pub coverage: Option<Box<ScenarioCoverage>>,
    /// Where the scenario's time went, phase by phase (zero for phases it never reached).
    pub timings: Timings,
}

/// Where a scenario's wall time went: the kernel matrix and `run --json` report it so that a
/// slow run can be taken apart (building namespaces, a proxy's start, probes, teardown).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Timings {
    /// Namespaces, links and addresses made (`Stage::build`).
    pub build: Duration,
    /// The proxy started and synced, servers, captures and recorders up.
    pub start: Duration,
    /// Every phase's probes sent, the proxy's updates and restarts between them included.
    pub probes: Duration,
    /// Captures stopped, verdicts judged and evidence kept.
    pub judge: Duration,
    /// Everything taken down again.
    pub teardown: Duration,
}

impl ScenarioReport {
    pub fn passed(&self) -> bool {
        matches!(&self.outcome, Outcome::Judged(v) if v.iter().all(ProbeVerdict::passed))
    }

    /// Whether the scenario failed: a probe failed (on witnesses that agree), or the proxy did.
    pub fn failed(&self) -> bool {
        match &self.outcome {
            Outcome::Judged(v) => v.iter().any(ProbeVerdict::failed),
            Outcome::ProxyFailed(_) => true,
            Outcome::Skipped(_) => false,
        }
    }

    /// Whether the harness failed to observe it: no probe failed, but some probe's witnesses
    /// disagree. Neither passed nor failed: the machine is at fault (exit 2).
    pub fn faulted(&self) -> bool {
        match &self.outcome {
            Outcome::Judged(v) => !self.failed() && v.iter().any(ProbeVerdict::faulted),
            Outcome::ProxyFailed(_) | Outcome::Skipped(_) => false,
        }
    }

    pub fn skipped(scenario: &Scenario, proxy: &str, reason: String) -> ScenarioReport {
        ScenarioReport {
            scenario: scenario.name.clone(),
            source: scenario.source.clone(),
            proxy: proxy.to_string(),
            outcome: Outcome::Skipped(reason),
            elapsed: Duration::ZERO,
            artifacts: None,
            unjudged: scenario.unjudged_flows.clone(),
            profile: None,
            coverage: None,
            timings: Timings::default(),
        }
    }
}
