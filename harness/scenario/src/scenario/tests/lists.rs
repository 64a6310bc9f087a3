//! `kind: List` documents and typed lists: each item read as its own document, at its own lines.

use super::*;

const KUBECTL: &str = include_str!("kubectl.yaml");

/// The pasted objects of `kubectl.yaml` as one `kind: List`, as `kubectl get svc,endpointslices,pods
/// -o yaml` prints them, after its Scenario document.
fn as_list(text: &str, kind: &str) -> String {
    let mut docs = text.split("\n---\n");
    let scenario = docs.next().unwrap();
    let mut out = format!("{scenario}\n---\napiVersion: v1\nitems:\n");
    for doc in docs.filter(|d| !d.trim().is_empty()) {
        for (i, line) in doc.lines().enumerate() {
            out.push_str(if i == 0 { "- " } else { "  " });
            out.push_str(line);
            out.push('\n');
        }
    }
    out.push_str(&format!("kind: {kind}\nmetadata:\n  resourceVersion: \"\"\n"));
    out
}

#[test]
fn a_pasted_list_reads_as_its_items() {
    let s = load(&as_list(KUBECTL, "List"));
    let (_, http) = s.cluster.service_port("web", "http").unwrap();
    let endpoints: Vec<String> = http.endpoints.iter().map(|e| e.address().to_string()).collect();
    assert_eq!(endpoints, ["10.244.1.10:80"]);
    assert_eq!(s.objects.endpoint_slices.len(), 1);
    assert_eq!(s.cluster.pods.len(), 2);
}

#[test]
fn errors_in_items_point_at_the_items_own_lines() {
    let text = as_list(
        &edit(
            KUBECTL,
            "  sessionAffinity: None\n",
            "  sessionAffinity: None\n  trafficDistribution: PreferSameNode\n",
        ),
        "List",
    );
    let errs = errors(&text);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].field, "Service default/web: spec.trafficDistribution");
    assert_eq!((errs[0].line, errs[0].column), at(&text, "PreferSameNode"));
    // A missing field points at its item.
    let text = as_list(
        &edit(
            KUBECTL,
            "  nodeName: node-a\n  restartPolicy: Always\nstatus:\n  podIP: 10.244.1.20\n",
            "  restartPolicy: Always\nstatus:\n  podIP: 10.244.1.20\n",
        ),
        "List",
    );
    assert_has(
        &parse_errors(&text),
        // The item's `spec`, the mapping that lacks it.
        (at(&text, "  spec:\n    containers:\n    - image: busybox").0 + 1, 5),
        "Pod default/client: spec.nodeName",
        "required field `nodeName` is missing",
    );
}

#[test]
fn items_of_unsupported_kinds_are_refused_at_the_item() {
    let text = as_list(KUBECTL, "List").replacen(
        "kind: List\n",
        "- apiVersion: apps/v1\n  kind: Deployment\n  metadata: {name: web}\nkind: List\nitems2: 1\n",
        1,
    );
    let errs = parse_errors(&text);
    assert_has(
        &errs,
        at_in(&text, "kind: Deployment", "Deployment"),
        "kind",
        "unsupported kind \"Deployment\"",
    );
    assert_has(&errs, at(&text, "items2"), "List: items2", "unknown field `items2`");
}

#[test]
fn typed_lists_imply_their_items_kind() {
    // The API server's ServiceList leaves kind and apiVersion out of its items.
    let text = as_list(KUBECTL, "List");
    let service = text.find("- apiVersion: v1\n  kind: Service\n").unwrap();
    let end = text[service + 2..].find("\n- ").unwrap() + service + 3;
    let item =
        text[service..end].replacen("- apiVersion: v1\n  kind: Service\n  metadata:", "- metadata:", 1);
    let rest = text[..service].to_string() + &text[end..];
    let typed = format!("{rest}---\napiVersion: v1\nkind: ServiceList\nitems:\n{item}");
    let s = load(&typed);
    assert_eq!(s.cluster.services.len(), 1);
    // An item of another kind is refused at its kind.
    let wrong = format!("{rest}---\napiVersion: v1\nkind: PodList\nitems:\n{}", &text[service..end]);
    let errs = parse_errors(&wrong);
    assert_has(
        &errs,
        (at(&wrong, "kind: PodList").0 + 3, 9),
        "kind",
        "a PodList holds Pod objects, not Service",
    );
}
