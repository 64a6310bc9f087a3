//! The mutation catalog at work: the suite against every deliberately broken proxy. A mutant
//! that no scenario kills is a hole in the suite.

use std::sync::Mutex;
use std::time::Duration;

use crate::model::Scenario;
use crate::proxy::iptables::{BuiltinIptables, Mutant};
use crate::runner::{self, Outcome, RunOptions};

/// What the suite did to one mutant.
#[derive(Debug)]
pub struct Hunt {
    pub mutant: Mutant,
    /// Scenarios in which some probe failed.
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

/// Runs `scenarios` against each mutant, one scenario per core at a time. With `first_kill`, a
/// mutant's hunt stops once some scenario has killed it.
pub fn hunt(
    scenarios: &[Scenario],
    mutants: &[Mutant],
    first_kill: bool,
    on_done: impl Fn(&Hunt),
) -> Vec<Hunt> {
    mutants
        .iter()
        .map(|&mutant| {
            let result = hunt_one(scenarios, mutant, first_kill);
            on_done(&result);
            result
        })
        .collect()
}

fn hunt_one(scenarios: &[Scenario], mutant: Mutant, first_kill: bool) -> Hunt {
    let options = RunOptions { timeout: MUTANT_TIMEOUT, ..RunOptions::default() };
    let proxy = BuiltinIptables { mutant: Some(mutant) };
    let result = Mutex::new(Hunt { mutant, killed_by: Vec::new(), errors: Vec::new() });
    let next = Mutex::new(scenarios.iter());
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                loop {
                    if first_kill && lock(&result).killed() {
                        break;
                    }
                    let Some(s) = lock(&next).next() else { break };
                    match runner::run(s, &proxy, &options) {
                        Ok(report) if matches!(report.outcome, Outcome::Judged(_)) && !report.passed() => {
                            lock(&result).killed_by.push(s.name.clone())
                        }
                        Ok(_) => {}
                        Err(e) => lock(&result).errors.push(format!("{}: {e:#}", s.name)),
                    }
                }
            });
        }
    });
    let mut result = result.into_inner().unwrap_or_else(|e| e.into_inner());
    result.killed_by.sort();
    result
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
