//! `packetproof explore`: generated cases against a proxy, failures shrunk to scenario files.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;

use super::{EXIT_ERROR, EXIT_FAIL, EXIT_PASS, proxy_choice, remove_leftovers};
use crate::explore::features::Feature;
use crate::explore::{self, Settings, Stop, Summary};
use crate::runner::RunOptions;

#[derive(clap::Args)]
pub struct Args {
    /// The seed the cases are drawn from (default: one from the clock, printed); the same seed
    /// and packetproof version give the same cases.
    #[arg(long)]
    pub seed: Option<u64>,
    /// How long to explore, with its unit (`90s`, `2m`, `1h`).
    #[arg(long, value_parser = budget, conflicts_with = "cases")]
    pub budget: Option<Duration>,
    /// How many cases to explore (default 100, unless `--budget`).
    #[arg(long)]
    pub cases: Option<usize>,
    /// Proxy to program the nodes with.
    #[arg(long, default_value = crate::model::DEFAULT_PROXY)]
    pub proxy: String,
    /// An option for the `--proxy` adapter, `KEY=VALUE` (as `run --proxy-option`); repeatable.
    #[arg(long = "proxy-option", value_name = "KEY=VALUE")]
    pub proxy_options: Vec<String>,
    /// Judge by this profile instead of the proxy's own (as `run --profile`).
    #[arg(long)]
    pub profile: Option<crate::model::Profile>,
    /// Where each confirmed failure is written, shrunk, as a scenario file.
    #[arg(long, default_value = "explore-findings")]
    pub out: PathBuf,
    /// Also write the fewest judged cases that reach everything the exploration reached, as
    /// scenario files (a suite for `packetproof mutants DIR`).
    #[arg(long, value_name = "DIR")]
    pub save_corpus: Option<PathBuf>,
    /// Milliseconds an attempt waits for an answer (as `run --timeout-ms`).
    #[arg(long, default_value_t = 1000, value_parser = super::timeout_ms)]
    pub timeout_ms: u64,
    /// Cases run at once (default: four per core).
    #[arg(long, value_parser = super::jobs)]
    pub jobs: Option<usize>,
    /// Runs a failure's shrinking may take at most.
    #[arg(long, default_value_t = 300)]
    pub shrink_runs: usize,
    /// Also write every generated case here, as it runs.
    #[arg(long, value_name = "DIR")]
    pub keep_cases: Option<PathBuf>,
}

/// `90s`, `2m`, `1h`, `500ms`.
fn budget(text: &str) -> Result<Duration, String> {
    let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &text[digits.len()..];
    let n: u64 =
        digits.parse().map_err(|_| format!("{text:?}: expected a number and a unit (90s, 2m, 1h)"))?;
    let seconds = match unit {
        "ms" => return Ok(Duration::from_millis(n)),
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        _ => return Err(format!("{text:?}: the unit must be ms, s, m or h")),
    };
    Ok(Duration::from_secs(seconds))
}

pub fn main(args: Args) -> Result<i32> {
    let seed = args.seed.unwrap_or_else(|| {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        now.as_secs() ^ u64::from(now.subsec_nanos())
    });
    let proxy = proxy_choice(&args.proxy, &args.proxy_options)?;
    crate::proxy::build(&proxy, std::path::Path::new("."))?;
    if let Some(reason) = crate::privileges::preflight() {
        anyhow::bail!("cannot explore here: {reason}");
    }
    for stale in remove_leftovers(false)? {
        eprintln!("packetproof: removed {stale}, left by an earlier run");
    }
    let stop = match (args.budget, args.cases) {
        (Some(budget), _) => Stop::After(budget),
        (None, cases) => Stop::Cases(cases.unwrap_or(100)),
    };
    println!("exploring with seed {seed} against {} ({})", proxy.label(), describe(stop));
    let settings = Settings {
        seed,
        stop,
        proxy,
        options: RunOptions {
            timeout: Duration::from_millis(args.timeout_ms),
            profile: args.profile,
            ..RunOptions::default()
        },
        jobs: args.jobs.unwrap_or_else(crate::engine::Engine::default_jobs),
        out: args.out,
        save_corpus: args.save_corpus,
        shrink_runs: args.shrink_runs,
        keep_cases: args.keep_cases,
    };
    let summary = explore::explore(&settings, |s| {
        println!(
            "  {} cases: {} passed, {} findings, {} flows judged",
            s.cases,
            s.passed,
            s.findings.len(),
            s.flows_judged
        )
    })?;
    print!("{}", report(&summary, seed));
    Ok(if !summary.findings.is_empty() {
        EXIT_FAIL
    } else if !summary.errors.is_empty()
        || !summary.rejected.is_empty()
        || !summary.harness_faults.is_empty()
        || summary.passed == 0
    {
        EXIT_ERROR
    } else {
        EXIT_PASS
    })
}

fn describe(stop: Stop) -> String {
    match stop {
        Stop::After(d) => format!("for {}s", d.as_secs()),
        Stop::Cases(n) => format!("{n} cases"),
    }
}

/// The closing report: counts, what was covered, each finding.
pub fn report(s: &Summary, seed: u64) -> String {
    let mut out = String::new();
    for e in &s.rejected {
        out.push_str(&format!("generator bug, a case the reader refused:\n{e}\n"));
    }
    for e in &s.errors {
        out.push_str(&format!("setup error: {e}\n"));
    }
    for u in &s.unconfirmed {
        out.push_str(&format!(
            "not confirmed (failed once, passed on re-runs; suspect: {}): {}: {} ({})\n",
            u.suspect.name(),
            u.case,
            u.why,
            u.file.display()
        ));
    }
    for fault in &s.harness_faults {
        out.push_str(&format!("harness fault (its witnesses disagree; not a finding): {fault}\n"));
    }
    let flows: usize = s.covered.iter().filter(|f| matches!(f, Feature::Flow(_))).count();
    let fields = s.covered.len() - flows;
    out.push_str(&format!(
        "seed {seed}: {} cases, {} passed, {} confirmed failures, {} not confirmed, {} harness faults, {} skipped, {} setup errors, {} refused by the reader\n",
        s.cases,
        s.passed,
        s.findings.len(),
        s.unconfirmed.len(),
        s.harness_faults.len(),
        s.skipped,
        s.errors.len(),
        s.rejected.len()
    ));
    out.push_str(&format!(
        "{} flows judged, {} not judged (no defined outcome); covered {} field combinations and {} kinds of flow × outcome\n",
        s.flows_judged,
        s.flows_unjudged,
        fields,
        flows
    ));
    for f in &s.findings {
        if let Some(same) = &f.same_as {
            out.push_str(&format!(
                "FAILED {} as {same} did (not shrunk again): {}\n",
                f.case,
                f.file.display()
            ));
            continue;
        }
        let (services, pods, nodes, steps) = f.size;
        out.push_str(&format!(
            "FAILED {}: shrunk to {services} Services, {pods} pods, {nodes} nodes, {steps} steps: {}\n",
            f.case,
            f.file.display()
        ));
        for (symptom, kind) in &f.signature {
            out.push_str(&format!("  fails as {symptom} on {kind}\n"));
        }
        if let Some(bug) = &f.known_bug {
            out.push_str(&format!("  {bug}\n"));
        }
        match f.passes_unbroken {
            Some(true) => out.push_str("  passes on the proxy without the mutant\n"),
            Some(false) => out.push_str("  ALSO FAILS on the proxy without the mutant\n"),
            None => {}
        }
    }
    if let Some((dir, kept)) = &s.corpus {
        out.push_str(&format!("corpus: {kept} cases in {}\n", dir.display()));
    }
    out
}
