//! The `packetproof` command line: clap's parsing only; each subcommand is a function of
//! `commands`, which returns the exit code.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::commands::{self, EXIT_ERROR, EXIT_PASS, default_paths, proxy_choice};
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
    Run(commands::run::Args),
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
        #[arg(long, default_value = crate::model::DEFAULT_PROXY)]
        proxy: String,
    },
    /// Measure topology build and teardown, probe round trips and the whole suite.
    Bench(commands::bench::Args),
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
        #[arg(long, default_value = crate::model::DEFAULT_PROXY)]
        proxy: String,
        /// Write every mutant's verdict as JSON here (what `matrix --mutants` reads back).
        #[arg(long)]
        json: Option<PathBuf>,
        /// Scenario runs at once, over all mutants: several mutants are hunted at a time
        /// (default: four per core; 1 to 256).
        #[arg(long, value_parser = crate::commands::jobs)]
        jobs: Option<usize>,
        /// Hunt only slice K of N of the chosen mutants (`hash:K/N` by name, or `count:K/N`),
        /// to spread the hunt over machines.
        #[arg(long, value_name = "hash:K/N|count:K/N")]
        partition: Option<commands::partition::Partition>,
        /// Build every run's namespaces afresh, instead of each worker resetting its last
        /// run's and running the next mutant of the same scenario on them (slower; the verdicts
        /// are the same).
        #[arg(long)]
        fresh_topologies: bool,
        /// Also run each scenario in whose every state a mutant's rules are the unbroken
        /// proxy's (such a run cannot kill the mutant; by default it is not made).
        #[arg(long)]
        every_run: bool,
    },
    /// Join the JSON reports of a suite's slices (`run --partition`), kernels and modes (`run
    /// --json`, `matrix --json`) into one verdict: one count, the known bugs matched over all
    /// of them, and `run`'s exit code. Reports of different releases, overlapping slices and
    /// missing slices are refused (exit 2). Exploration reports (`explore --json`, slices of
    /// `explore --partition`) merge likewise, with `explore`'s exit code.
    Merge {
        /// The JSON reports.
        #[arg(required = true)]
        reports: Vec<PathBuf>,
        /// Write the merged JSON report here.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Write the merged JUnit XML report here.
        #[arg(long)]
        junit: Option<PathBuf>,
        /// Colour the report: auto (a terminal, unless NO_COLOR is set), always or never.
        #[arg(long, value_name = "WHEN", default_value_t = clap::ColorChoice::Auto)]
        color: clap::ColorChoice,
    },
    /// Run scenarios with two proxies and list every flow whose observed behaviour differs
    /// (outcome, backends reached, source they saw), whether or not either side passes. Exit
    /// code 0 when none differs, 1 when some do, 2 when a side could not be set up (nothing
    /// of that scenario was compared) or every scenario was skipped.
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
        /// How many runs (one scenario with one proxy) at a time (default: four per core; 1
        /// to 256). A scenario's two sides run one after the other on one worker, the second
        /// on the first's namespaces, reset.
        #[arg(long, value_parser = crate::commands::jobs)]
        jobs: Option<usize>,
        /// Build each side's namespaces afresh instead of resetting the other side's (slower;
        /// the verdicts are the same).
        #[arg(long)]
        fresh_topologies: bool,
        /// Also write what differed as JSON (the two proxies, each differing flow with whether
        /// each side passed the oracle, each scenario not compared, the exit code).
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        /// Where a side that fails one of a scenario's probes leaves its evidence:
        /// DIR/left/SCENARIO and DIR/right/SCENARIO (summary, pcaps, conntrack, rules).
        #[arg(long, value_name = "DIR", default_value = "artifacts")]
        artifacts: PathBuf,
    },
    /// A service proxy that watches the Kubernetes API (the adapter `reference-proxy-*` runs
    /// it on every node): proves the API-server adapter without kube-proxy.
    ReferenceProxy(crate::proxy::reference::Args),
    /// Run scenarios on several kernels, each in a VM (qemu), with each proxy: one line per
    /// kernel × proxy, a combined report, exit codes as `run`.
    Matrix(commands::matrix::Args),
    /// Rule coverage across runs.
    #[command(subcommand)]
    Coverage(CoverageCommand),
    /// Generate clusters nobody wrote, probe every flow the oracle defines, judge them as `run`
    /// does; shrink each confirmed failure to a scenario file. Exit 1 if any case failed.
    Explore(commands::explore::Args),
    /// Run scenarios N times and list every verdict that changed between runs, and every
    /// harness fault: a correct proxy gets the same verdict every run.
    ///
    /// Each flip comes with its odd runs' failures and evidence (`--artifacts`/run-<i>). Exit 1
    /// if a verdict flipped or a probe failed in every run; 2 on a harness fault, a setup error,
    /// or nothing judged.
    Soak(commands::soak::Args),
    /// Remove namespaces that killed runs left behind (`--all`: also those of live runs).
    Cleanup {
        /// Also remove what runs still alive made.
        #[arg(long)]
        all: bool,
    },
}

#[derive(Subcommand)]
enum CoverageCommand {
    /// Merge the rule coverage of several runs (their `run --coverage --json` reports, or an
    /// earlier merge's output) into one table per proxy; a template is covered when any run
    /// covered it.
    Merge {
        /// JSON reports or coverage files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Write the merged tables here (a file `coverage merge` reads again).
        #[arg(long)]
        json: Option<PathBuf>,
        /// Exit 1 when fewer than PERCENT of a proxy's templates were covered.
        #[arg(long, value_name = "PERCENT", value_parser = crate::commands::percent)]
        min_coverage: Option<f64>,
        /// Also list the probes behind each covered template.
        #[arg(long)]
        show_covering: bool,
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
        Command::Run(args) => commands::run::command(args),
        Command::Check { paths, show } => commands::check::main(&default_paths(paths), show),
        Command::Rules { file, node, proxy } => commands::rules::main(&file, node.as_deref(), &proxy),
        Command::Bench(args) => commands::bench::main(args),
        Command::Mutants {
            suite,
            only,
            first_kill,
            proxy,
            json,
            jobs,
            partition,
            fresh_topologies,
            every_run,
        } => {
            let json = json.as_deref();
            commands::mutants::main(&commands::HuntArgs {
                suite: &suite,
                only: &only,
                first_kill,
                proxy: &proxy,
                json,
                jobs,
                partition,
                fresh_topologies,
                every_run,
            })
        }
        Command::Diff {
            paths,
            left,
            left_options,
            right,
            right_options,
            timeout_ms,
            jobs,
            fresh_topologies,
            json,
            artifacts,
        } => {
            let options = RunOptions {
                timeout: Duration::from_millis(timeout_ms),
                artifacts: Some(artifacts),
                reuse_topologies: !fresh_topologies,
                ..RunOptions::default()
            };
            proxy_choice(&left, &left_options).and_then(|left| {
                let right = proxy_choice(&right, &right_options)?;
                commands::diff::main(
                    &default_paths(paths),
                    &left,
                    &right,
                    &options,
                    jobs.unwrap_or_else(crate::engine::Engine::default_jobs),
                    json.as_deref(),
                )
            })
        }
        Command::Merge { reports, json, junit, color } => commands::merge::main(
            &reports,
            &commands::merge::MergeOutputs { json, junit },
            Paint::for_stdout(color),
        ),
        Command::Coverage(CoverageCommand::Merge { files, json, min_coverage, show_covering }) => {
            commands::coverage::merge(&files, json.as_deref(), min_coverage, show_covering)
        }
        Command::Cleanup { all } => commands::cleanup::main(all),
        Command::Matrix(args) => commands::matrix::main(args),
        Command::Explore(args) => commands::explore::main(args),
        Command::Soak(args) => commands::soak::main(args),
        Command::ReferenceProxy(args) => crate::proxy::reference::main(args).map(|()| EXIT_PASS),
    };
    result.unwrap_or_else(|e| {
        eprintln!("packetproof: {e:#}");
        EXIT_ERROR
    })
}
