//! `bench --proxy P --suite-rounds N`: the whole suite with a proxy and with the built-in
//! proxy of its mode, in turns on the same machine, so that "a real proxy's suite against the
//! built-in one" is one command's figure: median wall time of each, their ratio, and the CPU
//! each cost (the harness and every program it ran, by getrusage).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::model::{ProxyChoice, Scenario};
use crate::proxy::registry;
use crate::report::CpuSeconds;

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
    let (mut builtin_rounds, mut proxy_rounds) = (Vec::new(), Vec::new());
    for round in 1..=rounds {
        builtin_rounds.push(timed(&scenarios, &builtin)?);
        proxy_rounds.push(timed(&scenarios, proxy)?);
        let (a, b) = (builtin_rounds.last().expect("pushed"), proxy_rounds.last().expect("pushed"));
        eprintln!(
            "round {round}/{rounds}: {} {:.2}s, {} {:.2}s",
            builtin.name,
            a.wall.as_secs_f64(),
            proxy.name,
            b.wall.as_secs_f64()
        );
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (b, p) = (summary(&builtin_rounds), summary(&proxy_rounds));
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
    registry::built_in_of_mode(registry::mode_of(&proxy.name, &proxy.options))
}

fn timed(scenarios: &[Scenario], proxy: &ProxyChoice) -> Result<Timed> {
    let (before, t) = (CpuSeconds::now(), Instant::now());
    let failed = super::run_suite(scenarios, Some(proxy), false)?;
    let (wall, after) = (t.elapsed(), CpuSeconds::now());
    let spent = |of: fn(&CpuSeconds) -> f64| match (&before, &after) {
        (Some(b), Some(a)) => of(a) - of(b),
        _ => 0.0,
    };
    Ok(Timed {
        wall,
        harness_cpu: spent(|c| c.harness_user + c.harness_system),
        programs_cpu: spent(|c| c.programs_user + c.programs_system),
        failed,
    })
}

/// Median wall seconds, median CPU seconds of the harness and of its programs, and the most
/// failures of a side's rounds.
fn summary(rounds: &[Timed]) -> (f64, f64, f64, usize) {
    let median = |of: fn(&Timed) -> f64| {
        super::stats::Summary::of(&rounds.iter().map(of).collect::<Vec<_>>()).map_or(0.0, |s| s.median)
    };
    (
        median(|r| r.wall.as_secs_f64()),
        median(|r| r.harness_cpu),
        median(|r| r.programs_cpu),
        rounds.iter().map(|r| r.failed).max().unwrap_or(0),
    )
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
