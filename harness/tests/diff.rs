//! `packetproof diff` lists exactly the known differences: between kube-proxy's iptables and
//! nftables modes, the implementation choices the profiles model and nothing else; between a
//! mutant and its original, the flows its bug changes.

use std::collections::BTreeSet;
use std::path::Path;

use packetproof::admission;
use packetproof::commands::diff::diff;
use packetproof::engine::Engine;
use packetproof::model::{ProxyChoice, Scenario};
use packetproof::runner::RunOptions;

/// The named scenarios, or `None` (with the reason printed) where scenarios cannot run.
fn scenarios(names: &[&str]) -> Option<Vec<Scenario>> {
    if !packetproof::privileges::scenarios_can_run() {
        return None;
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
    let load =
        |name: &&str| admission::load(&dir.join(format!("{name}.yaml"))).unwrap_or_else(|e| panic!("{e}"));
    Some(names.iter().map(load).collect())
}

fn differing(scenarios: &[Scenario], left: &ProxyChoice, right: &ProxyChoice) -> BTreeSet<(String, String)> {
    differing_with(scenarios, left, right, RunOptions::default())
}

fn differing_with(
    scenarios: &[Scenario],
    left: &ProxyChoice,
    right: &ProxyChoice,
    options: RunOptions,
) -> BTreeSet<(String, String)> {
    let engine = Engine { options, jobs: 2 };
    let found = diff(scenarios, left, right, &engine, &mut []).expect("the runs end");
    eprint!("{}", packetproof::commands::diff::table(&left.name, &right.name, &found));
    assert!(found.not_compared.is_empty(), "every scenario compared: {:?}", found.not_compared);
    found.flows.into_iter().map(|d| (d.scenario, d.probe)).collect()
}

fn pairs(scenario: &str, probes: &[&str]) -> Vec<(String, String)> {
    probes.iter().map(|p| (scenario.to_string(), p.to_string())).collect()
}

#[test]
fn iptables_and_nftables_modes_differ_exactly_where_kube_proxy_chose_differently() {
    // The scenarios with an implementation choice, and some without any.
    let Some(suite) = scenarios(&[
        "raw-addresses",
        "localhost-node-port",
        "secondary-node-ip",
        "hairpin",
        "etp-local-nodeport",
        "live-stale-udp-conntrack",
    ]) else {
        return;
    };
    let found =
        differing(&suite, &ProxyChoice::named("builtin-iptables"), &ProxyChoice::named("builtin-nftables"));
    let known: BTreeSet<(String, String)> = [
        pairs("raw-addresses", &["cluster-ip-unused-port"]),
        pairs("localhost-node-port", &["node-a-to-localhost-node-port", "node-b-to-localhost-node-port"]),
        pairs(
            "secondary-node-ip",
            &[
                "outside-to-secondary",
                "outside-to-secondary-udp",
                "pod-to-secondary",
                "node-b-host-to-secondary",
                "node-a-host-to-own-secondary",
            ],
        ),
    ]
    .concat()
    .into_iter()
    .collect();
    assert_eq!(found, known);
}

#[test]
fn a_mutant_differs_from_its_original_in_the_flows_its_bug_changes() {
    let Some(suite) = scenarios(&["etp-local-nodeport", "kube-dns-udp"]) else { return };
    let original = ProxyChoice::named("builtin-iptables");
    let mut broken = ProxyChoice::named("builtin-iptables");
    broken.options.insert("mutant".into(), "etp-local-masquerades".into());
    let artifacts = std::env::temp_dir().join(format!("packetproof-diff-evidence-{}", std::process::id()));
    let options = RunOptions { artifacts: Some(artifacts.clone()), ..RunOptions::default() };
    let found = differing_with(&suite, &original, &broken, options);
    let known: BTreeSet<(String, String)> =
        pairs("etp-local-nodeport", &["node-b-host-to-node-a-node-port", "outside-via-endpoint-node"])
            .into_iter()
            .collect();
    assert_eq!(found, known);
    // The side that broke the oracle keeps its evidence, in its own folder; the rest none.
    let kept = |side: &str, scenario: &str| artifacts.join(side).join(scenario).join("summary.txt").exists();
    assert!(kept("right", "etp-local-nodeport"), "the mutant's failing scenario keeps its evidence");
    assert!(!kept("left", "etp-local-nodeport") && !kept("right", "kube-dns-udp"), "passing runs keep none");
    let _ = std::fs::remove_dir_all(&artifacts);
}

/// A side that could not be set up (its program does not exist) is an input or machine fault,
/// exit 2 with the error, as `run` says it: nothing was compared, so nothing differs.
#[test]
fn a_side_that_could_not_be_set_up_exits_2_and_is_no_difference() {
    if scenarios(&[]).is_none() {
        return;
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_packetproof"))
        .args(["diff", "--left", "apiserver", "--left-option", "mode=iptables"])
        .args(["--left-option", "command=nonexistent-proxy --config={config}", "--right", "builtin-iptables"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/hairpin.yaml"))
        .output()
        .expect("running packetproof diff");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let text = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(stdout.contains("not compared: hairpin: left: setup error:"), "{text}");
    assert!(stdout.contains("nonexistent-proxy"), "the error names the program: {text}");
    assert!(!stdout.contains("behave differently"), "{text}");
}
