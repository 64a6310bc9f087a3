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
use crate::admission::{Checks, load_str};
use crate::model::Scenario;

/// The shipped example, which other work may extend: only the happy path reads it.
pub(super) const SHIPPED_KUBE_DNS: &str = include_str!("../../../../scenarios/kube-dns-udp.yaml");
/// A frozen copy of it (one probe), which the error tests edit.
pub(crate) const KUBE_DNS: &str = include_str!("dns.yaml");
pub(crate) const FILE: &str = "scenarios/test.yaml";
/// A LoadBalancer Service with every external frontend (external IP, ingress IP, source
/// ranges, health-check node port), session affinity, a node with a secondary IP, proxy
/// flags, and a probe of every new target form.
pub(crate) const EXPOSED: &str = include_str!("exposed.yaml");

/// A NodePort Service with a named targetPort that resolves to different ports in its two
/// pods, an external host and the three kinds of target.
pub(crate) const WEB: &str = r#"apiVersion: packetproof.dev/v1alpha1
kind: Scenario
metadata:
  name: web
spec:
  cluster:
    podCIDR: 10.244.0.0/16
    serviceCIDR: 10.96.0.0/12
    nodeNetwork: 192.168.50.0/24
  nodes:
    - {name: node-a, ip: 192.168.50.11, podCIDR: 10.244.1.0/24}
    - {name: node-b, ip: 192.168.50.12, podCIDR: 10.244.2.0/24}
  externalHosts:
    - {name: outside, ip: 192.168.50.100}
  probes:
    - name: pod-to-web
      from: {pod: client}
      to: {service: web, port: http}
      expect: {verdict: answered, source: client}
    - name: outside-to-nodeport
      from: {external: outside}
      to: {service: web, port: http, nodePort: node-b}
    - from: {node: node-a}
      to: {address: 10.96.0.99, port: 80}
      expect: {verdict: forwarded, profile: kube-proxy-iptables}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  type: NodePort
  clusterIP: 10.96.0.20
  selector: {app: web}
  ports:
    - {name: http, port: 80, targetPort: http, nodePort: 30080}
---
apiVersion: v1
kind: Pod
metadata: {name: web-a, labels: {app: web}}
spec:
  nodeName: node-a
  containers:
    - name: web
      ports: [{name: http, containerPort: 8080}]
status: {podIP: 10.244.1.10}
---
apiVersion: v1
kind: Pod
metadata: {name: web-b, labels: {app: web}}
spec:
  nodeName: node-b
  containers:
    - name: web
      ports: [{name: http, containerPort: 9090}]
status: {podIP: 10.244.2.10}
---
apiVersion: v1
kind: Pod
metadata: {name: client}
spec:
  nodeName: node-a
  containers: [{name: client}]
status: {podIP: 10.244.1.20}
"#;

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
