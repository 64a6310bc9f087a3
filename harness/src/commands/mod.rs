//! The commands behind `packetproof`'s subcommands: each takes parsed arguments and returns
//! the exit code. Exit codes: 0 everything passed; 1 a proxy failed; 2 the input or the
//! machine is at fault (bad scenario files, a setup error).

pub mod bench;
pub mod coverage;
pub mod diff;
pub mod explore;
pub mod matrix;
pub mod merge;
pub mod mutants;
pub mod partition;
pub mod soak;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::engine::{self, Engine, MachineReports, Run, RunProgress, RunProxy, TerminalReport};
use crate::model::{ProxyChoice, Scenario};
use crate::report::Paint;
use crate::report::terminal::Progress;
use crate::results::ScenarioReport;
use crate::runner::RunOptions;
use crate::{admission, privileges, proxy, scenario};

pub(crate) const EXIT_PASS: i32 = 0;
pub(crate) const EXIT_FAIL: i32 = 1;
pub(crate) const EXIT_ERROR: i32 = 2;

/// `--timeout-ms`: how long an attempt waits for an answer. Below 10 ms answered probes would
/// read as silent (a proxy failure that is not one); above a minute a run seems to hang.
pub fn timeout_ms(text: &str) -> Result<u64, String> {
    bounded(text, 10, 60_000)
}

/// `--jobs`: scenarios at once; 0 would run nothing.
pub fn jobs(text: &str) -> Result<usize, String> {
    bounded(text, 1, 256).map(|n| n as usize)
}

/// `--min-coverage`: a percentage, 0 to 100.
pub fn percent(text: &str) -> Result<f64, String> {
    match text.trim_end_matches('%').parse::<f64>() {
        Ok(p) if (0.0..=100.0).contains(&p) => Ok(p),
        Ok(p) => Err(format!("{p} is outside 0..=100")),
        Err(_) => Err(format!("{text:?} is not a number")),
    }
}

fn bounded(text: &str, low: u64, high: u64) -> Result<u64, String> {
    let n: u64 = text.parse().map_err(|_| format!("{text:?} is not a whole number"))?;
    if (low..=high).contains(&n) { Ok(n) } else { Err(format!("{n} is outside {low}..={high}")) }
}

/// The scenarios a command reads when given no path.
pub(crate) fn default_paths(paths: Vec<PathBuf>) -> Vec<PathBuf> {
    if paths.is_empty() { vec![PathBuf::from("scenarios")] } else { paths }
}

/// Removes what killed runs left behind: namespaces, additions to existing nodes, and objects
/// they wrote to a cluster's API (deleted the way the `cluster` proxy wrote them).
pub(crate) fn remove_leftovers(include_live: bool) -> Result<Vec<String>> {
    crate::topology::remove_leftovers(include_live, proxy::cluster::delete_leftover)
}

/// Loads and validates every scenario; prints every error and returns `None` if any file is bad.
pub(crate) fn load_all(paths: &[PathBuf]) -> Result<Option<Vec<Scenario>>> {
    load_each(paths, |_| {})
}

/// [`load_all`], telling `on_loaded` of each scenario that loaded, also when others did not.
fn load_each(paths: &[PathBuf], mut on_loaded: impl FnMut(&Scenario)) -> Result<Option<Vec<Scenario>>> {
    let (files, unreadable) = scenario::discover_each(paths);
    for problem in &unreadable {
        eprintln!("{problem}");
    }
    let mut scenarios = Vec::new();
    let mut bad = !unreadable.is_empty();
    let mut named: std::collections::HashMap<String, PathBuf> = std::collections::HashMap::new();
    for file in &files {
        match admission::load(file) {
            Ok(s) => {
                // A name is the scenario's evidence folder and its report entry: two files
                // with one name would overwrite each other's evidence.
                if let Some(first) = named.insert(s.name.clone(), s.source.clone()) {
                    eprintln!(
                        "{}: metadata.name: scenario {:?} is also the name of {}: \
                         each scenario of a run needs its own name",
                        s.source.display(),
                        s.name,
                        first.display()
                    );
                    bad = true;
                } else {
                    on_loaded(&s);
                }
                scenarios.push(s);
            }
            Err(errors) => {
                eprintln!("{errors}");
                bad = true;
            }
        }
    }
    Ok((!bad).then_some(scenarios))
}

/// Every file is checked, and each one that passes says so, whatever the others do; with
/// `show`, followed by what each of its probes must see and why.
pub fn check(paths: &[PathBuf], show: bool) -> Result<i32> {
    let loaded = load_each(paths, |s| {
        println!("ok {} ({}, {} probes)", s.name, s.source.display(), s.probes.len());
        for warning in &s.warnings {
            println!("  warning: {warning}");
        }
        if show {
            print!("{}", expectations(s));
        }
    })?;
    Ok(if loaded.is_some() { EXIT_PASS } else { EXIT_ERROR })
}

/// A line per probe of `s`: the outcome its proxy's profile expects, and why.
fn expectations(s: &Scenario) -> String {
    let profile = proxy::build(&s.proxy, crate::model::folder_of(&s.source))
        .map_or(crate::model::Profile::KUBERNETES, |p| p.profile());
    let mut text = String::new();
    for probe in &s.probes {
        let expected = match crate::oracle::predict(&s.cluster, probe, profile) {
            Ok(crate::oracle::Prediction::Expected(e)) => {
                format!("{} ({}; by {})", crate::report::expected(&e.outcome), e.because, e.basis)
            }
            Ok(crate::oracle::Prediction::Open(why)) => format!("not judged under {profile}: {why}"),
            Err(why) => format!("no defined outcome: {why}"),
        };
        text.push_str(&format!("  {} (from {}): {expected}\n", probe.name, probe.from));
    }
    text
}

/// The `--proxy` and `--proxy-option` flags as a proxy choice.
pub(crate) fn proxy_choice(name: &str, options: &[String]) -> Result<ProxyChoice> {
    let mut choice = ProxyChoice::named(name);
    for option in options {
        let (key, value) = option
            .split_once('=')
            .with_context(|| format!("--proxy-option {option:?}: expected KEY=VALUE"))?;
        let value = serde_json::from_str(value).unwrap_or_else(|_| serde_json::Value::String(value.into()));
        choice.options.insert(key.to_string(), value);
    }
    Ok(choice)
}

pub fn diff(
    paths: &[PathBuf],
    left: &ProxyChoice,
    right: &ProxyChoice,
    options: &RunOptions,
    jobs: usize,
) -> Result<i32> {
    let Some(scenarios) = load_all(paths)? else { return Ok(EXIT_ERROR) };
    for choice in [left, right] {
        proxy::build(choice, Path::new("."))?;
    }
    for stale in remove_leftovers(false)? {
        eprintln!("packetproof: removed {stale}, left by an earlier run");
    }
    let engine = Engine { options: options.clone(), jobs };
    let mut progress = RunProgress::new(Paint::for_stdout(clap::ColorChoice::Auto));
    let found = diff::diff(&scenarios, left, right, &engine, &mut [&mut progress])?;
    print!("{}", diff::table(&left.label(), &right.label(), &found));
    Ok(diff_exit_code(&found))
}

/// As `run`'s: 2 when a side could not be set up or nothing was compared (input or machine at
/// fault), 1 when some flow differs, 0 otherwise.
fn diff_exit_code(found: &diff::Differences) -> i32 {
    if found.setup_failed() || found.compared == 0 {
        EXIT_ERROR
    } else if found.flows.is_empty() {
        EXIT_PASS
    } else {
        EXIT_FAIL
    }
}

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
pub fn run(
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

pub fn rules(file: &std::path::Path, node: Option<&str>, proxy_name: &str) -> Result<i32> {
    let Some(mut scenarios) = load_all(&[file.to_path_buf()])? else { return Ok(EXIT_ERROR) };
    let s = scenarios.remove(0);
    let node = match node {
        Some(n) => n.to_string(),
        None => s.cluster.nodes.first().context("the scenario has no nodes")?.name.clone(),
    };
    anyhow::ensure!(s.cluster.node(&node).is_some(), "no node {node:?} in {}", file.display());
    let Some(built_in) = proxy::registry::built_in(proxy_name) else {
        anyhow::bail!("no rules to print for proxy {proxy_name:?} (built-in proxies only)")
    };
    let text = (built_in.render)(&s.cluster, &node, None);
    print!("{text}");
    Ok(EXIT_PASS)
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
}

pub fn mutants(args: &HuntArgs<'_>) -> Result<i32> {
    let proxy_name = args.proxy;
    let breakable = mutants::breakable(proxy_name)
        .with_context(|| format!("no mutants of proxy {proxy_name:?} (built-in proxies only)"))?;
    let Some(scenarios) = load_all(args.suite)? else { return Ok(EXIT_ERROR) };
    if let Some(reason) = privileges::preflight() {
        anyhow::bail!("cannot hunt mutants here: {reason}");
    }
    let mut chosen: Vec<_> = if args.only.is_empty() {
        mutants::catalog(proxy_name)
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
    let baseline = mutants::baseline(&scenarios, breakable, jobs)?;
    for (scenario, probe) in &baseline {
        println!("baseline: {scenario}/{probe} fails unbroken; its failures kill no mutant");
    }
    let paint = Paint::for_stdout(clap::ColorChoice::Auto);
    // Several mutants are hunted at once: each line comes when its verdict is known.
    let progress = Progress::new(total, paint);
    let hunts = mutants::hunt(&scenarios, &chosen, args.first_kill, breakable, &baseline, jobs, |h| {
        let n = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let verdict = if h.killed() { paint.pass("killed") } else { paint.fail("SURVIVED") };
        let mut text = format!("[{n}/{total}] {verdict} {} by {}\n", h.mutant.name(), h.killed_by.join(", "));
        for e in &h.errors {
            text.push_str(&format!("        setup error: {e}\n"));
        }
        progress.finished(h.mutant.name(), &text);
    })?;
    progress.finish();
    println!("\n{}", mutants::table(&hunts));
    for (mutant, why) in mutants::not_observable(proxy_name) {
        println!("not hunted: {}: {why}", mutant.name());
    }
    if let Some(path) = args.json {
        std::fs::write(path, mutants::json(proxy_name, &hunts, &baseline)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let survivors = hunts.iter().filter(|h| !h.killed()).count();
    println!("{} killed, {survivors} survived", hunts.len() - survivors);
    Ok(if survivors == 0 { EXIT_PASS } else { EXIT_FAIL })
}

pub fn cleanup(all: bool) -> Result<i32> {
    let removed = remove_leftovers(all)?;
    for what in &removed {
        println!("removed {what}");
    }
    println!("{} leftovers removed", removed.len());
    Ok(EXIT_PASS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_diff_that_could_not_compare_is_an_error_and_a_skip_beside_a_comparison_is_not() {
        let not = |error| diff::NotCompared { scenario: "s".into(), why: "left: …".into(), error };
        let found = |flows: usize, not_compared, compared| diff::Differences {
            flows: (0..flows)
                .map(|_| diff::FlowDiff {
                    scenario: "s".into(),
                    probe: "p".into(),
                    left: "a".into(),
                    right: "b".into(),
                })
                .collect(),
            not_compared,
            compared,
        };
        assert_eq!(diff_exit_code(&found(0, vec![not(false)], 1)), EXIT_PASS);
        assert_eq!(diff_exit_code(&found(1, vec![], 1)), EXIT_FAIL);
        assert_eq!(
            diff_exit_code(&found(1, vec![not(true)], 1)),
            EXIT_ERROR,
            "an error outweighs a difference"
        );
        assert_eq!(diff_exit_code(&found(0, vec![not(false)], 0)), EXIT_ERROR, "nothing compared");
    }

    #[test]
    fn a_diff_column_names_a_command_by_its_program() {
        let choice = proxy_choice(
            "apiserver",
            &["mode=nftables".into(), "command=/opt/k8s/kube-proxy --config={config} --v=2".into()],
        )
        .unwrap();
        assert_eq!(choice.label(), "apiserver (kube-proxy, mode=nftables)");
        assert_eq!(
            proxy_choice("builtin-iptables", &["mutant=x".into()]).unwrap().label(),
            "builtin-iptables (mutant=x)"
        );
    }
}
