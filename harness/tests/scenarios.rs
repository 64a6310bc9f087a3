//! `cargo test` runner: one trial per scenario file in `scenarios/` and proxy, judged with
//! real packets. A scenario for a built-in proxy runs against every proxy of `EVERY_PROXY`
//! (each under its own profile); one that names an adapter (`ruleset`, `command`) runs with it.
//!
//! Filtering works as usual (`cargo test --test scenarios -- kube-dns`), and so does `cargo
//! nextest run`, which lists the trials and then runs each as `--exact NAME` in a process of
//! its own: names come from a glance at each file (`scenario::peek`), and a process asked for
//! one trial reads only that trial's file, so the suite costs one check per trial, not one
//! per trial and file (`protocol.rs` proves it by running this binary as nextest does).
//! Without root, every
//! trial is reported as ignored with the reason printed first; with
//! `PACKETPROOF_REQUIRE_PRIVILEGES=1` (set by `.ci/run`) that is a failure instead, so a CI
//! machine that lost its privileges cannot pass by skipping everything.

#[path = "scenarios/protocol.rs"]
mod protocol;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use libtest_mimic::{Arguments, Failed, Trial};
use packetproof::engine::{Engine, Run};
use packetproof::model::ProxyChoice;
use packetproof::model::Scenario;
use packetproof::results::{Outcome, ScenarioReport};
use packetproof::runner::{self, RunOptions};
use packetproof::topology::netns;
use packetproof::{admission, commands, proxy, report, scenario};

/// The proxies every scenario of a built-in proxy runs against: the built-in generators, and
/// the reference proxy through the embedded API server in both modes.
const EVERY_PROXY: &[&str] = &[
    proxy::iptables::NAME,
    proxy::nftables::NAME,
    proxy::apiserver::REFERENCE_IPTABLES,
    proxy::apiserver::REFERENCE_NFTABLES,
];

/// The proxies whose trials take longest: a process per node through the API server, and
/// kube-proxy's min-sync-period waited out at every start.
const SLOW_PROXIES: &[&str] = &[proxy::apiserver::REFERENCE_IPTABLES, proxy::apiserver::REFERENCE_NFTABLES];

/// The proxies a file runs against (`None` is its own choice), from its `spec.proxy`.
fn proxies_of(peeked: &scenario::Peek) -> Vec<Option<&'static str>> {
    match &peeked.proxy {
        Some(name) if !name.starts_with("builtin-") => vec![None],
        _ => EVERY_PROXY.iter().map(|p| Some(*p)).collect(),
    }
}

/// Why `file` cannot run on this host, if so. Only a file that names SCTP needs its whole
/// check for that: only SCTP probes depend on the host's kernel.
fn unsupported(file: &Path, peeked: &scenario::Peek) -> Option<String> {
    if !peeked.names_sctp {
        return None;
    }
    load(file).ok().and_then(|s| runner::unsupported(&s))
}

/// With `--exact NAME`, as nextest runs one trial, only the file NAME comes from is read.
fn only_named(files: Vec<PathBuf>, args: &Arguments) -> Vec<PathBuf> {
    let Some(name) = args.filter.as_deref().filter(|_| args.exact) else { return files };
    let stem = name.split_once(" [").map_or(name, |(stem, _)| stem);
    files.into_iter().filter(|f| f.file_stem().is_some_and(|s| s == stem)).collect()
}

/// `PACKETPROOF_TRACE_LOADS=1` prints every file read, the evidence `protocol.rs` checks.
fn trace(what: &str, file: &Path) {
    if std::env::var_os(protocol::TRACE_ENV).is_some() {
        eprintln!("{} {what} {}", protocol::TRACE_PREFIX, file.display());
    }
}

fn peek(file: &Path) -> scenario::Peek {
    trace("peek", file);
    scenario::peek(file)
}

fn load(file: &Path) -> Result<Scenario, scenario::ScenarioErrors> {
    trace("load", file);
    admission::load(file)
}

fn main() {
    // The reference proxy runs as `packetproof reference-proxy`: the binary cargo built.
    // SAFETY: no other thread runs yet.
    unsafe { std::env::set_var("PACKETPROOF_BIN", env!("CARGO_BIN_EXE_packetproof")) };
    let mut args = Arguments::from_args();
    args.test_threads = args.test_threads.or_else(default_threads);
    packetproof::topology::install_interrupt_handler();
    let suite =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios").canonicalize().expect("scenarios/ exists");
    let files = only_named(scenario::discover(&[suite]).expect("listing scenarios/"), &args);
    let skip_reason = packetproof::privileges::preflight();
    let require = packetproof::privileges::required();
    if let Some(reason) = &skip_reason {
        eprintln!("packetproof: scenarios cannot run here: {reason}");
    } else if args.list {
        // Listing runs nothing, so it leaves other runs' namespaces alone.
    } else if let Ok(stale) = netns::cleanup(false) {
        for name in stale {
            eprintln!("packetproof: removed namespace {name} left by an earlier run");
        }
    }
    // Every scenario that ran, for the JUnit and JSON reports written after the last trial.
    let finished: Finished = Arc::default();
    let mut trials: Vec<Trial> = files
        .into_iter()
        .flat_map(|file| {
            let peeked = peek(&file);
            // A scenario this host cannot run (e.g. SCTP without SCTP sockets) is ignored with its
            // reason printed: libtest-mimic cannot turn a running trial into a skipped one.
            let unsupported = unsupported(&file, &peeked);
            proxies_of(&peeked).into_iter().map(move |proxy| (file.clone(), proxy, unsupported.clone()))
        })
        .map(|(file, proxy, unsupported)| {
            let stem = file.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
            let name = match proxy {
                Some(p) => format!("{stem} [{p}]"),
                None => stem,
            };
            if let Some(why) = &unsupported {
                eprintln!("packetproof: {name} skipped: {why}");
            }
            let ignored = unsupported.is_some() || (skip_reason.is_some() && !require);
            let must_fail = skip_reason.clone().filter(|_| require);
            let finished = Arc::clone(&finished);
            Trial::test(name, move || run_trial(&file, proxy, must_fail.as_deref(), &finished))
                .with_ignored_flag(ignored)
        })
        .collect();
    // Slowest first, so that no slow trial starts last and runs alone at the end.
    trials.sort_by_key(|t| !SLOW_PROXIES.iter().any(|p| t.name().ends_with(&format!("[{p}]"))));
    trials.push(protocol::trial(skip_reason.is_none()));
    let conclusion = libtest_mimic::run(&args, trials);
    if let Err(e) = write_reports(&finished) {
        eprintln!("packetproof: {e:#}");
        std::process::exit(101);
    }
    // Every trial tears down its own namespaces; anything of ours still here is a leak.
    let leaked: Vec<String> = netns::leftover_namespaces(true)
        .unwrap_or_default()
        .into_iter()
        .filter(|n| n.starts_with(&netns::process_prefix()))
        .collect();
    if !leaked.is_empty() {
        eprintln!("packetproof: namespaces left behind by this run: {}", leaked.join(", "));
        netns::remove_all_live();
        std::process::exit(101);
    }
    conclusion.exit();
}

/// Trials at once unless `--test-threads` (or `RUST_TEST_THREADS`) says: two per core (half
/// what `packetproof run` does: half the trials run the reference proxy and an API server,
/// which use the cores rather than wait). A trial mostly waits (on proxies' syncs, timeouts, affinity
/// expiry), each in namespaces of its own, and every verdict stands on captured packets, not
/// on how soon they came (`RunOptions::timeout` is three orders above an answer's time here).
fn default_threads() -> Option<usize> {
    if let Some(n) = std::env::var("RUST_TEST_THREADS").ok().and_then(|v| v.parse().ok()) {
        return Some(n);
    }
    Some(2 * std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The scenarios the trials ran, with how each ended, shared by the trials and `main`.
type Finished = Arc<Mutex<Vec<(Scenario, Result<ScenarioReport, String>)>>>;

/// One trial: the scenario through the engine, as `packetproof run` runs it.
fn run_trial(
    file: &Path,
    proxy: Option<&str>,
    missing_privileges: Option<&str>,
    finished: &Finished,
) -> Result<(), Failed> {
    if let Some(reason) = missing_privileges {
        return Err(format!("{}=1 but {reason}", packetproof::privileges::REQUIRE_ENV).into());
    }
    let scenario = load(file).map_err(|errors| Failed::from(errors.to_string()))?;
    let artifacts = artifacts_dir().join(proxy.unwrap_or(&scenario.proxy.name));
    let options = RunOptions { artifacts: Some(artifacts), ..RunOptions::default() };
    let choice = proxy.map(ProxyChoice::named);
    let engine = Engine { options, jobs: 1 };
    let runs = Run::each(std::slice::from_ref(&scenario), choice.as_ref());
    let result = engine
        .execute(&runs, &mut [])
        .map_err(|e| Failed::from(format!("{e:#}")))?
        .pop()
        .map(|(_, result)| result)
        .expect("one run, one result");
    let report = match result {
        Ok(report) => report,
        Err(e) => {
            let message = format!("{}: setup failed: {e:#}", file.display());
            finished.lock().unwrap_or_else(|e| e.into_inner()).push((scenario, Err(message.clone())));
            return Err(message.into());
        }
    };
    let judged = judge(&scenario, &report);
    finished.lock().unwrap_or_else(|e| e.into_inner()).push((scenario, Ok(report)));
    judged
}

/// `PACKETPROOF_JUNIT=path` and `PACKETPROOF_JSON=path` ask for machine-readable reports.
fn write_reports(finished: &Finished) -> anyhow::Result<()> {
    let outputs = commands::Outputs {
        junit: std::env::var_os("PACKETPROOF_JUNIT").map(Into::into),
        json: std::env::var_os("PACKETPROOF_JSON").map(Into::into),
        slice: None,
    };
    let finished = finished.lock().unwrap_or_else(|e| e.into_inner());
    let finished: Vec<report::Finished> = finished
        .iter()
        .map(|(scenario, result)| match result {
            Ok(report) => report::Finished::Ran { scenario, report },
            Err(error) => report::Finished::Error { scenario, error: error.clone() },
        })
        .collect();
    outputs.write(&finished)
}

fn judge(scenario: &Scenario, report: &ScenarioReport) -> Result<(), Failed> {
    match &report.outcome {
        Outcome::Judged(verdicts) if !report.passed() => Err(format!(
            "{}\n{}  evidence: {}",
            report::scenario_line(report),
            report::flow_table(&scenario.cluster, verdicts),
            report.artifacts.as_ref().map_or("(none)".into(), |d| d.display().to_string()),
        )
        .into()),
        Outcome::Judged(_) => {
            eprint!("{}", report::unjudged_lines(report));
            Ok(())
        }
        Outcome::ProxyFailed(_) => Err(report::scenario_line(report).into()),
        // Never a pass: a scenario that could not run fails with its reason.
        Outcome::Skipped(reason) => Err(format!("could not run: {reason}").into()),
    }
}

/// Evidence of failing scenarios: `PACKETPROOF_ARTIFACTS`, or `target/packetproof-artifacts`.
fn artifacts_dir() -> std::path::PathBuf {
    std::env::var_os("PACKETPROOF_ARTIFACTS")
        .map(Into::into)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/packetproof-artifacts"))
}
