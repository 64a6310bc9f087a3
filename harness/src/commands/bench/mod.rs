//! `packetproof bench`: figures, never assertions. Topology build and teardown for a 2-node,
//! 8-pod cluster; the median answered TCP probe next to a bare connect-and-read between the
//! same namespaces; and the whole suite's wall time. With a proxy (`--proxy`), its time from
//! start to synced on every node and from a step's push to synced, instead. With `--scale`,
//! a proxy's figures on N generated Services, measured with real packets ([`scale`]), and the
//! performance gate ([`gate`]).

mod figures;
mod gate;
mod round;
mod scale;
mod scenario;
mod stats;
mod suite;

pub use figures::Side;
pub use gate::Thresholds;
pub use scale::{Baseline, ScaleArgs};
pub use suite::against_builtin as suite_against_builtin;

/// The most Services `--scale` takes: what `spec.generate` allows in one file.
pub const MAX_SCALE: usize = 100_000;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::engine::{Engine, Run};
use crate::model::{Cluster, ContainerPort, ExternalHost, Node, PerFamily, Pod, Protocol};
use crate::runner::RunOptions;
use crate::stage::Stage;
use crate::topology::Topology;
use crate::traffic::client::SourcePorts;
use crate::traffic::{Attempt, Prober};

/// `bench --scale`: every round, the table, the JSON and the gate; the exit code.
pub fn scale(args: &ScaleArgs) -> Result<i32> {
    for side in args.proxies.iter().chain(match &args.baseline {
        Some(Baseline::Proxy(side)) => Some(side),
        _ => None,
    }) {
        scale::check_side(side)?;
    }
    scale::main(args)
}

/// One round of `bench --scale` (what [`scale`] runs as a process of its own): its figures to
/// `out`; the exit code (1 when the proxy failed at its job).
pub fn scale_round(services: usize, side: &Side, connects: usize, out: &Path) -> i32 {
    let result = crate::commands::proxy_choice(&side.proxy, &side.options)
        .and_then(|choice| round::run(services, &choice, connects, out));
    match result {
        Ok(()) => crate::commands::EXIT_PASS,
        Err(e) => {
            eprintln!("packetproof: {e:#}");
            scale::exit_code_of(&e)
        }
    }
}

const TOPOLOGY_ROUNDS: usize = 20;
const BENCH_PORT: u16 = 8080;

/// `coverage_rounds`: besides the suite's figure, its wall time without and with rule coverage
/// measured (`run --coverage`), that many rounds of each taken in turns.
pub fn run(suite: &Path, round_trips: u32, coverage_rounds: usize) -> Result<()> {
    if let Some(reason) = crate::privileges::preflight() {
        anyhow::bail!("cannot benchmark here: {reason}");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    let cluster = two_nodes_eight_pods();

    // The kernel frees a torn-down namespace afterwards (its cleanup work queue), so every
    // build but the first may pay for the one before: the whole rounds, back to back, are what
    // a run of many scenarios really pays per topology.
    let (mut builds, mut teardowns) = (Vec::new(), Vec::new());
    let rounds = Instant::now();
    for _ in 0..TOPOLOGY_ROUNDS {
        let t = Instant::now();
        let topology = runtime.block_on(Topology::build(&cluster))?;
        builds.push(t.elapsed());
        let t = Instant::now();
        topology.teardown()?;
        teardowns.push(t.elapsed());
    }
    let per_round = rounds.elapsed() / TOPOLOGY_ROUNDS as u32;
    let first = builds.first().copied().unwrap_or_default();
    println!(
        "topology 2 nodes, 8 pods, 1 external host: build median {} (min {}, first {} before any teardown), teardown median {}, a round of both back to back {} on average  [{TOPOLOGY_ROUNDS} rounds]",
        ms(median(&mut builds)),
        ms(*builds.iter().min().unwrap_or(&Duration::ZERO)),
        ms(first),
        ms(median(&mut teardowns)),
        ms(per_round),
    );

    let (probe, raw) = round_trips_between_nodes(&cluster, round_trips)?;
    println!(
        "TCP round trip pod-a0 -> pod-b0 (other node): probe median {}, raw connect+read median {}, ratio {:.2}  [{round_trips} each]",
        us(probe),
        us(raw),
        probe.as_secs_f64() / raw.as_secs_f64()
    );

    let t = Instant::now();
    let Some(scenarios) = crate::commands::load_all(&[suite.to_path_buf()])? else {
        anyhow::bail!("the suite at {} has invalid scenarios", suite.display());
    };
    let count = scenarios.len();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let failed = run_suite(&scenarios, None, false)?;
    println!(
        "suite {}: {count} scenarios in {:.2}s wall on {cores} cores ({failed} failed)",
        suite.display(),
        t.elapsed().as_secs_f64(),
    );
    if coverage_rounds > 0 {
        let (mut plain, mut traced) = (Vec::new(), Vec::new());
        let (mut plain_failed, mut traced_failed) = (0, 0);
        for _ in 0..coverage_rounds {
            let t = Instant::now();
            plain_failed = plain_failed.max(run_suite(&scenarios, None, false)?);
            plain.push(t.elapsed());
            let t = Instant::now();
            traced_failed = traced_failed.max(run_suite(&scenarios, None, true)?);
            traced.push(t.elapsed());
        }
        let (plain, traced) = (median(&mut plain), median(&mut traced));
        println!(
            "suite {} with rule coverage: median {:.2}s against {:.2}s without, ratio {:.2} on {cores} cores \
             (at most {traced_failed} failed with, {plain_failed} without)  [{coverage_rounds} rounds each, in turns]",
            suite.display(),
            traced.as_secs_f64(),
            plain.as_secs_f64(),
            traced.as_secs_f64() / plain.as_secs_f64(),
        );
    }
    Ok(())
}

/// Runs every scenario as `packetproof run` does (with `proxy` instead of each scenario's own,
/// where given; with rule coverage measured, or not); returns how many failed.
fn run_suite(
    scenarios: &[crate::model::Scenario],
    proxy: Option<&crate::model::ProxyChoice>,
    coverage: bool,
) -> Result<usize> {
    let options = RunOptions { coverage, ..RunOptions::default() };
    let engine = Engine { options, jobs: Engine::default_jobs() };
    let results = engine.execute(&Run::each(scenarios, proxy), &mut [])?;
    let fine = |r: &crate::results::ScenarioReport| {
        r.passed() || matches!(r.outcome, crate::results::Outcome::Skipped(_))
    };
    Ok(results.iter().filter(|(_, r)| !r.as_ref().is_ok_and(fine)).count())
}

fn round_trips_between_nodes(cluster: &Cluster, n: u32) -> Result<(Duration, Duration)> {
    Stage::build(cluster, &Default::default())?.play(|scene| {
        scene.start_servers(cluster, [])?;
        let target = cluster.pod("pod-b0").context("bench pod")?;
        let dst = std::net::SocketAddr::new(target.ip(), BENCH_PORT);
        let pod_a0 = &scene.topology().pods["pod-a0"];
        let prober = Prober::new(pod_a0, SourcePorts::default(), Duration::from_secs(1))?;
        // Warm up neighbour tables so the first samples do not time ARP.
        prober.probe(Protocol::Tcp, dst, 3)?;
        let mut probes = Vec::new();
        let mut raws = Vec::new();
        for _ in 0..n {
            let t = Instant::now();
            let attempt = prober.probe(Protocol::Tcp, dst, 1)?;
            probes.push(t.elapsed());
            anyhow::ensure!(
                matches!(attempt.as_slice(), [Attempt::Answered { .. }]),
                "bench probe failed: {attempt:?}"
            );
            let t = Instant::now();
            prober.raw_tcp_round_trip(dst)?.context("raw round trip")?;
            raws.push(t.elapsed());
        }
        Ok((median(&mut probes), median(&mut raws)))
    })
}

/// The bench cluster: nodes a and b, four pods each serving TCP 8080, one external host.
pub(crate) fn two_nodes_eight_pods() -> Cluster {
    let ip = |s: &str| s.parse().expect("literal address");
    let net = |s: &str| s.parse().expect("literal CIDR");
    let nodes = vec![
        Node {
            zone: None,
            name: "node-a".into(),
            ips: PerFamily::single(ip("192.168.50.11")),
            secondary_ips: vec![],
            pod_cidrs: PerFamily::single(net("10.244.1.0/24")),
        },
        Node {
            zone: None,
            name: "node-b".into(),
            ips: PerFamily::single(ip("192.168.50.12")),
            secondary_ips: vec![],
            pod_cidrs: PerFamily::single(net("10.244.2.0/24")),
        },
    ];
    let pods = (0..8)
        .map(|i| {
            let (node, subnet) = if i % 2 == 0 { ("a", 1) } else { ("b", 2) };
            Pod {
                namespace: "default".into(),
                name: format!("pod-{node}{}", i / 2),
                node: format!("node-{node}"),
                ips: PerFamily::single(ip(&format!("10.244.{subnet}.{}", 10 + i / 2))),
                labels: Default::default(),
                ports: vec![ContainerPort { name: None, port: BENCH_PORT, protocol: Protocol::Tcp }],
            }
        })
        .collect();
    Cluster {
        second_family: None,
        pod_cidr: net("10.244.0.0/16"),
        service_cidr: net("10.96.0.0/12"),
        node_network: net("192.168.50.0/24"),
        nodes,
        external_hosts: vec![ExternalHost {
            name: "outside".into(),
            ips: PerFamily::single(ip("192.168.50.100")),
            routes: vec![],
        }],
        pods,
        services: Vec::new(),
        proxy: Default::default(),
    }
}

/// Starts `choice` on the first state of `scenario` `rounds` times and pushes each of its steps:
/// how long until every node reported the state applied (the adapter's own sync wait).
pub(crate) fn sync_times(scenario: &Path, choice: &crate::model::ProxyChoice, rounds: usize) -> Result<()> {
    if let Some(reason) = crate::privileges::preflight() {
        anyhow::bail!("cannot benchmark here: {reason}");
    }
    let Some(mut loaded) = crate::commands::load_all(&[scenario.to_path_buf()])? else {
        anyhow::bail!("{} is not a valid scenario", scenario.display());
    };
    let scenario = loaded.pop().context("no scenario")?;
    let proxy = crate::proxy::build(choice, crate::model::folder_of(&scenario.source))?;
    let phases = scenario.phases();
    let state = |i: usize| crate::proxy::State { cluster: phases[i].cluster, objects: phases[i].objects };
    let (mut starts, mut updates) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        Stage::build(&scenario.cluster, &Default::default())?.play(|scene| {
            let t = Instant::now();
            scene.start_proxy(proxy.as_ref(), &state(0), &scenario.source)?;
            starts.push(t.elapsed());
            for i in 1..phases.len() {
                let t = Instant::now();
                scene.update(&state(i))?;
                updates.push(t.elapsed());
            }
            Ok(())
        })?;
    }
    let figure = |samples: &mut Vec<Duration>| {
        if samples.is_empty() {
            return "none (no steps)".to_string();
        }
        let max = samples.iter().max().copied().unwrap_or_default();
        format!("median {} (max {})", ms(median(samples)), ms(max))
    };
    println!(
        "{} on {} ({} nodes): start to synced {}; a step to synced {}  [{rounds} rounds]",
        proxy.name(),
        scenario.name,
        scenario.cluster.nodes.len(),
        figure(&mut starts),
        figure(&mut updates),
    );
    Ok(())
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples.get(samples.len() / 2).copied().unwrap_or_default()
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn us(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

/// `packetproof bench`'s arguments: the figure it takes is chosen by which are given.
#[derive(clap::Args)]
pub struct Args {
    /// Scenarios for the whole-suite figure.
    #[arg(default_value = "scenarios")]
    pub suite: PathBuf,
    /// Round trips to time for the probe figure.
    #[arg(long, default_value_t = 500)]
    pub round_trips: u32,
    /// Also time the suite without and with rule coverage (`run --coverage`), this many
    /// rounds of each in turns, and print the ratio of the medians.
    #[arg(long, value_name = "ROUNDS", default_value_t = 0)]
    pub coverage_rounds: usize,
    /// Instead: time this proxy from start to synced, and each step's push to synced, on
    /// the scenario `--sync-scenario`.
    #[arg(long)]
    pub proxy: Option<String>,
    /// An option for `--proxy`, `KEY=VALUE` (as `run --proxy-option`); repeatable.
    #[arg(long = "proxy-option", value_name = "KEY=VALUE")]
    pub proxy_options: Vec<String>,
    /// The scenario whose start and steps are timed with `--proxy`.
    #[arg(long, default_value = "scenarios/live-stale-udp-conntrack.yaml")]
    pub sync_scenario: PathBuf,
    /// Times each figure is taken, for its median and spread.
    #[arg(long, default_value_t = 10)]
    pub sync_rounds: usize,
    /// With `--proxy`, instead: time the whole suite with `--proxy` and with the built-in
    /// proxy of its mode (its `mode` option), this many rounds of each in turns, and print
    /// both medians, their CPU and the ratio. Judge a real kube-proxy under its profile
    /// (`--proxy-option profile=kube-proxy-iptables@v1.30`).
    #[arg(long, value_name = "ROUNDS", default_value_t = 0, requires = "proxy", conflicts_with = "scale")]
    pub suite_rounds: usize,
    /// Instead: measure with real packets at these counts of generated Services (2
    /// endpoints each on 2 nodes; e.g. `1000,5000,10000`): start to synced, four API
    /// changes from the change to the first packet on the new path, connect time to the
    /// first and last Service, peak memory. `--proxy` (default: builtin-iptables, then
    /// builtin-nftables).
    #[arg(long, value_name = "N,N,…", value_delimiter = ',')]
    pub scale: Vec<usize>,
    /// With `--scale`: rounds per proxy and count, each a fresh topology and proxy start.
    #[arg(long, default_value_t = 5, requires = "scale")]
    pub rounds: usize,
    /// With `--scale`: connect times taken to each of the first and last Service per round.
    #[arg(long, default_value_t = 20, requires = "scale")]
    pub connects: usize,
    /// With `--scale`: write every sample and summary (and the gate's verdict) as JSON here.
    #[arg(long, requires = "scale")]
    pub json: Option<PathBuf>,
    /// With `--scale`: the performance gate against this proxy, measured in turns with
    /// `--proxy`; exit 1 if `--proxy` regressed.
    #[arg(long, requires = "scale", conflicts_with = "baseline")]
    pub against: Option<String>,
    /// An option for `--against`, `KEY=VALUE`; repeatable.
    #[arg(long = "against-option", value_name = "KEY=VALUE", requires = "against")]
    pub against_options: Vec<String>,
    /// With `--scale`: the performance gate against an earlier `--json` report.
    #[arg(long, requires = "scale")]
    pub baseline: Option<PathBuf>,
    /// The gate: a figure regressed when its median is at least this many times the
    /// baseline's (and the two conditions below hold).
    #[arg(long, default_value_t = 1.5)]
    pub gate_ratio: f64,
    /// The gate: ... and the one-sided Mann–Whitney U test gives p below this.
    #[arg(long, default_value_t = 0.01)]
    pub gate_alpha: f64,
    /// The gate: ... and the medians differ by at least this many milliseconds.
    #[arg(long, default_value_t = 1.0)]
    pub gate_floor_ms: f64,
    /// One round of `--scale` (one count, one proxy), its figures written to this file:
    /// how `--scale` runs each round as a process of its own.
    #[arg(long, hide = true, requires = "scale")]
    pub scale_round: Option<PathBuf>,
}

/// Takes the figure the arguments choose: one round of `--scale` (as its own process), the
/// scale figures, the suite's own figures, the suite against the built-in of a proxy's mode, or
/// a proxy's sync times.
pub fn main(args: Args) -> Result<i32> {
    use crate::commands::{EXIT_PASS, proxy_choice};
    use crate::proxy;
    match args {
        Args { scale, proxy, proxy_options, connects, scale_round: Some(out), .. } => {
            let side =
                Side { proxy: proxy.unwrap_or_else(|| proxy::iptables::NAME.into()), options: proxy_options };
            match scale.as_slice() {
                [services] => Ok(scale_round(*services, &side, connects, &out)),
                _ => Err(anyhow::anyhow!("a round takes one count of Services")),
            }
        }
        Args {
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
            let thresholds = Thresholds { ratio: gate_ratio, alpha: gate_alpha, floor_ms: gate_floor_ms };
            self::scale(&ScaleArgs { scales: scale, proxies, baseline, rounds, connects, json, thresholds })
        }
        Args { suite, round_trips, coverage_rounds, proxy: None, .. } => {
            run(&suite, round_trips, coverage_rounds).map(|()| EXIT_PASS)
        }
        Args { suite, proxy: Some(name), proxy_options, suite_rounds: rounds @ 1.., .. } => {
            proxy_choice(&name, &proxy_options)
                .and_then(|choice| suite_against_builtin(&suite, &choice, rounds))
                .map(|()| EXIT_PASS)
        }
        Args { proxy: Some(name), proxy_options, sync_scenario, sync_rounds, .. } => {
            proxy_choice(&name, &proxy_options)
                .and_then(|choice| sync_times(&sync_scenario, &choice, sync_rounds))
                .map(|()| EXIT_PASS)
        }
    }
}
