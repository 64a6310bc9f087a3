//! YAML syntax, document kinds and the shape of the Scenario document.

use super::*;

#[test]
fn yaml_syntax_error_points_where_the_scanner_stopped() {
    let text = edit(KUBE_DNS, "      count: 40\n", "      count: 40\n     bad: [1, 2\n");
    let errs = errors(&text);
    assert_eq!(errs.len(), 1, "{errs:?}");
    let e = &errs[0];
    assert_eq!(e.field, "");
    assert!(e.message.starts_with("invalid YAML: "), "{e}");
    assert_eq!((e.line, e.column), at(&text, "bad: ["), "{e}");
}

#[test]
fn duplicate_keys_are_errors() {
    let text = edit(KUBE_DNS, "      count: 40\n", "      count: 40\n      count: 41\n");
    let errs = errors(&text);
    assert_only(&errs, at(&text, "count: 41"), "", "invalid YAML: duplicated key in mapping");
}

#[test]
fn unknown_scenario_fields_are_errors() {
    let text = edit(KUBE_DNS, "from: {pod: client}", "form: {pod: client}");
    let errs = errors(&text);
    assert_only(
        &errs,
        at(&text, "form:"),
        "spec.probes[0].form",
        "unknown field `form`, expected one of `name`, `from`, `to`, `protocol`, `count`, `interval`, `family`, `sourcePort`, `expect`, `hold`, `held`, `outOfWindow`",
    );
    let text = edit(KUBE_DNS, "  proxy: builtin-iptables", "  proxi: builtin-iptables");
    let errs = errors(&text);
    assert_eq!(errs[0].field, "spec.proxi", "{errs:?}");
    assert_eq!((errs[0].line, errs[0].column), at(&text, "proxi"));
}

#[test]
fn wrong_types_are_errors() {
    let text = edit(KUBE_DNS, "count: 40", "count: many");
    assert_only(
        &errors(&text),
        at(&text, "many"),
        "spec.probes[0].count",
        "invalid type: string \"many\", expected u32",
    );
    let text = edit(KUBE_DNS, "verdict: answered", "verdict: answerd");
    assert_only(
        &errors(&text),
        at(&text, "answerd"),
        "spec.probes[0].expect.verdict",
        "unknown variant `answerd`, expected one of `answered`, `rejected`, `dropped`, `forwarded`",
    );
}

#[test]
fn a_bad_probe_does_not_hide_errors_in_the_next() {
    let text = edit(KUBE_DNS, "count: 40", "count: many");
    let text = edit(
        &text,
        "      expect: {verdict",
        "    - from: {pod: nobody}\n      to: {service: kube-dns, port: dns}\n      expect: {verdict",
    );
    let errs = errors(&text);
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert_has(&errs, at(&text, "many"), "spec.probes[0].count", "invalid type");
    assert_has(&errs, at(&text, "nobody"), "spec.probes[1].from.pod", "no Pod named \"nobody\"");
}

#[test]
fn missing_required_fields_point_at_the_enclosing_mapping() {
    let text = edit(KUBE_DNS, "  nodes:\n", "  nodez:\n");
    let errs = errors(&text);
    assert_has(&errs, at(&text, "nodez"), "spec.nodez", "unknown field `nodez`");
    let text = edit(KUBE_DNS, "metadata:\n  name: kube-dns-udp\n", "metadata:\n  labels: {}\n");
    assert_only(&errors(&text), at(&text, "labels: {}"), "metadata.name", "required field `name` is missing");
}

#[test]
fn every_document_needs_a_kind() {
    let text = edit(
        KUBE_DNS,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: client\n",
        "apiVersion: v1\nmetadata:\n  name: client\n",
    );
    let errs = errors(&text);
    assert_has(
        &errs,
        at(&text, "apiVersion: v1\nmetadata:\n  name: client"),
        "kind",
        "required field `kind` is missing (supported kinds: Scenario, Step, Service, EndpointSlice, Pod, Node, and List of them)",
    );
    // The unreadable pod may be the one the probe means: no second error about it.
    assert_eq!(errs.len(), 1, "{errs:?}");
}

#[test]
fn unsupported_kinds_are_named() {
    let text = format!("{KUBE_DNS}---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: x}}\n");
    assert_only(
        &errors(&text),
        at(&text, "Deployment"),
        "kind",
        "unsupported kind \"Deployment\" (supported kinds: Scenario, Step, Service, EndpointSlice, Pod, Node, and List of them)",
    );
}

#[test]
fn api_version_must_match_the_kind() {
    let text = edit(KUBE_DNS, "apiVersion: v1\nkind: Service", "apiVersion: apps/v1\nkind: Service");
    let errs = errors(&text);
    assert_only(
        &errs,
        at(&text, "apps/v1"),
        "apiVersion",
        "kind Service needs apiVersion v1, not \"apps/v1\"",
    );
}

#[test]
fn a_file_needs_exactly_one_scenario_document() {
    let objects = &KUBE_DNS[KUBE_DNS.find("---\n").unwrap() + 4..];
    let errs = errors(objects);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_error_like(&errs[0], (1, 1), "kind", "no Scenario document");

    let scenario = &KUBE_DNS[..KUBE_DNS.find("---\n").unwrap()];
    let text = format!("{KUBE_DNS}---\n{scenario}");
    let second = at_nth(&text, "kind: Scenario", 1);
    assert_only(
        &errors(&text),
        (second.0, second.1 + "kind: ".len()),
        "kind",
        "a second Scenario document (the first starts at line 5): a file holds exactly one",
    );
}

#[test]
fn errors_from_all_documents_are_reported_in_file_order() {
    let text = edit(KUBE_DNS, "count: 40", "count: 0");
    let text = edit(&text, "podIP: 10.244.2.7", "podIP: 10.244.9.7");
    let errs = errors(&text);
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert!(errs[0].line < errs[1].line);
    assert_eq!(errs[0].field, "spec.probes[0].count");
    assert_eq!(errs[1].field, "Pod kube-system/coredns-b: status.podIP");
    let all = crate::scenario::ScenarioErrors { errors: errs }.to_string();
    assert_eq!(all.lines().count(), 2);
    assert!(all.starts_with("scenarios/test.yaml:"), "{all}");
}

#[track_caller]
fn assert_error_like(e: &crate::scenario::ScenarioError, pos: (usize, usize), field: &str, message: &str) {
    assert_eq!(((e.line, e.column), e.field.as_str()), (pos, field), "{e}");
    assert!(e.message.starts_with(message), "{e}");
}

#[test]
fn a_scenario_with_the_wrong_api_version_is_reported_once() {
    let text = edit(KUBE_DNS, "apiVersion: packetproof.dev/v1alpha1", "apiVersion: packetproof.dev/v1");
    assert_only(
        &errors(&text),
        at(&text, "packetproof.dev/v1\n"),
        "apiVersion",
        "kind Scenario needs apiVersion packetproof.dev/v1alpha1, not \"packetproof.dev/v1\"",
    );
}

#[test]
fn documents_must_be_mappings() {
    let text = format!("{KUBE_DNS}---\n- just\n- a list\n");
    assert_only(
        &errors(&text),
        at(&text, "- just"),
        "kind",
        "a document must be a mapping with apiVersion and kind (supported kinds: Scenario, Step, Service, EndpointSlice, Pod, Node, and List of them)",
    );
}

#[test]
fn the_proxy_is_a_known_name_with_the_options_its_adapter_accepts() {
    let text = edit(KUBE_DNS, "  proxy: builtin-iptables", "  proxy: kube-proxy-ipvs");
    let errs = errors(&text);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].field, "spec.proxy");
    assert!(errs[0].message.starts_with("unknown proxy \"kube-proxy-ipvs\" (known: "), "{}", errs[0]);
    assert_eq!((errs[0].line, errs[0].column), at(&text, "kube-proxy-ipvs"));

    let text = edit(KUBE_DNS, "  proxy: builtin-iptables", "  proxy: {name: builtin-iptables, speed: 3}");
    let errs = errors(&text);
    assert_only(
        &errs,
        at(&text, "{name:"),
        "spec.proxy",
        "builtin-iptables takes only the option `mutant`, but \"speed\" was given",
    );

    let text = edit(KUBE_DNS, "  proxy: builtin-iptables", "  proxy: {speed: 3}");
    let errs = errors(&text);
    assert_only(
        &errs,
        at(&text, "{speed"),
        "spec.proxy",
        "a proxy with options needs `name:` (e.g. `name: command`)",
    );
}
