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
        /// not judged. A kube-proxy profile may name the release whose choices it states
        /// (`kube-proxy-nftables@v1.30`; v1.30 to v1.34); without `@`, the newest.
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
        /// Instead: measure with real packets at these counts of generated Services (2
        /// endpoints each on 2 nodes; e.g. `1000,5000,10000`): start to synced, four API
        /// changes from the change to the first packet on the new path, connect time to the
        /// first and last Service, peak memory. `--proxy` (default: builtin-iptables, then
        /// builtin-nftables).
        #[arg(long, value_name = "N,N,…", value_delimiter = ',')]
        scale: Vec<usize>,
        /// With `--scale`: rounds per proxy and count, each a fresh topology and proxy start.
        #[arg(long, default_value_t = 5, requires = "scale")]
        rounds: usize,
        /// With `--scale`: connect times taken to each of the first and last Service per round.
        #[arg(long, default_value_t = 20, requires = "scale")]
        connects: usize,
        /// With `--scale`: write every sample and summary (and the gate's verdict) as JSON here.
        #[arg(long, requires = "scale")]
        json: Option<PathBuf>,
        /// With `--scale`: the performance gate against this proxy, measured in turns with
        /// `--proxy`; exit 1 if `--proxy` regressed.
        #[arg(long, requires = "scale", conflicts_with = "baseline")]
        against: Option<String>,
        /// An option for `--against`, `KEY=VALUE`; repeatable.
        #[arg(long = "against-option", value_name = "KEY=VALUE", requires = "against")]
        against_options: Vec<String>,
        /// With `--scale`: the performance gate against an earlier `--json` report.
        #[arg(long, requires = "scale")]
        baseline: Option<PathBuf>,
        /// The gate: a figure regressed when its median is at least this many times the
        /// baseline's (and the two conditions below hold).
        #[arg(long, default_value_t = 1.5)]
        gate_ratio: f64,
        /// The gate: ... and the one-sided Mann–Whitney U test gives p below this.
        #[arg(long, default_value_t = 0.01)]
        gate_alpha: f64,
        /// The gate: ... and the medians differ by at least this many milliseconds.
        #[arg(long, default_value_t = 1.0)]
        gate_floor_ms: f64,
        /// One round of `--scale` (one count, one proxy), its figures written to this file:
        /// how `--scale` runs each round as a process of its own.
        #[arg(long, hide = true, requires = "scale")]
        scale_round: Option<PathBuf>,
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
        /// Milliseconds an attempt waits for an answer before it counts as silent (10 to 60000);
        /// one the oracle expects to be silent waits three tenths of it (its captures decide).
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
    /// Generate clusters nobody wrote, probe every flow the oracle defines, judge them as `run`
    /// does; shrink each confirmed failure to a scenario file. Exit 1 if any case failed.
    Explore(commands::explore::Args),
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
        Command::Bench { scale, proxy, proxy_options, connects, scale_round: Some(out), .. } => {
            let side = commands::bench::Side {
                proxy: proxy.unwrap_or_else(|| proxy::iptables::NAME.into()),
                options: proxy_options,
            };
            match scale.as_slice() {
                [services] => Ok(commands::bench::scale_round(*services, &side, connects, &out)),
                _ => Err(anyhow::anyhow!("a round takes one count of Services")),
            }
        }
        Command::Bench {
            scale,
            proxy,
            proxy_options,
            rounds,
            connects,
            json,
            against,
            against_options,
            baseline,
            gate_ratio,
            gate_alpha,
            gate_floor_ms,
            ..
        } if !scale.is_empty() => {
            use commands::bench::{Baseline, Side};
            let proxies = match proxy {
                Some(proxy) => vec![Side { proxy, options: proxy_options }],
                None if against.is_some() || baseline.is_some() => {
                    vec![Side { proxy: proxy::iptables::NAME.into(), options: vec![] }]
                }
                None => [proxy::iptables::NAME, proxy::nftables::NAME]
                    .map(|p| Side { proxy: p.into(), options: vec![] })
                    .into(),
            };
            let baseline = match (against, baseline) {
                (Some(proxy), _) => Some(Baseline::Proxy(Side { proxy, options: against_options })),
                (None, Some(path)) => Some(Baseline::File(path)),
                (None, None) => None,
            };
            let thresholds =
                commands::bench::Thresholds { ratio: gate_ratio, alpha: gate_alpha, floor_ms: gate_floor_ms };
            commands::bench::scale(&commands::bench::ScaleArgs {
                scales: scale,
                proxies,
                baseline,
                rounds,
                connects,
                json,
                thresholds,
            })
        }
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
        Command::Explore(args) => commands::explore::main(args),
        Command::ReferenceProxy(args) => crate::proxy::reference::main(args).map(|()| EXIT_PASS),
    };
    result.unwrap_or_else(|e| {
        eprintln!("packetproof: {e:#}");
        EXIT_ERROR
    })
}
