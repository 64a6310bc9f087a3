//! The mutation catalog at work: the suite against every deliberately broken proxy. A mutant
//! that no scenario kills is a hole in the suite.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;

use crate::model::Scenario;
use crate::proxy::Proxy;
use crate::proxy::iptables::Mutant;
use crate::runner::{self, Outcome, RunOptions, ScenarioReport};

pub use crate::proxy::{Breakable, breakable, catalog};

/// Probes (scenario, probe) that fail against the unbroken proxy. A failure among them
/// proves nothing about a mutant: a kill needs a probe that passes unbroken.
pub type Baseline = BTreeSet<(String, String)>;

/// What the suite did to one mutant.
#[derive(Debug)]
pub struct Hunt {
    pub mutant: Mutant,
    /// Scenarios in which some probe outside the baseline failed.
    pub killed_by: Vec<String>,
    /// Scenarios that could not be set up with this mutant (counted as neither).
    pub errors: Vec<String>,
}

impl Hunt {
    pub fn killed(&self) -> bool {
        !self.killed_by.is_empty()
    }
}

/// How long an attempt waits for an answer under a mutant: mutants often turn answers into
/// silence, and a kill is decided by what the probes report, never by this wait.
pub const MUTANT_TIMEOUT: Duration = Duration::from_millis(300);

/// The probes that fail against the unbroken proxy, run as the hunt runs them (a scenario
/// that cannot be set up is an error).
pub fn baseline(scenarios: &[Scenario], breakable: Breakable) -> anyhow::Result<Baseline> {
    let proxy = breakable(None);
    let failing = Mutex::new(Baseline::new());
    let errors = Mutex::new(Vec::new());
    run_each(
        scenarios,
        proxy.as_ref(),
        || false,
        |s, result| match result {
            Ok(report) => lock(&failing).extend(failing_probes(&report).map(|p| (s.name.clone(), p))),
            Err(e) => lock(&errors).push(format!("{}: {e:#}", s.name)),
        },
    );
    let errors = errors.into_inner().unwrap_or_else(|e| e.into_inner());
    anyhow::ensure!(errors.is_empty(), "the unbroken proxy could not run: {}", errors.join("; "));
    Ok(failing.into_inner().unwrap_or_else(|e| e.into_inner()))
}

/// Runs `scenarios` against each mutant of the proxy `breakable` builds, one scenario per
/// core at a time. With `first_kill`, a mutant's hunt stops once some scenario has killed it.
/// Failures of `baseline` probes do not count.
pub fn hunt(
    scenarios: &[Scenario],
    mutants: &[Mutant],
    first_kill: bool,
    breakable: Breakable,
    baseline: &Baseline,
    on_done: impl Fn(&Hunt),
) -> Vec<Hunt> {
    mutants
        .iter()
        .map(|&mutant| {
            let result = hunt_one(scenarios, mutant, first_kill, breakable, baseline);
            on_done(&result);
            result
        })
        .collect()
}

fn hunt_one(
    scenarios: &[Scenario],
    mutant: Mutant,
    first_kill: bool,
    breakable: Breakable,
    baseline: &Baseline,
) -> Hunt {
    let proxy = breakable(Some(mutant));
    let result = Mutex::new(Hunt { mutant, killed_by: Vec::new(), errors: Vec::new() });
    let stop = || first_kill && lock(&result).killed();
    run_each(scenarios, proxy.as_ref(), stop, |s, outcome| match outcome {
        Ok(report) => {
            if failing_probes(&report).any(|p| !baseline.contains(&(s.name.clone(), p))) {
                lock(&result).killed_by.push(s.name.clone())
            }
        }
        Err(e) => lock(&result).errors.push(format!("{}: {e:#}", s.name)),
    });
    let mut result = result.into_inner().unwrap_or_else(|e| e.into_inner());
    result.killed_by.sort();
    result
}

/// Names of the probes that failed in a judged scenario.
fn failing_probes(report: &ScenarioReport) -> impl Iterator<Item = String> + '_ {
    let verdicts = match &report.outcome {
        Outcome::Judged(v) => v.as_slice(),
        Outcome::Skipped(_) => &[],
    };
    verdicts.iter().filter(|v| !v.passed()).map(|v| v.probe.name.clone())
}

/// Runs every scenario against `proxy`, one per core at a time, until `stop` says so.
fn run_each(
    scenarios: &[Scenario],
    proxy: &dyn Proxy,
    stop: impl Fn() -> bool + Sync,
    on_result: impl Fn(&Scenario, anyhow::Result<ScenarioReport>) + Sync,
) {
    let options = RunOptions { timeout: MUTANT_TIMEOUT, ..RunOptions::default() };
    let next = Mutex::new(scenarios.iter());
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                while !stop() {
                    let Some(s) = lock(&next).next() else { break };
                    on_result(s, runner::run(s, proxy, &options));
                }
            });
        }
    });
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The first few killing scenarios, and how many more there are.
fn killers(names: &[String]) -> String {
    const SHOWN: usize = 4;
    let mut text = names.iter().take(SHOWN).cloned().collect::<Vec<_>>().join(", ");
    if names.len() > SHOWN {
        text.push_str(&format!(" (+{} more)", names.len() - SHOWN));
    }
    text
}

/// The catalog as a Markdown table: mutant, what it breaks, killed or survived, by whom.
pub fn table(hunts: &[Hunt]) -> String {
    let mut out = String::from("| mutant | the bug | verdict | killed by |\n| --- | --- | --- | --- |\n");
    for h in hunts {
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            h.mutant.name(),
            h.mutant.description(),
            if h.killed() { "killed" } else { "**survived**" },
            killers(&h.killed_by)
        ));
    }
    out
}
