//! `packetproof run`: scenarios judged, reported on the terminal and in the machine reports.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::{EXIT_ERROR, EXIT_FAIL, EXIT_PASS, load_all, partition, remove_leftovers};
use crate::engine::{self, Engine, MachineReports, Run, RunProxy, TerminalReport};
use crate::model::{ProxyChoice, Scenario};
use crate::proxy;
use crate::report::Paint;
use crate::results::ScenarioReport;
use crate::runner::RunOptions;

/// The scenarios a command was given: files and folders, and the slice of them to run.
pub struct Chosen<'a> {
    pub paths: &'a [PathBuf],
    pub partition: Option<partition::Partition>,
}

impl Chosen<'_> {
    /// Loads every scenario (a bad file fails every slice alike) and keeps those of the slice.
    pub(crate) fn load(&self) -> Result<Option<Vec<Scenario>>> {
        let Some(scenarios) = load_all(self.paths)? else { return Ok(None) };
        let Some(slice) = self.partition else { return Ok(Some(scenarios)) };
        let kept = slice.keep(scenarios, |s| partition::scenario_key(&s.source, self.paths));
        println!("slice {slice}: {} scenarios", kept.len());
        Ok(Some(kept))
    }
}

/// `coverage`: the coverage report when `options.coverage` measures it; a proxy below its
/// `--min-coverage` fails the run (exit 1) as a failing probe does.
#[allow(clippy::too_many_arguments)]
pub fn main(
    chosen: &Chosen<'_>,
    proxy_override: Option<&ProxyChoice>,
    options: &RunOptions,
    jobs: Option<usize>,
    outputs: MachineReports,
    paint: Paint,
    show_passing: bool,
    coverage: Option<engine::CoverageReport>,
) -> Result<i32> {
    let Some(scenarios) = chosen.load()? else { return Ok(EXIT_ERROR) };
    outputs.check_writable()?;
    if let Some(choice) = proxy_override {
        proxy::build(choice, Path::new("."))?;
    }
    for stale in remove_leftovers(false)? {
        eprintln!("packetproof: removed {stale}, left by an earlier run");
    }
    let engine = Engine { options: options.clone(), jobs: jobs.unwrap_or_else(Engine::default_jobs) };
    let mut terminal = TerminalReport::new(paint);
    terminal.show_passing = show_passing;
    let mut outputs = outputs;
    let mut coverage = coverage;
    match coverage.as_mut() {
        Some(coverage) => engine
            .execute(&Run::each(&scenarios, proxy_override), &mut [&mut terminal, &mut outputs, coverage])?,
        None => engine.execute(&Run::each(&scenarios, proxy_override), &mut [&mut terminal, &mut outputs])?,
    };
    let summary = terminal.summary.context("the suite never finished")?;
    let below_minimum = coverage.is_some_and(|c| !c.below_minimum.is_empty());
    let code = if summary.errors > 0 || summary.harness_faults > 0 {
        EXIT_ERROR
    } else if summary.failed || below_minimum {
        EXIT_FAIL
    } else if summary.judged_something {
        EXIT_PASS
    } else {
        // Every scenario skipped (no root, no SCTP, …): a CI job that lost its privileges
        // must not go green.
        println!("nothing was judged: every scenario was skipped (exit {EXIT_ERROR})");
        EXIT_ERROR
    };
    Ok(code)
}

/// Machine-readable reports a run writes, if asked (the engine's reporter).
pub type Outputs = MachineReports;

/// Runs one scenario with the proxy it names (or the override).
pub fn run_one(
    s: &Scenario,
    proxy_override: Option<&ProxyChoice>,
    options: &RunOptions,
    skip_reason: Option<&str>,
) -> Result<ScenarioReport> {
    let proxy = proxy_override.map_or(RunProxy::Own, RunProxy::Choice);
    engine::run_one(&Run { scenario: s, proxy }, options, skip_reason)
}
