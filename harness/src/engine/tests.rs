//! The engine's scheduling and event order, with runs that end at proxy set-up (an unknown
//! proxy), so no namespace is needed.

use std::path::Path;

use super::*;
use crate::admission;

fn scenarios(n: usize) -> Vec<Scenario> {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/hairpin.yaml");
    let s = admission::load(&file).unwrap_or_else(|e| panic!("{e}"));
    (0..n).map(|i| Scenario { name: format!("s{i}"), ..s.clone() }).collect()
}

/// Writes each event as a line; stops at the `stop_after`-th finished scenario.
struct Log {
    lines: Vec<String>,
    stop_after: Option<usize>,
}

impl Reporter for Log {
    fn event(&mut self, event: &Event<'_>) -> Result<Control> {
        let line = match event {
            Event::SuiteStarted { total } => format!("suite started: {total}"),
            Event::ScenarioStarted { scenario, .. } => format!("started {}", scenario.name),
            Event::ProbeJudged { verdict, .. } => format!("judged {}", verdict.probe.name),
            Event::ScenarioFinished { scenario, result, done, total, .. } => {
                format!(
                    "finished {} {done}/{total} {}",
                    scenario.name,
                    if result.is_ok() { "ok" } else { "error" }
                )
            }
            Event::SuiteFinished { results, .. } => format!("suite finished: {}", results.len()),
        };
        self.lines.push(line);
        let finished = self.lines.iter().filter(|l| l.starts_with("finished")).count();
        Ok(if self.stop_after == Some(finished) { Control::Stop } else { Control::Continue })
    }
}

#[test]
fn every_run_is_reported_in_order_and_its_result_kept() {
    let suite = scenarios(3);
    let unknown = ProxyChoice::named("no-such-proxy");
    let engine = Engine { options: RunOptions::default(), jobs: 1 };
    let mut log = Log { lines: Vec::new(), stop_after: None };
    let results = engine.execute(&Run::each(&suite, Some(&unknown)), &mut [&mut log]).unwrap();
    assert_eq!(
        log.lines,
        [
            "suite started: 3",
            "started s0",
            "finished s0 1/3 error",
            "started s1",
            "finished s1 2/3 error",
            "started s2",
            "finished s2 3/3 error",
            "suite finished: 3"
        ]
    );
    let names: Vec<&str> = results.iter().map(|(s, _)| s.name.as_str()).collect();
    assert_eq!(names, ["s0", "s1", "s2"]);
    assert!(format!("{:#}", results[0].1.as_ref().unwrap_err()).contains("no-such-proxy"));
}

#[test]
fn a_reporter_that_stops_the_suite_starts_no_further_run() {
    let suite = scenarios(4);
    let unknown = ProxyChoice::named("no-such-proxy");
    let engine = Engine { options: RunOptions::default(), jobs: 1 };
    let mut log = Log { lines: Vec::new(), stop_after: Some(1) };
    let results = engine.execute(&Run::each(&suite, Some(&unknown)), &mut [&mut log]).unwrap();
    // One worker, which waits for the reporters' answer before it takes the next run.
    assert_eq!(log.lines, ["suite started: 4", "started s0", "finished s0 1/4 error", "suite finished: 4"]);
    let cancelled: Vec<&str> = results
        .iter()
        .filter(|(_, r)| r.as_ref().is_err_and(|e| e.to_string() == "not run: the suite was stopped"))
        .map(|(s, _)| s.name.as_str())
        .collect();
    assert_eq!(cancelled, ["s1", "s2", "s3"]);
}

#[test]
fn every_reporter_hears_every_event_and_an_error_is_returned_after_the_runs() {
    struct Failing;
    impl Reporter for Failing {
        fn event(&mut self, event: &Event<'_>) -> Result<Control> {
            match event {
                Event::SuiteStarted { .. } => anyhow::bail!("cannot write the report"),
                _ => Ok(Control::Continue),
            }
        }
    }
    let suite = scenarios(2);
    let unknown = ProxyChoice::named("no-such-proxy");
    let engine = Engine { options: RunOptions::default(), jobs: 2 };
    let mut log = Log { lines: Vec::new(), stop_after: None };
    let error =
        engine.execute(&Run::each(&suite, Some(&unknown)), &mut [&mut Failing, &mut log]).unwrap_err();
    assert_eq!(error.to_string(), "cannot write the report");
    assert_eq!(log.lines.len(), 6, "the other reporter heard the whole suite: {:?}", log.lines);
}

#[test]
fn the_run_with_the_longest_pauses_starts_first_and_results_keep_the_given_order() {
    let mut suite = scenarios(3);
    suite[2].probes[0].interval = Some(Duration::from_millis(1500));
    let unknown = ProxyChoice::named("no-such-proxy");
    let engine = Engine { options: RunOptions::default(), jobs: 1 };
    let mut log = Log { lines: Vec::new(), stop_after: None };
    let results = engine.execute(&Run::each(&suite, Some(&unknown)), &mut [&mut log]).unwrap();
    let started: Vec<&str> = log.lines.iter().filter_map(|l| l.strip_prefix("started ")).collect();
    assert_eq!(started, ["s2", "s0", "s1"]);
    let names: Vec<&str> = results.iter().map(|(s, _)| s.name.as_str()).collect();
    assert_eq!(names, ["s0", "s1", "s2"]);
}

#[test]
fn runs_marked_ahead_start_before_the_longest_and_keep_their_order() {
    let mut suite = scenarios(4);
    suite[0].probes[0].interval = Some(Duration::from_millis(1500));
    let unknown = ProxyChoice::named("no-such-proxy");
    let mut runs = Run::each(&suite, Some(&unknown));
    runs[3].ahead = true;
    runs[1].ahead = true;
    let engine = Engine { options: RunOptions::default(), jobs: 1 };
    let mut log = Log { lines: Vec::new(), stop_after: None };
    engine.execute(&runs, &mut [&mut log]).unwrap();
    let started: Vec<&str> = log.lines.iter().filter_map(|l| l.strip_prefix("started ")).collect();
    assert_eq!(started, ["s1", "s3", "s0", "s2"]);
}

#[test]
fn a_reporter_that_cancels_runs_leaves_those_and_only_those_unstarted() {
    /// At the first finished run, cancels runs 2 and 3 (say, a killed mutant's).
    struct Cancels;
    impl Reporter for Cancels {
        fn event(&mut self, event: &Event<'_>) -> Result<Control> {
            Ok(match event {
                Event::ScenarioFinished { done: 1, .. } => Control::Cancel { from: 2, to: 4 },
                _ => Control::Continue,
            })
        }
    }
    let suite = scenarios(5);
    let unknown = ProxyChoice::named("no-such-proxy");
    let engine = Engine { options: RunOptions::default(), jobs: 1 };
    let mut log = Log { lines: Vec::new(), stop_after: None };
    let results = engine.execute(&Run::each(&suite, Some(&unknown)), &mut [&mut Cancels, &mut log]).unwrap();
    let started: Vec<&str> = log.lines.iter().filter_map(|l| l.strip_prefix("started ")).collect();
    assert_eq!(started, ["s0", "s1", "s4"]);
    let cancelled: Vec<&str> = results
        .iter()
        .filter(|(_, r)| r.as_ref().is_err_and(|e| e.to_string() == "not run: cancelled"))
        .map(|(s, _)| s.name.as_str())
        .collect();
    assert_eq!(cancelled, ["s2", "s3"]);
}
