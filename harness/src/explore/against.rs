//! `explore --against`: each generated case on two proxies, compared flow by flow
//! ([`crate::compare`]) instead of judged by the oracle alone.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use anyhow::{Context, Result};

use super::features::{Feature, Guide};
use super::{Difference, Ready, Settings, Summary, Suspect, Unconfirmed, run_all};
use crate::compare::FlowDiff;
use crate::engine::Engine;
use crate::model::{ProxyChoice, Scenario};
use crate::results::ScenarioReport;

/// A batch of cases run on both proxies and compared flow by flow. A case that differs is run
/// on both again; the flows that differ both times are its finding, written unshrunk to
/// `differences/` under `--out` with each side's behaviour and which side the oracle allows. One
/// that differed only once is not confirmed, and the harness's until shown otherwise.
pub(super) fn compare_batch(
    settings: &Settings,
    engine: &Engine,
    against: &ProxyChoice,
    ready: Vec<(Ready, BTreeSet<Feature>)>,
    summary: &mut Summary,
    guide: &mut dyn Guide,
) -> Result<()> {
    let scenarios: Vec<Scenario> = ready.iter().map(|(r, _)| r.scenario.clone()).collect();
    let found = crate::compare::diff(&scenarios, &settings.proxy, against, engine, &mut [])?;
    for ((r, f), scenario) in ready.into_iter().zip(&scenarios) {
        let name = r.case.name.clone();
        if let Some(not) = found.not_compared.iter().find(|n| n.scenario == scenario.name) {
            match not.error {
                true => summary.errors.push(format!("{name}: {}", not.why)),
                false => summary.skipped.push((name, not.why.clone())),
            }
            continue;
        }
        guide.judged(&r.case, &f);
        summary.covered.extend(f);
        summary.flows_compared += scenario.probes.len();
        let differing: Vec<_> = found.flows.iter().filter(|d| d.scenario == scenario.name).cloned().collect();
        if differing.is_empty() {
            summary.passed.push(name);
            continue;
        }
        investigate(settings, engine, against, &r, scenario, differing, summary)?;
    }
    Ok(())
}

/// A case whose flows differed: run on both again; the flows that differ both times are its
/// finding (a documented choice when each side passes under its own profile), kept with each
/// side's behaviour; one that differed only once is not confirmed.
fn investigate(
    settings: &Settings,
    engine: &Engine,
    against: &ProxyChoice,
    r: &Ready,
    scenario: &Scenario,
    differing: Vec<FlowDiff>,
    summary: &mut Summary,
) -> Result<()> {
    let name = r.case.name.clone();
    let again =
        crate::compare::diff(std::slice::from_ref(scenario), &settings.proxy, against, engine, &mut [])?;
    let flows: Vec<FlowDiff> =
        differing.iter().filter(|d| again.flows.iter().any(|a| a.probe == d.probe)).cloned().collect();
    // Two implementation choices a profile documents (nftables mode refusing what iptables
    // mode answers): each side passes under its own profile, so neither is a bug.
    let documented = !flows.is_empty() && {
        let own = |proxy: &ProxyChoice| -> Result<bool> {
            let results = run_all(engine, &[scenario], proxy)?;
            Ok(results.first().is_some_and(|r| r.as_ref().is_ok_and(ScenarioReport::passed)))
        };
        own(&settings.proxy)? && own(against)?
    };
    let (folder, headline) = match (flows.is_empty(), documented) {
        (true, _) => ("flaky", "Behaved differently once, then alike"),
        (false, true) => ("documented-choices", "Behaves differently, twice, as each side's profile allows"),
        (false, false) => ("differences", "Behaves differently, twice"),
    };
    let dir = settings.out.join(folder);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let file = dir.join(format!("{name}.yaml"));
    let shown = if flows.is_empty() { &differing } else { &flows };
    let header = format!(
        "{headline} under `packetproof explore --seed {}` (packetproof {}) between {} and {}.\n{}",
        settings.seed,
        env!("CARGO_PKG_VERSION"),
        settings.proxy.label(),
        against.label(),
        described(shown, &settings.proxy, against)
    );
    std::fs::write(&file, r.case.render(&header)).with_context(|| format!("writing {}", file.display()))?;
    if flows.is_empty() {
        let why = "a behaviour that changes between runs of the same proxies is the harness's until its mechanism is found".to_string();
        summary.unconfirmed.push(Unconfirmed {
            case: name,
            what: "differed once, alike on its re-run",
            suspect: Suspect::Harness,
            why,
            file,
        });
    } else {
        eprintln!(
            "packetproof explore: {name}: {} flows behave differently{} (kept as {})",
            flows.len(),
            if documented { ", as each side's profile allows" } else { "" },
            file.display()
        );
        summary.differences.push(Difference { case: name, file, flows, documented });
    }
    Ok(())
}

/// Each differing flow with both sides' behaviour and which the oracle allows, for the header
/// of the case's file.
fn described(flows: &[FlowDiff], left: &ProxyChoice, right: &ProxyChoice) -> String {
    let mut h = String::new();
    for d in flows {
        let oracle = match d.passed {
            (Some(true), Some(false)) => "the oracle allows only the first",
            (Some(false), Some(true)) => "the oracle allows only the second",
            (Some(true), Some(true)) => "the oracle allows both",
            (Some(false), Some(false)) => "the oracle allows neither",
            _ => "not judged on both",
        };
        let _ = writeln!(
            h,
            "- {}\n    {}: {}\n    {}: {}\n    ({oracle})",
            d.probe,
            left.label(),
            d.left,
            right.label(),
            d.right
        );
    }
    h
}
