//! `bench --proxy P --suite-rounds N`: the whole suite with a proxy and with the built-in
//! proxy of its mode, in turns on the same machine, so that "a real proxy's suite against the
//! built-in one" is one command's figure: median wall time of each, their ratio, and the CPU
//! each cost (the harness and every program it ran, by getrusage).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::engine::{Engine, Run};
use crate::model::{ProxyChoice, Scenario};
use crate::results::{Outcome, ScenarioReport};
use crate::runner::RunOptions;

/// One timed run of the suite.
struct Timed {
    wall: Duration,
    /// The harness's own CPU seconds (the embedded API server's included) and its programs'.
    harness_cpu: f64,
    programs_cpu: f64,
    failed: usize,
}

/// Times the suite with `proxy` and with the built-in proxy of its mode, `rounds` of each in
/// turns (the built-in first), and prints both medians and their ratio.
pub fn against_builtin(suite: &Path, proxy: &ProxyChoice, rounds: usize) -> Result<()> {
    let Some(scenarios) = crate::commands::load_all(&[suite.to_path_buf()])? else {
        anyhow::bail!("the suite at {} has invalid scenarios", suite.display());
    };
    let builtin = ProxyChoice::named(builtin_of(proxy));
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for round in 1..=rounds {
        ours.push(timed(&scenarios, &builtin)?);
        theirs.push(timed(&scenarios, proxy)?);
        let (a, b) = (ours.last().expect("pushed"), theirs.last().expect("pushed"));
        eprintln!(
            "round {round}/{rounds}: {} {:.2}s, {} {:.2}s",
            builtin.name,
            a.wall.as_secs_f64(),
            proxy.name,
            b.wall.as_secs_f64()
        );
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (b, p) = (summary(&mut ours), summary(&mut theirs));
    let side = |name: &str, (wall, harness, programs, failed): (f64, f64, f64, usize)| {
        format!(
            "{name} median {wall:.2}s wall, CPU {harness:.1}s the harness's and {programs:.1}s its programs' \
             ({failed} failed at most)"
        )
    };
    println!(
        "suite {} ({} scenarios, {cores} cores): {}; {}; ratio {:.2}  [{rounds} rounds each, in turns]",
        suite.display(),
        scenarios.len(),
        side(&proxy.name, p),
        side(&builtin.name, b),
        p.0 / b.0,
    );
    Ok(())
}

/// The built-in proxy of `proxy`'s mode (its `mode` option; iptables unless told).
fn builtin_of(proxy: &ProxyChoice) -> &'static str {
    match proxy.options.get("mode").and_then(|m| m.as_str()) {
        Some("nftables") => crate::proxy::nftables::NAME,
        Some("ipvs") => crate::proxy::ipvs::NAME,
        _ => crate::proxy::iptables::NAME,
    }
}

fn timed(scenarios: &[Scenario], proxy: &ProxyChoice) -> Result<Timed> {
    let engine = Engine { options: RunOptions::default(), jobs: Engine::default_jobs() };
    let (harness, programs, t) =
        (cpu_seconds(libc::RUSAGE_SELF), cpu_seconds(libc::RUSAGE_CHILDREN), Instant::now());
    let results = engine.execute(&Run::each(scenarios, Some(proxy)), &mut [])?;
    let fine = |r: &ScenarioReport| r.passed() || matches!(r.outcome, Outcome::Skipped(_));
    let failed = results.iter().filter(|(_, r)| !r.as_ref().is_ok_and(fine)).count();
    Ok(Timed {
        wall: t.elapsed(),
        harness_cpu: cpu_seconds(libc::RUSAGE_SELF) - harness,
        programs_cpu: cpu_seconds(libc::RUSAGE_CHILDREN) - programs,
        failed,
    })
}

/// Median wall seconds, median CPU seconds of the harness and of its programs, and the most
/// failures of a side's rounds.
fn summary(rounds: &mut [Timed]) -> (f64, f64, f64, usize) {
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    (
        median(rounds.iter().map(|r| r.wall.as_secs_f64()).collect()),
        median(rounds.iter().map(|r| r.harness_cpu).collect()),
        median(rounds.iter().map(|r| r.programs_cpu).collect()),
        rounds.iter().map(|r| r.failed).max().unwrap_or(0),
    )
}

/// CPU seconds so far of this process (`RUSAGE_SELF`) or of its waited-for children.
fn cpu_seconds(who: libc::c_int) -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    match unsafe { libc::getrusage(who, &mut usage) } {
        0 => seconds(usage.ru_utime) + seconds(usage.ru_stime),
        _ => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proxy_is_compared_with_the_built_in_proxy_of_its_mode() {
        let choice = |options: serde_json::Value| ProxyChoice {
            options: options.as_object().cloned().unwrap_or_default(),
            ..ProxyChoice::named("apiserver")
        };
        assert_eq!(builtin_of(&choice(serde_json::json!({"mode": "nftables"}))), "builtin-nftables");
        assert_eq!(builtin_of(&choice(serde_json::json!({"mode": "ipvs"}))), "builtin-ipvs");
        assert_eq!(builtin_of(&choice(serde_json::json!({}))), "builtin-iptables");
    }
}
