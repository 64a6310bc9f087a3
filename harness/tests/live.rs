//! Live behaviour with real packets: a connection held open across an unrelated change, a
//! proxy restart, a backend turning terminating and leaving, passes against both built-in
//! proxies; and when a broken proxy lets an out-of-window segment reset it, the failure names
//! the segment and what the client's capture shows.

use std::path::Path;

use packetproof::model::{Life, Scenario};
use packetproof::proxy::Mutant;
use packetproof::proxy::Proxy;
use packetproof::proxy::iptables::BuiltinIptables;
use packetproof::proxy::nftables::BuiltinNftables;
use packetproof::results::Outcome;
use packetproof::runner::{self, RunOptions};
use packetproof::{admission, report};

fn load(name: &str) -> Option<Scenario> {
    if !packetproof::privileges::scenarios_can_run() {
        return None;
    }
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios").join(format!("{name}.yaml"));
    Some(admission::load(&file).unwrap_or_else(|e| panic!("{e}")))
}

fn run(s: &Scenario, proxy: &dyn Proxy) -> (bool, String, usize) {
    let report = runner::run(s, proxy, &RunOptions::default()).expect("the scenario runs");
    let Outcome::Judged(verdicts) = &report.outcome else { panic!("{} did not run", s.name) };
    let held_checks = verdicts.iter().filter(|v| matches!(v.probe.life, Life::Held { .. })).count();
    let table = report::flow_table(&s.cluster, verdicts);
    println!("{}\n{table}", report::scenario_line(&report));
    (report.passed(), table, held_checks)
}

#[test]
fn a_held_connection_survives_an_unrelated_change_and_a_restart() {
    let Some(s) = load("live-held-connection") else { return };
    let restarts = s.steps.iter().filter(|step| step.restart_proxy).count();
    assert_eq!(restarts, 1, "the scenario restarts the proxy once");
    let proxies: [Box<dyn Proxy>; 2] =
        [Box::new(BuiltinIptables { mutant: None }), Box::new(BuiltinNftables::default())];
    for proxy in &proxies {
        let (passed, table, held_checks) = run(&s, proxy.as_ref());
        assert!(passed, "{} broke a held connection:\n{table}", proxy.name());
        // Unrelated change, restart, terminating, removed: each checked the one connection.
        assert_eq!(held_checks, 4, "{table}");
    }
}

#[test]
fn a_reset_held_connection_is_reported_with_its_evidence() {
    let Some(s) = load("live-out-of-window") else { return };
    let (passed, table, _) = run(&s, &BuiltinIptables { mutant: Some(Mutant::InvalidNotDropped) });
    assert!(!passed, "invalid-not-dropped survived:\n{table}");
    for fragment in [
        "session-survives",
        "the held connection was reset",
        "out-of-window segment",
        "arriving un-translated",
        "the client's RST",
    ] {
        assert!(table.contains(fragment), "the report lacks {fragment:?}:\n{table}");
    }
}
