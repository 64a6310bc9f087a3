//! The `packetproof` command: `run`, `check`, `rules`, `bench`, `matrix`, `cleanup`.
//!
//! Exit codes: 0 everything passed; 1 a probe failed; 2 bad input or a setup error.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

use crate::engine::{self, Engine, MachineReports, Run, RunProgress, RunProxy, TerminalReport};
use crate::model::{ProxyChoice, Scenario};
use crate::report::Paint;
use crate::report::terminal::Progress;
use crate::runner::{self, RunOptions, ScenarioReport};
use crate::topology::netns;
use crate::{oracle, proxy, scenario};

pub const EXIT_PASS: i32 = 0;
pub const EXIT_FAIL: i32 = 1;
pub const EXIT_ERROR: i32 = 2;

#[derive(Parser)]
#[command(
    name = "packetproof",
    version,
    about = "Proves what a Kubernetes service proxy does, with real packets in network namespaces"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run scenarios (files or directories; default `scenarios/`) and judge every probe.
    Run {
        paths: Vec<PathBuf>,
        /// Proxy to program the nodes with, instead of each scenario's own choice.
        #[arg(long)]
        proxy: Option<String>,
        /// An option for the `--proxy` adapter, `KEY=VALUE` (VALUE read as JSON when it
        /// parses, else as a string); repeatable.
        #[arg(long = "proxy-option", value_name = "KEY=VALUE", requires = "proxy")]
        proxy_options: Vec<String>,
        /// Judge by this profile (kubernetes, kube-proxy-iptables, kube-proxy-nftables, kube-proxy-ipvs)
        /// instead of the proxy's own; under `kubernetes`, outcomes Kubernetes leaves open are
        /// not judged.
        #[arg(long)]
        profile: Option<oracle::Profile>,
        /// Milliseconds an attempt waits before it counts as dropped.
        #[arg(long, default_value_t = 1000)]
        timeout_ms: u64,
        /// Scenarios run at once (default: two per core).
        #[arg(long)]
        jobs: Option<usize>,
        /// Where a failing scenario leaves its evidence: summary, pcaps, conntrack, rules.
        #[arg(long, default_value = "artifacts")]
        artifacts: PathBuf,
        /// Keep the evidence of passing scenarios too.
        #[arg(long)]
        keep_evidence: bool,
        /// Write a JUnit XML report here (a test case per probe).
        #[arg(long)]
        junit: Option<PathBuf>,
        /// Write a JSON report with the same content here.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Colour the report: auto (a terminal, unless NO_COLOR is set), always or never.
        #[arg(long, value_name = "WHEN", default_value_t = clap::ColorChoice::Auto)]
        color: clap::ColorChoice,
        /// A node that already exists, for the scenario node NAME: `docker:CONTAINER`,
        /// `podman:CONTAINER` (a kind node) or `netns:/PATH`; repeatable, one per scenario
        /// node. Scenarios then run one at a time (usually with `--proxy cluster`).
        #[arg(long = "node", value_name = "NAME=REF", value_parser = crate::topology::existing::parse_assignment)]
        nodes: Vec<(String, crate::topology::existing::NodeRef)>,
    },
    /// Validate scenario files without running anything.
    Check { paths: Vec<PathBuf> },
    /// Print the rules a built-in proxy generates for one node of a scenario.
    Rules {
        file: PathBuf,
        /// Node to generate for (default: the first).
        #[arg(long)]
        node: Option<String>,
        /// Built-in proxy whose rules to print: builtin-iptables, builtin-nftables,
        /// builtin-nftables-v1.31, builtin-ipvs.
        #[arg(long, default_value = proxy::iptables::NAME)]
        proxy: String,
    },
    /// Measure topology build and teardown, probe round trips and the whole suite.
    Bench {
        /// Scenarios for the whole-suite figure.
        #[arg(default_value = "scenarios")]
        suite: PathBuf,
        /// Round trips to time for the probe figure.
        #[arg(long, default_value_t = 500)]
        round_trips: u32,
        /// Instead: time this proxy from start to synced, and each step's push to synced, on
        /// the scenario `--sync-scenario`.
        #[arg(long)]
        proxy: Option<String>,
        #[arg(long = "proxy-option", value_name = "KEY=VALUE")]
        proxy_options: Vec<String>,
        #[arg(long, default_value = "scenarios/live-stale-udp-conntrack.yaml")]
        sync_scenario: PathBuf,
        #[arg(long, default_value_t = 10)]
        sync_rounds: usize,
    },
    /// Run the suite against every catalogued mutant (deliberately broken proxy) and print
    /// which scenarios kill each; exit 1 if any mutant survives.
    Mutants {
        /// Scenario files or directories.
        #[arg(default_value = "scenarios")]
        suite: Vec<PathBuf>,
        /// Only these mutants (names as printed), instead of the whole catalog.
        #[arg(long = "only")]
        only: Vec<String>,
        /// Stop hunting a mutant at its first kill (faster; the table then names one killer).
        #[arg(long)]
        first_kill: bool,
        /// Built-in proxy to break: builtin-iptables, builtin-nftables, builtin-nftables-v1.31,
        /// builtin-ipvs.
        #[arg(long, default_value = proxy::iptables::NAME)]
        proxy: String,
        /// Write every mutant's verdict as JSON here (what `matrix --mutants` reads back).
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Run scenarios with two proxies and list every flow whose observed behaviour differs
    /// (outcome, backends reached, source they saw), whether or not either side passes. Exit
    /// code 0 when none differs, 1 when some do.
    Diff {
        paths: Vec<PathBuf>,
        /// The first proxy (e.g. builtin-iptables).
        #[arg(long)]
        left: String,
        /// An option of the left proxy, `KEY=VALUE` (e.g. `mutant=no-hairpin-masq`).
        #[arg(long = "left-option", value_name = "KEY=VALUE")]
        left_options: Vec<String>,
        /// The second proxy (e.g. builtin-nftables).
        #[arg(long)]
        right: String,
        #[arg(long = "right-option", value_name = "KEY=VALUE")]
        right_options: Vec<String>,
        /// Milliseconds an attempt waits before it counts as dropped.
        #[arg(long, default_value_t = 1000)]
        timeout_ms: u64,
        /// How many runs (one scenario with one proxy) at a time (default 2: a scenario's two
        /// sides together).
        #[arg(long, default_value_t = 2)]
        jobs: usize,
    },
    /// A service proxy that watches the Kubernetes API (the adapter `reference-proxy-*` runs
    /// it on every node): proves the API-server adapter without kube-proxy.
    ReferenceProxy(crate::reference_proxy::Args),
    /// Run scenarios on several kernels, each in a VM (qemu), with each proxy: one line per
    /// kernel × proxy, a combined report, exit codes as `run`.
    Matrix(crate::matrix::Args),
    /// Remove namespaces that killed runs left behind (`--all`: also those of live runs).
    Cleanup {
        #[arg(long)]
        all: bool,
    },
}

/// Parses the command line, runs the command, and returns the exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    // The matrix creates no namespace on this host; it stops its VMs on an interrupt instead.
    if !matches!(cli.command, Command::Matrix(_)) {
        netns::install_interrupt_handler();
    }
    let result = match cli.command {
        Command::Run {
            paths,
            proxy,
            proxy_options,
            profile,
            timeout_ms,
            jobs,
            artifacts,
            keep_evidence,
            junit,
            json,
            color,
            nodes,
        } => {
            // Scenarios on the same existing nodes would meet each other's rules and objects.
            let jobs = if nodes.is_empty() { jobs } else { Some(1) };
            let options = RunOptions {
                timeout: Duration::from_millis(timeout_ms),
                artifacts: Some(artifacts),
                keep_passing: keep_evidence,
                profile,
                nodes: nodes.into_iter().collect(),
            };
            proxy.map(|name| proxy_choice(&name, &proxy_options)).transpose().and_then(|proxy| {
                let outputs = MachineReports { junit, json };
                run(&default_paths(paths), proxy.as_ref(), &options, jobs, outputs, Paint::for_stdout(color))
            })
        }
        Command::Check { paths } => check(&default_paths(paths)),
        Command::Rules { file, node, proxy } => rules(&file, node.as_deref(), &proxy),
        Command::Bench { suite, round_trips, proxy: None, .. } => {
            crate::bench::run(&suite, round_trips).map(|()| EXIT_PASS)
        }
        Command::Bench { proxy: Some(name), proxy_options, sync_scenario, sync_rounds, .. } => {
            proxy_choice(&name, &proxy_options)
                .and_then(|choice| crate::bench::sync_times(&sync_scenario, &choice, sync_rounds))
                .map(|()| EXIT_PASS)
        }
        Command::Mutants { suite, only, first_kill, proxy, json } => {
            mutants(&suite, &only, first_kill, &proxy, json.as_deref())
        }
        Command::Diff { paths, left, left_options, right, right_options, timeout_ms, jobs } => {
            let options = RunOptions { timeout: Duration::from_millis(timeout_ms), ..RunOptions::default() };
            proxy_choice(&left, &left_options).and_then(|left| {
                let right = proxy_choice(&right, &right_options)?;
                diff(&default_paths(paths), &left, &right, &options, jobs)
            })
        }
        Command::Cleanup { all } => cleanup(all),
        Command::Matrix(args) => crate::matrix::main(args),
        Command::ReferenceProxy(args) => crate::reference_proxy::main(args).map(|()| EXIT_PASS),
    };
    result.unwrap_or_else(|e| {
        eprintln!("packetproof: {e:#}");
        EXIT_ERROR
    })
}

fn default_paths(paths: Vec<PathBuf>) -> Vec<PathBuf> {
    if paths.is_empty() { vec![PathBuf::from("scenarios")] } else { paths }
}

/// Loads and validates every scenario; prints every error and returns `None` if any file is bad.
pub fn load_all(paths: &[PathBuf]) -> Result<Option<Vec<Scenario>>> {
    let files = scenario::discover(paths)?;
    let mut scenarios = Vec::new();
    let mut bad = false;
    for file in &files {
        match scenario::load(file) {
            Ok(s) => scenarios.push(s),
            Err(errors) => {
                eprintln!("{errors}");
                bad = true;
            }
        }
    }
    Ok((!bad).then_some(scenarios))
}

fn check(paths: &[PathBuf]) -> Result<i32> {
    let Some(scenarios) = load_all(paths)? else { return Ok(EXIT_ERROR) };
    for s in &scenarios {
        println!("ok {} ({}, {} probes)", s.name, s.source.display(), s.probes.len());
    }
    Ok(EXIT_PASS)
}

/// The `--proxy` and `--proxy-option` flags as a proxy choice.
/// A proxy's name for a column header: its name and options, a command by its program's
/// file name and the options that tell one run from another (mode, mutant), never the
/// whole command line.
fn column_name(c: &ProxyChoice) -> String {
    let options: Vec<String> = c
        .options
        .iter()
        .map(|(k, v)| match (k.as_str(), v) {
            ("command", serde_json::Value::String(cmd)) => program_name(cmd.split_whitespace().next()),
            ("command", serde_json::Value::Array(words)) => {
                program_name(words.first().and_then(|w| w.as_str()))
            }
            (_, serde_json::Value::String(s)) => format!("{k}={s}"),
            _ => format!("{k}={v}"),
        })
        .collect();
    if options.is_empty() { c.name.clone() } else { format!("{} ({})", c.name, options.join(", ")) }
}

fn program_name(program: Option<&str>) -> String {
    let program = program.unwrap_or_default();
    Path::new(program).file_name().map_or(program.to_string(), |f| f.to_string_lossy().into_owned())
}

fn proxy_choice(name: &str, options: &[String]) -> Result<ProxyChoice> {
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

fn diff(
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
    for stale in crate::topology::remove_leftovers(false)? {
        eprintln!("packetproof: removed {stale}, left by an earlier run");
    }
    let engine = Engine { options: options.clone(), jobs };
    let mut progress = RunProgress::new(Paint::for_stdout(clap::ColorChoice::Auto));
    let diffs = crate::diff::diff(&scenarios, left, right, &engine, &mut [&mut progress])?;
    print!("{}", crate::diff::table(&column_name(left), &column_name(right), &diffs));
    Ok(if diffs.is_empty() { EXIT_PASS } else { EXIT_FAIL })
}

fn run(
    paths: &[PathBuf],
    proxy_override: Option<&ProxyChoice>,
    options: &RunOptions,
    jobs: Option<usize>,
    outputs: MachineReports,
    paint: Paint,
) -> Result<i32> {
    let Some(scenarios) = load_all(paths)? else { return Ok(EXIT_ERROR) };
    if let Some(choice) = proxy_override {
        proxy::build(choice, Path::new("."))?;
    }
    for stale in crate::topology::remove_leftovers(false)? {
        eprintln!("packetproof: removed {stale}, left by an earlier run");
    }
    let engine = Engine { options: options.clone(), jobs: jobs.unwrap_or_else(Engine::default_jobs) };
    let mut terminal = TerminalReport::new(paint);
    let mut outputs = outputs;
    engine.execute(&Run::each(&scenarios, proxy_override), &mut [&mut terminal, &mut outputs])?;
    let summary = terminal.summary.context("the suite never finished")?;
    let code = if summary.errors > 0 {
        EXIT_ERROR
    } else if summary.failed {
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

fn rules(file: &std::path::Path, node: Option<&str>, proxy_name: &str) -> Result<i32> {
    let Some(mut scenarios) = load_all(&[file.to_path_buf()])? else { return Ok(EXIT_ERROR) };
    let s = scenarios.remove(0);
    let node = match node {
        Some(n) => n.to_string(),
        None => s.cluster.nodes.first().context("the scenario has no nodes")?.name.clone(),
    };
    anyhow::ensure!(s.cluster.node(&node).is_some(), "no node {node:?} in {}", file.display());
    let text = match proxy_name {
        proxy::iptables::NAME => proxy::iptables::render_node(&s.cluster, &node, None),
        proxy::nftables::NAME => proxy::nftables::render_node(&s.cluster, &node, None),
        proxy::ipvs::NAME => proxy::ipvs::render_node(&s.cluster, &node, None),
        proxy::nftables::NAME_V1_31 => {
            proxy::nftables::render_node_in(&s.cluster, &node, None, proxy::nftables::Layout::V1_31)
        }
        other => anyhow::bail!("no rules to print for proxy {other:?} (built-in proxies only)"),
    };
    print!("{text}");
    Ok(EXIT_PASS)
}

fn mutants(
    suite: &[PathBuf],
    only: &[String],
    first_kill: bool,
    proxy_name: &str,
    json: Option<&std::path::Path>,
) -> Result<i32> {
    let breakable = crate::mutants::breakable(proxy_name)
        .with_context(|| format!("no mutants of proxy {proxy_name:?} (built-in proxies only)"))?;
    let Some(scenarios) = load_all(suite)? else { return Ok(EXIT_ERROR) };
    if let Some(reason) = runner::preflight() {
        anyhow::bail!("cannot hunt mutants here: {reason}");
    }
    let chosen: Vec<_> = if only.is_empty() {
        crate::mutants::catalog(proxy_name)
    } else {
        only.iter()
            .map(|name| name.parse().map_err(|_| anyhow::anyhow!("no mutant {name:?}")))
            .collect::<Result<_>>()?
    };
    let total = chosen.len();
    let done = std::sync::atomic::AtomicUsize::new(0);
    // A probe that fails unbroken (a behaviour of this proxy the oracle does not expect)
    // kills nothing.
    let baseline = crate::mutants::baseline(&scenarios, breakable)?;
    for (scenario, probe) in &baseline {
        println!("baseline: {scenario}/{probe} fails unbroken; its failures kill no mutant");
    }
    let paint = Paint::for_stdout(clap::ColorChoice::Auto);
    // Mutants are hunted one after another: when one ends, the next begins.
    let progress = Progress::new(total, paint);
    if let Some(first) = chosen.first() {
        progress.started(first.name());
    }
    let hunts = crate::mutants::hunt(&scenarios, &chosen, first_kill, breakable, &baseline, |h| {
        let n = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let verdict = if h.killed() { paint.pass("killed") } else { paint.fail("SURVIVED") };
        let mut text = format!("[{n}/{total}] {verdict} {} by {}\n", h.mutant.name(), h.killed_by.join(", "));
        for e in &h.errors {
            text.push_str(&format!("        setup error: {e}\n"));
        }
        progress.finished(h.mutant.name(), &text);
        if let Some(next) = chosen.get(n) {
            progress.started(next.name());
        }
    });
    progress.finish();
    println!("\n{}", crate::mutants::table(&hunts));
    for (mutant, why) in crate::mutants::not_observable(proxy_name) {
        println!("not hunted: {}: {why}", mutant.name());
    }
    if let Some(path) = json {
        std::fs::write(path, crate::mutants::json(proxy_name, &hunts, &baseline)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let survivors = hunts.iter().filter(|h| !h.killed()).count();
    println!("{} killed, {survivors} survived", hunts.len() - survivors);
    Ok(if survivors == 0 { EXIT_PASS } else { EXIT_FAIL })
}

fn cleanup(all: bool) -> Result<i32> {
    let removed = crate::topology::remove_leftovers(all)?;
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
    fn a_diff_column_names_a_command_by_its_program() {
        let choice = proxy_choice(
            "apiserver",
            &["mode=nftables".into(), "command=/opt/k8s/kube-proxy --config={config} --v=2".into()],
        )
        .unwrap();
        assert_eq!(column_name(&choice), "apiserver (kube-proxy, mode=nftables)");
        assert_eq!(
            column_name(&proxy_choice("builtin-iptables", &["mutant=x".into()]).unwrap()),
            "builtin-iptables (mutant=x)"
        );
    }
}
