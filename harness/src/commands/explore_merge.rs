//! `packetproof merge` of exploration reports (`explore --json`): the slices of a seed
//! (`explore --partition count:K/N`) or any explorations of one proxy joined into one report:
//! counts summed, findings, cases not confirmed and faults listed together, coverage united, and
//! `explore`'s exit code. Reports of different releases, proxies or guides, a seed explored
//! twice, and a missing slice are refused (exit 2): a merged verdict must be the verdict of every
//! case it counts.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{Result, bail};
use serde_json::{Map, Value};

use crate::report::Paint;

/// Counts every report has, summed.
const SUMMED: [&str; 6] =
    ["cases", "passed", "confirmed_failures", "skipped", "flows_judged", "flows_not_judged"];
/// Lists of things that happened, joined.
const JOINED: [&str; 6] =
    ["findings", "not_confirmed", "harness_faults", "setup_errors", "refused_by_the_reader", "differences"];
/// Lists of what was reached, united.
const UNITED: [&str; 3] = ["covered_fields", "covered_flows", "covered_rules"];

/// Whether `value` is an exploration's report rather than a run's or a matrix's.
pub fn is_explore_report(value: &Value) -> bool {
    value.get("kind").and_then(Value::as_str) == Some(crate::commands::explore::REPORT_KIND)
}

/// Merges the exploration reports `parts` (each with the file it came from) and prints the
/// verdict; the exit code is `explore`'s.
pub fn main(parts: Vec<(String, Value)>, json: Option<&Path>, junit: bool, paint: Paint) -> Result<i32> {
    if junit {
        bail!("merge writes no JUnit report of explorations: each `explore --junit` is one already");
    }
    check(&parts)?;
    let mut merged = merged(&parts);
    for (label, v) in &parts {
        println!(
            "{label}: seed {}, {} cases, {} passed, {} confirmed failures, {} not confirmed",
            v["seed"],
            v["cases"],
            v["passed"],
            v["confirmed_failures"],
            v["not_confirmed"].as_array().map_or(0, Vec::len)
        );
    }
    let count = |key: &str| merged[key].as_array().map_or(0, Vec::len);
    let code = merged["exit_code"].as_i64().unwrap_or(i64::from(super::EXIT_ERROR)) as i32;
    let line = format!(
        "{} cases, {} passed, {} confirmed failures, {} not confirmed, {} harness faults, {} setup errors \
         (merged from {} reports)",
        merged["cases"],
        merged["passed"],
        merged["confirmed_failures"],
        count("not_confirmed"),
        count("harness_faults"),
        count("setup_errors"),
        parts.len()
    );
    println!("\n{}", if code == super::EXIT_PASS { paint.pass(&line) } else { paint.fail(&line) });
    for corpus in merged["corpora"].as_array().into_iter().flatten() {
        println!("corpus: {} ({} cases)", corpus["dir"].as_str().unwrap_or("?"), corpus["cases"]);
    }
    if let Some(path) = json {
        write(path, &Value::Object(std::mem::take(&mut merged)))?;
    }
    Ok(code)
}

/// The merged report: every count summed, every list joined or united, and the exit code.
fn merged(parts: &[(String, Value)]) -> Map<String, Value> {
    let mut merged = Map::new();
    for key in ["version", "kind", "proxy", "guide"] {
        merged.insert(key.into(), parts[0].1[key].clone());
    }
    for key in SUMMED {
        let sum: u64 = parts.iter().map(|(_, v)| v[key].as_u64().unwrap_or(0)).sum();
        merged.insert(key.into(), sum.into());
    }
    for key in JOINED {
        let all: Vec<Value> =
            parts.iter().flat_map(|(_, v)| v[key].as_array().cloned().unwrap_or_default()).collect();
        merged.insert(key.into(), all.into());
    }
    for key in UNITED {
        let all: BTreeSet<&str> = parts
            .iter()
            .flat_map(|(_, v)| v[key].as_array().into_iter().flatten())
            .filter_map(Value::as_str)
            .collect();
        merged.insert(key.into(), all.into_iter().collect::<Vec<_>>().into());
    }
    let seeds: Vec<Value> = parts.iter().map(|(_, v)| v["seed"].clone()).collect();
    merged.insert("seeds".into(), seeds.into());
    let corpora: Vec<Value> =
        parts.iter().filter_map(|(_, v)| v.get("corpus").filter(|c| !c.is_null()).cloned()).collect();
    merged.insert("corpora".into(), corpora.into());
    merged.insert("merged".into(), parts.iter().map(|(label, _)| label.clone()).collect::<Vec<_>>().into());
    let count = |key: &str| merged[key].as_array().map_or(0, Vec::len);
    let code = super::explore::exit_code_of(
        count("findings"),
        merged["differences"]
            .as_array()
            .is_some_and(|d| d.iter().any(|d| d["documented"].as_bool() != Some(true))),
        count("setup_errors") + count("refused_by_the_reader") + count("harness_faults"),
        merged["passed"].as_u64().unwrap_or(0),
    );
    merged.insert("exit_code".into(), code.into());
    merged
}

fn write(path: &Path, value: &Value) -> Result<()> {
    use anyhow::Context;
    std::fs::write(path, serde_json::to_string_pretty(value)? + "\n")
        .with_context(|| format!("writing the JSON report {}", path.display()))
}

/// Refuses reports that cannot make one verdict: of different releases, proxies or guides,
/// the same seed twice, or a slice of a partition missing or given twice.
fn check(parts: &[(String, Value)]) -> Result<()> {
    for key in ["version", "proxy", "guide"] {
        let values: BTreeSet<String> = parts.iter().map(|(_, v)| v[key].to_string()).collect();
        if values.len() > 1 {
            let each: Vec<String> = parts.iter().map(|(label, v)| format!("{label} ({})", v[key])).collect();
            bail!("explorations whose {key} differs cannot be merged: {}", each.join(", "));
        }
        if parts[0].1[key].is_null() {
            bail!("{}: the report names no {key} (written by an older packetproof?)", parts[0].0);
        }
    }
    let mut seeds: BTreeMap<String, &str> = BTreeMap::new();
    for (label, v) in parts {
        if let Some(first) = seeds.insert(v["seed"].to_string(), label) {
            bail!("{first} and {label} both explored seed {}: merge each once", v["seed"]);
        }
    }
    // Every slice of a partitioned seed, once.
    let mut slices: BTreeMap<(String, u64), BTreeSet<u64>> = BTreeMap::new();
    for (label, v) in parts {
        let Some(slice) = v.get("slice").filter(|s| !s.is_null()) else { continue };
        let (Some(k), Some(n)) = (slice["slice"].as_u64(), slice["of"].as_u64()) else {
            bail!("{label}: its slice does not read: {slice}");
        };
        slices.entry((slice["seed"].to_string(), n)).or_default().insert(k);
    }
    for ((seed, n), have) in &slices {
        let missing: Vec<String> =
            (1..=*n).filter(|k| !have.contains(k)).map(|k| format!("{k}/{n}")).collect();
        if !missing.is_empty() {
            bail!(
                "slices {} of seed {seed} are missing: a merged verdict must count every case",
                missing.join(", ")
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(seed: u64, slice: Option<(u64, u32, u32)>, passed: u64, fields: &[&str]) -> (String, Value) {
        let slice = slice.map(|(seed, k, n)| serde_json::json!({"seed": seed, "slice": k, "of": n}));
        let value = serde_json::json!({
            "version": "1", "kind": "explore", "seed": seed, "slice": slice, "proxy": "builtin-iptables",
            "guide": "fields", "exit_code": 0, "cases": passed, "passed": passed, "confirmed_failures": 0,
            "not_confirmed": [], "harness_faults": [], "skipped": 0, "setup_errors": [],
            "refused_by_the_reader": [], "flows_judged": 10, "flows_not_judged": 1, "findings": [],
            "differences": [], "covered_fields": fields, "covered_flows": [], "covered_rules": [],
            "corpus": null,
        });
        (format!("slice-{seed}.json"), value)
    }

    #[test]
    fn slices_sum_their_counts_and_unite_their_coverage() {
        let parts =
            vec![report(82, Some((41, 1, 2)), 5, &["a", "b"]), report(83, Some((41, 2, 2)), 7, &["b", "c"])];
        assert!(is_explore_report(&parts[0].1));
        check(&parts).expect("two slices of one seed merge");
        let m = merged(&parts);
        assert_eq!(m["passed"], 12);
        assert_eq!(m["flows_judged"], 20);
        assert_eq!(m["covered_fields"], serde_json::json!(["a", "b", "c"]));
        assert_eq!(m["exit_code"], super::super::EXIT_PASS);
    }

    #[test]
    fn a_missing_slice_a_repeated_seed_and_another_proxy_are_refused() {
        let first = report(82, Some((41, 1, 2)), 5, &[]);
        let missing = check(std::slice::from_ref(&first)).unwrap_err().to_string();
        assert!(missing.contains("slices 2/2 of seed 41 are missing"), "{missing}");
        let twice = check(&[first.clone(), first.clone()]).unwrap_err().to_string();
        assert!(twice.contains("both explored seed 82"), "{twice}");
        let mut other = report(83, Some((41, 2, 2)), 5, &[]);
        other.1["proxy"] = "builtin-nftables".into();
        let proxies = check(&[first, other]).unwrap_err().to_string();
        assert!(proxies.contains("whose proxy differs"), "{proxies}");
    }

    #[test]
    fn a_finding_in_any_slice_fails_the_merge() {
        let mut second = report(83, Some((41, 2, 2)), 5, &[]);
        second.1["findings"] = serde_json::json!([{"case": "explore-83-7"}]);
        let m = merged(&[report(82, Some((41, 1, 2)), 5, &[]), second]);
        assert_eq!(m["exit_code"], super::super::EXIT_FAIL);
    }
}
