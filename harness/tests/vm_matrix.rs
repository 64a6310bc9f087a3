//! The kernel matrix on the oldest and newest kernels of the measured set (5.10 and 7.3), in
//! VMs: real SCTP associations through both built-in modes with a few core scenarios beside
//! them, and a broken SCTP rule caught inside the VMs. Skipped with the reason where qemu is
//! missing; under PACKETPROOF_REQUIRE_PRIVILEGES=1 (`.ci/run`) that fails instead.

use std::path::{Path, PathBuf};
use std::process::Command;

const KERNELS: &str = "5.10,7.3";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize().expect("the repository")
}

fn vms_can_run() -> bool {
    let qemu = ["/usr/bin/qemu-system-x86_64", "/usr/local/bin/qemu-system-x86_64"]
        .iter()
        .any(|p| Path::new(p).exists());
    packetproof::privileges::tool_or_skip(
        qemu,
        "qemu-system-x86_64 is not installed (ci/install-deps.sh installs it)",
    ) && packetproof::privileges::tool_or_skip(
        nix::unistd::Uid::effective().is_root(),
        "the kernel matrix needs root (9p share, qemu)",
    )
}

/// Runs `packetproof matrix` from the repository; returns its exit code and combined report.
fn matrix(args: &[&str], json: &Path) -> (i32, serde_json::Value) {
    let output = Command::new(env!("CARGO_BIN_EXE_packetproof"))
        .arg("matrix")
        .args(["--kernels", KERNELS, "--json"])
        .arg(json)
        .args(args)
        .current_dir(repo())
        .output()
        .expect("running packetproof matrix");
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let report =
        std::fs::read_to_string(json).unwrap_or_else(|e| panic!("no combined report ({e}):\n{stdout}"));
    (output.status.code().unwrap_or(-1), serde_json::from_str(&report).expect("the combined report is JSON"))
}

/// `(kernel, proxy, scenario) -> status` of every scenario in the combined report.
fn statuses(report: &serde_json::Value) -> Vec<(String, String, String, String)> {
    let mut out = Vec::new();
    for run in report["runs"].as_array().expect("runs") {
        let (kernel, proxy) = (run["kernel"].as_str().unwrap(), run["proxy"].as_str().unwrap());
        let scenarios = run["report"]["scenarios"]
            .as_array()
            .unwrap_or_else(|| panic!("{kernel} {proxy}: no report: {run}"));
        for s in scenarios {
            out.push((
                kernel.into(),
                proxy.into(),
                s["name"].as_str().unwrap().into(),
                s["status"].as_str().unwrap().into(),
            ));
        }
    }
    out
}

// Once ignored for a finding (5.10 + builtin-iptables: 1 in 10 SCTP associations reported
// "associated, but no answer"). The probe said "associated" without knowing it: a
// non-blocking SCTP connect reports the socket writable as soon as the INIT is sent (fixed in
// traffic/sctp.rs). With evidence kept, 17 runs of this set on 5.10 (5 with 7.3 beside it,
// both modes) showed no retransmitted, aborted or unanswered chunk; a failing run keeps its
// pcaps and conntrack events under artifacts/KERNEL/PROXY/ (see the README's kernel matrix).
#[test]
fn sctp_and_core_scenarios_pass_on_the_oldest_and_newest_kernels_and_a_broken_sctp_rule_is_caught() {
    if !vms_can_run() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("packetproof-vm-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    // Both built-in modes: SCTP is answered for real (never skipped), beside core scenarios.
    let (code, report) = matrix(
        &[
            "scenarios/sctp.yaml",
            "scenarios/pod-to-clusterip-cross-node.yaml",
            "scenarios/hairpin.yaml",
            "scenarios/no-endpoints-reject.yaml",
            "scenarios/external-nodeport-masquerade.yaml",
        ],
        &dir.join("core.json"),
    );
    let all = statuses(&report);
    assert_eq!(all.len(), 2 * 2 * 5, "every kernel × mode × scenario reported: {all:?}");
    for (kernel, proxy, scenario, status) in &all {
        assert_eq!(status, "passed", "{scenario} on {kernel} with {proxy}");
    }
    assert_eq!(code, 0);

    // The same SCTP scenario replayed from a dump of the built-in iptables rules, once intact
    // and once with the SCTP cluster-IP rule removed: the intact replay passes, the broken one
    // fails on the probe that crosses the removed rule, on both kernels.
    let (code, report) =
        matrix(&["--proxy", "ruleset", "harness/tests/data/broken-sctp"], &dir.join("broken.json"));
    let all = statuses(&report);
    assert_eq!(all.len(), 2 * 2, "{all:?}");
    for (kernel, _, scenario, status) in &all {
        let expected = if scenario == "sctp-rule-removed" { "failed" } else { "passed" };
        assert_eq!(status, expected, "{scenario} on {kernel}");
    }
    for run in report["runs"].as_array().unwrap() {
        let broken = run["report"]["scenarios"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == "sctp-rule-removed")
            .unwrap();
        let failed: Vec<&str> = broken["probes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["passed"] == false)
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            failed,
            ["pod-to-cluster-ip"],
            "{}: the SCTP node port still works, the cluster IP does not",
            run["kernel"]
        );
    }
    assert_eq!(code, 1, "a failed probe, not an error");
    let _ = std::fs::remove_dir_all(&dir);
    // The failing runs' evidence is kept under artifacts/; the matrix leaves nothing else.
    let leftovers: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("packetproof-vm."))
        .filter(|e| {
            let pid = e.file_name().to_string_lossy().trim_start_matches("packetproof-vm.").to_string();
            !Path::new("/proc").join(pid).exists()
        })
        .collect();
    assert!(leftovers.is_empty(), "scratch directories left behind: {leftovers:?}");
}
