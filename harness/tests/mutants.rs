//! Every catalogued mutant — a known proxy bug applied to a built-in proxy — must fail its
//! signature (`report::known_bugs`): each probe the signature names fails as it says, in
//! iptables mode and in nftables mode. That kills every mutant and proves every signature by
//! running only the signatures' scenarios; `packetproof mutants [--proxy P]` still hunts
//! through the whole suite and prints which scenarios kill each one.

use std::path::Path;
use std::sync::Mutex;

use packetproof::commands::mutants::{self, SignatureCheck};
use packetproof::model::Scenario;
use packetproof::proxy::Mutant;
use packetproof::report::known_bugs::{self, CATALOG};
use packetproof::{admission, proxy, scenario};

/// One mode at a time: each already runs four scenarios per core, and a loaded machine turns
/// answers into timeouts.
static ONE_MODE: Mutex<()> = Mutex::new(());

fn load_suite() -> Vec<Scenario> {
    let suite = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
    scenario::discover(&[suite])
        .expect("listing scenarios/")
        .iter()
        .map(|f| admission::load(f).unwrap_or_else(|e| panic!("{e}")))
        .collect()
}

/// These scenarios of the suite, by name.
fn named_scenarios(names: &[&str]) -> Vec<Scenario> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
    names
        .iter()
        .map(|n| admission::load(&dir.join(format!("{n}.yaml"))).unwrap_or_else(|e| panic!("{e}")))
        .collect()
}

/// The suite, or `None` where scenarios cannot run.
fn suite() -> Option<Vec<Scenario>> {
    packetproof::privileges::scenarios_can_run().then(load_suite)
}

#[test]
fn every_signature_names_probes_of_the_suite() {
    let dangling = mutants::dangling_marks(&load_suite());
    assert!(dangling.is_empty(), "signatures name probes the suite lacks: {dangling:#?}");
}

#[test]
fn the_known_bugs_are_the_mutants() {
    for name in [proxy::iptables::NAME, proxy::nftables::NAME, proxy::ipvs::NAME] {
        for mutant in mutants::catalog(name) {
            assert!(
                known_bugs::by_name(mutant.name()).is_some(),
                "{mutant} is in no entry of the known-bug catalog"
            );
        }
    }
    for bug in CATALOG {
        assert!(bug.name.parse::<Mutant>().is_ok(), "{} is no mutant", bug.name);
    }
}

fn assert_every_signature_holds(scenarios: &[Scenario], proxy_name: &str) {
    let breakable = mutants::breakable(proxy_name).expect("a built-in proxy");
    let checks = mutants::check_signatures(
        scenarios,
        &mutants::catalog(proxy_name),
        breakable,
        |c: &SignatureCheck| {
            eprintln!(
                "{proxy_name}: {} {}",
                c.mutant.name(),
                if c.proven() {
                    "fails its signature".to_string()
                } else {
                    format!("{:?} {:?}", c.unmet, c.errors)
                }
            );
        },
    )
    .expect("running the signatures");
    let errors: Vec<&String> = checks.iter().flat_map(|c| &c.errors).collect();
    assert!(errors.is_empty(), "scenarios could not be set up under some mutant: {errors:#?}");
    let unmet: Vec<String> =
        checks.iter().flat_map(|c| c.unmet.iter().map(move |u| format!("{}: {u}", c.mutant))).collect();
    assert!(unmet.is_empty(), "mutants that do not fail their signature as it says: {unmet:#?}");
}

#[test]
fn every_mutant_fails_its_signature_in_iptables_mode() {
    let _alone = ONE_MODE.lock().unwrap_or_else(|e| e.into_inner());
    let Some(scenarios) = suite() else { return };
    assert_every_signature_holds(&scenarios, proxy::iptables::NAME);
}

#[test]
fn every_mutant_fails_its_signature_in_nftables_mode() {
    let _alone = ONE_MODE.lock().unwrap_or_else(|e| e.into_inner());
    let Some(scenarios) = suite() else { return };
    assert_every_signature_holds(&scenarios, proxy::nftables::NAME);
}

/// Mutants hunted at once, each by its own runs: the whole hunt names the scenarios that kill
/// each one, each mutant's verdict is told once, and a first-kill hunt names one killer per
/// mutant, its other runs cancelled (never counted as errors).
#[test]
fn several_mutants_hunted_at_once_are_each_judged_by_their_own_runs() {
    let _alone = ONE_MODE.lock().unwrap_or_else(|e| e.into_inner());
    if !packetproof::privileges::scenarios_can_run() {
        return;
    }
    let scenarios = named_scenarios(&["hairpin", "kube-dns-udp"]);
    let chosen: Vec<Mutant> =
        ["no-hairpin-masq", "last-endpoint-never-chosen"].iter().map(|n| n.parse().unwrap()).collect();
    let breakable = mutants::breakable(proxy::iptables::NAME).expect("a built-in proxy");
    let baseline = mutants::baseline(&scenarios, breakable, 4).expect("the unbroken proxy runs");
    assert!(baseline.is_empty(), "{baseline:?}");
    for first_kill in [false, true] {
        let told = Mutex::new(Vec::new());
        let how = mutants::HowToHunt { first_kill, jobs: 4, fresh_topologies: false, every_run: false };
        let hunts = mutants::hunt(&scenarios, &chosen, how, breakable, &baseline, |h| {
            told.lock().unwrap().push(h.mutant.name().to_string());
        })
        .expect("the hunt runs");
        let mut told = told.into_inner().unwrap();
        told.sort();
        assert_eq!(told, ["last-endpoint-never-chosen", "no-hairpin-masq"], "each verdict told once");
        let by: Vec<(&str, &[String])> =
            hunts.iter().map(|h| (h.mutant.name(), h.killed_by.as_slice())).collect();
        assert_eq!(by[0].0, "no-hairpin-masq");
        assert!(by[0].1.contains(&"hairpin".to_string()) || first_kill, "{by:?}");
        assert!(by[1].1.contains(&"kube-dns-udp".to_string()) || first_kill, "{by:?}");
        for h in &hunts {
            assert!(h.errors.is_empty(), "{}: {:?}", h.mutant, h.errors);
            assert!(h.killed(), "{} survived", h.mutant);
            if first_kill {
                assert_eq!(
                    h.killed_by.len(),
                    1,
                    "{}: one killer at a first kill: {:?}",
                    h.mutant,
                    h.killed_by
                );
            }
        }
    }
}

/// A hunt does not run a scenario in whose every state the mutant's rules are the unbroken
/// proxy's: run anyway (`every_run`), each such run kills nothing.
#[test]
fn the_runs_a_hunt_skips_would_have_killed_nothing() {
    let _alone = ONE_MODE.lock().unwrap_or_else(|e| e.into_inner());
    if !packetproof::privileges::scenarios_can_run() {
        return;
    }
    let scenarios = named_scenarios(&["hairpin", "no-endpoints-reject", "session-affinity"]);
    let chosen: Vec<Mutant> =
        ["drop-instead-of-reject", "no-affinity"].iter().map(|n| n.parse().unwrap()).collect();
    for name in [proxy::iptables::NAME, proxy::nftables::NAME] {
        let breakable = mutants::breakable(name).expect("a built-in proxy");
        let baseline = mutants::baseline(&scenarios, breakable, 4).expect("the unbroken proxy runs");
        let hunt = |scenarios: &[Scenario], chosen: &[Mutant], every_run| {
            let how = mutants::HowToHunt { first_kill: false, jobs: 4, fresh_topologies: false, every_run };
            let hunts =
                mutants::hunt(scenarios, chosen, how, breakable, &baseline, |_| {}).expect("the hunt runs");
            for h in &hunts {
                assert!(h.errors.is_empty(), "{name}: {}: {:?}", h.mutant, h.errors);
            }
            hunts
        };
        let skipping: Vec<(Vec<String>, Vec<String>)> =
            hunt(&scenarios, &chosen, false).into_iter().map(|h| (h.killed_by, h.equivalent)).collect();
        // No affinity outside `session-affinity`: `no-affinity` acts as the unbroken proxy in
        // the other two. No Service without endpoints outside `no-endpoints-reject`: iptables
        // mode then writes no REJECT to turn into a DROP (nftables mode's reject chain is
        // always there).
        let no_reject = match name {
            proxy::iptables::NAME => vec!["hairpin".to_string(), "session-affinity".to_string()],
            _ => vec![],
        };
        assert_eq!(
            skipping,
            [
                (vec!["no-endpoints-reject".to_string()], no_reject),
                (
                    vec!["session-affinity".to_string()],
                    vec!["hairpin".to_string(), "no-endpoints-reject".to_string()]
                ),
            ],
            "{name}"
        );
        for (&mutant, (_, equivalent)) in chosen.iter().zip(&skipping) {
            let skipped: Vec<Scenario> =
                scenarios.iter().filter(|s| equivalent.contains(&s.name)).cloned().collect();
            if skipped.is_empty() {
                continue;
            }
            let ran = hunt(&skipped, &[mutant], true);
            assert!(ran[0].equivalent.is_empty(), "{name}: {mutant}: every run made");
            assert!(
                ran[0].killed_by.is_empty(),
                "{name}: {mutant} killed by {:?}, which the hunt skips",
                ran[0].killed_by
            );
        }
    }
}
