//! One verdict from many machines: `run --partition hash:1/3`, `2/3` and `3/3` together run
//! each scenario of a suite exactly once, and `merge` of their JSON reports gives the counts,
//! known bugs and exit code of one run of the whole suite, here with a mutant whose bug fails
//! scenarios in two different slices. A merge of overlapping or incomplete slices is refused.
//! Needs root (the one privilege gate).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// Quick scenarios; `hairpin` (slice 3) and `etp-local-nodeport` (slice 1) carry the mutant's
/// signature between them, and every slice holds one at least.
const SUITE: &[&str] =
    &["hairpin", "etp-local-nodeport", "kube-dns-udp", "no-endpoints-reject", "node-to-clusterip"];

const MUTANT: &str = "mutant=no-hairpin-masq";

fn packetproof(dir: &Path, args: &[&str]) -> Output {
    told(args, command(dir, args).output().expect("running packetproof"))
}

fn command(dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_packetproof"));
    command.args(args).current_dir(dir);
    command
}

fn told(args: &[&str], out: Output) -> Output {
    eprintln!("packetproof {}:\n{}{}", args.join(" "), text(&out.stdout), text(&out.stderr));
    out
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn names(report: &serde_json::Value) -> Vec<String> {
    report["scenarios"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap().to_string()).collect()
}

fn counts(report: &serde_json::Value) -> [u64; 4] {
    ["passed", "failed", "skipped", "errors"].map(|k| report[k].as_u64().unwrap())
}

fn known_bugs(report: &serde_json::Value) -> BTreeSet<(String, Vec<(String, String)>)> {
    report["known_bugs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            let mut probes: Vec<(String, String)> = serde_json::from_value(b["probes"].clone()).unwrap();
            probes.sort();
            (b["name"].as_str().unwrap().to_string(), probes)
        })
        .collect()
}

/// `run` of the suite in `dir` with the mutant, writing `report`, plus `extra` arguments (the
/// default timeout, as the suite's: the whole run and the slices must judge alike under load).
fn run_args<'a>(report: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["run", "suite", "--proxy", "builtin-iptables", "--proxy-option", MUTANT];
    args.extend(["--jobs", "2", "--color", "never"]);
    // Each machine keeps its own evidence.
    args.extend(["--artifacts", report.trim_end_matches(".json"), "--json", report]);
    args.extend(extra);
    args
}

#[test]
fn slices_run_each_scenario_once_and_their_merge_is_the_whole_runs_verdict() {
    if !packetproof::privileges::scenarios_can_run() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("packetproof-merge-{}", std::process::id()));
    let suite = dir.join("suite");
    std::fs::create_dir_all(&suite).unwrap();
    let scenarios = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
    for name in SUITE {
        std::fs::copy(scenarios.join(format!("{name}.yaml")), suite.join(format!("{name}.yaml"))).unwrap();
    }

    // The whole suite and its three slices at once, as four machines would run them.
    let slices: Vec<(String, String)> =
        (1..=3).map(|k| (format!("slice-{k}.json"), format!("hash:{k}/3"))).collect();
    let mut runs = vec![run_args("whole.json", &[])];
    runs.extend(slices.iter().map(|(report, slice)| run_args(report, &["--partition", slice])));
    let children: Vec<_> = runs
        .iter()
        .map(|args| command(&dir, args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap())
        .collect();
    let outputs: Vec<Output> =
        children.into_iter().zip(&runs).map(|(c, args)| told(args, c.wait_with_output().unwrap())).collect();
    let whole = &outputs[0];
    let whole_report = json(&dir.join("whole.json"));
    assert_eq!(whole.status.code(), Some(1), "the mutant fails the whole run");

    let mut ran = Vec::new();
    let slices: Vec<PathBuf> = slices
        .iter()
        .enumerate()
        .map(|(i, (report, slice))| {
            let read = json(&dir.join(report));
            assert_eq!(read["slice"], slice.as_str());
            assert!(!names(&read).is_empty(), "slice {} runs something of this suite", i + 1);
            ran.extend(names(&read));
            dir.join(report)
        })
        .collect();
    ran.sort();
    let mut expected = names(&whole_report);
    expected.sort();
    assert_eq!(ran, expected, "each scenario in exactly one slice");

    let slice_args: Vec<&str> = slices.iter().map(|p| p.to_str().unwrap()).collect();
    let mut merge = vec!["merge", "--json", "merged.json", "--junit", "merged.xml", "--color", "never"];
    merge.extend(&slice_args);
    let merged = packetproof(&dir, &merge);
    let merged_report = json(&dir.join("merged.json"));
    assert_eq!(merged.status.code(), whole.status.code(), "the merged exit code is the whole run's");
    assert_eq!(counts(&merged_report), counts(&whole_report));
    let bugs = known_bugs(&merged_report);
    assert_eq!(bugs, known_bugs(&whole_report), "the known bugs matched over all slices");
    assert!(bugs.iter().any(|(name, _)| name == "no-hairpin-masq"), "{bugs:?}");
    assert!(text(&merged.stdout).contains("matches"), "the terminal names the known bug");
    let xml = std::fs::read_to_string(dir.join("merged.xml")).unwrap();
    assert_eq!(xml.matches("<testsuite ").count(), SUITE.len(), "{xml}");

    // The same slice twice, and a slice missing: refused as input at fault.
    let twice = packetproof(&dir, &["merge", slice_args[0], slice_args[0], slice_args[1], slice_args[2]]);
    assert_eq!(twice.status.code(), Some(2));
    assert!(text(&twice.stderr).contains("overlapping reports"), "{}", text(&twice.stderr));
    let short = packetproof(&dir, &["merge", slice_args[0], slice_args[1]]);
    assert_eq!(short.status.code(), Some(2));
    assert!(text(&short.stderr).contains("missing slices on kernel"), "{}", text(&short.stderr));
    let _ = std::fs::remove_dir_all(&dir);
}
