//! The `packetproof` command line: clap's parsing only; each subcommand is a function of
//! `commands`, which returns the exit code.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::commands::{
    self, EXIT_ERROR, EXIT_PASS, check, cleanup, default_paths, diff, mutants, proxy_choice, rules, run,
};
use crate::engine::MachineReports;
use crate::proxy;
use crate::report::Paint;
use crate::runner::RunOptions;

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
        /// not judged.
        #[arg(long)]
        profile: Option<crate::model::Profile>,
        /// Milliseconds an attempt waits before it counts as dropped (10 to 60000).
        #[arg(long, default_value_t = 1000, value_parser = crate::commands::timeout_ms)]
        timeout_ms: u64,
        /// Scenarios run at once (default: two per core; 1 to 256).
        #[arg(long, value_parser = crate::commands::jobs)]
        jobs: Option<usize>,
        /// Where a failing scenario leaves its evidence: summary, pcaps, conntrack, rules.
        #[arg(long, default_value = "artifacts")]
        artifacts: PathBuf,
        /// Keep the evidence of passing scenarios too.
        #[arg(long)]
        keep_evidence: bool,
        /// Which scenarios' flow tables to print: `failures`, or `all` (to review what a
        /// passing scenario judged: expected, observed and why, per probe).
        #[arg(long, value_name = "WHICH", default_value = "failures", value_parser = ["failures", "all"])]
        show: String,
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
    Check {
        /// Scenario files or directories of them (default: `scenarios`).
        paths: Vec<PathBuf>,
        /// Also print what each probe must see and why (the oracle's expectation under the
        /// scenario proxy's profile), without running anything.
        #[arg(long)]
        show: bool,
    },
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
        /// An option for `--proxy`, `KEY=VALUE` (as `run --proxy-option`); repeatable.
        #[arg(long = "proxy-option", value_name = "KEY=VALUE")]
        proxy_options: Vec<String>,
        /// The scenario whose start and steps are timed with `--proxy`.
        #[arg(long, default_value = "scenarios/live-stale-udp-conntrack.yaml")]
        sync_scenario: PathBuf,
        /// Times each figure is taken, for its median and spread.
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
        /// Scenario files or directories of them (default: `scenarios`).
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
        /// An option for the second proxy, `KEY=VALUE`; repeatable.
        #[arg(long = "right-option", value_name = "KEY=VALUE")]
        right_options: Vec<String>,
        /// Milliseconds an attempt waits before it counts as dropped (10 to 60000).
        #[arg(long, default_value_t = 1000, value_parser = crate::commands::timeout_ms)]
        timeout_ms: u64,
        /// How many runs (one scenario with one proxy) at a time (default 2: a scenario's two
        /// sides together).
        #[arg(long, default_value_t = 2, value_parser = crate::commands::jobs)]
        jobs: usize,
    },
    /// A service proxy that watches the Kubernetes API (the adapter `reference-proxy-*` runs
    /// it on every node): proves the API-server adapter without kube-proxy.
    ReferenceProxy(crate::proxy::reference::Args),
    /// Run scenarios on several kernels, each in a VM (qemu), with each proxy: one line per
    /// kernel × proxy, a combined report, exit codes as `run`.
    Matrix(commands::matrix::Args),
    /// Remove namespaces that killed runs left behind (`--all`: also those of live runs).
    Cleanup {
        /// Also remove what runs still alive made.
        #[arg(long)]
        all: bool,
    },
}

/// Parses the command line, runs the command, and returns the exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    // The matrix creates no namespace on this host; it stops its VMs on an interrupt instead.
    if !matches!(cli.command, Command::Matrix(_)) {
        crate::topology::install_interrupt_handler();
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
            show,
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
                let show_passing = show == "all";
                let paint = Paint::for_stdout(color);
                run(&default_paths(paths), proxy.as_ref(), &options, jobs, outputs, paint, show_passing)
            })
        }
        Command::Check { paths, show } => check(&default_paths(paths), show),
        Command::Rules { file, node, proxy } => rules(&file, node.as_deref(), &proxy),
        Command::Bench { suite, round_trips, proxy: None, .. } => {
            commands::bench::run(&suite, round_trips).map(|()| EXIT_PASS)
        }
        Command::Bench { proxy: Some(name), proxy_options, sync_scenario, sync_rounds, .. } => {
            proxy_choice(&name, &proxy_options)
                .and_then(|choice| commands::bench::sync_times(&sync_scenario, &choice, sync_rounds))
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
        Command::Matrix(args) => commands::matrix::main(args),
        Command::ReferenceProxy(args) => crate::proxy::reference::main(args).map(|()| EXIT_PASS),
    };
    result.unwrap_or_else(|e| {
        eprintln!("packetproof: {e:#}");
        EXIT_ERROR
    })
}
