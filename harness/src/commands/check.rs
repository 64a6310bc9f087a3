//! `packetproof check`: files read and admitted as `run` would, without running them.

use std::path::PathBuf;

use anyhow::Result;

use super::{EXIT_ERROR, EXIT_PASS, load_each};
use crate::model::Scenario;
use crate::proxy;

/// Every file is checked, and each one that passes says so, whatever the others do; with
/// `show`, followed by what each of its probes must see and why.
pub fn main(paths: &[PathBuf], show: bool) -> Result<i32> {
    let loaded = load_each(paths, |s| {
        println!("ok {} ({}, {} probes)", s.name, s.source.display(), s.probes.len());
        for warning in &s.warnings {
            println!("  warning: {warning}");
        }
        if show {
            print!("{}", expectations(s));
        }
    })?;
    Ok(if loaded.is_some() { EXIT_PASS } else { EXIT_ERROR })
}

/// A line per probe of `s`: the outcome its proxy's profile expects, and why.
fn expectations(s: &Scenario) -> String {
    let profile = proxy::build(&s.proxy, crate::model::folder_of(&s.source))
        .map_or(crate::model::Profile::KUBERNETES, |p| p.profile());
    let mut text = String::new();
    for probe in &s.probes {
        let expected = match crate::oracle::predict(&s.cluster, probe, profile) {
            Ok(crate::oracle::Prediction::Expected(e)) => {
                format!("{} ({}; by {})", crate::report::expected(&e.outcome), e.because, e.basis)
            }
            Ok(crate::oracle::Prediction::Open(why)) => format!("not judged under {profile}: {why}"),
            Err(why) => format!("no defined outcome: {why}"),
        };
        text.push_str(&format!("  {} (from {}): {expected}\n", probe.name, probe.from));
    }
    text
}
