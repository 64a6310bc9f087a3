//! The mutation catalog at work: the suite against every deliberately broken proxy. A mutant
//! that no scenario kills is a hole in the suite.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::{EXIT_ERROR, EXIT_FAIL, EXIT_PASS, load_all, partition};
use crate::engine::{Control, Engine, Event, Reporter, Run, RunProxy};
use crate::model::Scenario;
use crate::privileges;
use crate::proxy::Mutant;
use crate::proxy::Proxy;
use crate::report::Paint;
use crate::report::known_bugs::{ANY, PROXY};
use crate::report::terminal::Progress;
use crate::results::{Outcome, ScenarioReport};
use crate::runner::RunOptions;
use crate::stage::ReuseCounts;
use crate::verdict::Symptom;

pub use crate::proxy::{Breakable, breakable, catalog, not_observable};

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
    /// Scenarios not run: in every one of their states the mutant does what the unbroken
    /// proxy does ([`Proxy::same_as_unbroken`]), so they cannot kill it.
    pub equivalent: Vec<String>,
}

impl Hunt {
    pub fn killed(&self) -> bool {
        !self.killed_by.is_empty()
    }
}

/// How long an attempt waits for an answer under a mutant: mutants often turn answers into
/// silence, and a kill is decided by what the probes report, never by this wait.
pub(crate) const MUTANT_TIMEOUT: Duration = Duration::from_millis(300);

/// The probes that fail against the unbroken proxy, run as the hunt runs them (a scenario
/// that cannot be set up is an error).
pub fn baseline(scenarios: &[Scenario], breakable: Breakable, jobs: usize) -> anyhow::Result<Baseline> {
    let proxy = breakable(None);
    let mut failing = Baseline::new();
    let mut errors = Vec::new();
    let all: Vec<&Scenario> = scenarios.iter().collect();
    run_each(&all, proxy.as_ref(), jobs, |s, result| {
        match result {
            Ok(report) => failing.extend(failing_probes(report).map(|p| (s.name.clone(), p))),
            Err(e) => errors.push(format!("{}: {e:#}", s.name)),
        }
        Control::Continue
    })?;
    anyhow::ensure!(errors.is_empty(), "the unbroken proxy could not run: {}", errors.join("; "));
    Ok(failing)
}

/// How a hunt runs.
#[derive(Debug, Clone, Copy)]
pub struct HowToHunt {
    /// End a mutant's hunt at its first kill, cancelling its runs not yet started.
    pub first_kill: bool,
    /// Runs at once, over all mutants.
    pub jobs: usize,
    /// Build every run's topology afresh instead of each worker resetting and reusing its
    /// last one (`stage::Keeper`; `tests/reuse.rs` shows a reused topology judges alike).
    pub fresh_topologies: bool,
    /// Run every scenario against every mutant, also where the mutant does in every state
    /// what the unbroken proxy does (those runs cannot kill it).
    pub every_run: bool,
}

/// Runs `scenarios` against each mutant of the proxy `breakable` builds: every mutant's runs
/// in one engine, `jobs` at once, so that several mutants are hunted at a time (each run in
/// namespaces of its own) and no mutant waits for another's slowest scenario. With
/// `first_kill`, a mutant's hunt ends at its first kill and its runs not yet started are
/// cancelled. Failures of `baseline` probes do not count. A scenario in whose every state a
/// mutant does what the unbroken proxy does is not run against it (unless `every_run`): its
/// verdict would be the unbroken proxy's. `on_done` hears of each mutant once its verdict is
/// known.
pub fn hunt(
    scenarios: &[Scenario],
    mutants: &[Mutant],
    how: HowToHunt,
    breakable: Breakable,
    baseline: &Baseline,
    on_done: impl Fn(&Hunt),
) -> anyhow::Result<Vec<Hunt>> {
    let HowToHunt { first_kill, jobs, fresh_topologies, every_run } = how;
    let proxies: Vec<Box<dyn Proxy>> = mutants.iter().map(|&m| breakable(Some(m))).collect();
    let mut hunts: Vec<Hunt> = mutants
        .iter()
        .map(|&mutant| Hunt { mutant, killed_by: Vec::new(), errors: Vec::new(), equivalent: Vec::new() })
        .collect();
    // Mutant-major: mutant i's runs are `spans[i]`, each run's mutant `owner[run]`.
    let mut runs: Vec<Run> = Vec::new();
    let mut owner = Vec::new();
    let mut spans = Vec::new();
    for (i, (&mutant, proxy)) in mutants.iter().zip(&proxies).enumerate() {
        let killers = if first_kill { known_killers(mutant) } else { Vec::new() };
        let start = runs.len();
        for scenario in scenarios {
            if !every_run && same_as_unbroken(proxy.as_ref(), scenario) {
                hunts[i].equivalent.push(scenario.name.clone());
                continue;
            }
            runs.push(Run {
                ahead: killers.contains(&scenario.name.as_str()),
                ..Run::new(scenario, RunProxy::Built(proxy.as_ref()))
            });
            owner.push(i);
        }
        spans.push(start..runs.len());
    }
    let mut left: Vec<usize> = spans.iter().map(|span| span.len()).collect();
    let mut told = vec![false; mutants.len()];
    let mut reporter =
        EachRunControlled(|index: usize, s: &Scenario, outcome: &anyhow::Result<ScenarioReport>| {
            let i = owner[index];
            left[i] -= 1;
            if told[i] {
                return Control::Continue;
            }
            let hunt = &mut hunts[i];
            match outcome {
                Ok(report) => {
                    if failing_probes(report).any(|p| !baseline.contains(&(s.name.clone(), p))) {
                        hunt.killed_by.push(s.name.clone());
                    }
                }
                Err(e) => hunt.errors.push(format!("{}: {e:#}", s.name)),
            }
            if first_kill && hunt.killed() {
                told[i] = true;
                on_done(hunt);
                return Control::Cancel { from: spans[i].start, to: spans[i].end };
            }
            if left[i] == 0 {
                told[i] = true;
                hunt.killed_by.sort();
                on_done(hunt);
            }
            Control::Continue
        });
    // Every scenario runs once per mutant: each worker keeps its topology for the next.
    let reuse_topologies = !fresh_topologies;
    let options = RunOptions { timeout: MUTANT_TIMEOUT, reuse_topologies, ..RunOptions::default() };
    let engine = Engine { options, jobs };
    engine.execute(&runs, &mut [&mut reporter])?;
    for (hunt, told) in hunts.iter_mut().zip(told) {
        hunt.killed_by.sort();
        // Only with no scenario run at all: nothing killed it.
        if !told {
            on_done(hunt);
        }
    }
    Ok(hunts)
}

/// Whether `proxy` (a mutant) does what the unbroken proxy does in every state `scenario`
/// takes, its start and each step.
fn same_as_unbroken(proxy: &dyn Proxy, scenario: &Scenario) -> bool {
    scenario.phases().iter().all(|phase| proxy.same_as_unbroken(phase.cluster))
}

/// The scenarios a mutant is known to fail: its known-bug signature's. A first-kill hunt
/// starts them before the others ([`Run::ahead`]): the first kill, and with it the mutant's
/// hunt, then comes at its first run, and its other runs are cancelled before they start.
fn known_killers(mutant: Mutant) -> Vec<&'static str> {
    crate::report::known_bugs::by_name(mutant.name()).map(|b| b.scenarios()).unwrap_or_default()
}

/// What a mutant's signature run showed (`known_bugs`): each probe of its signature that did
/// not fail as the signature says.
#[derive(Debug)]
pub struct SignatureCheck {
    pub mutant: Mutant,
    /// `scenario: probe: why`, for each probe of the signature not failing as it says.
    pub unmet: Vec<String>,
    /// Scenarios that could not be set up with this mutant.
    pub errors: Vec<String>,
    /// How many of the signature's `by_chance` probes failed as it says.
    pub by_chance_shown: usize,
}

impl SignatureCheck {
    pub fn proven(&self) -> bool {
        self.unmet.is_empty() && self.errors.is_empty()
    }

    /// A bug whose every probe shows it only by chance is proven by any of them: a run of the
    /// bug misses them all only if every attempt of every one misses (for the catalog's such
    /// bugs, two or more probes of 20 or 40 attempts, about half of each showing it).
    fn require_a_chance_shown(&mut self) {
        let Some(bug) = crate::report::known_bugs::by_name(self.mutant.name()) else { return };
        if bug.signature.iter().all(|m| m.by_chance) && self.by_chance_shown == 0 && self.errors.is_empty() {
            self.unmet.push("none of its by-chance probes failed as the signature says".into());
        }
    }
}

/// Runs each mutant against its signature's scenarios only (instead of hunting through the
/// whole suite) and checks that every probe of the signature fails with the signature's
/// symptom: a kill and a proof of the signature at once. All runs share one engine, four
/// per core at a time as a hunt's (with one per core the iptables catalog's checks took 24 s
/// instead of 9 s on 2 cores: the runs mostly wait).
pub fn check_signatures(
    scenarios: &[Scenario],
    mutants: &[Mutant],
    breakable: Breakable,
    on_done: impl Fn(&SignatureCheck),
) -> anyhow::Result<Vec<SignatureCheck>> {
    let proxies: Vec<Box<dyn Proxy>> = mutants.iter().map(|&m| breakable(Some(m))).collect();
    let mut checks: Vec<SignatureCheck> = mutants
        .iter()
        .map(|&mutant| SignatureCheck { mutant, unmet: Vec::new(), errors: Vec::new(), by_chance_shown: 0 })
        .collect();
    // (mutant's index, run) for every scenario of every signature.
    let mut owners = Vec::new();
    let mut runs = Vec::new();
    for (i, (&mutant, proxy)) in mutants.iter().zip(&proxies).enumerate() {
        let Some(bug) = crate::report::known_bugs::by_name(mutant.name()) else {
            checks[i].unmet.push("no entry in the known-bug catalog".into());
            continue;
        };
        for name in bug.scenarios() {
            match scenarios.iter().find(|s| s.name == name) {
                Some(scenario) => {
                    owners.push(i);
                    runs.push(Run::new(scenario, RunProxy::Built(proxy.as_ref())));
                }
                None => checks[i].unmet.push(format!("{name}: no such scenario")),
            }
        }
    }
    // Fresh topologies, unlike the hunt's: a mutant's signature names few scenarios, so a kept
    // topology is seldom used again, while keeping reads every build once more to know it as
    // built (measured: 25.5 s kept against 23.5 s fresh for the iptables catalog's checks).
    let engine = Engine {
        options: RunOptions { timeout: MUTANT_TIMEOUT, ..RunOptions::default() },
        jobs: Engine::default_jobs(),
    };
    let mut left: Vec<usize> = mutants.iter().map(|_| 0).collect();
    for &i in &owners {
        left[i] += 1;
    }
    let without_runs: Vec<usize> = (0..mutants.len()).filter(|&i| left[i] == 0).collect();
    let mut reporter =
        EachRun(|index: usize, scenario: &Scenario, result: &anyhow::Result<ScenarioReport>| {
            let i = owners[index];
            let check = &mut checks[i];
            match result {
                Ok(report) => {
                    check.unmet.extend(unmet(check.mutant, scenario, report));
                    check.by_chance_shown += shown_by_chance(check.mutant, scenario, report);
                }
                Err(e) => check.errors.push(format!("{}: {e:#}", scenario.name)),
            }
            left[i] -= 1;
            if left[i] == 0 {
                check.require_a_chance_shown();
                on_done(check);
            }
        });
    engine.execute(&runs, &mut [&mut reporter])?;
    for i in without_runs {
        on_done(&checks[i]);
    }
    Ok(checks)
}

/// How many of `mutant`'s `by_chance` probes in `scenario` failed as its signature says.
fn shown_by_chance(mutant: Mutant, scenario: &Scenario, report: &ScenarioReport) -> usize {
    let Some(bug) = crate::report::known_bugs::by_name(mutant.name()) else { return 0 };
    let Outcome::Judged(verdicts) = &report.outcome else { return 0 };
    bug.signature
        .iter()
        .filter(|m| m.by_chance && m.scenario == scenario.name)
        .filter(|m| verdicts.iter().any(|v| v.probe.name == m.probe && v.symptoms().contains(&m.symptom)))
        .count()
}

/// The probes of `mutant`'s signature in `scenario` that did not fail as the signature says,
/// `by_chance` ones aside: a run may miss those (see [`shown_by_chance`]).
fn unmet(mutant: Mutant, scenario: &Scenario, report: &ScenarioReport) -> Vec<String> {
    let Some(bug) = crate::report::known_bugs::by_name(mutant.name()) else { return Vec::new() };
    let marks = bug.signature.iter().filter(|m| m.scenario == scenario.name && !m.by_chance);
    let verdicts = match &report.outcome {
        Outcome::Judged(v) => v.as_slice(),
        Outcome::ProxyFailed(why) => {
            return marks
                .filter(|m| m.symptom != Symptom::ProxyFailed)
                .map(|m| format!("{}: {}: the proxy failed: {why}", m.scenario, m.probe))
                .collect();
        }
        Outcome::Skipped(why) => return vec![format!("{}: skipped: {why}", scenario.name)],
    };
    marks
        .filter_map(|m| {
            let why = match verdicts.iter().find(|v| v.probe.name == m.probe) {
                None if m.symptom == Symptom::ProxyFailed => "the proxy did not fail".to_string(),
                None if m.probe == ANY => {
                    if verdicts.iter().any(|v| v.symptoms().contains(&m.symptom)) {
                        return None;
                    }
                    format!("no probe failed as {}", m.symptom)
                }
                None => "not judged".to_string(),
                Some(v) if !v.failed() => "passed".to_string(),
                Some(v) if v.symptoms().contains(&m.symptom) => match v.attempts_showing(m.symptom) {
                    // A probe the bug fails in only some attempts rests on their random
                    // choices: a run can miss it, so the mark must say so (`by_chance`).
                    Some((showing, judged)) if showing < judged => format!(
                        "failed as {} in only {showing} of {judged} attempts, so a run can pass it by chance: \
                         its mark must be `by_chance`",
                        m.symptom
                    ),
                    _ => return None,
                },
                Some(v) => {
                    let kinds: Vec<String> = v.symptoms().iter().map(|k| k.to_string()).collect();
                    format!(
                        "failed as {} instead of {}: {}",
                        kinds.join(", "),
                        m.symptom,
                        v.failures.iter().map(|f| f.message.as_str()).collect::<Vec<_>>().join("; ")
                    )
                }
            };
            Some(format!("{}: {}: {why}", m.scenario, m.probe))
        })
        .collect()
}

/// Every probe a known bug's signature names that the suite lacks (a renamed scenario or probe).
pub fn dangling_marks(scenarios: &[Scenario]) -> Vec<String> {
    crate::report::known_bugs::CATALOG
        .iter()
        .flat_map(|bug| bug.signature.iter().map(move |m| (bug, m)))
        .filter(|(_, m)| {
            !scenarios.iter().any(|s| {
                s.name == m.scenario
                    && (m.probe == PROXY
                        || m.probe == ANY
                        || s.phases().iter().any(|ph| ph.probes.iter().any(|p| p.name == m.probe)))
            })
        })
        .map(|(bug, m)| format!("{}: {}: {}", bug.name, m.scenario, m.probe))
        .collect()
}

/// A reporter that hands each finished run, by its index, to a closure, which answers for it.
struct EachRunControlled<F>(F);

impl<F: FnMut(usize, &Scenario, &anyhow::Result<ScenarioReport>) -> Control> Reporter
    for EachRunControlled<F>
{
    fn event(&mut self, event: &Event<'_>) -> anyhow::Result<Control> {
        Ok(match event {
            Event::ScenarioFinished { index, scenario, result, .. } => (self.0)(*index, scenario, result),
            _ => Control::Continue,
        })
    }
}

/// A reporter that hands each finished run, by its index, to a closure.
struct EachRun<F>(F);

impl<F: FnMut(usize, &Scenario, &anyhow::Result<ScenarioReport>)> Reporter for EachRun<F> {
    fn event(&mut self, event: &Event<'_>) -> anyhow::Result<Control> {
        if let Event::ScenarioFinished { index, scenario, result, .. } = event {
            (self.0)(*index, scenario, result);
        }
        Ok(Control::Continue)
    }
}

/// Names of the probes that failed in a judged scenario, or [`PROXY`] where the proxy failed
/// at its own job (a kill too: the scenario fails).
fn failing_probes(report: &ScenarioReport) -> impl Iterator<Item = String> + '_ {
    let (verdicts, proxy_failed) = match &report.outcome {
        Outcome::Judged(v) => (v.as_slice(), None),
        Outcome::ProxyFailed(_) => (&[][..], Some(PROXY.to_string())),
        Outcome::Skipped(_) => (&[][..], None),
    };
    verdicts.iter().filter(|v| v.failed()).map(|v| v.probe.name.clone()).chain(proxy_failed)
}

/// Runs every scenario against `proxy`, `jobs` at a time, handing each result to
/// `on_result` on this thread; its [`Control::Stop`] starts no further scenario.
fn run_each(
    scenarios: &[&Scenario],
    proxy: &dyn Proxy,
    jobs: usize,
    on_result: impl FnMut(&Scenario, &anyhow::Result<ScenarioReport>) -> Control,
) -> anyhow::Result<()> {
    let engine = Engine { options: RunOptions { timeout: MUTANT_TIMEOUT, ..RunOptions::default() }, jobs };
    let runs: Vec<Run> =
        scenarios.iter().map(|&scenario| Run::new(scenario, RunProxy::Built(proxy))).collect();
    engine.execute(&runs, &mut [&mut EachResult(on_result)])?;
    Ok(())
}

/// A reporter that hands each finished scenario to a closure.
struct EachResult<F>(F);

impl<F: FnMut(&Scenario, &anyhow::Result<ScenarioReport>) -> Control> Reporter for EachResult<F> {
    fn event(&mut self, event: &Event<'_>) -> anyhow::Result<Control> {
        Ok(match event {
            Event::ScenarioFinished { scenario, result, .. } => (self.0)(scenario, result),
            _ => Control::Continue,
        })
    }
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

/// Every hunt as JSON: `{"proxy", "killed", "survived", "errors", "mutants": [{"name",
/// "killed", "killed_by", "errors", "equivalent"}], "baseline": [[scenario, probe]],
/// "topologies": {"built", "kept", "not_reset"}}`. A mutant whose hunt could not set up some
/// scenario counts among `errors`, killed or not.
pub fn json(
    proxy: &str,
    hunts: &[Hunt],
    baseline: &Baseline,
    topologies: ReuseCounts,
) -> anyhow::Result<String> {
    let mutants: Vec<HuntedMutant> = hunts
        .iter()
        .map(|h| HuntedMutant {
            name: h.mutant.name().into(),
            killed: h.killed(),
            killed_by: h.killed_by.clone(),
            errors: h.errors.clone(),
            equivalent: h.equivalent.clone(),
        })
        .collect();
    let killed = hunts.iter().filter(|h| h.killed()).count();
    Ok(serde_json::to_string_pretty(&HuntReport {
        proxy: proxy.into(),
        killed,
        survived: hunts.len() - killed,
        errors: hunts.iter().filter(|h| !h.errors.is_empty()).count(),
        mutants,
        baseline: baseline.clone(),
        topologies,
    })?)
}

/// A hunt's report (`mutants --json`), as written and as `matrix --mutants` reads its guests'
/// back.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct HuntReport {
    pub proxy: String,
    pub killed: usize,
    pub survived: usize,
    /// Mutants whose hunt could not set up some scenario (killed or not).
    pub errors: usize,
    pub mutants: Vec<HuntedMutant>,
    /// `[scenario, probe]` pairs failing against the unbroken proxy.
    pub baseline: Baseline,
    /// The topologies the hunt built and kept (absent from reports of older builds).
    #[serde(default)]
    pub topologies: ReuseCounts,
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct HuntedMutant {
    pub name: String,
    pub killed: bool,
    pub killed_by: Vec<String>,
    pub errors: Vec<String>,
    /// Scenarios not run, in whose every state the mutant does what the unbroken proxy does
    /// (absent from reports of older builds).
    #[serde(default)]
    pub equivalent: Vec<String>,
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

/// What `mutants` hunts: which mutants of which proxy, and how.
pub struct HuntArgs<'a> {
    pub suite: &'a [PathBuf],
    pub only: &'a [String],
    pub first_kill: bool,
    pub proxy: &'a str,
    pub json: Option<&'a Path>,
    /// Runs at once, over all mutants (default: [`Engine::default_jobs`]).
    pub jobs: Option<usize>,
    /// Hunt only this slice of the chosen mutants (by each mutant's name).
    pub partition: Option<partition::Partition>,
    /// A fresh topology for every run (see [`HowToHunt`]).
    pub fresh_topologies: bool,
    /// Also the runs that cannot kill (see [`HowToHunt`]).
    pub every_run: bool,
}

/// `packetproof mutants`: every catalogued mutant of a built-in proxy hunted with a suite.
pub fn main(args: &HuntArgs<'_>) -> Result<i32> {
    let proxy_name = args.proxy;
    let breakable = breakable(proxy_name)
        .with_context(|| format!("no mutants of proxy {proxy_name:?} (built-in proxies only)"))?;
    let Some(scenarios) = load_all(args.suite)? else { return Ok(EXIT_ERROR) };
    if let Some(reason) = privileges::preflight() {
        anyhow::bail!("cannot hunt mutants here: {reason}");
    }
    let mut chosen: Vec<_> = if args.only.is_empty() {
        catalog(proxy_name)
    } else {
        args.only
            .iter()
            .map(|name| name.parse().map_err(|_| anyhow::anyhow!("no mutant {name:?}")))
            .collect::<Result<_>>()?
    };
    if let Some(slice) = args.partition {
        chosen = slice.keep(chosen, |m| m.name().to_string());
        println!("slice {slice}: {} mutants", chosen.len());
    }
    let jobs = args.jobs.unwrap_or_else(Engine::default_jobs);
    let total = chosen.len();
    let done = std::sync::atomic::AtomicUsize::new(0);
    // A probe that fails unbroken (a behaviour of this proxy the oracle does not expect)
    // kills nothing.
    let baseline = baseline(&scenarios, breakable, jobs)?;
    for (scenario, probe) in &baseline {
        println!("baseline: {scenario}/{probe} fails unbroken; its failures kill no mutant");
    }
    let paint = Paint::for_stdout(clap::ColorChoice::Auto);
    // Several mutants are hunted at once: each line comes when its verdict is known.
    let progress = Progress::new(total, paint);
    let how = HowToHunt {
        first_kill: args.first_kill,
        jobs,
        fresh_topologies: args.fresh_topologies,
        every_run: args.every_run,
    };
    let hunts = hunt(&scenarios, &chosen, how, breakable, &baseline, |h| {
        let n = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let verdict = if h.killed() { paint.pass("killed") } else { paint.fail("SURVIVED") };
        let mut text = format!("[{n}/{total}] {verdict} {} by {}\n", h.mutant.name(), h.killed_by.join(", "));
        for e in &h.errors {
            text.push_str(&format!("        setup error: {e}\n"));
        }
        progress.finished(h.mutant.name(), &text);
    })?;
    progress.finish();
    println!("\n{}", table(&hunts));
    for (mutant, why) in not_observable(proxy_name) {
        println!("not hunted: {}: {why}", mutant.name());
    }
    if let Some(path) = args.json {
        std::fs::write(path, json(proxy_name, &hunts, &baseline, crate::stage::reuse_counts())?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let survivors = hunts.iter().filter(|h| !h.killed()).count();
    let equivalent: usize = hunts.iter().map(|h| h.equivalent.len()).sum();
    if equivalent > 0 {
        println!(
            "not run: {equivalent} of {} runs, in whose scenario's every state the mutant's rules are the \
             unbroken proxy's (they cannot kill it; --every-run makes them)",
            hunts.len() * scenarios.len()
        );
    }
    let ReuseCounts { built, kept, not_reset } = crate::stage::reuse_counts();
    println!(
        "topologies: {built} built, {kept} runs on one kept from an earlier run, reset; \
         {not_reset} kept ones whose reset failed"
    );
    println!("{} killed, {survivors} survived", hunts.len() - survivors);
    Ok(if survivors == 0 { EXIT_PASS } else { EXIT_FAIL })
}
