//! `hold:` and `held:` on a probe: a TCP connection opened in one phase and checked in later
//! ones. A `held` check names its opener, an earlier phase's `hold: true` probe, and takes
//! its source and target from it (the Service may be gone by then), so it is assembled here,
//! once the phases before it are known.

use crate::model::{Life, Probe, Protocol, Target};

use super::error::{Diagnostics, Site};
use super::spec::ProbeSpec;
use super::yaml::FieldPath;

/// The life `spec` asks for: `hold: true`, `held: NAME` (with `outOfWindow`), or neither.
pub(crate) fn life(site: &Site<'_>, path: &FieldPath, spec: &ProbeSpec, diag: &mut Diagnostics) -> Life {
    if spec.out_of_window.is_some() && spec.held.is_none() {
        diag.value(site, &path.key("outOfWindow"), "outOfWindow only goes with `held: NAME`");
    }
    match (spec.hold, &spec.held) {
        (Some(true), Some(_)) => {
            diag.value(
                site,
                &path.key("held"),
                "a probe either holds a connection (hold) or checks one (held)",
            );
            Life::Hold
        }
        (Some(true), None) => Life::Hold,
        (_, Some(opener)) => {
            Life::Held { opener: opener.clone(), out_of_window: spec.out_of_window == Some(true) }
        }
        _ => Life::OneShot,
    }
}

/// A holding probe is one TCP connection from a port of its own, which a hand-made SYN to a
/// node's 127.0.0.1 never opens.
#[allow(clippy::too_many_arguments)]
pub(crate) fn check(
    site: &Site<'_>,
    path: &FieldPath,
    life: &Life,
    to: &Target,
    protocol: Protocol,
    count: u32,
    source_port: Option<u16>,
    diag: &mut Diagnostics,
) {
    match life {
        Life::OneShot => {}
        Life::Held { .. } => diag.value(
            site,
            &path.key("held"),
            "`held` checks go in a step, after the phase that holds the connection",
        ),
        Life::Hold => {
            if matches!(to, Target::Localhost { .. }) {
                diag.value(
                    site,
                    &path.key("hold"),
                    "a hand-made SYN to a node's 127.0.0.1 opens no connection to hold",
                );
            }
            if protocol != Protocol::Tcp {
                diag.value(
                    site,
                    &path.key("hold"),
                    format!("only a TCP connection can be held, not {protocol}"),
                );
            }
            if count != 1 {
                diag.value(site, &path.key("count"), "a held connection is one connection: count must be 1");
            }
            if source_port.is_some() {
                diag.value(site, &path.key("sourcePort"), "a held connection takes a port of its own");
            }
        }
    }
}

/// Whether `spec` is a `held` check (assembled by [`resolve`], not with the step's other probes).
pub(crate) fn is_check(spec: &ProbeSpec) -> bool {
    spec.held.is_some()
}

/// A step's `held` checks: each a copy of its opener (found among `earlier`, the probes of
/// the phases before, by its name as written) with the check's own name, expectation and life.
pub(crate) fn resolve(
    site: &Site<'_>,
    step: &str,
    checks: &[(usize, FieldPath, ProbeSpec)],
    earlier: &[&Probe],
    diag: &mut Diagnostics,
) -> Vec<Probe> {
    let mut out = Vec::new();
    for (i, path, spec) in checks {
        let held = |key: &str| spec_has(spec, key);
        for key in ["from", "to", "protocol", "count", "interval", "family", "sourcePort", "hold"] {
            if held(key) {
                diag.value(
                    site,
                    &path.key(key),
                    format!("a `held` check uses its opener's connection: {key} is the opener's"),
                );
            }
        }
        let Some(opener_name) = &spec.held else { continue };
        let opener = earlier.iter().rev().find(|p| {
            p.life == Life::Hold && (p.name == *opener_name || p.name.ends_with(&format!(": {opener_name}")))
        });
        let Some(opener) = opener else {
            let holders: Vec<&str> =
                earlier.iter().filter(|p| p.life == Life::Hold).map(|p| p.name.as_str()).collect();
            diag.value(
                site,
                &path.key("held"),
                format!(
                    "no earlier probe {opener_name:?} holds a connection (holding: {})",
                    if holders.is_empty() { "none".to_string() } else { holders.join(", ") }
                ),
            );
            continue;
        };
        let name = spec.name.clone().unwrap_or_else(|| format!("probe[{i}]"));
        let life =
            Life::Held { opener: opener.name.clone(), out_of_window: spec.out_of_window == Some(true) };
        out.push(Probe { name: format!("{step}: {name}"), expect: None, life, ..(*opener).clone() });
        if spec.expect.is_some() {
            diag.value(
                site,
                &path.key("expect"),
                "a `held` check's outcome is the oracle's (the connection goes on to the backend that answered it); state none",
            );
        }
    }
    out
}

fn spec_has(spec: &ProbeSpec, key: &str) -> bool {
    match key {
        "from" => spec.from.is_some(),
        "to" => spec.to.is_some(),
        "protocol" => spec.protocol.is_some(),
        "count" => spec.count.is_some(),
        "interval" => spec.interval.is_some(),
        "family" => spec.family.is_some(),
        "sourcePort" => spec.source_port.is_some(),
        "hold" => spec.hold.is_some(),
        _ => false,
    }
}
