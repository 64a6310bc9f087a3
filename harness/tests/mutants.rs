//! Every catalogued mutant — a realistic proxy bug applied to the built-in generator — must be
//! killed by some scenario of the suite. A survivor is a hole in the suite: add the scenario
//! that catches it. (`packetproof mutants` prints the whole table.)

use std::path::Path;

use packetproof::mutants::{self, Hunt};
use packetproof::proxy::iptables::Mutant;
use packetproof::{runner, scenario};

#[test]
fn every_mutant_is_killed_by_the_suite() {
    if let Some(reason) = runner::preflight() {
        assert!(std::env::var("PACKETPROOF_REQUIRE_PRIVILEGES").is_err(), "{reason}");
        eprintln!("skipped: {reason}");
        return;
    }
    let suite = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
    let scenarios: Vec<_> = scenario::discover(&[suite])
        .expect("listing scenarios/")
        .iter()
        .map(|f| scenario::load(f).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    let hunts = mutants::hunt(&scenarios, &Mutant::ALL, true, |h: &Hunt| {
        eprintln!(
            "{} {} by {}",
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
