//! Exploration: clusters nobody wrote, judged by the oracle. Cases are drawn from a grammar over
//! the fields the scenario reader models (`grammar`), written as scenario files (`case`) with
//! `spec.flows: {all: true}` and steps whose probes are the flows after them (`probes`), read by
//! the normal reader and run by the engine as `run` runs a file: the runner and the verdict
//! judge them, nothing here does. A failing case is confirmed by running it again, cut down
//! while it fails the same way (`shrink`), confirmed again and written out as a commented
//! scenario file that `packetproof run` reproduces; one that does not fail again is classified
//! (`classify`) and never a finding. With `--against`, each case runs on two proxies and is
//! compared flow by flow (`against`).
//!
//! The same seed gives the same cases: each case is drawn from its own seeded stream
//! (`rng`), and the choice among candidates depends only on what was generated before it
//! (`features`), never on timing or on `--jobs`.

mod against;
pub mod case;
pub mod classify;
pub mod features;
pub mod grammar;
pub mod parity;
pub mod probes;
pub mod rng;
pub mod shrink;

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::engine::{Engine, Run, RunProxy};
use crate::model::{ProxyChoice, Scenario};
use crate::results::{Outcome, ScenarioReport};
use crate::runner::RunOptions;
use case::{Case, ProbeText};
pub use classify::Suspect;
use features::{Feature, FieldCombinations, Guide};
use shrink::Signature;

/// Candidates drawn per case; the one bringing the most new field combinations is kept.
const CANDIDATES: usize = 6;

/// When an exploration stops.
#[derive(Debug, Clone, Copy)]
pub enum Stop {
    After(Duration),
    Cases(usize),
}

pub struct Settings {
    pub seed: u64,
    pub stop: Stop,
    pub proxy: ProxyChoice,
    pub options: RunOptions,
    pub jobs: usize,
    /// Where shrunk failures are written.
    pub out: PathBuf,
    /// Where the corpus (the fewest judged cases covering all the run covered) is written.
    pub save_corpus: Option<PathBuf>,
    /// Runs a failure's shrinking may take at most.
    pub shrink_runs: usize,
    /// Where to write every generated case as it runs (to read or re-run one).
    pub keep_cases: Option<PathBuf>,
    /// A second proxy each case also runs on: every flow whose behaviour differs is the finding
    /// ([`crate::compare`]), not the oracle's verdict.
    pub against: Option<ProxyChoice>,
    /// What steers generation.
    pub guide: GuideKind,
}

/// The guides `explore --guide` chooses from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum GuideKind {
    // Plain comments: clap would print doc comments as each value's help, in the long form.
    // Field combinations not yet generated (`features::FieldCombinations`).
    #[default]
    Fields,
    // Rule templates of the proxy's not yet reached, from each run's rule coverage (as `run
    // --coverage`), and field combinations (`features::RuleCoverage`).
    Coverage,
}

/// What an exploration did.
#[derive(Debug, Default)]
pub struct Summary {
    pub cases: usize,
    /// The cases that passed, by name.
    pub passed: Vec<String>,
    /// The cases skipped, with why.
    pub skipped: Vec<(String, String)>,
    /// Cases that failed once but not again: never findings, each with its suspect.
    pub unconfirmed: Vec<Unconfirmed>,
    /// Cases the harness failed to observe (witnesses that disagree), with the first fault:
    /// never findings, never re-run to be dismissed; each a harness bug to diagnose.
    pub harness_faults: Vec<String>,
    /// Cases that could not be set up (the machine), with why.
    pub errors: Vec<String>,
    /// Generated cases the reader refused (a bug of the generator), with its errors.
    pub rejected: Vec<String>,
    pub flows_judged: usize,
    pub flows_unjudged: usize,
    /// With `against`: flows sent on both proxies and compared.
    pub flows_compared: usize,
    /// Field combinations generated and flow outcomes judged.
    pub covered: BTreeSet<Feature>,
    pub findings: Vec<Finding>,
    pub corpus: Option<(PathBuf, usize)>,
    /// With `against`: the cases whose flows behaved differently on the two proxies, twice.
    pub differences: Vec<Difference>,
}

/// A generated case on which two proxies behave differently, confirmed by a second run.
#[derive(Debug)]
pub struct Difference {
    pub case: String,
    /// Where it was written (unshrunk), with each differing flow.
    pub file: PathBuf,
    pub flows: Vec<crate::compare::FlowDiff>,
    /// Each side passes the case under its own profile: two implementation choices the
    /// profiles document, never a finding.
    pub documented: bool,
}

/// A case that failed once and passed on its re-runs, with whose bug it most likely is.
#[derive(Debug)]
pub struct Unconfirmed {
    pub case: String,
    /// What happened: `failed once, passed on re-runs`, or (`--against`) `differed once, alike
    /// on its re-run`.
    pub what: &'static str,
    pub suspect: Suspect,
    /// The evidence for the suspect, in words.
    pub why: String,
    /// Where it was written unshrunk, with its first failure.
    pub file: PathBuf,
}

/// A confirmed failure, shrunk and written out.
#[derive(Debug)]
pub struct Finding {
    pub case: String,
    pub file: PathBuf,
    pub signature: Signature,
    pub known_bug: Option<String>,
    /// For a mutant: whether the shrunk case passes on the proxy without it.
    pub passes_unbroken: Option<bool>,
    /// The Services, pods, nodes and steps of the shrunk case.
    pub size: (usize, usize, usize, usize),
    /// The earlier finding it fails as (every symptom on every kind of flow its signature
    /// holds): confirmed, but not shrunk again, so that one frequent bug does not spend the
    /// whole budget.
    pub same_as: Option<String>,
}

/// Case `n` of `seed`, given what `guide` has seen (it learns this case's features).
pub fn generate(seed: u64, n: u64, guide: &mut dyn Guide) -> Case {
    let mut rng = rng::Rng::for_case(seed, n);
    let name = format!("explore-{seed}-{n}");
    if let Some(parent) = guide.parent(&mut rng) {
        let case = grammar::mutated(&mut rng, parent, &name);
        guide.chosen(&features::of_case(&case));
        return case;
    }
    let mut best: Option<(usize, Case, BTreeSet<Feature>)> = None;
    for _ in 0..CANDIDATES {
        let c = grammar::case(&mut rng, &name);
        let f = features::of_case(&c);
        let score = guide.novelty(&c, &f);
        if best.as_ref().is_none_or(|(s, _, _)| score > *s) {
            best = Some((score, c, f));
        }
    }
    let (_, case, f) = best.expect("at least one candidate");
    guide.chosen(&f);
    case
}

/// A case ready to run: its steps' probes filled, its text, and the scenario read from it.
pub struct Ready {
    pub case: Case,
    pub text: String,
    pub scenario: Scenario,
}

/// Fills the steps' probes and reads the case as `run` reads a file; the reader's errors if it
/// refuses it.
pub fn prepare(mut case: Case, header: &str) -> Result<Ready, String> {
    probes::keep_streams(&mut case)?;
    probes::fill_steps(&mut case)?;
    let ready = read(case, header)?;
    // Flows of a known gap of the harness: every other flow, listed.
    let flows = &ready.scenario.probes;
    if ready.case.probes.is_some()
        || !flows.iter().any(|p| probes::known_gap(&ready.scenario.cluster, p).is_some())
    {
        return Ok(ready);
    }
    let listed = flows
        .iter()
        .filter(|p| p.name.starts_with("flow: ") && probes::known_gap(&ready.scenario.cluster, p).is_none())
        .map(|p| probes::text(p, p.name.strip_prefix("flow: ").unwrap_or(&p.name), &p.name))
        .collect();
    read(Case { probes: Some(listed), ..ready.case }, header)
}

fn read(case: Case, header: &str) -> Result<Ready, String> {
    let text = case.render(header);
    let path = PathBuf::from(format!("{}.yaml", case.name));
    match crate::admission::load_str(&text, &path) {
        Ok(scenario) => Ok(Ready { case, text, scenario }),
        Err(e) => Err(format!("{e}\n--- the case ---\n{text}")),
    }
}

/// Reads a case whose steps already have their probes (a shrunk one).
fn reread(case: Case, header: &str) -> Option<Ready> {
    let text = case.render(header);
    let path = PathBuf::from(format!("{}.yaml", case.name));
    crate::admission::load_str(&text, &path).ok().map(|scenario| Ready { case, text, scenario })
}

pub fn explore(settings: &Settings, mut progress: impl FnMut(&Summary)) -> Result<Summary> {
    let started = Instant::now();
    let mut options = settings.options.clone();
    options.coverage |= settings.guide == GuideKind::Coverage;
    let engine = Engine { options, jobs: settings.jobs };
    let mut guide: Box<dyn Guide> = match settings.guide {
        GuideKind::Fields => Box::new(FieldCombinations::default()),
        GuideKind::Coverage => Box::new(features::RuleCoverage::default()),
    };
    let mut summary = Summary::default();
    let mut judged_cases: Vec<JudgedCase> = Vec::new();
    let within = |drawn: u64| match settings.stop {
        Stop::Cases(total) => (drawn as usize) < total,
        Stop::After(budget) => started.elapsed() < budget,
    };
    match &settings.against {
        Some(against) => {
            let mut n = 0u64;
            let batch = 2 * settings.jobs.max(1);
            let mut last_progress = Instant::now();
            while within(n) {
                let count = match settings.stop {
                    Stop::Cases(total) => total.saturating_sub(n as usize).min(batch),
                    Stop::After(_) => batch,
                };
                let ready = generate_batch(settings, &mut n, count, guide.as_mut(), &mut summary)?;
                against::compare_batch(settings, &engine, against, ready, &mut summary, guide.as_mut())?;
                if last_progress.elapsed() > Duration::from_secs(10) {
                    progress(&summary);
                    last_progress = Instant::now();
                }
            }
        }
        None => {
            let mut record = |entry: Entry, summary: &mut Summary, guide: &mut dyn Guide| match entry {
                Entry::Refused(e) => {
                    summary.rejected.push(e);
                    Ok(())
                }
                Entry::Ran(r, f, result) => match *result {
                    Err(e) => {
                        summary.errors.push(format!("{}: {e:#}", r.case.name));
                        Ok(())
                    }
                    Ok(report) => {
                        let judged = Judged { settings, engine: &engine, guide };
                        judged.record(*r, f, &report, summary, &mut judged_cases)
                    }
                },
            };
            let mut last_progress = Instant::now();
            stream(settings, &engine, within, guide.as_mut(), &mut summary, |entry, summary, guide| {
                record(entry, summary, guide)?;
                if last_progress.elapsed() > Duration::from_secs(10) {
                    progress(summary);
                    last_progress = Instant::now();
                }
                Ok(())
            })?;
        }
    }
    if let Some(dir) = &settings.save_corpus {
        let kept = save_corpus(dir, &judged_cases)?;
        summary.corpus = Some((dir.clone(), kept));
    }
    Ok(summary)
}

/// A case that passed, as the corpus keeps it: its name, its file and what it reached.
type JudgedCase = (String, String, BTreeSet<Feature>);

/// Cases drawn ahead of those recorded: case `n` is drawn once cases `0..=n − LOOKAHEAD` have
/// been recorded, and no later one has, so that what the guide has learned when it draws a case
/// (under `--guide coverage`, the cases that reached new rules) depends on the seed alone, never
/// on `--jobs` or on which run finished first; and workers take the next case as they free up,
/// never waiting for a whole batch.
const LOOKAHEAD: u64 = 32;

/// A drawn case, as it is recorded: refused by the reader, or run (with its field combinations).
enum Entry {
    Refused(String),
    Ran(Box<Ready>, BTreeSet<Feature>, Box<Result<ScenarioReport>>),
}

/// Draws cases while `within` says so and runs them, `settings.jobs` at once, handing each to
/// `record` in the order drawn ([`LOOKAHEAD`]). A case whose report calls for an investigation
/// (it failed) is recorded only once no other case runs, so that its confirmation and shrinking
/// run alone, as they would after a batch.
fn stream(
    settings: &Settings,
    engine: &Engine,
    within: impl Fn(u64) -> bool,
    guide: &mut dyn Guide,
    summary: &mut Summary,
    mut record: impl FnMut(Entry, &mut Summary, &mut dyn Guide) -> Result<()>,
) -> Result<()> {
    use std::collections::BTreeMap;
    use std::sync::{Mutex, mpsc};

    let jobs = settings.jobs.max(1);
    let skip_all = crate::privileges::preflight();
    let (work, queue) = mpsc::channel::<(u64, Ready, BTreeSet<Feature>)>();
    let queue = Mutex::new(queue);
    let (finished, results) = mpsc::channel::<(u64, Entry)>();
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            let (queue, finished, skip_all) = (&queue, finished.clone(), skip_all.as_deref());
            scope.spawn(move || {
                loop {
                    let next = queue.lock().unwrap_or_else(|e| e.into_inner()).recv();
                    let Ok((n, ready, f)) = next else { return };
                    let run = Run::new(&ready.scenario, RunProxy::Choice(&settings.proxy));
                    let result = crate::engine::run_caught(&run, &engine.options, skip_all, None);
                    if finished.send((n, Entry::Ran(Box::new(ready), f, Box::new(result)))).is_err() {
                        return;
                    }
                }
            });
        }
        drop(finished);
        let (mut drawn, mut recorded, mut running) = (0u64, 0u64, 0usize);
        let mut done: BTreeMap<u64, Entry> = BTreeMap::new();
        let wait = |done: &mut BTreeMap<u64, Entry>, running: &mut usize| -> Result<()> {
            let (n, entry) = results.recv().context("every exploration worker stopped")?;
            *running -= 1;
            done.insert(n, entry);
            Ok(())
        };
        let outcome = (|| -> Result<()> {
            loop {
                let more = within(drawn);
                // Before drawing case `drawn`: every case up to `drawn − LOOKAHEAD` recorded.
                let due = if more { (drawn + 1).saturating_sub(LOOKAHEAD) } else { drawn };
                while recorded < due {
                    let Some(entry) = done.remove(&recorded) else {
                        wait(&mut done, &mut running)?;
                        continue;
                    };
                    if let Entry::Ran(_, _, result) = &entry
                        && let Ok(report) = &**result
                        && to_investigate(report)
                    {
                        while running > 0 {
                            wait(&mut done, &mut running)?;
                        }
                    }
                    summary.cases += 1;
                    record(entry, summary, guide)?;
                    recorded += 1;
                }
                if !more {
                    return Ok(());
                }
                if running == jobs {
                    wait(&mut done, &mut running)?;
                    continue;
                }
                let case = generate(settings.seed, drawn, guide);
                let f = features::of_case(&case);
                match prepare(case, "") {
                    Ok(r) => {
                        if let Some(dir) = &settings.keep_cases {
                            keep_generated(dir, &r)?;
                        }
                        work.send((drawn, r, f)).context("every exploration worker stopped")?;
                        running += 1;
                    }
                    Err(e) => {
                        done.insert(drawn, Entry::Refused(e));
                    }
                }
                drawn += 1;
            }
        })();
        // The workers end once the queue is closed and empty.
        drop(work);
        outcome
    })
}

/// Whether a report is a failure that `Judged::record` investigates.
fn to_investigate(report: &ScenarioReport) -> bool {
    match &report.outcome {
        Outcome::Skipped(_) => false,
        Outcome::Judged(_) => !report.passed() && !report.faulted(),
        _ => true,
    }
}

/// Writes a generated case under `--keep-cases`.
fn keep_generated(dir: &Path, r: &Ready) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let file = dir.join(format!("{}.yaml", r.case.name));
    std::fs::write(&file, &r.text).with_context(|| format!("writing {}", file.display()))
}

/// The next `count` cases from case number `*n` on, each read as `run` reads a file (kept with
/// `--keep-cases`); a case the reader refuses is counted as such.
fn generate_batch(
    settings: &Settings,
    n: &mut u64,
    count: usize,
    guide: &mut dyn Guide,
    summary: &mut Summary,
) -> Result<Vec<(Ready, BTreeSet<Feature>)>> {
    let mut ready = Vec::new();
    for _ in 0..count {
        let case = generate(settings.seed, *n, guide);
        *n += 1;
        summary.cases += 1;
        let f = features::of_case(&case);
        match prepare(case, "") {
            Ok(r) => {
                if let Some(dir) = &settings.keep_cases {
                    keep_generated(dir, &r)?;
                }
                ready.push((r, f));
            }
            Err(e) => summary.rejected.push(e),
        }
    }
    Ok(ready)
}

/// What a judged case is counted with.
struct Judged<'a> {
    settings: &'a Settings,
    engine: &'a Engine,
    guide: &'a mut dyn Guide,
}

impl Judged<'_> {
    /// Counts one case's report: skipped, passed (what it reached feeds the guide and the
    /// corpus), a harness fault (kept, never a finding), or failed (investigated).
    fn record(
        self,
        r: Ready,
        mut f: BTreeSet<Feature>,
        report: &ScenarioReport,
        summary: &mut Summary,
        judged_cases: &mut Vec<JudgedCase>,
    ) -> Result<()> {
        match &report.outcome {
            Outcome::Skipped(why) => {
                if summary.skipped.is_empty() {
                    eprintln!("packetproof explore: {} skipped: {why}", r.case.name);
                }
                summary.skipped.push((r.case.name.clone(), why.clone()));
            }
            Outcome::Judged(verdicts) if report.passed() => {
                summary.passed.push(r.case.name.clone());
                summary.flows_judged += verdicts.len();
                summary.flows_unjudged += report.unjudged.len();
                f.extend(verdicts.iter().map(features::of_verdict));
                if let Some(coverage) = &report.coverage {
                    f.extend(features::of_coverage(coverage));
                }
                self.guide.judged(&r.case, &f);
                summary.covered.extend(f.iter().cloned());
                if self.settings.save_corpus.is_some() {
                    judged_cases.push((r.case.name.clone(), r.text.clone(), f));
                }
            }
            Outcome::Judged(verdicts) if report.faulted() => {
                let fault = verdicts.iter().flat_map(|v| &v.harness_faults).next();
                let fault = fault.map(|f| f.message.clone()).unwrap_or_default();
                let file = keep_case(
                    self.settings,
                    &r,
                    report,
                    "harness-faults",
                    "The harness failed to observe it",
                )?;
                eprintln!(
                    "packetproof explore: {}: harness fault, not a finding: {fault} (kept as {})",
                    r.case.name,
                    file.display()
                );
                summary.harness_faults.push(format!("{}: {fault}", r.case.name));
            }
            _ => match investigate(self.settings, self.engine, r, report, &summary.findings)? {
                Investigated::Confirmed(finding) => summary.findings.push(finding),
                Investigated::Unconfirmed(case) => summary.unconfirmed.push(case),
            },
        }
        Ok(())
    }
}

/// Runs scenarios with `proxy`, results in their order.
fn run_all(
    engine: &Engine,
    scenarios: &[&Scenario],
    proxy: &ProxyChoice,
) -> Result<Vec<Result<ScenarioReport>>> {
    if scenarios.is_empty() {
        return Ok(Vec::new());
    }
    let runs: Vec<Run> =
        scenarios.iter().map(|&scenario| Run::new(scenario, RunProxy::Choice(proxy))).collect();
    Ok(engine.execute(&runs, &mut [])?.into_iter().map(|(_, r)| r).collect())
}

/// Whether `ready` fails the way `first` did, on each of `times` runs (named apart, at once).
fn fails_again(
    engine: &Engine,
    proxy: &ProxyChoice,
    ready: &Ready,
    first: &Signature,
    times: usize,
) -> Result<bool> {
    let copies: Vec<Scenario> = (0..times)
        .map(|i| {
            let mut s = ready.scenario.clone();
            s.name = format!("{}-again-{i}", s.name);
            s
        })
        .collect();
    let refs: Vec<&Scenario> = copies.iter().collect();
    Ok(run_all(engine, &refs, proxy)?
        .iter()
        .all(|r| r.as_ref().is_ok_and(|report| shrink::same_way(first, &shrink::signature(report)))))
}

/// [`classify::RERUNS`] more runs of a once-failing case on the proxy and as many on a second
/// implementation ([`crate::proxy::second_opinion`]), all at once: what they showed.
fn rerun_beside_another(
    settings: &Settings,
    engine: &Engine,
    ready: &Ready,
    first: &Signature,
) -> Result<classify::Reruns> {
    let other = crate::proxy::second_opinion(&settings.proxy);
    let copies: Vec<Scenario> = (0..2 * classify::RERUNS)
        .map(|i| {
            let mut s = ready.scenario.clone();
            s.name = format!("{}-classify-{i}", s.name);
            s
        })
        .collect();
    let runs: Vec<Run> = copies
        .iter()
        .enumerate()
        .map(|(i, scenario)| {
            let proxy = if i < classify::RERUNS { &settings.proxy } else { &other };
            Run::new(scenario, RunProxy::Choice(proxy))
        })
        .collect();
    let results: Vec<Option<ScenarioReport>> =
        engine.execute(&runs, &mut [])?.into_iter().map(|(_, r)| r.ok()).collect();
    let again = |reports: &[Option<ScenarioReport>]| {
        reports.iter().flatten().filter(|r| shrink::same_way(first, &shrink::signature(r))).count()
    };
    let faulted = results
        .iter()
        .flatten()
        .filter(|r| matches!(&r.outcome, Outcome::Judged(v) if v.iter().any(|v| v.faulted())))
        .count();
    let (mine, theirs) = results.split_at(classify::RERUNS);
    Ok(classify::Reruns { other: other.label(), again: again(mine), again_on_other: again(theirs), faulted })
}

/// What investigating a failing case came to.
enum Investigated {
    Confirmed(Finding),
    Unconfirmed(Unconfirmed),
}

/// A failing case: confirmed by running it again, shrunk, confirmed once more, written out; or,
/// when it did not fail again, classified (never a finding).
fn investigate(
    settings: &Settings,
    engine: &Engine,
    ready: Ready,
    report: &ScenarioReport,
    earlier: &[Finding],
) -> Result<Investigated> {
    let first = shrink::signature(report);
    eprintln!(
        "packetproof explore: {} failed ({}); confirming",
        ready.case.name,
        first.iter().map(|(s, k)| format!("{s} on {k}")).collect::<Vec<_>>().join(", ")
    );
    if !fails_again(engine, &settings.proxy, &ready, &first, 2)? {
        let (suspect, why) = classify::classify(&rerun_beside_another(settings, engine, &ready, &first)?);
        let what = format!("Failed once, then passed twice; the suspect is {}: {why}. Found", suspect.name());
        let file = keep_case(settings, &ready, report, "flaky", &what)?;
        eprintln!(
            "packetproof explore: {} did not fail again the same way: not a finding; the suspect is \
             {}: {why} (kept with its failure as {})",
            ready.case.name,
            suspect.name(),
            file.display()
        );
        return Ok(Investigated::Unconfirmed(Unconfirmed {
            what: "failed once, passed on re-runs",
            case: ready.case.name.clone(),
            suspect,
            why,
            file,
        }));
    }
    let original_size = size(&ready.case);
    let seen: Signature = earlier.iter().flat_map(|f| f.signature.iter().cloned()).collect();
    if let Some(same) = earlier
        .iter()
        .find(|f| f.same_as.is_none() && first.is_subset(&seen) && shrink::same_way(&f.signature, &first))
    {
        std::fs::create_dir_all(&settings.out)
            .with_context(|| format!("creating {}", settings.out.display()))?;
        let file = settings.out.join(format!("{}.yaml", ready.case.name));
        let header = format!(
            "Found by `packetproof explore --seed {}` against {}: fails as {} did, so not shrunk again.\n{}",
            settings.seed,
            settings.proxy.label(),
            same.case,
            what_failed(report)
        );
        std::fs::write(&file, ready.case.render(&header))
            .with_context(|| format!("writing {}", file.display()))?;
        return Ok(Investigated::Confirmed(Finding {
            case: ready.case.name.clone(),
            file,
            signature: first,
            known_bug: same.known_bug.clone(),
            passes_unbroken: None,
            size: original_size,
            same_as: Some(same.case.clone()),
        }));
    }
    shrink_and_name(settings, engine, ready, report, first).map(Investigated::Confirmed)
}

/// A confirmed failure, shrunk, named by the bug that reproduces it (its own mutant's, or the
/// catalog's whose mutants fail the same way) and written to `--out`.
fn shrink_and_name(
    settings: &Settings,
    engine: &Engine,
    ready: Ready,
    report: &ScenarioReport,
    first: Signature,
) -> Result<Finding> {
    let original_size = size(&ready.case);
    let (shrunk, last_report, runs) = shrink_case(settings, engine, ready, report, &first)?;
    let signature: Signature = shrink::signature(&last_report).intersection(&first).cloned().collect();
    let mutant = crate::proxy::mutant_of(&settings.proxy)?;
    let known_bug = match mutant {
        Some(mutant) => crate::report::known_bugs::by_name(mutant.name()).map(|bug| bug.headline()),
        None => reproducing_mutants(settings, engine, &shrunk, &signature)?,
    };
    let passes_unbroken = match mutant {
        Some(_) => {
            let unbroken = crate::proxy::unbroken(&settings.proxy);
            let results = run_all(engine, &[&shrunk.scenario], &unbroken)?;
            Some(results.first().is_some_and(|r| r.as_ref().is_ok_and(|r| r.passed())))
        }
        None => None,
    };
    std::fs::create_dir_all(&settings.out).with_context(|| format!("creating {}", settings.out.display()))?;
    let file = settings.out.join(format!("{}.yaml", shrunk.case.name));
    let header =
        header(settings, &shrunk.case, original_size, runs, &signature, &last_report, known_bug.as_deref());
    let text = shrunk.case.render(&header);
    std::fs::write(&file, &text).with_context(|| format!("writing {}", file.display()))?;
    Ok(Finding {
        case: shrunk.case.name.clone(),
        file,
        signature,
        known_bug,
        passes_unbroken,
        size: size(&shrunk.case),
        same_as: None,
    })
}

fn size(case: &Case) -> (usize, usize, usize, usize) {
    (case.services.len(), case.pods.len(), case.nodes.len(), case.steps.len())
}

/// The first state's failing probes of `report`, as a case lists them.
fn failing_probes(case: &Case, report: &ScenarioReport) -> Vec<ProbeText> {
    let Outcome::Judged(verdicts) = &report.outcome else { return Vec::new() };
    let in_step = |name: &str| case.steps.iter().any(|s| name.starts_with(&format!("{}: ", s.name)));
    // Kept flows, expiry probes and the probes added to every flow are the case's own, kept or
    // cut whole.
    let added = case.added_probes();
    let stream = |name: &str| {
        case.streams.iter().any(|s| s.name == name)
            || case.expiries.iter().any(|e| name == e.name || name.starts_with(&format!("{}[", e.name)))
            || added.iter().any(|p| p.name == name)
    };
    verdicts
        .iter()
        .filter(|v| v.failed() && !in_step(&v.probe.name) && !stream(&v.probe.name))
        .filter_map(|v| match &case.probes {
            Some(listed) => listed.iter().find(|p| p.name == v.probe.name).cloned(),
            None => {
                let name = v.probe.name.strip_prefix("flow: ").unwrap_or(&v.probe.name);
                Some(probes::text(&v.probe, name, &v.probe.name))
            }
        })
        .collect()
}

/// Cuts `ready` down while it fails the way `first` said, each round running the candidates a
/// batch at a time and keeping the first (in the order given) that still fails; the shrunk case
/// is run twice more to confirm it. Returns it, its last failing report, and the runs taken.
fn shrink_case(
    settings: &Settings,
    engine: &Engine,
    ready: Ready,
    report: &ScenarioReport,
    first: &Signature,
) -> Result<(Ready, ScenarioReport, usize)> {
    let base = ready.case.name.clone();
    let mut current = ready;
    let mut failing = failing_probes(&current.case, report);
    let mut last: Option<ScenarioReport> = None;
    let mut runs = 0;
    let mut attempt = 0;
    'rounds: while runs < settings.shrink_runs {
        let candidates: Vec<Ready> = shrink::candidates(&current.case, &failing)
            .into_iter()
            .filter_map(|mut c| {
                attempt += 1;
                c.name = format!("{base}-s{attempt}");
                reread(c, "")
            })
            .collect();
        for chunk in candidates.chunks(settings.jobs.max(1)) {
            if runs >= settings.shrink_runs {
                break 'rounds;
            }
            let scenarios: Vec<&Scenario> = chunk.iter().map(|r| &r.scenario).collect();
            runs += chunk.len();
            let results = run_all(engine, &scenarios, &settings.proxy)?;
            let hit = chunk.iter().zip(results).find_map(|(c, r)| match r {
                Ok(r) if shrink::same_way(first, &shrink::signature(&r)) => Some((c, r)),
                _ => None,
            });
            if let Some((c, r)) = hit {
                // A candidate that fails once may be luck: it must fail again to be kept.
                runs += 2;
                if fails_again(engine, &settings.proxy, c, first, 2)? {
                    let chosen = candidates.iter().position(|x| std::ptr::eq(x, c)).unwrap();
                    failing = failing_probes(&c.case, &r);
                    last = Some(r);
                    current = candidates.into_iter().nth(chosen).unwrap();
                    continue 'rounds;
                }
            }
        }
        break;
    }
    let mut shrunk = current.case;
    shrunk.name = format!("{base}-shrunk");
    let shrunk = reread(shrunk, "").context("the shrunk case no longer reads")?;
    let report = match last {
        Some(r) => r,
        None => run_all(engine, &[&shrunk.scenario], &settings.proxy)?
            .pop()
            .context("no result")?
            .context("running the shrunk case")?,
    };
    Ok((shrunk, report, runs))
}

/// Runs of each mutant when looking for the one that reproduces a finding.
const REPRODUCTIONS: usize = 3;

/// The known bugs a finding matches, by reproduction rather than resemblance: the catalogued
/// mutants of the built-in proxy of the same mode that fail the shrunk case the same way.
/// `None` when none does (a new finding, or a bug the catalog lacks).
fn reproducing_mutants(
    settings: &Settings,
    engine: &Engine,
    shrunk: &Ready,
    signature: &Signature,
) -> Result<Option<String>> {
    // A correct built-in proxy's failure is the oracle's, and matches no bug.
    if crate::proxy::breakable(&settings.proxy.name).is_some() {
        return Ok(None);
    }
    use crate::proxy::kube_proxy_config::Mode;
    use crate::proxy::registry::{built_in_of_mode, mode_of};
    let built_in: Vec<&str> = match settings.proxy.options.get("mode") {
        // IPVS runs in the kernel matrix's VMs only.
        Some(_) => match mode_of(&settings.proxy.name, &settings.proxy.options) {
            mode @ (Mode::Iptables | Mode::Nftables) => vec![built_in_of_mode(mode)],
            Mode::Ipvs => Vec::new(),
        },
        // A proxy of no mode may be either.
        None => vec![built_in_of_mode(Mode::Iptables), built_in_of_mode(Mode::Nftables)],
    };
    // Only a built-in proxy that passes the case unbroken can tell a bug by its mutants.
    let unbroken: Vec<ProxyChoice> = built_in.iter().map(|name| ProxyChoice::named(name)).collect();
    let runs: Vec<Run> =
        unbroken.iter().map(|choice| Run::new(&shrunk.scenario, RunProxy::Choice(choice))).collect();
    let passing: Vec<&str> = built_in
        .iter()
        .zip(engine.execute(&runs, &mut [])?)
        .filter(|(_, (_, r))| r.as_ref().is_ok_and(|r| r.passed()))
        .map(|(name, _)| *name)
        .collect();
    let choices: Vec<(String, ProxyChoice)> = passing
        .iter()
        .flat_map(|name| {
            crate::proxy::catalog(name)
                .into_iter()
                .map(move |m| (m.name().to_string(), crate::proxy::broken(name, m)))
        })
        .collect();
    // A bug a probe shows only by chance (a stream re-picking among two backends after a flush
    // lands where it was half the time): each mutant gets a few runs, named apart.
    let copies: Vec<Scenario> = (0..REPRODUCTIONS)
        .map(|i| {
            let mut s = shrunk.scenario.clone();
            s.name = format!("{}-mutant-{i}", s.name);
            s
        })
        .collect();
    let runs: Vec<Run> = choices
        .iter()
        .flat_map(|(_, choice)| copies.iter().map(move |s| Run::new(s, RunProxy::Choice(choice))))
        .collect();
    let results = engine.execute(&runs, &mut [])?;
    let reproduced: Vec<bool> = results
        .chunks(REPRODUCTIONS)
        .map(|runs| {
            runs.iter()
                .any(|(_, r)| r.as_ref().is_ok_and(|r| shrink::same_way(signature, &shrink::signature(r))))
        })
        .collect();
    let mut matched: Vec<String> = choices
        .iter()
        .zip(reproduced)
        .filter(|(_, reproduced)| *reproduced)
        .filter_map(|((mutant, choice), _)| {
            let bug = crate::report::known_bugs::by_name(mutant)?;
            Some(format!("{}; reproduced by {}", bug.headline(), choice.label()))
        })
        .collect();
    matched.dedup();
    Ok((!matched.is_empty()).then(|| matched.join("\n")))
}

/// The comment at the top of a shrunk case's file.
fn header(
    settings: &Settings,
    case: &Case,
    original: (usize, usize, usize, usize),
    runs: usize,
    signature: &Signature,
    report: &ScenarioReport,
    known_bug: Option<&str>,
) -> String {
    let mut h = String::new();
    let proxy = &settings.proxy;
    let _ = writeln!(
        h,
        "Found by `packetproof explore --seed {}` (packetproof {}) against {}.",
        settings.seed,
        env!("CARGO_PKG_VERSION"),
        proxy.label()
    );
    let (s, p, n, st) = size(case);
    let _ = writeln!(
        h,
        "Shrunk from {} Services, {} pods, {} nodes, {} steps to {s}, {p}, {n}, {st} in {runs} runs.",
        original.0, original.1, original.2, original.3
    );
    for (symptom, kind) in signature {
        let _ = writeln!(h, "Fails as: {symptom} on {kind}.");
    }
    h.push_str(&what_failed(report));
    if let Some(bug) = known_bug {
        let _ = writeln!(h, "Known bug: {bug}.");
    }
    let _ = writeln!(h, "Reproduce: {} {}.yaml", reproduce(settings), case.name);
    h
}

/// Each failed probe of `report`: what was expected and why, what was seen, each failure.
fn what_failed(report: &ScenarioReport) -> String {
    let mut h = String::new();
    match &report.outcome {
        Outcome::Judged(verdicts) => {
            for v in verdicts.iter().filter(|v| !v.passed()) {
                // The proxy's failures, then where the harness failed to observe.
                let _ = writeln!(h, "- {}", v.probe.name);
                let _ = writeln!(
                    h,
                    "    expected: {} ({})",
                    crate::report::expected(&v.expected.outcome),
                    v.expected.because
                );
                let _ = writeln!(h, "    observed: {}", v.observed_summary());
                for f in &v.failures {
                    let _ = writeln!(h, "    {f}");
                }
                for f in &v.harness_faults {
                    let _ = writeln!(h, "    harness fault: {f}");
                }
            }
        }
        Outcome::ProxyFailed(why) => {
            let _ = writeln!(h, "The proxy failed: {}", why.lines().next().unwrap_or_default());
        }
        Outcome::Skipped(why) => {
            let _ = writeln!(h, "Skipped: {why}");
        }
    }
    h
}

/// The `run` command that reproduces a case file with the exploration's proxy and profile.
fn reproduce(settings: &Settings) -> String {
    let proxy = &settings.proxy;
    let mut command = format!("packetproof run --proxy {}", proxy.name);
    for (k, v) in &proxy.options {
        let v = v.as_str().map_or_else(|| v.to_string(), str::to_string);
        command.push_str(&format!(" --proxy-option '{k}={v}'"));
    }
    if let Some(profile) = settings.options.profile {
        command.push_str(&format!(" --profile {profile}"));
    }
    command
}

/// Writes a case that is never a finding but a bug to diagnose to `folder` under `--out`, with
/// what failed: one that failed once and passed on its re-runs (`flaky/`: the proxy's, the
/// oracle's or the harness's), or one the harness failed to observe (`harness-faults/`).
fn keep_case(
    settings: &Settings,
    ready: &Ready,
    report: &ScenarioReport,
    folder: &str,
    what: &str,
) -> Result<PathBuf> {
    let dir = settings.out.join(folder);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut h = String::new();
    let _ = writeln!(
        h,
        "{what} under `packetproof explore --seed {}` (packetproof {}) against {}.",
        settings.seed,
        env!("CARGO_PKG_VERSION"),
        settings.proxy.label()
    );
    h.push_str(&what_failed(report));
    let _ = writeln!(h, "Run it again: {} {}.yaml", reproduce(settings), ready.case.name);
    let file = dir.join(format!("{}.yaml", ready.case.name));
    std::fs::write(&file, ready.case.render(&h)).with_context(|| format!("writing {}", file.display()))?;
    Ok(file)
}

/// Writes the fewest judged cases that together reach every field combination and flow outcome
/// the exploration reached (greedy set cover: each pick the case adding most), as scenario
/// files; returns how many.
fn save_corpus(dir: &Path, judged: &[(String, String, BTreeSet<Feature>)]) -> Result<usize> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut uncovered: BTreeSet<&Feature> = judged.iter().flat_map(|(_, _, f)| f).collect();
    let mut kept = 0;
    while !uncovered.is_empty() {
        let Some((name, text, f)) = judged.iter().max_by_key(|(_, _, f)| {
            // Ties go to the earlier case (max_by_key keeps the last maximum: reverse index).
            f.iter().filter(|x| uncovered.contains(x)).count()
        }) else {
            break;
        };
        let adds = f.iter().filter(|x| uncovered.contains(x)).count();
        if adds == 0 {
            break;
        }
        for x in f {
            uncovered.remove(x);
        }
        let file = dir.join(format!("{name}.yaml"));
        std::fs::write(&file, text).with_context(|| format!("writing {}", file.display()))?;
        kept += 1;
    }
    Ok(kept)
}

#[cfg(test)]
mod tests;
