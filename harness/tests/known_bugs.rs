//! A run whose failures match a known bug's signature names the bug, in the terminal, the JSON
//! and the JUnit report: shown with the mutant that reproduces kubernetes/kubernetes#131765,
//! and an unbroken run of the same scenario names nothing.

use std::path::Path;
use std::process::{Command, Output};

fn run(dir: &Path, proxy_options: &[&str]) -> Output {
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/external-ips-local.yaml");
    let mut command = Command::new(env!("CARGO_BIN_EXE_packetproof"));
    command.args(["run", "--proxy", "builtin-nftables", "--color", "never", "--timeout-ms", "300"]);
    for option in proxy_options {
        command.args(["--proxy-option", option]);
    }
    command
        .arg(&scenario)
        .arg("--json")
        .arg(dir.join("report.json"))
        .arg("--junit")
        .arg(dir.join("report.xml"))
        .arg("--artifacts")
        .arg(dir.join("evidence"))
        .output()
        .expect("running packetproof")
}

#[test]
fn failures_name_the_known_bug_they_match() {
    if !packetproof::privileges::scenarios_can_run() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("pp-known-bugs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let headline = "matches kubernetes/kubernetes#131765, mutant etp-local-filtered-before-dnat";

    let out = run(&dir, &["mutant=etp-local-filtered-before-dnat"]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        stdout.contains(&format!("the failures of external-ips-local: node-b-host {headline}")),
        "{stdout}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    let bugs = json["known_bugs"].as_array().expect("known_bugs");
    assert!(bugs.iter().any(|b| b["name"] == "etp-local-filtered-before-dnat"), "{bugs:#?}");
    let probe = json["scenarios"][0]["probes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "node-b-host")
        .expect("the probe")
        .clone();
    assert_eq!(probe["symptoms"], serde_json::json!(["silent"]));
    assert!(probe["known_bugs"][0].as_str().is_some_and(|h| h.starts_with(headline)), "{probe:#}");
    let xml = std::fs::read_to_string(dir.join("report.xml")).unwrap();
    assert!(
        xml.contains(r#"<property name="known-bug" value="matches kubernetes/kubernetes#131765"#),
        "{xml}"
    );

    // The same scenario, unbroken, passes and names nothing.
    let out = run(&dir, &[]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(!stdout.contains("matches"), "{stdout}");
    let json = std::fs::read_to_string(dir.join("report.json")).unwrap();
    assert!(json.contains(r#""known_bugs": []"#), "{json}");
    let _ = std::fs::remove_dir_all(&dir);
}
