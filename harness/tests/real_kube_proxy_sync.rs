//! The `apiserver` adapter's sync detection against an unmodified kube-proxy v1.30: the
//! scenarios that start it, change the API objects step by step and restart it, run again and
//! again, give the same verdicts each time: only kube-proxy's known bug (kubernetes#122740,
//! every UDP conntrack entry flushed on restart) fails. A sync declared before it ended would
//! show up here as a probe that fails in one run and not the next.
//!
//! Needs the binary: `PACKETPROOF_KUBE_PROXY=PATH cargo test --test real_kube_proxy_sync --
//! --ignored` (root, as every scenario). Without it the test is ignored, with that reason.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// Start-up in one and both families, slice-only steps, Service steps, restarts.
const SCENARIOS: &[&str] = &[
    "dual-stack",
    "live-udp-kept-across-restart",
    "live-stale-udp-conntrack",
    "live-local-endpoint-arrives",
    "live-affinity-kept",
    "live-udp-service-deleted",
    "live-health-check-endpoint-moves",
];

const RUNS: usize = 3;

/// One run: the exit code and the failed probes `(scenario, probe)`.
fn run(kube_proxy: &str, mode: &str) -> (Option<i32>, BTreeSet<(String, String)>, String) {
    let dir = std::env::temp_dir().join(format!("pp-real-kube-proxy-sync-{}-{mode}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let scenarios = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
    let mut command = Command::new(env!("CARGO_BIN_EXE_packetproof"));
    command.args(["run", "--color", "never", "--proxy", "apiserver"]);
    command.args(["--proxy-option", &format!("mode={mode}")]);
    if mode == "nftables" {
        command.args(["--proxy-option", "featureGates=NFTablesProxyMode=true"]);
    }
    command.args([
        "--proxy-option",
        &format!("command={kube_proxy} --config={{config}} --hostname-override={{node}}"),
    ]);
    command.args(["--profile", &format!("kube-proxy-{mode}@v1.30")]);
    command.args(SCENARIOS.iter().map(|s| scenarios.join(format!("{s}.yaml"))));
    command.arg("--json").arg(dir.join("report.json")).arg("--artifacts").arg(dir.join("evidence"));
    let out = command.output().expect("running packetproof");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap())
            .unwrap_or_else(|e| panic!("{e}: {text}"));
    let mut failed = BTreeSet::new();
    for s in json["scenarios"].as_array().unwrap() {
        for p in s["probes"].as_array().into_iter().flatten() {
            if p["passed"] == false {
                failed.insert((
                    s["name"].as_str().unwrap().to_string(),
                    p["name"].as_str().unwrap().to_string(),
                ));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    (out.status.code(), failed, text)
}

#[test]
#[ignore = "needs a kube-proxy v1.30 binary: set PACKETPROOF_KUBE_PROXY=PATH and run with --ignored"]
fn kube_proxy_v1_30_gets_the_same_verdicts_run_after_run() {
    let kube_proxy = std::env::var("PACKETPROOF_KUBE_PROXY")
        .expect("PACKETPROOF_KUBE_PROXY must name a kube-proxy v1.30 binary for this test");
    if !packetproof::privileges::scenarios_can_run() {
        return;
    }
    let known_bug: BTreeSet<(String, String)> =
        [("live-udp-kept-across-restart".to_string(), "restart-while-draining: stream-stays".to_string())]
            .into();
    for mode in ["iptables", "nftables"] {
        for round in 1..=RUNS {
            let (code, failed, text) = run(&kube_proxy, mode);
            assert_eq!((code, &failed), (Some(1), &known_bug), "{mode} mode, run {round} of {RUNS}:\n{text}");
        }
    }
}
