//! The performance gate of `packetproof bench --scale` judges real runs: it flags a proxy
//! slowed on purpose (the `command` adapter running the example proxy behind a wrapper that
//! sleeps 0.3 s before every sync) and passes two runs of the same proxy. The verdict is asserted,
//! never a duration.

use std::path::Path;
use std::process::Command;

fn example_proxy() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/proxies/clusterip.py");
    path.canonicalize().expect("the example proxy").display().to_string()
}

/// `command=…` for the example proxy, run once per sync; `sleep` seconds before each run.
fn command_option(sleep: &str) -> String {
    let script = format!("sleep {sleep}; exec python3 \"$0\" --state \"$1\" --cluster-cidr \"$2\"");
    let argv = serde_json::json!(["sh", "-c", script, example_proxy(), "{state}", "{clusterCIDR}"]);
    format!("command={argv}")
}

/// At 50 Services the example proxy's sync takes about 0.25 s per node, so the sleep doubles
/// it; five rounds, the fewest with which the one-sided Mann–Whitney p can go under 0.01.
fn bench(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_packetproof"))
        .args(["bench", "--scale", "50", "--rounds", "5", "--connects", "10"])
        .args(args)
        .output()
        .expect("packetproof runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), stdout)
}

#[test]
fn the_gate_flags_a_proxy_that_sleeps_before_each_sync() {
    if !packetproof::privileges::scenarios_can_run() {
        return;
    }
    let json = std::env::temp_dir().join(format!("packetproof-gate-{}.json", std::process::id()));
    let (slow, fast) = (command_option("0.3"), command_option("0"));
    let (code, stdout) = bench(&[
        "--proxy",
        "command",
        "--proxy-option",
        &slow,
        "--against",
        "command",
        "--against-option",
        &fast,
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "a regression exits 1");
    assert!(stdout.contains("REGRESSED"), "the figures are printed");
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    std::fs::remove_file(&json).unwrap();
    let comparisons = report["gate"]["comparisons"].as_array().expect("the gate's verdict");
    let regressed =
        |figure: &str| comparisons.iter().any(|c| c["figure"] == figure && c["regressed"] == true);
    // Every sync sleeps: the start and the changes are slower (with 5 rounds one outlier can
    // lift a figure's p over 0.01, so most, not all); a connect through rules already loaded
    // is not.
    let slower = ["start-to-synced", "add-service", "remove-endpoint", "scale-up", "delete-service"];
    assert!(slower.iter().filter(|f| regressed(f)).count() >= 3, "most sync figures regressed");
    assert!(!regressed("connect-first") && !regressed("connect-last"));
    assert_eq!(report["results"].as_array().unwrap().len(), 2);
}

#[test]
fn two_runs_of_the_same_proxy_pass_the_gate() {
    if !packetproof::privileges::scenarios_can_run() {
        return;
    }
    let (code, stdout) = bench(&["--proxy", "builtin-iptables", "--against", "builtin-iptables"]);
    assert_eq!(code, 0, "no regression exits 0");
    assert!(stdout.contains("gate: no regression"));
}

#[test]
fn a_baseline_without_the_scale_is_an_input_error() {
    let json = std::env::temp_dir().join(format!("packetproof-gate-empty-{}.json", std::process::id()));
    std::fs::write(&json, r#"{"cores": 2, "kernel": "x", "results": []}"#).unwrap();
    let (code, _) = bench(&["--proxy", "no-such-proxy", "--baseline", json.to_str().unwrap()]);
    std::fs::remove_file(&json).unwrap();
    assert_eq!(code, 2, "an unknown proxy is the input's fault");
}
