//! `kind: Step` documents: the state after each change, and the errors a step can make.

use super::*;

/// The shipped live scenario: one step replaces the only endpoint.
const LIVE: &str = include_str!("../../../../../scenarios/live-stale-udp-conntrack.yaml");

fn loaded(text: &str) -> Scenario {
    load_str(text, Path::new(FILE)).unwrap_or_else(|e| panic!("expected the scenario to load, got:\n{e}"))
}

#[test]
fn a_step_replaces_the_object_of_the_same_name_and_runs_its_own_probes() {
    let s = loaded(LIVE);
    assert_eq!(s.probes.len(), 1);
    assert_eq!(s.steps.len(), 1);
    let step = &s.steps[0];
    assert_eq!(step.name, "endpoint-replaced");
    assert_eq!(step.probes[0].name, "endpoint-replaced: after");
    assert_eq!(step.probes[0].source_port, Some(15353));
    let pods = |c: &crate::model::Cluster| -> Vec<String> {
        c.services[0].ports[0].endpoints.iter().map(|e| e.pod.clone()).collect()
    };
    assert_eq!(pods(&s.cluster), ["dns-old"]);
    assert_eq!(pods(&step.cluster), ["dns-new"]);
    assert_eq!(step.objects.endpoint_slices.len(), 1);
    assert_eq!(step.cluster.pods, s.cluster.pods, "the topology is the same");
}

#[test]
fn a_deleted_object_leaves_the_state() {
    let text = edit(
        LIVE,
        "  probes:\n    - name: after",
        "  delete: [{kind: EndpointSlice, name: dns-abcde}]\n  probes:\n    - name: after",
    );
    // The slice applied after the step puts it back: drop that document.
    let text = text[..text.rfind("---\napiVersion: discovery.k8s.io/v1").unwrap()].to_string();
    let text = edit(
        &text,
        "      expect: {verdict: answered, backends: [dns-new], source: client}\n",
        "      expect: {verdict: rejected}\n",
    );
    let s = loaded(&text);
    assert!(s.steps[0].objects.endpoint_slices.is_empty());
    assert!(s.steps[0].cluster.services[0].ports[0].endpoints.is_empty());
}

#[test]
fn a_step_cannot_delete_what_is_not_there_or_change_the_topology() {
    let text = edit(
        LIVE,
        "  probes:\n    - name: after",
        "  delete: [{kind: Service, name: nope}]\n  probes:\n    - name: after",
    );
    let errs = errors(&text);
    assert_has(
        &errs,
        at(&text, "{kind: Service, name: nope}"),
        "spec.delete[0]",
        "no Service default/nope to delete at this step",
    );

    let text = edit(
        LIVE,
        "  probes:\n    - name: after",
        "  delete: [{kind: Pod, name: dns-old}]\n  probes:\n    - name: after",
    );
    let errs = errors(&text);
    assert_has(
        &errs,
        at(&text, "Pod, name: dns-old}"),
        "spec.delete[0].kind",
        "a step deletes Services and EndpointSlices only, not Pod",
    );

    let pod = "---\napiVersion: v1\nkind: Pod\nmetadata: {name: extra, namespace: default}\nspec: {nodeName: node-a}\nstatus: {podIP: 10.244.1.30}\n";
    let text = format!("{LIVE}{pod}");
    let errs = errors(&text);
    let last = text.matches("kind: Pod").count() - 1;
    let (line, column) = at_nth(&text, "kind: Pod", last);
    assert_has(
        &errs,
        (line, column + "kind: ".len()),
        "kind",
        "a step applies Services and EndpointSlices only",
    );
}

#[test]
fn a_step_needs_a_name_and_probes_whose_expectations_hold() {
    let text = edit(LIVE, "metadata:\n  name: endpoint-replaced\n", "metadata: {}\n");
    let errs = errors(&text);
    assert_has(
        &errs,
        at(&text, "{}\nspec:\n  description"),
        "metadata.name",
        "required field `name` is missing",
    );

    let text = edit(LIVE, "backends: [dns-new]", "backends: [dns-old]");
    let errs = errors(&text);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].field, "spec.probes[0].expect");
    assert_eq!(errs[0].line, at(&text, "backends: [dns-old], source: client}\n---\napiVersion: discovery").0);
}

#[test]
fn a_hand_made_syn_holds_no_connection() {
    let text = edit(
        include_str!("../../../../../scenarios/localhost-node-port.yaml"),
        "via: node-a}\n      count: 5\n      expect: {verdict: dropped}",
        "via: node-a}\n      hold: true",
    );
    let errs = errors(&text);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(errs[0].field.ends_with("].hold"), "{errs:?}");
    assert_eq!(errs[0].message, "a hand-made SYN to a node's 127.0.0.1 opens no connection to hold");
}
