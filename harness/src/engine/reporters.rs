//! The reporters `packetproof run` uses: the terminal (progress bar, a line per scenario, the
//! flow table of a failure, the closing summary) and the machine-readable files (JUnit, JSON).

use std::path::PathBuf;

use anyhow::{Context, Result};

use super::{Control, Event, Reporter};
use crate::model::Scenario;
use crate::report::terminal::Progress;
use crate::report::{self, Finished, Paint};
use crate::results::{Outcome, ScenarioReport};

/// What a person watching `packetproof run` reads.
pub struct TerminalReport {
    paint: Paint,
    /// Print the flow table of passing scenarios too (`run --show all`), for reviewing one.
    pub show_passing: bool,
    progress: RunProgress,
    /// The closing line, once the suite finished: `N passed, N failed, N skipped, N errors in Ts`.
    pub summary: Option<Summary>,
}

/// The suite's totals, which also decide `run`'s exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    pub errors: usize,
    /// Scenarios the harness failed to observe (their witnesses disagree): the machine's fault.
    pub harness_faults: usize,
    /// Some scenario failed (errors aside).
    pub failed: bool,
    /// Some scenario was judged (not every one skipped).
    pub judged_something: bool,
}

impl TerminalReport {
    pub fn new(paint: Paint) -> TerminalReport {
        TerminalReport { paint, show_passing: false, progress: RunProgress::new(paint), summary: None }
    }
}

impl Reporter for TerminalReport {
    fn event(&mut self, event: &Event<'_>) -> Result<Control> {
        match event {
            Event::SuiteStarted { .. } | Event::ScenarioStarted { .. } | Event::ProbeJudged { .. } => {
                self.progress.event(event)?;
            }
            Event::ScenarioFinished { scenario, result, done, total, .. } => {
                let text = match result {
                    Ok(report) => {
                        scenario_text(report, scenario, *done, *total, self.paint, self.show_passing)
                    }
                    Err(e) => format!(
                        "[{done}/{total}] {} {} ({}): {e:#}\n",
                        self.paint.fail("ERROR"),
                        scenario.name,
                        scenario.source.display()
                    ),
                };
                self.progress.finished(&scenario.name, &text);
            }
            Event::SuiteFinished { results, elapsed } => {
                self.progress.event(event)?;
                let errors = results.iter().filter(|(_, r)| r.is_err()).count();
                let reports: Vec<&ScenarioReport> =
                    results.iter().filter_map(|(_, r)| r.as_ref().ok()).collect();
                let summary = Summary {
                    errors,
                    harness_faults: reports.iter().filter(|r| r.faulted()).count(),
                    failed: reports.iter().any(|r| r.failed()),
                    judged_something: reports
                        .iter()
                        .any(|r| matches!(r.outcome, Outcome::Judged(_) | Outcome::ProxyFailed(_))),
                };
                let line = report::summary_line(&reports, errors);
                let clean =
                    errors == 0 && summary.harness_faults == 0 && !summary.failed && summary.judged_something;
                let line = if clean { self.paint.pass(&line) } else { self.paint.fail(&line) };
                println!("\n{line} in {:.2}s", elapsed.as_secs_f64());
                print!("{}", report::known_bug_lines(&report::known_bug_matches(reports.iter().copied())));
                self.summary = Some(summary);
            }
        }
        Ok(Control::Continue)
    }
}

/// What `run` prints for a scenario that ran: its line, flows not judged, the flow table of a
/// failure and where its evidence is (printed in one write, so scenarios do not interleave).
fn scenario_text(
    report: &ScenarioReport,
    s: &Scenario,
    done: usize,
    total: usize,
    paint: Paint,
    show_passing: bool,
) -> String {
    let mut text = format!("[{done}/{total}] {}\n", report::scenario_line_painted(report, paint));
    text.push_str(&report::unjudged_lines(report));
    if let (Outcome::Judged(verdicts), true) = (&report.outcome, show_passing || !report.passed()) {
        text.push_str(&report::flow_table_painted(&s.cluster, verdicts, paint));
    }
    if let Some(dir) = &report.artifacts {
        text.push_str(&format!("  evidence: {}\n", dir.display()));
    }
    text
}

/// The JUnit and JSON files a run writes when the suite ends, if asked.
#[derive(Debug, Default)]
pub struct MachineReports {
    pub junit: Option<PathBuf>,
    pub json: Option<PathBuf>,
    /// The slice of the suite the run is (`hash:1/3`), which the JSON report states.
    pub slice: Option<String>,
}

impl MachineReports {
    /// Fails now, before any scenario runs, if a report could not be written at the end.
    pub(crate) fn check_writable(&self) -> Result<()> {
        for (what, path) in [("JUnit", &self.junit), ("JSON", &self.json)] {
            if let Some(path) = path {
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .with_context(|| format!("the {what} report {} cannot be written", path.display()))?;
            }
        }
        Ok(())
    }

    /// Writes the reports of `finished` scenarios.
    pub fn write(&self, finished: &[Finished<'_>]) -> Result<()> {
        if let Some(path) = &self.junit {
            std::fs::write(path, report::junit_report(finished)?)
                .with_context(|| format!("writing the JUnit report {}", path.display()))?;
        }
        if let Some(path) = &self.json {
            std::fs::write(path, report::json_report_of_slice(finished, self.slice.clone())?)
                .with_context(|| format!("writing the JSON report {}", path.display()))?;
        }
        Ok(())
    }
}

impl Reporter for MachineReports {
    fn event(&mut self, event: &Event<'_>) -> Result<Control> {
        if let Event::SuiteFinished { results, .. } = event {
            let finished: Vec<Finished> = results
                .iter()
                .map(|(scenario, result)| match result {
                    Ok(report) => Finished::Ran { scenario, report },
                    Err(e) => Finished::Error { scenario, error: format!("{e:#}") },
                })
                .collect();
            self.write(&finished)?;
        }
        Ok(Control::Continue)
    }
}

/// The rule coverage a run measured (`run --coverage`): a closing line per proxy, the
/// templates no probe hit, and the gate `--min-coverage`.
#[derive(Debug, Default)]
pub struct CoverageReport {
    /// Also list the probes behind each covered template (`--show coverage`).
    pub show_covering: bool,
    /// The percentage every proxy's templates must reach.
    pub minimum: Option<f64>,
    /// Once the suite finished: the proxies below `minimum`, each with why.
    pub below_minimum: Vec<String>,
}

impl Reporter for CoverageReport {
    fn event(&mut self, event: &Event<'_>) -> Result<Control> {
        if let Event::SuiteFinished { results, .. } = event {
            let finished: Vec<Finished> = results
                .iter()
                .filter_map(|(scenario, result)| {
                    result.as_ref().ok().map(|report| Finished::Ran { scenario, report })
                })
                .collect();
            let tables = report::coverage_tables(&finished);
            // What limited a scenario's measurement is said, never left out of the figure
            // silently: each kind of note once, with the scenarios it held for.
            let mut notes: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
            for (scenario, result) in results.iter() {
                let of_scenario =
                    result.as_ref().ok().and_then(|r| r.coverage.as_deref()).map(|c| c.notes.as_slice());
                for note in of_scenario.unwrap_or_default() {
                    // `node NAME: what`: the same note on every node is one.
                    let what = note.split_once(": ").map_or(note.as_str(), |(_, what)| what);
                    let scenarios = notes.entry(what).or_default();
                    if scenarios.last() != Some(&scenario.name.as_str()) {
                        scenarios.push(&scenario.name);
                    }
                }
            }
            for (what, scenarios) in notes {
                let shown: Vec<&str> = scenarios.iter().take(3).copied().collect();
                let more = scenarios.len().saturating_sub(shown.len());
                let more = if more > 0 { format!(" and {more} more") } else { String::new() };
                println!("rules: {what} (in {}{more})", shown.join(", "));
            }
            print!("{}", report::coverage_text(&tables, self.show_covering));
            if tables.is_empty() {
                println!("rules: no scenario measured coverage");
            }
            if let Some(minimum) = self.minimum {
                self.below_minimum = crate::coverage::table::below(&tables, minimum);
                for why in &self.below_minimum {
                    println!("{why}");
                }
            }
        }
        Ok(Control::Continue)
    }
}

/// Only the progress bar (for commands that print their own result at the end, like `diff`).
pub struct RunProgress {
    paint: Paint,
    progress: Option<Progress>,
}

impl RunProgress {
    pub fn new(paint: Paint) -> RunProgress {
        RunProgress { paint, progress: None }
    }

    /// `name` ended; `text` goes to stdout above the bar.
    fn finished(&self, name: &str, text: &str) {
        if let Some(p) = &self.progress {
            p.finished(name, text);
        }
    }
}

impl Reporter for RunProgress {
    fn event(&mut self, event: &Event<'_>) -> Result<Control> {
        match event {
            Event::SuiteStarted { total } => self.progress = Some(Progress::new(*total, self.paint)),
            Event::ScenarioStarted { scenario, .. } => {
                if let Some(p) = &self.progress {
                    p.started(&scenario.name);
                }
            }
            Event::ScenarioFinished { scenario, .. } => self.finished(&scenario.name, ""),
            Event::SuiteFinished { .. } => {
                if let Some(p) = self.progress.take() {
                    p.finish();
                }
            }
            Event::ProbeJudged { .. } => {}
        }
        Ok(Control::Continue)
    }
}
