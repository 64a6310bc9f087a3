//! `packetproof diff` lists exactly the known differences: between kube-proxy's iptables and
//! nftables modes, the implementation choices the profiles model and nothing else; between a
//! mutant and its original, the flows its bug changes.

use std::collections::BTreeSet;
use std::path::Path;

use packetproof::commands::diff::{FlowDiff, diff};
use packetproof::engine::Engine;
use packetproof::model::{ProxyChoice, Scenario};
use packetproof::runner::RunOptions;
use packetproof::scenario;

/// The named scenarios, or `None` (with the reason printed) where scenarios cannot run.
fn scenarios(names: &[&str]) -> Option<Vec<Scenario>> {
    if !packetproof::privileges::scenarios_can_run() {
        return None;
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
    let load =
        |name: &&str| scenario::load(&dir.join(format!("{name}.yaml"))).unwrap_or_else(|e| panic!("{e}"));
    Some(names.iter().map(load).collect())
}

fn differing(scenarios: &[Scenario], left: &ProxyChoice, right: &ProxyChoice) -> BTreeSet<(String, String)> {
    let engine = Engine { options: RunOptions::default(), jobs: 2 };
    let diffs: Vec<FlowDiff> = diff(scenarios, left, right, &engine, &mut []).expect("the runs end");
    eprint!("{}", packetproof::commands::diff::table(&left.name, &right.name, &diffs));
    diffs.into_iter().map(|d| (d.scenario, d.probe)).collect()
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
    let found = differing(&suite, &original, &broken);
    let known: BTreeSet<(String, String)> =
        pairs("etp-local-nodeport", &["node-b-host-to-node-a-node-port", "outside-via-endpoint-node"])
            .into_iter()
            .collect();
    assert_eq!(found, known);
}
