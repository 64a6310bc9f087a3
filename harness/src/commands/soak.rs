//! `packetproof soak`: the false-failure rate as a command. A correct proxy must get the same
//! verdict every run, and the harness promises that a correct proxy fails a probe with
//! probability at most `FALSE_FAILURE_RATE`; running the same scenarios many times (on a busy
//! machine with `--stress`) and listing every verdict that changed between runs measures
//! whether that promise holds. A flip is a timing-dependent proxy or a harness that judges
//! wrongly; a harness fault is a harness bug whether it flipped or not.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Result;

use super::{EXIT_ERROR, EXIT_FAIL, EXIT_PASS, clear_leftovers, default_paths, load_all, proxy_choice};
use crate::engine::{Engine, Run, RunProgress};
use crate::model::{ProxyChoice, Scenario};
use crate::report::Paint;
use crate::results::{Outcome, ScenarioReport};
use crate::runner::RunOptions;

#[derive(clap::Args)]
pub struct Args {
    /// Scenario files or directories of them (default: `scenarios`).
    pub paths: Vec<PathBuf>,
    /// How many times to run every scenario (1 to 10000; one run flips nothing but still
    /// lists harness faults).
    #[arg(long, value_name = "N", value_parser = runs)]
    pub runs: usize,
    /// Busy threads per core, spinning until the soak ends (0 to 64): verdicts must not
    /// depend on an idle machine.
    #[arg(long, value_name = "K", default_value_t = 0, value_parser = stress)]
    pub stress: usize,
    /// Proxy to program the nodes with, instead of each scenario's own choice.
    #[arg(long)]
    pub proxy: Option<String>,
    /// An option for the `--proxy` adapter, `KEY=VALUE` (as `run --proxy-option`); repeatable.
    #[arg(long = "proxy-option", value_name = "KEY=VALUE", requires = "proxy")]
    pub proxy_options: Vec<String>,
    /// Scenarios run at once (default: four per core; 1 to 256).
    #[arg(long, value_parser = super::jobs)]
    pub jobs: Option<usize>,
    /// Milliseconds an attempt waits for an answer (as `run --timeout-ms`).
    #[arg(long, default_value_t = 1000, value_parser = super::timeout_ms)]
    pub timeout_ms: u64,
    /// Where each run leaves its evidence, in `run-<i>` below it so runs do not overwrite
    /// each other's.
    #[arg(long, default_value = "artifacts/soak")]
    pub artifacts: PathBuf,
    /// Keep the evidence of passing scenarios too: a flip's passing runs then have evidence
    /// to compare with its failing ones.
    #[arg(long)]
    pub keep_evidence: bool,
}

fn runs(text: &str) -> Result<usize, String> {
    super::bounded(text, 1, 10_000).map(|n| n as usize)
}

fn stress(text: &str) -> Result<usize, String> {
    super::bounded(text, 0, 64).map(|n| n as usize)
}

pub fn main(args: Args) -> Result<i32> {
    let started = Instant::now();
    let paths = default_paths(args.paths);
    let Some(scenarios) = load_all(&paths)? else { return Ok(EXIT_ERROR) };
    let proxy = args.proxy.as_deref().map(|name| proxy_choice(name, &args.proxy_options)).transpose()?;
    if let Some(choice) = &proxy {
        crate::proxy::build(choice, Path::new("."))?;
    }
    clear_leftovers(false)?;
    let engine_runs = Run::each(&scenarios, proxy.as_ref());
    let jobs = args.jobs.unwrap_or_else(Engine::default_jobs);
    let paint = Paint::for_stdout(clap::ColorChoice::Auto);
    // Held until every run ended, also when one returns an error.
    let stress = Stress::start(args.stress);
    if !stress.threads.is_empty() {
        println!("stress: {} busy threads ({} per core)", stress.threads.len(), args.stress);
    }
    let mut runs = Vec::with_capacity(args.runs);
    for i in 1..=args.runs {
        let options = RunOptions {
            timeout: Duration::from_millis(args.timeout_ms),
            artifacts: Some(args.artifacts.join(format!("run-{i}"))),
            keep_passing: args.keep_evidence,
            ..RunOptions::default()
        };
        let engine = Engine { options, jobs };
        let run_started = Instant::now();
        let results = engine.execute(&engine_runs, &mut [&mut RunProgress::new(paint)])?;
        let verdicts = RunVerdicts::of(&results, proxy.as_ref());
        print!("{}", run_text(i, args.runs, &results, &verdicts, run_started.elapsed()));
        runs.push(verdicts);
    }
    drop(stress);
    let soak = Soak::of(&runs);
    print!("{}", soak.report());
    println!("{} in {:.2}s", soak.closing_line(), started.elapsed().as_secs_f64());
    Ok(soak.exit_code())
}

/// `run 2/5: 7 passed, 1 failed, 0 faulted, 0 skipped, 0 errors in 3.10s`, and the line of
/// each scenario that did not pass (its error, for one that did not run).
fn run_text(
    i: usize,
    total: usize,
    results: &[(&Scenario, Result<ScenarioReport>)],
    verdicts: &RunVerdicts,
    elapsed: Duration,
) -> String {
    let count = |word: Word| verdicts.scenarios.iter().filter(|s| s.word() == word).count();
    let mut text = format!(
        "run {i}/{total}: {} passed, {} failed, {} faulted, {} skipped, {} errors in {:.2}s\n",
        count(Word::Pass),
        count(Word::Fail) + count(Word::ProxyFailed),
        count(Word::Fault),
        count(Word::Skipped),
        count(Word::Error),
        elapsed.as_secs_f64()
    );
    for (scenario, result) in results {
        match result {
            Ok(report) if report.passed() || matches!(report.outcome, Outcome::Skipped(_)) => {}
            Ok(report) => text.push_str(&format!("  {}\n", crate::report::scenario_line(report))),
            Err(e) => {
                text.push_str(&format!("  ERROR {} ({}): {e:#}\n", scenario.name, scenario.source.display()))
            }
        }
    }
    text
}

/// Busy threads that keep the cores loaded while the soak runs; dropping it stops and joins
/// them, so no way out of the command leaves them spinning.
struct Stress {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Stress {
    fn start(per_core: usize) -> Stress {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..per_core * cores)
            .map(|_| {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        n = std::hint::black_box(n.wrapping_add(1));
                    }
                })
            })
            .collect();
        Stress { stop, threads }
    }
}

impl Drop for Stress {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// What a flow came to in one run. The order is the order counts are printed in, and breaks
/// ties for the most common word in favour of the earlier (so a failing run is the odd one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Word {
    Pass,
    Fail,
    /// The harness failed to observe the probe (its witnesses disagree).
    Fault,
    ProxyFailed,
    /// The scenario could not be set up.
    Error,
    Skipped,
    /// The probe was not among the run's verdicts (a scenario that changed its flows).
    Absent,
}

impl fmt::Display for Word {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Word::Pass => "pass",
            Word::Fail => "fail",
            Word::Fault => "fault",
            Word::ProxyFailed => "proxy-failed",
            Word::Error => "error",
            Word::Skipped => "skipped",
            Word::Absent => "absent",
        })
    }
}

/// One probe of one scenario with one proxy: what must get the same verdict every run.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Flow {
    pub scenario: String,
    pub proxy: String,
    pub probe: String,
}

impl fmt::Display for Flow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.scenario, self.proxy, self.probe)
    }
}

/// The probe name of a scenario no run judged: its outcome stands for all its probes.
const WHOLE_SCENARIO: &str = "(whole scenario)";

/// What every scenario came to in one run.
#[derive(Debug, Clone, Default)]
pub struct RunVerdicts {
    pub scenarios: Vec<ScenarioRun>,
}

#[derive(Debug, Clone)]
pub struct ScenarioRun {
    pub scenario: String,
    pub proxy: String,
    pub result: ScenarioResult,
    /// Where this run left the scenario's evidence, if it kept any.
    pub artifacts: Option<PathBuf>,
}

#[derive(Debug, Clone)]
pub enum ScenarioResult {
    Judged(Vec<ProbeResult>),
    /// Skipped, a setup error, or a proxy that failed: one word for every probe, and why.
    Whole {
        word: Word,
        reason: String,
    },
}

#[derive(Debug, Clone)]
pub struct ProbeResult {
    pub probe: String,
    /// The proxy's failures, as sentences.
    pub failures: Vec<String>,
    /// Attempts the harness failed to observe, as sentences.
    pub harness_faults: Vec<String>,
}

impl ProbeResult {
    /// As `ProbeVerdict`: a failure outweighs a harness fault.
    pub fn word(&self) -> Word {
        match (self.failures.is_empty(), self.harness_faults.is_empty()) {
            (false, _) => Word::Fail,
            (true, false) => Word::Fault,
            (true, true) => Word::Pass,
        }
    }
}

impl ScenarioRun {
    /// The scenario's own word, as `run` would count it.
    fn word(&self) -> Word {
        match &self.result {
            ScenarioResult::Whole { word, .. } => *word,
            ScenarioResult::Judged(probes) => {
                let words: BTreeSet<Word> = probes.iter().map(ProbeResult::word).collect();
                [Word::Fail, Word::Fault].into_iter().find(|w| words.contains(w)).unwrap_or(Word::Pass)
            }
        }
    }
}

impl RunVerdicts {
    /// The engine's results of one run. Flows are named by the proxy chosen for them (not the
    /// report's), so a run that errored has the same flows as one that ran.
    pub fn of(results: &[(&Scenario, Result<ScenarioReport>)], proxy: Option<&ProxyChoice>) -> RunVerdicts {
        let scenarios = results
            .iter()
            .map(|(s, result)| {
                let (result, artifacts) = match result {
                    Err(e) => (ScenarioResult::Whole { word: Word::Error, reason: format!("{e:#}") }, None),
                    Ok(report) => (scenario_result(report), report.artifacts.clone()),
                };
                ScenarioRun {
                    scenario: s.name.clone(),
                    proxy: proxy.unwrap_or(&s.proxy).label(),
                    result,
                    artifacts,
                }
            })
            .collect();
        RunVerdicts { scenarios }
    }
}

fn scenario_result(report: &ScenarioReport) -> ScenarioResult {
    match &report.outcome {
        Outcome::Skipped(reason) => ScenarioResult::Whole { word: Word::Skipped, reason: reason.clone() },
        Outcome::ProxyFailed(reason) => {
            ScenarioResult::Whole { word: Word::ProxyFailed, reason: reason.clone() }
        }
        Outcome::Judged(verdicts) => {
            let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
            let probes = verdicts
                .iter()
                .map(|v| {
                    // Names are unique within a scenario; should two meet, neither hides the other.
                    let n = seen.entry(&v.probe.name).or_default();
                    *n += 1;
                    let probe = if *n == 1 { v.probe.name.clone() } else { format!("{} #{n}", v.probe.name) };
                    ProbeResult {
                        probe,
                        failures: v.failures.iter().map(ToString::to_string).collect(),
                        harness_faults: v.harness_faults.iter().map(ToString::to_string).collect(),
                    }
                })
                .collect();
            ScenarioResult::Judged(probes)
        }
    }
}

/// One flow in one run: its word and what shows why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub word: Word,
    /// The failures and harness faults of the probe, or why the whole scenario ended so.
    pub evidence: Vec<String>,
    pub artifacts: Option<PathBuf>,
}

/// A flow whose word was not the same in every run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flip {
    pub flow: Flow,
    /// How many runs gave each word, in [`Word`]'s order.
    pub counts: BTreeMap<Word, usize>,
    /// The most common word.
    pub usual: Word,
    /// The runs (numbered from 1) whose word was not the usual one.
    pub odd: Vec<(usize, Seen)>,
}

/// One harness fault of one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HarnessFault {
    pub flow: Flow,
    pub run: usize,
    pub message: String,
}

/// Every flow's word in every run, in order of flow.
pub fn table(runs: &[RunVerdicts]) -> BTreeMap<Flow, Vec<Seen>> {
    // The probes each (scenario, proxy) was judged on in any run: a run where the whole
    // scenario ended early gives its word to each of them.
    let mut probes: BTreeMap<(&str, &str), BTreeSet<&str>> = BTreeMap::new();
    for s in runs.iter().flat_map(|r| &r.scenarios) {
        let names = probes.entry((&s.scenario, &s.proxy)).or_default();
        if let ScenarioResult::Judged(judged) = &s.result {
            names.extend(judged.iter().map(|p| p.probe.as_str()));
        }
    }
    let mut table = BTreeMap::new();
    for ((scenario, proxy), names) in &probes {
        let names: Vec<&str> =
            if names.is_empty() { vec![WHOLE_SCENARIO] } else { names.iter().copied().collect() };
        for probe in names {
            let seen = runs
                .iter()
                .map(|run| {
                    let of_scenario =
                        run.scenarios.iter().find(|s| s.scenario == *scenario && s.proxy == *proxy);
                    seen_in(of_scenario, probe)
                })
                .collect();
            let flow =
                Flow { scenario: scenario.to_string(), proxy: proxy.to_string(), probe: probe.to_string() };
            table.insert(flow, seen);
        }
    }
    table
}

fn seen_in(scenario: Option<&ScenarioRun>, probe: &str) -> Seen {
    let absent = Seen { word: Word::Absent, evidence: Vec::new(), artifacts: None };
    let Some(s) = scenario else { return absent };
    match &s.result {
        ScenarioResult::Whole { word, reason } => {
            Seen { word: *word, evidence: vec![reason.clone()], artifacts: s.artifacts.clone() }
        }
        ScenarioResult::Judged(judged) => match judged.iter().find(|p| p.probe == probe) {
            None => absent,
            Some(p) => {
                let faults = p.harness_faults.iter().map(|m| format!("harness fault: {m}"));
                Seen {
                    word: p.word(),
                    evidence: p.failures.iter().cloned().chain(faults).collect(),
                    artifacts: s.artifacts.clone(),
                }
            }
        },
    }
}

/// Every flow whose word was not the same in every run, with its odd runs.
pub fn flips(runs: &[RunVerdicts]) -> Vec<Flip> {
    flips_of(&table(runs))
}

fn flips_of(table: &BTreeMap<Flow, Vec<Seen>>) -> Vec<Flip> {
    table
        .iter()
        .filter_map(|(flow, seen)| {
            // A run that could not set the scenario up gave no verdict to flip: it is counted
            // as a setup error, apart.
            let mut counts: BTreeMap<Word, usize> = BTreeMap::new();
            for s in seen.iter().filter(|s| s.word != Word::Error) {
                *counts.entry(s.word).or_default() += 1;
            }
            if counts.len() < 2 {
                return None;
            }
            // The most common; of equals, the first in `Word`'s order.
            let (&usual, _) = counts.iter().max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))?;
            let odd = seen
                .iter()
                .enumerate()
                .filter(|(_, s)| s.word != usual && s.word != Word::Error)
                .map(|(i, s)| (i + 1, s.clone()))
                .collect();
            Some(Flip { flow: flow.clone(), counts, usual, odd })
        })
        .collect()
}

/// Every harness fault of every run, flipped or not: each is a harness bug to diagnose.
pub fn harness_faults(runs: &[RunVerdicts]) -> Vec<HarnessFault> {
    let mut faults = Vec::new();
    for (i, run) in runs.iter().enumerate() {
        for s in &run.scenarios {
            let ScenarioResult::Judged(probes) = &s.result else { continue };
            for p in probes {
                for message in &p.harness_faults {
                    let flow =
                        Flow { scenario: s.scenario.clone(), proxy: s.proxy.clone(), probe: p.probe.clone() };
                    faults.push(HarnessFault { flow, run: i + 1, message: message.clone() });
                }
            }
        }
    }
    faults
}

/// Everything the closing report says, and the exit code it comes to.
#[derive(Debug)]
pub struct Soak {
    pub runs: usize,
    pub flips: Vec<Flip>,
    pub harness_faults: Vec<HarnessFault>,
    /// Flows the proxy failed in every run (a steady proxy failure, not a flip), with the first
    /// run's evidence.
    pub failed_every_run: Vec<(Flow, Seen)>,
    /// Setup errors: (scenario, proxy, run, message).
    pub errors: Vec<(String, String, usize, String)>,
    /// Some scenario was judged (or its proxy failed) in some run.
    pub judged_something: bool,
}

impl Soak {
    pub fn of(runs: &[RunVerdicts]) -> Soak {
        let table = table(runs);
        let failed_every_run = table
            .iter()
            .filter_map(|(flow, seen)| {
                // Runs that set the scenario up; the others gave no verdict.
                let set_up: Vec<&Seen> = seen.iter().filter(|s| s.word != Word::Error).collect();
                let failed = |s: &&Seen| matches!(s.word, Word::Fail | Word::ProxyFailed);
                (!set_up.is_empty() && set_up.iter().all(failed)).then(|| (flow.clone(), set_up[0].clone()))
            })
            .collect();
        let mut errors = Vec::new();
        for (i, run) in runs.iter().enumerate() {
            for s in &run.scenarios {
                if let ScenarioResult::Whole { word: Word::Error, reason } = &s.result {
                    errors.push((s.scenario.clone(), s.proxy.clone(), i + 1, reason.clone()));
                }
            }
        }
        let judged_something = runs
            .iter()
            .flat_map(|r| &r.scenarios)
            .any(|s| !matches!(&s.result, ScenarioResult::Whole { word: Word::Skipped | Word::Error, .. }));
        Soak {
            runs: runs.len(),
            flips: flips_of(&table),
            harness_faults: harness_faults(runs),
            failed_every_run,
            errors,
            judged_something,
        }
    }

    /// As `run`'s: errors (a setup error, a harness fault: the machine or the harness at
    /// fault) outweigh failures (a flip, a flow failed every run); nothing judged is an error
    /// too, so a soak that lost its privileges does not go green.
    pub fn exit_code(&self) -> i32 {
        if !self.errors.is_empty() || !self.harness_faults.is_empty() {
            EXIT_ERROR
        } else if !self.flips.is_empty() || !self.failed_every_run.is_empty() {
            EXIT_FAIL
        } else if self.judged_something {
            EXIT_PASS
        } else {
            EXIT_ERROR
        }
    }

    /// `N runs, F flows flipped, H harness faults, E setup errors` (the caller adds the time).
    pub fn closing_line(&self) -> String {
        format!(
            "{} runs, {} flows flipped, {} harness faults, {} setup errors",
            self.runs,
            self.flips.len(),
            self.harness_faults.len(),
            self.errors.len()
        )
    }

    /// Every flip with its odd runs' evidence, every harness fault, every setup error and
    /// every flow failed in every run.
    pub fn report(&self) -> String {
        let mut out = String::new();
        for flip in &self.flips {
            let mut counts: Vec<String> = [Word::Pass, Word::Fail, Word::Fault]
                .iter()
                .map(|w| format!("{w} ×{}", self.count(flip, *w)))
                .collect();
            counts.extend(
                flip.counts
                    .iter()
                    .filter(|(w, _)| !matches!(w, Word::Pass | Word::Fail | Word::Fault))
                    .map(|(w, n)| format!("{w} ×{n}")),
            );
            out.push_str(&format!("flipped: {}: {}\n", flip.flow, counts.join(", ")));
            for (run, seen) in &flip.odd {
                out.push_str(&format!("  run {run}: {}\n", seen.word));
                for line in &seen.evidence {
                    out.push_str(&format!("    {line}\n"));
                }
                out.push_str(&evidence_line(seen));
            }
        }
        for fault in &self.harness_faults {
            out.push_str(&format!("harness fault: {}: run {}: {}\n", fault.flow, fault.run, fault.message));
        }
        for (scenario, proxy, run, message) in &self.errors {
            out.push_str(&format!("setup error: {scenario} ({proxy}): run {run}: {message}\n"));
        }
        for (flow, seen) in &self.failed_every_run {
            out.push_str(&format!("failed every run: {flow}\n"));
            for line in &seen.evidence {
                out.push_str(&format!("    {line}\n"));
            }
            out.push_str(&evidence_line(seen));
        }
        if !self.judged_something {
            out.push_str(&format!(
                "nothing was judged: every scenario was skipped or did not run (exit {EXIT_ERROR})\n"
            ));
        }
        out
    }

    fn count(&self, flip: &Flip, word: Word) -> usize {
        flip.counts.get(&word).copied().unwrap_or(0)
    }
}

/// Where a run's evidence of the flow is; a passing scenario keeps none unless asked.
fn evidence_line(seen: &Seen) -> String {
    match (&seen.artifacts, seen.word) {
        (Some(dir), _) => format!("    evidence: {}\n", dir.display()),
        (None, Word::Pass) => "    evidence: none kept (it passed; --keep-evidence keeps it)\n".into(),
        (None, _) => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(name: &str, failures: &[&str], faults: &[&str]) -> ProbeResult {
        ProbeResult {
            probe: name.into(),
            failures: failures.iter().map(|s| s.to_string()).collect(),
            harness_faults: faults.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn judged(scenario: &str, run: usize, probes: Vec<ProbeResult>) -> ScenarioRun {
        ScenarioRun {
            scenario: scenario.into(),
            proxy: "builtin-iptables".into(),
            result: ScenarioResult::Judged(probes),
            artifacts: Some(PathBuf::from(format!("artifacts/soak/run-{run}/{scenario}"))),
        }
    }

    fn whole(scenario: &str, word: Word, reason: &str) -> ScenarioRun {
        ScenarioRun {
            scenario: scenario.into(),
            proxy: "builtin-iptables".into(),
            result: ScenarioResult::Whole { word, reason: reason.into() },
            artifacts: None,
        }
    }

    fn run(scenarios: Vec<ScenarioRun>) -> RunVerdicts {
        RunVerdicts { scenarios }
    }

    fn passing(run_number: usize) -> RunVerdicts {
        run(vec![judged("dns", run_number, vec![probe("udp", &[], &[]), probe("tcp", &[], &[])])])
    }

    #[test]
    fn the_same_verdict_every_run_flips_nothing_and_passes() {
        let runs = vec![passing(1), passing(2), passing(3)];
        let soak = Soak::of(&runs);
        assert!(soak.flips.is_empty());
        assert!(soak.harness_faults.is_empty());
        assert_eq!(soak.exit_code(), EXIT_PASS);
        assert_eq!(soak.closing_line(), "3 runs, 0 flows flipped, 0 harness faults, 0 setup errors");
        assert_eq!(soak.report(), "");
    }

    #[test]
    fn a_flip_names_the_odd_run_with_its_failure_and_evidence() {
        let odd = run(vec![judged(
            "dns",
            2,
            vec![probe("udp", &["b answered 0 of 40"], &[]), probe("tcp", &[], &[])],
        )]);
        let runs = vec![passing(1), odd, passing(3)];
        let found = flips(&runs);
        assert_eq!(found.len(), 1, "{found:?}");
        let flip = &found[0];
        assert_eq!(flip.flow.probe, "udp");
        assert_eq!(flip.usual, Word::Pass);
        assert_eq!(flip.odd.len(), 1);
        assert_eq!(flip.odd[0].0, 2);
        let soak = Soak::of(&runs);
        assert_eq!(soak.exit_code(), EXIT_FAIL);
        assert_eq!(
            soak.report(),
            "flipped: dns (builtin-iptables): udp: pass ×2, fail ×1, fault ×0\n\
             \x20 run 2: fail\n\
             \x20   b answered 0 of 40\n\
             \x20   evidence: artifacts/soak/run-2/dns\n"
        );
        assert_eq!(soak.closing_line(), "3 runs, 1 flows flipped, 0 harness faults, 0 setup errors");
    }

    #[test]
    fn of_equally_common_words_the_failing_runs_are_the_odd_ones() {
        let failing =
            run(vec![judged("dns", 2, vec![probe("udp", &["silent"], &[]), probe("tcp", &[], &[])])]);
        let found = flips(&[passing(1), failing]);
        assert_eq!(found[0].usual, Word::Pass);
        assert_eq!(found[0].odd.iter().map(|(i, _)| *i).collect::<Vec<_>>(), vec![2]);
    }

    #[test]
    fn a_harness_fault_is_listed_and_outweighs_a_flip_even_when_nothing_flipped_there() {
        let faulted = |n| {
            run(vec![judged(
                "dns",
                n,
                vec![probe("udp", &[], &["witnesses disagree"]), probe("tcp", &[], &[])],
            )])
        };
        // Faulted in every run: no flip, but still an error.
        let runs = vec![faulted(1), faulted(2)];
        let soak = Soak::of(&runs);
        assert!(soak.flips.is_empty());
        assert_eq!(soak.harness_faults.len(), 2);
        assert_eq!(soak.harness_faults[1].run, 2);
        assert_eq!(soak.exit_code(), EXIT_ERROR);
        assert!(
            soak.report().contains("harness fault: dns (builtin-iptables): udp: run 1: witnesses disagree\n"),
            "{}",
            soak.report()
        );
        assert_eq!(soak.closing_line(), "2 runs, 0 flows flipped, 2 harness faults, 0 setup errors");
        // Once among passes: a flip, and still an error rather than a failure.
        let soak = Soak::of(&[passing(1), faulted(2)]);
        assert_eq!(soak.flips.len(), 1);
        assert!(
            soak.report().starts_with("flipped: dns (builtin-iptables): udp: pass ×1, fail ×0, fault ×1\n")
        );
        assert!(soak.report().contains("    harness fault: witnesses disagree\n"));
        assert_eq!(soak.exit_code(), EXIT_ERROR);
    }

    #[test]
    fn a_failure_beside_a_harness_fault_is_a_failure_whose_fault_is_still_counted() {
        let p = probe("udp", &["silent"], &["witnesses disagree"]);
        assert_eq!(p.word(), Word::Fail);
        let runs = vec![run(vec![judged("dns", 1, vec![p])])];
        assert_eq!(harness_faults(&runs).len(), 1);
    }

    #[test]
    fn a_flow_failed_in_every_run_is_a_proxy_failure_not_a_flip() {
        let failing =
            |n| run(vec![judged("dns", n, vec![probe("udp", &["silent"], &[]), probe("tcp", &[], &[])])]);
        let soak = Soak::of(&[failing(1), failing(2)]);
        assert!(soak.flips.is_empty());
        assert_eq!(soak.failed_every_run.len(), 1);
        assert_eq!(soak.exit_code(), EXIT_FAIL);
        assert!(soak.report().starts_with("failed every run: dns (builtin-iptables): udp\n    silent\n"));
    }

    #[test]
    fn a_whole_scenario_outcome_stands_for_each_probe_judged_in_other_runs() {
        let failed = run(vec![whole("dns", Word::ProxyFailed, "sync failed")]);
        let runs = vec![passing(1), failed, passing(3)];
        let found = flips(&runs);
        assert_eq!(found.iter().map(|f| f.flow.probe.as_str()).collect::<Vec<_>>(), vec!["tcp", "udp"]);
        assert_eq!(found[0].counts, BTreeMap::from([(Word::Pass, 2), (Word::ProxyFailed, 1)]));
        assert_eq!(found[0].odd[0].1.evidence, vec!["sync failed".to_string()]);
        let soak = Soak::of(&runs);
        assert!(
            soak.report().contains("udp: pass ×2, fail ×0, fault ×0, proxy-failed ×1\n"),
            "{}",
            soak.report()
        );
        assert_eq!(soak.exit_code(), EXIT_FAIL);
    }

    #[test]
    fn a_setup_error_is_no_verdict_and_counted_apart() {
        let runs = vec![passing(1), run(vec![whole("dns", Word::Error, "links not ready")]), passing(3)];
        let soak = Soak::of(&runs);
        assert!(soak.flips.is_empty(), "{:?}", soak.flips);
        assert!(soak.report().contains("setup error: dns (builtin-iptables): run 2: links not ready\n"));
        assert_eq!(soak.closing_line(), "3 runs, 0 flows flipped, 0 harness faults, 1 setup errors");
        assert_eq!(soak.exit_code(), EXIT_ERROR);
    }

    #[test]
    fn a_scenario_never_judged_is_one_flow() {
        let skipped = || run(vec![whole("sctp", Word::Skipped, "no SCTP")]);
        let runs = vec![skipped(), run(vec![whole("sctp", Word::ProxyFailed, "sync failed")])];
        let found = flips(&runs);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].flow.probe, WHOLE_SCENARIO);
        // A proxy that failed once is judged; the skip beside it is not an error.
        assert_eq!(Soak::of(&runs).exit_code(), EXIT_FAIL);
    }

    #[test]
    fn nothing_judged_is_an_error() {
        let skipped = || run(vec![whole("dns", Word::Skipped, "not root")]);
        let soak = Soak::of(&[skipped(), skipped()]);
        assert!(soak.flips.is_empty());
        assert_eq!(soak.exit_code(), EXIT_ERROR);
        assert!(soak.report().starts_with("nothing was judged"));
    }

    #[test]
    fn a_probe_missing_from_a_run_is_absent_there() {
        let short = run(vec![judged("dns", 2, vec![probe("udp", &[], &[])])]);
        let found = flips(&[passing(1), short]);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].flow.probe, "tcp");
        assert_eq!(found[0].odd[0].1.word, Word::Absent);
    }

    #[test]
    fn an_odd_passing_run_says_its_evidence_was_not_kept() {
        let failing = |n| run(vec![judged("dns", n, vec![probe("udp", &["silent"], &[])])]);
        let mut passed = passing(2);
        passed.scenarios[0].artifacts = None;
        let soak = Soak::of(&[failing(1), passed, failing(3)]);
        assert!(
            soak.report()
                .contains("  run 2: pass\n    evidence: none kept (it passed; --keep-evidence keeps it)\n"),
            "{}",
            soak.report()
        );
    }

    #[test]
    fn stress_threads_stop_when_dropped() {
        let stress = Stress::start(1);
        assert!(!stress.threads.is_empty());
        drop(stress);
        assert!(Stress::start(0).threads.is_empty());
    }

    #[test]
    fn runs_and_stress_are_bounded() {
        assert_eq!(runs("3"), Ok(3));
        assert!(runs("0").is_err());
        assert_eq!(stress("0"), Ok(0));
        assert!(stress("65").is_err());
    }
}
