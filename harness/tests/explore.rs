//! `packetproof explore` end to end, kept short for CI: a few generated cases pass on each
//! built-in mode (exit 0), and with a mutant exploration exits 1 and writes a shrunk scenario
//! that fails `run` with that mutant and passes without it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn packetproof(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_packetproof"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("running packetproof")
}

fn text(out: &Output) -> String {
    format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pp-explore-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Two slices of one seed per mode pass, and `merge` joins them into one verdict; slices of
/// two proxies do not merge.
#[test]
fn a_short_exploration_passes_on_each_built_in_mode_and_its_slices_merge() {
    if !packetproof::privileges::scenarios_can_run() {
        return;
    }
    let dir = scratch("slices");
    for proxy in ["builtin-iptables", "builtin-nftables"] {
        for k in 1..=2 {
            let (slice, json) = (format!("count:{k}/2"), format!("{proxy}-{k}.json"));
            let out = packetproof(
                &dir,
                &[
                    "explore",
                    "--seed",
                    "1",
                    "--partition",
                    &slice,
                    "--cases",
                    "1",
                    "--proxy",
                    proxy,
                    "--timeout-ms",
                    "500",
                    "--json",
                    &json,
                ],
            );
            let said = text(&out);
            assert_eq!(out.status.code(), Some(0), "{proxy}:\n{said}");
            let seed = 1 + k; // seed × N + K − 1
            assert!(
                said.contains(&format!("seed {seed}: 1 cases, 1 passed, 0 confirmed failures")),
                "{proxy}:\n{said}"
            );
            assert!(said.contains("flows judged"), "{said}");
        }
        let out = packetproof(&dir, &["merge", &format!("{proxy}-1.json"), &format!("{proxy}-2.json")]);
        let said = text(&out);
        assert_eq!(out.status.code(), Some(0), "{proxy}:\n{said}");
        assert!(said.contains("2 cases, 2 passed, 0 confirmed failures"), "{said}");
    }
    let out = packetproof(&dir, &["merge", "builtin-iptables-1.json", "builtin-nftables-2.json"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("whose proxy differs"), "{}", text(&out));
    let _ = std::fs::remove_dir_all(&dir);
}

/// One mutant per mode: exploration finds it, shrinks it, and the file it writes is a finding
/// `run` reproduces with the mutant and not without.
#[test]
fn a_mutant_is_found_and_its_shrunk_case_reproduces_only_with_it() {
    if !packetproof::privileges::scenarios_can_run() {
        return;
    }
    for (proxy, mutant) in
        [("builtin-iptables", "no-off-cluster-masq"), ("builtin-nftables", "no-off-cluster-masq")]
    {
        let dir = scratch(&format!("{proxy}-{mutant}"));
        let option = format!("mutant={mutant}");
        let out = packetproof(
            &dir,
            &[
                "explore",
                "--seed",
                "1",
                "--cases",
                "1",
                "--proxy",
                proxy,
                "--proxy-option",
                &option,
                "--shrink-runs",
                "8",
                "--timeout-ms",
                "300",
                "--out",
                "found",
                "--json",
                "found.json",
                "--junit",
                "found.xml",
            ],
        );
        let said = text(&out);
        assert_eq!(out.status.code(), Some(1), "{proxy} {mutant}:\n{said}");
        // The machine reports tell the closing line's counts.
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("found.json")).unwrap()).unwrap();
        assert_eq!((json["exit_code"].as_i64(), json["cases"].as_u64()), (Some(1), Some(1)), "{json}");
        assert_eq!(json["findings"].as_array().map(Vec::len), Some(1), "{json}");
        assert!(json["findings"][0]["known_bug"].as_str().is_some_and(|b| b.contains(mutant)), "{json}");
        let junit = std::fs::read_to_string(dir.join("found.xml")).unwrap();
        assert!(junit.contains("tests=\"1\"") && junit.contains("failures=\"1\""), "{junit}");
        assert!(said.contains(&format!("mutant {mutant}")), "the report names the known bug:\n{said}");
        assert!(said.contains("passes on the proxy without the mutant"), "{said}");
        let found: Vec<PathBuf> =
            std::fs::read_dir(dir.join("found")).unwrap().map(|e| e.unwrap().path()).collect();
        assert_eq!(found.len(), 1, "{said}");
        let file = found[0].to_str().unwrap();
        let broken = packetproof(&dir, &["run", "--proxy", proxy, "--proxy-option", &option, file]);
        assert_eq!(broken.status.code(), Some(1), "with the mutant:\n{}", text(&broken));
        let fine = packetproof(&dir, &["run", "--proxy", proxy, file]);
        assert_eq!(fine.status.code(), Some(0), "without it:\n{}", text(&fine));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Two proxies against each other: a mutant behaves differently from the proxy it breaks (exit
/// 1, the case written with each side's behaviour), and the same proxy on both sides does not.
#[test]
fn against_a_mutant_the_differences_are_reported_and_against_itself_none() {
    if !packetproof::privileges::scenarios_can_run() {
        return;
    }
    let dir = scratch("against");
    let explore = |against: &[&str]| {
        let mut args =
            vec!["explore", "--seed", "2", "--cases", "2", "--timeout-ms", "300", "--out", "found"];
        args.extend(["--against", "builtin-iptables"]);
        args.extend(against);
        packetproof(&dir, &args)
    };
    let out = explore(&["--against-option", "mutant=no-off-cluster-masq"]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("flows behave differently"), "{said}");
    let found: Vec<PathBuf> =
        std::fs::read_dir(dir.join("found/differences")).unwrap().map(|e| e.unwrap().path()).collect();
    // Which of the seed's cases reach a masqueraded off-cluster flow is the grammar's choice:
    // seed 2's first two do (seed 1's no longer did once the grammar learned the shapes of the
    // catalog's last survivors).
    assert!(!found.is_empty(), "{said}");
    for file in &found {
        let file = std::fs::read_to_string(file).unwrap();
        assert!(file.contains("builtin-iptables (mutant=no-off-cluster-masq): "), "{file}");
        assert!(file.contains("(the oracle allows only the first)"), "{file}");
    }

    let same = explore(&[]);
    assert_eq!(same.status.code(), Some(0), "{}", text(&same));
    assert!(!text(&same).contains("behave differently"), "{}", text(&same));
    let _ = std::fs::remove_dir_all(&dir);
}
