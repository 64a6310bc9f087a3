//! `packetproof run`: scenarios judged, reported on the terminal and in the machine reports.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};

use super::{EXIT_ERROR, EXIT_FAIL, EXIT_PASS, clear_leftovers, load_all, partition};
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

/// `packetproof run`'s arguments.
#[derive(clap::Args)]
pub struct Args {
    /// Scenario files or directories of them (default: `scenarios`).
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
    /// not judged. A kube-proxy profile may name the release whose choices it states
    /// (`kube-proxy-nftables@v1.30`; v1.30 to v1.36); without `@`, the newest.
    #[arg(long)]
    profile: Option<crate::model::Profile>,
    /// Milliseconds an attempt waits for an answer before it counts as silent (10 to 60000);
    /// one the oracle expects to be silent waits three tenths of it (its captures decide).
    #[arg(long, default_value_t = 1000, value_parser = crate::commands::timeout_ms)]
    timeout_ms: u64,
    /// Scenarios run at once (default: four per core; 1 to 256).
    #[arg(long, value_parser = crate::commands::jobs)]
    jobs: Option<usize>,
    /// Where a failing scenario leaves its evidence: summary, pcaps, conntrack, rules.
    #[arg(long, default_value = "artifacts")]
    artifacts: PathBuf,
    /// Keep the evidence of passing scenarios too.
    #[arg(long)]
    keep_evidence: bool,
    /// Which scenarios' flow tables to print: `failures`, or `all` (to review what a
    /// passing scenario judged: expected, observed and why, per probe); `coverage` (with
    /// `--coverage`): failures, and the probes that covered each rule template.
    #[arg(long, value_name = "WHICH", default_value = "failures", value_parser = ["failures", "all", "coverage"])]
    show: String,
    /// Trace which of the proxy's rules each probe's packets matched (nftables, and
    /// iptables on the nft backend) and print how many rule templates the probes covered.
    #[arg(long)]
    coverage: bool,
    /// With coverage measured (implied): exit 1 when fewer than PERCENT of a proxy's rule
    /// templates were covered.
    #[arg(long, value_name = "PERCENT", value_parser = crate::commands::percent)]
    min_coverage: Option<f64>,
    /// Write a JUnit XML report here (a test case per probe).
    #[arg(long)]
    junit: Option<PathBuf>,
    /// Write a JSON report with the same content here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Run only slice K of N of the scenarios, to spread a suite over machines:
    /// `hash:K/N` (by each file's path below its folder: the same slice on every machine)
    /// or `count:K/N` (dealt in turn, in order of path). `packetproof merge` joins the
    /// slices' JSON reports into one verdict.
    #[arg(long, value_name = "hash:K/N|count:K/N")]
    partition: Option<super::partition::Partition>,
    /// Colour the report: auto (a terminal, unless NO_COLOR is set), always or never.
    #[arg(long, value_name = "WHEN", default_value_t = clap::ColorChoice::Auto)]
    color: clap::ColorChoice,
    /// A node that already exists, for the scenario node NAME: `docker:CONTAINER`,
    /// `podman:CONTAINER` (a kind node) or `netns:/PATH`; repeatable, one per scenario
    /// node. Scenarios then run one at a time (usually with `--proxy cluster`).
    #[arg(long = "node", value_name = "NAME=REF", value_parser = crate::topology::existing::parse_assignment)]
    nodes: Vec<(String, crate::topology::existing::NodeRef)>,
}

/// `packetproof run` from its arguments.
pub fn command(args: Args) -> Result<i32> {
    let Args {
        paths,
        proxy,
        proxy_options,
        profile,
        timeout_ms,
        jobs,
        artifacts,
        keep_evidence,
        show,
        junit,
        json,
        partition,
        color,
        nodes,
        coverage,
        min_coverage,
    } = args;
    // Scenarios on the same existing nodes would meet each other's rules and objects.
    let jobs = if nodes.is_empty() { jobs } else { Some(1) };
    let options = RunOptions {
        timeout: Duration::from_millis(timeout_ms),
        artifacts: Some(artifacts),
        keep_passing: keep_evidence,
        profile,
        nodes: nodes.into_iter().collect(),
        coverage: coverage || min_coverage.is_some(),
        reuse_topologies: false,
    };
    let coverage = options.coverage.then(|| engine::CoverageReport {
        show_covering: show == "coverage",
        minimum: min_coverage,
        below_minimum: Vec::new(),
    });
    let proxy = proxy.map(|name| super::proxy_choice(&name, &proxy_options)).transpose()?;
    let outputs = MachineReports { junit, json, slice: partition.map(|p| p.to_string()) };
    let paths = super::default_paths(paths);
    let chosen = Chosen { paths: &paths, partition };
    main(&chosen, proxy.as_ref(), &options, jobs, outputs, Paint::for_stdout(color), show == "all", coverage)
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
    clear_leftovers(!options.nodes.is_empty())?;
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
    engine::run_one(&Run::new(s, proxy), options, skip_reason, None)
}
