//! End-to-end tests: scenario text in, model or located errors out.
//!
//! Positions are found by searching the text (`at`), so fixtures can change without
//! recounting lines by hand.

mod all_namespaces;
mod cluster;
mod detect_local;
mod dual_stack;
mod external;
mod fields;
mod flows;
mod happy;
mod ipv6;
mod kubernetes;
mod lists;
mod min_kernel;
mod nodes;
mod probes;
mod served;
mod slices;
mod steps;
mod syntax;
mod targets;
mod topology;

use std::path::Path;

use super::{ScenarioError, load_with, validate};
// Whole files are read as `run` reads them: through the admission stage.
use crate::model::Scenario;

/// The shipped example, which other work may extend: only the happy path reads it.
pub(super) const SHIPPED_KUBE_DNS: &str = include_str!("../../../../../scenarios/kube-dns-udp.yaml");
pub(crate) use super::fixtures::{EXPOSED, FILE, KUBE_DNS, WEB};

/// The error for the first IPv6 value, shown as `this` (`fd00::10 is`, or `this is` for a
/// family name), in an IPv4 fixture whose first address is its podCIDR 10.244.0.0/16.
pub(super) fn mixed(text: &str, this: &str) -> String {
    let line = at(text, "podCIDR: 10.244.0.0/16").0;
    format!(
        "{} ({this} IPv6, but the first address, 10.244.0.0/16 at spec.cluster.podCIDR line {line}, is IPv4)",
        super::families::DUAL_STACK
    )
}

pub(super) fn load(text: &str) -> Scenario {
    match load_str(text, Path::new(FILE)) {
        Ok(s) => s,
        Err(e) => panic!("expected a valid scenario, got:\n{e}"),
    }
}

/// `text` through every check but the oracle's, which judges probes separately: for the
/// parser's own rules, whatever the oracle makes of the probes.
pub(super) fn parse(text: &str) -> Scenario {
    match load_with(text, Path::new(FILE), validate::build_without_oracle, &Checks) {
        Ok(s) => s,
        Err(e) => panic!("expected the parser to accept the scenario, got:\n{e}"),
    }
}

/// The parser's errors, without the oracle's check (see [`parse`]).
pub(super) fn parse_errors(text: &str) -> Vec<ScenarioError> {
    match load_with(text, Path::new(FILE), validate::build_without_oracle, &Checks) {
        Ok(_) => panic!("expected errors, the parser accepted:\n{text}"),
        Err(e) => e.errors,
    }
}

pub(super) fn errors(text: &str) -> Vec<ScenarioError> {
    match load_str(text, Path::new(FILE)) {
        Ok(_) => panic!("expected errors, the scenario loaded:\n{text}"),
        Err(e) => e.errors,
    }
}

/// `text` with `old`, which must occur exactly once, replaced by `new`.
pub(super) fn edit(text: &str, old: &str, new: &str) -> String {
    assert_eq!(text.matches(old).count(), 1, "{old:?} must occur exactly once");
    text.replacen(old, new, 1)
}

/// 1-based line and column of the first occurrence of `needle`.
pub(super) fn at(text: &str, needle: &str) -> (usize, usize) {
    at_nth(text, needle, 0)
}

/// 1-based line and column of the `n`th (from 0) occurrence of `needle`.
pub(super) fn at_nth(text: &str, needle: &str, n: usize) -> (usize, usize) {
    let (offset, _) =
        text.match_indices(needle).nth(n).unwrap_or_else(|| panic!("{needle:?} #{n} not in the text"));
    position(text, offset)
}

/// Position of `target` inside the first occurrence of `context`, e.g. the value of a
/// key: `at_in(text, "count: 0", "0")`.
pub(super) fn at_in(text: &str, context: &str, target: &str) -> (usize, usize) {
    let offset = text.find(context).unwrap_or_else(|| panic!("{context:?} not in the text"));
    let inner = context.find(target).unwrap_or_else(|| panic!("{target:?} not in {context:?}"));
    position(text, offset + inner)
}

fn position(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().unwrap_or_default().chars().count() + 1;
    (line, column)
}

/// Asserts that the only error is at `pos`, on `field`, with `message`.
#[track_caller]
pub(super) fn assert_only(errors: &[ScenarioError], pos: (usize, usize), field: &str, message: &str) {
    assert_eq!(errors.len(), 1, "expected exactly one error, got:\n{}", show(errors));
    assert_error(&errors[0], pos, field, message);
}

/// Asserts that some error is at `pos`, on `field`, with a message containing `message`.
#[track_caller]
pub(super) fn assert_has(errors: &[ScenarioError], pos: (usize, usize), field: &str, message: &str) {
    let found =
        errors.iter().any(|e| (e.line, e.column) == pos && e.field == field && e.message.contains(message));
    assert!(found, "no error at {pos:?} on {field:?} containing {message:?}; got:\n{}", show(errors));
}

#[track_caller]
fn assert_error(e: &ScenarioError, pos: (usize, usize), field: &str, message: &str) {
    assert_eq!(e.file, Path::new(FILE));
    assert_eq!((e.line, e.column), pos, "position of: {e}");
    assert_eq!(e.field, field, "field of: {e}");
    assert_eq!(e.message, message, "message of: {e}");
}

fn show(errors: &[ScenarioError]) -> String {
    errors.iter().map(|e| format!("  {e}\n")).collect()
}

/// A file read as `run` reads it, through the harness's admission stage.
pub(crate) fn load_str(text: &str, path: &Path) -> Result<Scenario, super::ScenarioErrors> {
    super::load_str(text, path, &Checks)
}

/// The harness's admission stage (the proxy and the oracle answer what the reader cannot
/// tell), for the reader under test: these tests see the reader's own `Admission` trait, the
/// harness implements the one of the reader it links.
pub(crate) struct Checks;

impl super::Admission for Checks {
    fn proxy_problem(
        &self,
        choice: &crate::model::ProxyChoice,
        file: &Path,
        nodes: &[&str],
    ) -> Option<String> {
        packetproof::scenario::Admission::proxy_problem(&packetproof::admission::Checks, choice, file, nodes)
    }

    fn probe_problems(
        &self,
        cluster: &crate::model::Cluster,
        probes: &[crate::model::Probe],
    ) -> Vec<(usize, &'static str, String)> {
        packetproof::scenario::Admission::probe_problems(&packetproof::admission::Checks, cluster, probes)
    }
}
