//! `packetproof merge`: the JSON reports of a suite's slices (`run --partition`), kernels and
//! modes (`run --json`, `matrix --json`) joined into one verdict: one JSON and JUnit report,
//! one count, the known bugs matched over all of them, and `run`'s exit code. Reports of
//! different releases, scenarios run twice (overlapping slices) and slices missing from a
//! partition are refused (exit 2): a merged verdict must be the verdict of the whole suite.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use super::matrix::report::{GuestReport, MatrixReport};
use super::partition::Partition;
use crate::report::{JsonRun, JunitOrigin, Paint, junit_suite};

/// Where the merged verdict goes besides the terminal.
pub struct MergeOutputs {
    pub json: Option<PathBuf>,
    pub junit: Option<PathBuf>,
}

/// One report to merge: a `run --json`, or one kernel × proxy of a `matrix --json`.
struct Part {
    /// `FILE` or `FILE: KERNEL PROXY`.
    label: String,
    run: JsonRun,
}

/// Merges `files` and prints the verdict; the exit code is `run`'s (0, 1, or 2 for an input or
/// machine fault, which a refused merge is too).
pub fn main(files: &[PathBuf], outputs: &MergeOutputs, paint: Paint) -> Result<i32> {
    let reports = files.iter().map(|file| read_json(file)).collect::<Result<Vec<_>>>()?;
    let explorations = reports.iter().filter(|(_, v)| super::explore_merge::is_explore_report(v)).count();
    if explorations > 0 {
        if explorations < reports.len() {
            bail!("exploration reports (`explore --json`) merge only with each other, not with runs");
        }
        return super::explore_merge::main(reports, outputs.json.as_deref(), outputs.junit.is_some(), paint);
    }
    let mut parts = Vec::new();
    for (shown, value) in reports {
        parts.extend(read(shown, value)?);
    }
    check(&parts)?;
    for part in &parts {
        let r = &part.run;
        println!(
            "{}: {} passed, {} failed, {} skipped, {} errors",
            part.label, r.passed, r.failed, r.skipped, r.errors
        );
    }
    let junit = outputs.junit.as_ref().map(|_| junit(&parts)).transpose()?;
    let described = parts.iter().map(|p| p.label.clone()).collect();
    let merged = JsonRun::merged(parts.into_iter().map(|p| p.run).collect(), described);
    for s in merged.scenarios.iter().filter(|s| s.status != "passed" && s.status != "skipped") {
        let failed: Vec<&str> = s.probes.iter().filter(|p| !p.passed).map(|p| p.name.as_str()).collect();
        let what = if failed.is_empty() { s.reason.clone().unwrap_or_default() } else { failed.join(", ") };
        let status = match s.status.as_str() {
            "error" => "ERROR",
            "harness-fault" => "FAULT",
            _ => "FAIL",
        };
        println!("{} {} ({}): {what}", paint.status(status), s.name, s.proxy.as_deref().unwrap_or("-"));
    }
    let faults = crate::report::harness_faults_count(merged.harness_faults);
    let line = format!(
        "{} passed, {} failed, {} skipped, {} errors{faults} (merged from {} reports)",
        merged.passed,
        merged.failed,
        merged.skipped,
        merged.errors,
        merged.merged.len()
    );
    let code = exit_code(&merged);
    println!("\n{}", if code == super::EXIT_PASS { paint.pass(&line) } else { paint.fail(&line) });
    for bug in &merged.known_bugs {
        let probes: Vec<String> = bug.probes.iter().map(|(s, p)| format!("{s}: {p}")).collect();
        println!("the failures of {} {}", probes.join(", "), bug.headline);
    }
    if code == super::EXIT_ERROR && merged.errors == 0 {
        println!("nothing was judged: every scenario was skipped (exit {code})");
    }
    if let Some(path) = &outputs.json {
        std::fs::write(path, serde_json::to_string_pretty(&merged)?)
            .with_context(|| format!("writing the JSON report {}", path.display()))?;
    }
    if let (Some(path), Some(xml)) = (&outputs.junit, junit) {
        std::fs::write(path, xml).with_context(|| format!("writing the JUnit report {}", path.display()))?;
    }
    Ok(code)
}

/// As `run`'s: an error or a harness fault outweighs a failure; a merge in which nothing was
/// judged fails too.
fn exit_code(merged: &JsonRun) -> i32 {
    if merged.errors > 0 || merged.harness_faults > 0 {
        super::EXIT_ERROR
    } else if merged.failed > 0 {
        super::EXIT_FAIL
    } else if merged.passed > 0 {
        super::EXIT_PASS
    } else {
        super::EXIT_ERROR
    }
}

/// A report file's JSON, with the file's name.
fn read_json(file: &Path) -> Result<(String, serde_json::Value)> {
    let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let value = serde_json::from_str(&text).with_context(|| format!("{}: not JSON", file.display()))?;
    Ok((file.display().to_string(), value))
}

/// The reports in a file's JSON: a run's, or each kernel × proxy of a matrix's (a run the
/// matrix could not carry out becomes an error of its own).
fn read(shown: String, value: serde_json::Value) -> Result<Vec<Part>> {
    // A matrix's report is the one with `runs`; each is read as the type that wrote it.
    if value.get("runs").is_none() {
        let run = serde_json::from_value(value)
            .with_context(|| format!("{shown}: not a packetproof run report (`run --json`)"))?;
        return Ok(vec![Part { label: shown, run }]);
    }
    let matrix: MatrixReport = serde_json::from_value(value)
        .with_context(|| format!("{shown}: not a packetproof matrix report (`matrix --json`)"))?;
    matrix
        .runs
        .into_iter()
        .map(|cell| {
            let label = format!("{shown}: {} {}", cell.kernel, cell.proxy);
            let run = match cell.report {
                Some(GuestReport::Run(run)) => run,
                Some(GuestReport::Hunt(_)) => {
                    bail!("{label}: a mutant hunt's report, which merge does not join with runs")
                }
                Some(GuestReport::Diff(_)) => {
                    bail!("{label}: a comparison of two proxies, which merge does not join with runs")
                }
                None => unrun(cell.error.as_deref(), &cell.kernel, &cell.proxy)?,
            };
            Ok(Part { label, run })
        })
        .collect()
}

/// A matrix run with no report (its VM failed): an error, counted.
fn unrun(error: Option<&str>, kernel: &str, proxy: &str) -> Result<JsonRun> {
    let error = error.unwrap_or("the run wrote no report");
    let report = serde_json::json!({
        "version": crate::report::VERSION,
        "kernel": kernel,
        "passed": 0, "failed": 0, "skipped": 0, "errors": 1,
        "scenarios": [{
            "name": format!("{kernel} {proxy} (the whole run)"),
            "file": "",
            "status": "error",
            "proxy": proxy,
            "reason": error,
            "elapsed_seconds": 0.0,
            "probes": [],
            "not_judged": [],
        }],
    });
    Ok(serde_json::from_value(report)?)
}

/// Refuses parts that cannot make one verdict: of different releases, running a scenario
/// twice, or with a slice of a partition missing.
fn check(parts: &[Part]) -> Result<()> {
    if parts.is_empty() {
        bail!("no reports to merge");
    }
    for part in parts {
        if part.run.version.is_empty() {
            bail!("{}: the report names no packetproof release (written by an older one?)", part.label);
        }
    }
    let versions: BTreeSet<&str> = parts.iter().map(|p| p.run.version.as_str()).collect();
    if versions.len() > 1 {
        let each: Vec<String> = parts.iter().map(|p| format!("{} ({})", p.label, p.run.version)).collect();
        bail!("reports of different packetproof releases cannot be merged: {}", each.join(", "));
    }
    let mut ran: BTreeMap<(&str, Option<&str>, &str), &str> = BTreeMap::new();
    for part in parts {
        for s in &part.run.scenarios {
            let key = (part.run.kernel.as_str(), s.proxy.as_deref(), s.name.as_str());
            if let Some(first) = ran.insert(key, &part.label) {
                bail!(
                    "overlapping reports: {first} and {} both ran scenario {:?} with {} on kernel {}; \
                     merge each slice once",
                    part.label,
                    s.name,
                    s.proxy.as_deref().unwrap_or("its own proxy"),
                    if part.run.kernel.is_empty() { "(unknown)" } else { &part.run.kernel },
                );
            }
        }
    }
    missing_slices(parts)
}

/// Every slice of a partition must be there, as often as any other slice of it (once per
/// mode, say): a lost shard would otherwise make a green verdict of part of the suite.
fn missing_slices(parts: &[Part]) -> Result<()> {
    let mut seen: BTreeMap<(&str, super::partition::Scheme, u32), BTreeMap<u32, usize>> = BTreeMap::new();
    for part in parts {
        let Some(text) = &part.run.slice else { continue };
        let slice: Partition =
            text.parse().map_err(|e| anyhow::anyhow!("{}: its slice does not read: {e}", part.label))?;
        *seen
            .entry((part.run.kernel.as_str(), slice.scheme, slice.of))
            .or_default()
            .entry(slice.slice)
            .or_default() += 1;
    }
    for ((kernel, scheme, of), slices) in seen {
        let most = slices.values().copied().max().unwrap_or(0);
        let short: Vec<String> = (1..=of)
            .filter(|k| slices.get(k).copied().unwrap_or(0) < most)
            .map(|slice| Partition { scheme, slice, of }.to_string())
            .collect();
        if !short.is_empty() {
            bail!(
                "missing slices on kernel {kernel}: {} (merge the report of every slice)",
                short.join(", ")
            );
        }
    }
    Ok(())
}

/// The parts' scenarios as JUnit test suites; on several kernels, each suite's name says which.
fn junit(parts: &[Part]) -> Result<String> {
    let kernels: BTreeSet<&str> = parts.iter().map(|p| p.run.kernel.as_str()).collect();
    let mut report = quick_junit::Report::new("packetproof");
    for part in parts {
        let origin = if kernels.len() > 1 { JunitOrigin::Guest(&part.run.kernel) } else { JunitOrigin::Host };
        for scenario in &part.run.scenarios {
            report.add_test_suite(junit_suite(origin, scenario));
        }
    }
    crate::report::junit_root_without_skipped(&report.to_string()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(label: &str, slice: Option<&str>, names: &[&str]) -> Part {
        let scenarios: Vec<serde_json::Value> = names
            .iter()
            .map(|n| {
                serde_json::json!({"name": n, "file": format!("{n}.yaml"), "status": "passed",
                    "proxy": "builtin-iptables", "elapsed_seconds": 0.1, "probes": [], "not_judged": []})
            })
            .collect();
        let run = serde_json::json!({"version": crate::report::VERSION, "slice": slice, "kernel": "6.18.0",
            "passed": names.len(), "failed": 0, "skipped": 0, "errors": 0, "scenarios": scenarios});
        Part { label: label.into(), run: serde_json::from_value(run).unwrap() }
    }

    #[test]
    fn slices_of_one_partition_merge_and_overlaps_or_gaps_are_refused() {
        let a = || part("a.json", Some("hash:1/2"), &["x", "y"]);
        let b = || part("b.json", Some("hash:2/2"), &["z"]);
        check(&[a(), b()]).unwrap();
        let merged = JsonRun::merged(vec![a().run, b().run], vec!["a".into(), "b".into()]);
        assert_eq!(
            (merged.passed, merged.scenarios.len(), exit_code(&merged)),
            (3, 3, super::super::EXIT_PASS)
        );

        let twice = check(&[a(), part("c.json", Some("hash:2/2"), &["y"])]).unwrap_err().to_string();
        assert!(twice.contains("overlapping reports: a.json and c.json both ran scenario \"y\""), "{twice}");
        let gap = check(&[a()]).unwrap_err().to_string();
        assert!(gap.contains("missing slices on kernel 6.18.0: hash:2/2"), "{gap}");

        let mut old = b();
        old.run.version = "0.0.9".into();
        let versions = check(&[a(), old]).unwrap_err().to_string();
        assert!(versions.contains("different packetproof releases"), "{versions}");
    }

    #[test]
    fn nothing_judged_is_an_error_and_an_error_outweighs_a_failure() {
        let mut merged = JsonRun::merged(vec![part("a", None, &[]).run], vec![]);
        assert_eq!(exit_code(&merged), super::super::EXIT_ERROR);
        merged.failed = 1;
        assert_eq!(exit_code(&merged), super::super::EXIT_FAIL);
        merged.errors = 1;
        assert_eq!(exit_code(&merged), super::super::EXIT_ERROR);
    }
}
