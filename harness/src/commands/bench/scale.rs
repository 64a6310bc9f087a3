//! `bench --scale`: per proxy and per count of generated Services, the figures of
//! [`round`](super::round) over several rounds, each round a process of its own, as a table
//! and as JSON; with `--against` or `--baseline`, the performance gate's verdict on them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use super::figures::{FIGURES, Figure, Measured, Side, value};
use super::gate::{self, Thresholds};
use super::round::RoundFigures;
use super::scenario::Change;
use super::stats::Summary;
use crate::commands::{EXIT_ERROR, EXIT_FAIL, EXIT_PASS};

/// What the command line asked for.
pub struct ScaleArgs {
    pub scales: Vec<usize>,
    /// The proxies measured (the candidate first when gating): name and `KEY=VALUE` options.
    pub proxies: Vec<Side>,
    /// The baseline to gate against: another proxy measured now, or an earlier `--json`.
    pub baseline: Option<Baseline>,
    pub rounds: usize,
    pub connects: usize,
    pub json: Option<PathBuf>,
    pub thresholds: Thresholds,
}

pub enum Baseline {
    Proxy(Side),
    File(PathBuf),
}

/// The JSON report.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Report {
    pub cores: usize,
    pub kernel: String,
    pub results: Vec<Measured>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<gate::Verdict>,
}

fn change_key(change: Change) -> &'static str {
    match change {
        Change::AddService => "add-service",
        Change::RemoveEndpoint => "remove-endpoint",
        Change::ScaleUp => "scale-up",
        Change::DeleteService => "delete-service",
    }
}

/// Runs the rounds, prints the table, writes the JSON, and gates: the exit code.
pub fn main(args: &ScaleArgs) -> Result<i32> {
    if args.scales.is_empty() || args.scales.iter().any(|&n| n == 0 || n > crate::commands::bench::MAX_SCALE)
    {
        bail!("--scale takes counts of Services from 1 to {}", crate::commands::bench::MAX_SCALE);
    }
    if args.rounds == 0 {
        bail!("--rounds must be at least 1");
    }
    let baseline_file = match &args.baseline {
        Some(Baseline::File(path)) => Some(read_report(path)?),
        _ => None,
    };
    let mut sides = args.proxies.clone();
    if let Some(Baseline::Proxy(side)) = &args.baseline {
        sides.push(side.clone());
    }
    let exe = std::env::current_exe().context("finding this program to run its rounds")?;
    let scratch = std::env::temp_dir().join(format!("packetproof-bench-rounds-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let measured = measure_all(&exe, &scratch, &sides, args);
    let _ = std::fs::remove_dir_all(&scratch);
    let results = match measured {
        Ok(results) => results,
        Err(RoundFailed::Proxy(message)) => {
            eprintln!("packetproof: {message}");
            return Ok(EXIT_FAIL);
        }
        Err(RoundFailed::Other(e)) => return Err(e),
    };
    for m in &results {
        print_table(m);
    }
    let verdict = match (&args.baseline, baseline_file) {
        (None, _) => None,
        (Some(Baseline::Proxy(_)), _) => {
            // Per scale, one result per side in `sides`' order: the baseline is the last.
            let (baseline, candidate): (Vec<_>, Vec<_>) =
                results.iter().enumerate().partition(|(i, _)| i % sides.len() == sides.len() - 1);
            let strip =
                |v: Vec<(usize, &Measured)>| v.into_iter().map(|(_, m)| m.clone()).collect::<Vec<_>>();
            let (baseline, candidate) = (strip(baseline), strip(candidate));
            Some(gate::judge(&candidate, &baseline, &args.thresholds)?)
        }
        (Some(Baseline::File(_)), Some(file)) => {
            Some(gate::judge(&results, &file.results, &args.thresholds)?)
        }
        (Some(Baseline::File(_)), None) => unreachable!("read above"),
    };
    if let Some(v) = &verdict {
        gate::print(v);
    }
    let report = Report { cores: cores(), kernel: kernel(), results, gate: verdict };
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(match &report.gate {
        Some(v) if v.regressed() => EXIT_FAIL,
        _ => EXIT_PASS,
    })
}

fn read_report(path: &Path) -> Result<Report> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text)
        .with_context(|| format!("{} is not a `bench --scale --json` report", path.display()))
}

enum RoundFailed {
    Proxy(String),
    Other(anyhow::Error),
}

impl From<anyhow::Error> for RoundFailed {
    fn from(e: anyhow::Error) -> Self {
        RoundFailed::Other(e)
    }
}

/// Every round of every side at every scale; the sides alternate round by round, so that a
/// change in the machine's load meets them alike.
fn measure_all(
    exe: &Path,
    scratch: &Path,
    sides: &[Side],
    args: &ScaleArgs,
) -> Result<Vec<Measured>, RoundFailed> {
    let mut results = Vec::new();
    for &services in &args.scales {
        let mut rounds: Vec<Vec<RoundFigures>> = vec![Vec::new(); sides.len()];
        let mut walls = vec![0.0; sides.len()];
        for round in 0..args.rounds {
            for (i, side) in sides.iter().enumerate() {
                eprintln!("{} Services, round {}/{}: {}", services, round + 1, args.rounds, side.label());
                let out = scratch.join(format!("{services}-{round}-{i}.json"));
                let t = Instant::now();
                rounds[i].push(one_round(exe, &out, side, services, args.connects)?);
                walls[i] += t.elapsed().as_secs_f64();
            }
        }
        for ((side, figures), wall) in sides.iter().zip(rounds).zip(walls) {
            results.push(summarise(side, services, &figures, wall));
        }
    }
    Ok(results)
}

/// Runs `packetproof bench --scale-round` for one round and reads its figures back.
fn one_round(
    exe: &Path,
    out: &Path,
    side: &Side,
    services: usize,
    connects: usize,
) -> Result<RoundFigures, RoundFailed> {
    let mut command = Command::new(exe);
    command.args(["bench", "--scale", &services.to_string(), "--connects", &connects.to_string()]);
    command.arg("--proxy").arg(&side.proxy);
    for option in &side.options {
        command.arg("--proxy-option").arg(option);
    }
    command.arg("--scale-round").arg(out);
    let status = command.status().context("running a round")?;
    match status.code() {
        Some(EXIT_PASS) => {
            let text = std::fs::read(out).context("reading a round's figures")?;
            Ok(serde_json::from_slice(&text).context("a round's figures")?)
        }
        Some(EXIT_FAIL) => Err(RoundFailed::Proxy(format!(
            "{} failed a round at {services} Services (its message is above)",
            side.label()
        ))),
        _ => Err(RoundFailed::Other(anyhow::anyhow!(
            "a round of {} at {services} Services ended with {status}",
            side.label()
        ))),
    }
}

fn summarise(side: &Side, services: usize, rounds: &[RoundFigures], wall_s: f64) -> Measured {
    let mut samples: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for r in rounds {
        samples.entry("start-to-synced").or_default().push(r.start_ms);
        for (change, ms) in &r.wire_ms {
            samples.entry(change_key(*change)).or_default().push(*ms);
        }
        for (change, ms) in &r.synced_ms {
            let key = match change {
                Change::AddService => "add-service-synced",
                Change::RemoveEndpoint => "remove-endpoint-synced",
                Change::ScaleUp => "scale-up-synced",
                Change::DeleteService => "delete-service-synced",
            };
            samples.entry(key).or_default().push(*ms);
        }
        samples.entry("connect-first").or_default().extend(&r.connect_first_us);
        samples.entry("connect-last").or_default().extend(&r.connect_last_us);
    }
    let figures = FIGURES
        .iter()
        .filter_map(|(key, _, unit, _)| {
            let s = samples.remove(key)?;
            let summary = Summary::of(&s)?;
            Some((key.to_string(), Figure { unit: unit.to_string(), summary, samples: s }))
        })
        .collect();
    let mb = |kb: u64| kb as f64 / 1024.0;
    Measured {
        side: side.clone(),
        services,
        rounds: rounds.len(),
        figures,
        harness_peak_mb: mb(rounds.iter().map(|r| r.harness_peak_kb).max().unwrap_or(0)),
        proxy_peak_mb: mb(rounds.iter().map(|r| r.proxy_peak_kb).max().unwrap_or(0)),
        wall_s,
    }
}

pub fn print_table(m: &Measured) {
    println!(
        "{} · {} Services (2 endpoints each, 2 nodes) · {} rounds in {:.1} s",
        m.side.label(),
        m.services,
        m.rounds,
        m.wall_s
    );
    println!("  {:<46} {:>10} {:>10} {:>10} {:>8}", "figure", "min", "median", "p95", "samples");
    for (key, title, unit, _) in FIGURES {
        if let Some(f) = m.figures.get(*key) {
            let s = f.summary;
            println!(
                "  {:<46} {:>10} {:>10} {:>10} {:>8}",
                title,
                value(s.min, unit),
                value(s.median, unit),
                value(s.p95, unit),
                s.n
            );
        }
    }
    println!(
        "  peak RSS: harness {:.0} MB (its VmHWM, built-in proxies' rule models included); proxy {:.0} MB (the largest child process, getrusage)",
        m.harness_peak_mb, m.proxy_peak_mb
    );
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn kernel() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").map(|s| s.trim().to_string()).unwrap_or_default()
}

/// A `--proxy` and its options are checked before any round runs (a typo is exit 2 at once).
pub fn check_side(side: &Side) -> Result<()> {
    let choice = crate::commands::proxy_choice(&side.proxy, &side.options)?;
    crate::proxy::build(&choice, &std::env::current_dir()?).map(drop)
}

pub fn exit_code_of(e: &anyhow::Error) -> i32 {
    if e.downcast_ref::<super::round::ProxyFault>().is_some() { EXIT_FAIL } else { EXIT_ERROR }
}
