//! Every supported kube-proxy release, unmodified, judged by the whole suite under its own
//! release profile in iptables and nftables mode: each fails exactly the known bugs listed
//! for it below ([`EXPECTED`]), every failing probe named by one of them, and nothing is a
//! setup error (the embedded API server serves whatever the release asks for).
//!
//! Needs the binaries, which nothing here builds: `PACKETPROOF_KUBE_PROXIES=DIR cargo test
//! --test kube_proxy_releases -- --ignored`, DIR holding files `kube-proxy-vMAJOR.MINOR.PATCH`
//! (upstream's `make WHAT=cmd/kube-proxy`, one per release). Without them the test is
//! ignored, with that reason; asked to run without them, it fails rather than pass.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The known bugs (mutant names, `report::known_bugs`) each release fails in each mode, as
/// the binaries showed (docs/src/proxies.md, "Every release"). v1.30 from v1.30.3; v1.31 to
/// v1.36 from v1.31.14, v1.32.13, v1.33.13, v1.34.9, v1.35.6 and v1.36.3.
const EXPECTED: &[(&str, &str, &[&str])] = &[
    ("v1.30", "iptables", &["udp-conntrack-flushed-on-restart"]),
    (
        "v1.30",
        "nftables",
        &[
            "udp-conntrack-flushed-on-restart",
            "etp-local-filtered-before-dnat",
            "interface-prefix-matched-by-index",
        ],
    ),
    ("v1.31", "iptables", &["udp-conntrack-flushed-on-restart"]),
    (
        "v1.31",
        "nftables",
        &[
            "udp-conntrack-flushed-on-restart",
            "etp-local-filtered-before-dnat",
            "interface-prefix-matched-by-index",
        ],
    ),
    ("v1.32", "iptables", &["stale-udp-kept-when-scaled-to-zero", "stale-udp-kept-when-deleted"]),
    (
        "v1.32",
        "nftables",
        &[
            "stale-udp-kept-when-scaled-to-zero",
            "stale-udp-kept-when-deleted",
            "etp-local-filtered-before-dnat",
            "interface-prefix-matched-by-index",
        ],
    ),
    ("v1.33", "iptables", &["stale-udp-kept-when-scaled-to-zero", "stale-udp-kept-when-deleted"]),
    ("v1.33", "nftables", &["stale-udp-kept-when-scaled-to-zero", "stale-udp-kept-when-deleted"]),
    ("v1.34", "iptables", &["stale-udp-kept-when-scaled-to-zero", "stale-udp-kept-when-deleted"]),
    ("v1.34", "nftables", &["stale-udp-kept-when-scaled-to-zero", "stale-udp-kept-when-deleted"]),
    ("v1.35", "iptables", &["stale-udp-kept-when-scaled-to-zero", "stale-udp-kept-when-deleted"]),
    ("v1.35", "nftables", &["stale-udp-kept-when-scaled-to-zero", "stale-udp-kept-when-deleted"]),
    ("v1.36", "iptables", &["stale-udp-kept-when-scaled-to-zero", "stale-udp-kept-when-deleted"]),
    (
        "v1.36",
        "nftables",
        &[
            "stale-udp-kept-when-scaled-to-zero",
            "stale-udp-kept-when-deleted",
            "remote-hairpin-not-masqueraded",
        ],
    ),
];

/// `kube-proxy-v1.34.9` → `v1.34`; anything else is not a release binary.
fn minor_release(file: &Path) -> Option<String> {
    let version = file.file_name()?.to_str()?.strip_prefix("kube-proxy-v")?;
    let mut parts = version.split('.');
    let (major, minor, patch) = (parts.next()?, parts.next()?, parts.next()?);
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (numeric(major) && numeric(minor) && numeric(patch) && parts.next().is_none())
        .then(|| format!("v{major}.{minor}"))
}

/// The release binaries in `dir`, oldest first.
fn binaries(dir: &Path) -> Vec<(String, PathBuf)> {
    let mut found: Vec<(String, PathBuf)> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading PACKETPROOF_KUBE_PROXIES={}: {e}", dir.display()))
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            Some((minor_release(&path)?, path))
        })
        .collect();
    found.sort_by_key(|(release, _)| release.split('.').nth(1).and_then(|m| m.parse::<u32>().ok()));
    found
}

/// What one run of the suite showed: the known bugs it named, and what no bug covers.
struct Judged {
    code: Option<i32>,
    named: BTreeSet<String>,
    unnamed: Vec<String>,
    text: String,
}

fn run_suite(binary: &Path, release: &str, mode: &str) -> Judged {
    let dir =
        std::env::temp_dir().join(format!("pp-kube-proxy-releases-{}-{release}-{mode}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let scenarios = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
    let mut command = Command::new(env!("CARGO_BIN_EXE_packetproof"));
    command.args(["run", "--color", "never", "--proxy", "apiserver"]);
    command.args(["--proxy-option", &format!("mode={mode}")]);
    if (release, mode) == ("v1.30", "nftables") {
        // Alpha in v1.30, on by default from v1.31.
        command.args(["--proxy-option", "featureGates=NFTablesProxyMode=true"]);
    }
    let template = format!("command={} --config={{config}} --hostname-override={{node}}", binary.display());
    command.args(["--proxy-option", &template, "--profile", &format!("kube-proxy-{mode}@{release}")]);
    command
        .arg(&scenarios)
        .arg("--json")
        .arg(dir.join("report.json"))
        .arg("--artifacts")
        .arg(dir.join("evidence"));
    let out = command.output().expect("running packetproof");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap())
            .unwrap_or_else(|e| panic!("{e}: {text}"));
    let mut covered = BTreeSet::new();
    let mut named = BTreeSet::new();
    for bug in report["known_bugs"].as_array().into_iter().flatten() {
        named.insert(bug["name"].as_str().unwrap().to_string());
        for probe in bug["probes"].as_array().into_iter().flatten() {
            covered.insert((probe[0].as_str().unwrap().to_string(), probe[1].as_str().unwrap().to_string()));
        }
    }
    let mut unnamed = Vec::new();
    for s in report["scenarios"].as_array().unwrap() {
        let name = s["name"].as_str().unwrap().to_string();
        match s["status"].as_str().unwrap() {
            "error" => unnamed.push(format!("{name}: a setup error: {}", s["reason"])),
            "failed" => {
                let failed: Vec<String> = s["probes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|p| p["passed"] == false)
                    .map(|p| p["name"].as_str().unwrap().to_string())
                    .collect();
                if failed.is_empty() && !covered.contains(&(name.clone(), "(the proxy)".to_string())) {
                    unnamed.push(format!("{name}: the proxy failed: {}", s["reason"]));
                }
                for probe in failed {
                    if !covered.contains(&(name.clone(), probe.clone())) {
                        unnamed.push(format!("{name}: {probe}"));
                    }
                }
            }
            _ => {}
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Judged { code: out.status.code(), named, unnamed, text }
}

#[test]
#[ignore = "needs kube-proxy release binaries: set PACKETPROOF_KUBE_PROXIES=DIR (files kube-proxy-vX.Y.Z) and run with --ignored"]
fn every_release_fails_only_its_known_bugs_in_both_modes() {
    let dir = std::env::var_os("PACKETPROOF_KUBE_PROXIES")
        .expect("PACKETPROOF_KUBE_PROXIES must name a directory of kube-proxy-vX.Y.Z binaries for this test");
    if !packetproof::privileges::scenarios_can_run() {
        return;
    }
    let found = binaries(Path::new(&dir));
    assert!(!found.is_empty(), "no kube-proxy-vX.Y.Z file in {}", Path::new(&dir).display());
    let mut wrong = Vec::new();
    for (release, binary) in &found {
        for mode in ["iptables", "nftables"] {
            let Some((_, _, bugs)) = EXPECTED.iter().find(|(r, m, _)| r == release && *m == mode) else {
                wrong.push(format!("{release} {mode}: no expectation listed for this release"));
                continue;
            };
            let judged = run_suite(binary, release, mode);
            let expected: BTreeSet<String> = bugs.iter().map(|b| b.to_string()).collect();
            eprintln!("{} {mode}: exit {:?}, named {:?}", binary.display(), judged.code, judged.named);
            if judged.named != expected || !judged.unnamed.is_empty() {
                wrong.push(format!(
                    "{release} {mode} ({}): named {:?}, expected {expected:?}; not named: {:#?}\n{}",
                    binary.display(),
                    judged.named,
                    judged.unnamed,
                    judged.text
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
}

#[test]
fn release_binaries_are_told_by_their_names() {
    assert_eq!(minor_release(Path::new("/x/kube-proxy-v1.34.9")).as_deref(), Some("v1.34"));
    for not_one in [
        "kube-proxy",
        "kube-proxy-v1.34",
        "kube-proxy-v1.34.9.1",
        "kube-proxy-v1.x.9",
        "kube-proxy-v1.34.9-rc.0",
    ] {
        assert_eq!(minor_release(Path::new(not_one)), None, "{not_one}");
    }
    // Every release a profile names has a row in each mode.
    for release in ["v1.30", "v1.31", "v1.32", "v1.33", "v1.34", "v1.35", "v1.36"] {
        for mode in ["iptables", "nftables"] {
            assert!(EXPECTED.iter().any(|(r, m, _)| *r == release && *m == mode), "{release} {mode}");
        }
    }
}
