//! Every catalogued mutant — a realistic proxy bug applied to a built-in proxy — must be
//! killed by some scenario of the suite, in iptables mode and in nftables mode. A survivor is
//! a hole in the suite: add the scenario that catches it. (`packetproof mutants [--proxy P]`
//! prints the whole table.)

use std::path::Path;
use std::sync::Mutex;

use packetproof::commands::mutants::{self, Baseline, Hunt};
use packetproof::model::Scenario;
use packetproof::{proxy, scenario};

/// One hunt at a time: each already runs a scenario per core, and a loaded machine turns
/// answers into timeouts.
static ONE_HUNT: Mutex<()> = Mutex::new(());

/// The suite, or `None` (with the reason printed) where scenarios cannot run.
fn suite() -> Option<Vec<Scenario>> {
    if !packetproof::privileges::scenarios_can_run() {
        return None;
    }
    let suite = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
    let scenarios = scenario::discover(&[suite])
        .expect("listing scenarios/")
        .iter()
        .map(|f| scenario::load(f).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    Some(scenarios)
}

fn assert_every_mutant_killed(scenarios: &[Scenario], proxy_name: &str, baseline: &Baseline) {
    let breakable = mutants::breakable(proxy_name).expect("a built-in proxy");
    let hunts =
        mutants::hunt(scenarios, &mutants::catalog(proxy_name), true, breakable, baseline, |h: &Hunt| {
            eprintln!(
                "{proxy_name}: {} {} by {}",
                if h.killed() { "killed" } else { "SURVIVED" },
                h.mutant.name(),
                h.killed_by.join(", ")
            );
        });
    let survivors: Vec<&str> = hunts.iter().filter(|h| !h.killed()).map(|h| h.mutant.name()).collect();
    let errors: Vec<&String> = hunts.iter().flat_map(|h| &h.errors).collect();
    assert!(errors.is_empty(), "scenarios could not be set up under some mutant: {errors:#?}");
    assert!(survivors.is_empty(), "mutants no scenario kills: {survivors:?}\n{}", mutants::table(&hunts));
}

#[test]
fn every_mutant_is_killed_by_the_suite() {
    let _alone = ONE_HUNT.lock().unwrap_or_else(|e| e.into_inner());
    let Some(scenarios) = suite() else { return };
    // The suite passes against the unbroken iptables proxy: every failure is a kill.
    assert_every_mutant_killed(&scenarios, proxy::iptables::NAME, &Baseline::new());
}

#[test]
fn every_mutant_is_killed_in_nftables_mode() {
    let _alone = ONE_HUNT.lock().unwrap_or_else(|e| e.into_inner());
    let Some(scenarios) = suite() else { return };
    // The suite passes against the unbroken nftables proxy too (under its own profile).
    assert_every_mutant_killed(&scenarios, proxy::nftables::NAME, &Baseline::new());
}
