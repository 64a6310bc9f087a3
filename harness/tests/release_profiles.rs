//! A release profile changes what the one oracle expects, with real packets: under
//! `kube-proxy-nftables@v1.30` an unallocated service-CIDR address is forwarded un-translated
//! (v1.30 writes its drop rule only for ServiceCIDR objects, watched only behind a gate), so
//! `builtin-nftables`, which drops it as the newest releases do, fails exactly that probe of
//! `raw-addresses`, and `builtin-iptables`, which forwards it, passes it (failing only the
//! cluster IP's unused port, which every nftables release rejects). With a real kube-proxy
//! v1.30 in nftables mode (`PACKETPROOF_KUBE_PROXY=PATH`, an ignored test), both scenarios that show the
//! difference pass under the release profile.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn scenario(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../scenarios/{name}.yaml"))
}

/// Runs `scenarios` with `proxy` (and its options) under `profile`: the exit code, the failed
/// probes `(scenario, probe)` and the report's text.
fn run(
    proxy: &[&str],
    profile: &str,
    scenarios: &[&str],
) -> (Option<i32>, BTreeSet<(String, String)>, String) {
    let dir = std::env::temp_dir().join(format!("pp-release-profiles-{}-{}", std::process::id(), proxy[0]));
    std::fs::create_dir_all(&dir).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_packetproof"));
    command.args(["run", "--color", "never", "--profile", profile, "--proxy", proxy[0]]);
    for option in &proxy[1..] {
        command.args(["--proxy-option", option]);
    }
    command.args(scenarios.iter().map(|s| scenario(s))).arg("--json").arg(dir.join("report.json"));
    command.arg("--artifacts").arg(dir.join("evidence"));
    let out = command.output().expect("running packetproof");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap())
            .unwrap_or_else(|e| panic!("{e}: {text}"));
    let mut failed = BTreeSet::new();
    for s in json["scenarios"].as_array().unwrap() {
        for p in s["probes"].as_array().unwrap() {
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

fn probes(scenario: &str, names: &[&str]) -> BTreeSet<(String, String)> {
    names.iter().map(|p| (scenario.to_string(), p.to_string())).collect()
}

#[test]
fn the_v1_30_profile_expects_unallocated_service_addresses_forwarded() {
    if !packetproof::privileges::scenarios_can_run() {
        return;
    }
    let v1_30 = "kube-proxy-nftables@v1.30";
    let (code, failed, text) = run(&["builtin-nftables"], v1_30, &["raw-addresses"]);
    assert_eq!(
        (code, failed),
        (Some(1), probes("raw-addresses", &["unallocated-service-address"])),
        "{text}"
    );
    assert!(
        text.contains("FORWARD un-translated") && text.contains("(by kube-proxy-nftables@v1.30's choice)"),
        "{text}"
    );

    let (code, failed, text) = run(&["builtin-iptables"], v1_30, &["raw-addresses"]);
    assert_eq!((code, failed), (Some(1), probes("raw-addresses", &["cluster-ip-unused-port"])), "{text}");
}

/// Run it with `PACKETPROOF_KUBE_PROXY=PATH cargo test --test release_profiles -- --ignored`.
#[test]
#[ignore = "needs a kube-proxy v1.30 binary: set PACKETPROOF_KUBE_PROXY=PATH and run with --ignored"]
fn a_real_kube_proxy_v1_30_passes_the_release_difference_under_its_profile() {
    let kube_proxy = std::env::var_os("PACKETPROOF_KUBE_PROXY")
        .expect("PACKETPROOF_KUBE_PROXY must name a kube-proxy v1.30 binary for this test");
    if !packetproof::privileges::scenarios_can_run() {
        return;
    }
    let command =
        format!("command={} --config={{config}} --hostname-override={{node}}", kube_proxy.to_string_lossy());
    let proxy = ["apiserver", "mode=nftables", "featureGates=NFTablesProxyMode=true", command.as_str()];
    let (code, failed, text) =
        run(&proxy, "kube-proxy-nftables@v1.30", &["raw-addresses", "live-udp-service-deleted"]);
    assert_eq!((code, failed), (Some(0), BTreeSet::new()), "{text}");
}

/// A release no profile knows is the user's mistake (exit 2), refused with the known ones,
/// before anything runs.
#[test]
fn an_unknown_release_is_refused_with_the_known_ones() {
    for (profile, says) in [
        ("kube-proxy-nftables@v1.29", "unknown release \"v1.29\""),
        ("kubernetes@v1.30", "names no release"),
        ("kube-proxy-nftables@v1.30; rm -rf /", "unknown release"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_packetproof"))
            .args(["run", "--profile", profile])
            .arg(scenario("raw-addresses"))
            .output()
            .expect("running packetproof");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains(says) && stderr.contains("v1.30, v1.31, v1.32, v1.33, v1.34, v1.35, v1.36"),
            "{stderr}"
        );
    }
}
