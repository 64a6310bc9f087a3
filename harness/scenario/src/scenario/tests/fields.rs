//! Fields a proxy acts on that the model does not hold are refused, one row per field
//! (`scenario/fields.rs` holds the audit); fields that change nothing are accepted.

use super::*;

const KUBECTL: &str = include_str!("kubectl.yaml");

/// One refused field: `old` → `new` in the pasted objects, the error's position (the first
/// `needle` after the edit), field and a part of its message.
struct Refused {
    old: &'static str,
    new: &'static str,
    needle: &'static str,
    field: &'static str,
}

const SERVICE_LABELS: &str = "  labels:\n    app: web\n  managedFields:";
const SLICE_LABELS: &str = "    kubernetes.io/service-name: web\n";
const SLICE_ENDPOINT: &str = "  nodeName: node-a\n  targetRef:";

const REFUSED: &[Refused] = &[
    Refused {
        old: "  sessionAffinity: None\n",
        new: "  sessionAffinity: None\n  trafficDistribution: PreferSameZone\n",
        needle: "PreferSameZone",
        field: "Service default/web: spec.trafficDistribution",
    },
    Refused {
        old: SERVICE_LABELS,
        new: "  labels:\n    app: web\n    service.kubernetes.io/service-proxy-name: cilium\n  managedFields:",
        needle: "service.kubernetes.io/service-proxy-name",
        field: "Service default/web: metadata.labels[\"service.kubernetes.io/service-proxy-name\"]",
    },
    Refused {
        old: SERVICE_LABELS,
        new: "  labels:\n    app: web\n    service.kubernetes.io/headless: \"\"\n  managedFields:",
        needle: "service.kubernetes.io/headless",
        field: "Service default/web: metadata.labels[\"service.kubernetes.io/headless\"]",
    },
    Refused {
        old: SLICE_LABELS,
        new: "    kubernetes.io/service-name: web\n    service.kubernetes.io/service-proxy-name: other\n",
        needle: "service.kubernetes.io/service-proxy-name",
        field: "EndpointSlice default/web-x9k2q: metadata.labels[\"service.kubernetes.io/service-proxy-name\"]",
    },
    Refused {
        old: SLICE_LABELS,
        new: "    kubernetes.io/service-name: web\n    service.kubernetes.io/headless: \"\"\n",
        needle: "service.kubernetes.io/headless",
        field: "EndpointSlice default/web-x9k2q: metadata.labels[\"service.kubernetes.io/headless\"]",
    },
    Refused {
        old: SLICE_ENDPOINT,
        new: "  nodeName: node-a\n  hints:\n    forNodes:\n    - name: node-a\n  targetRef:",
        needle: "forNodes",
        field: "EndpointSlice default/web-x9k2q: endpoints[0].hints.forNodes",
    },
];

#[test]
fn fields_a_proxy_acts_on_are_refused_as_not_modelled() {
    for row in REFUSED {
        let text = edit(KUBECTL, row.old, row.new);
        let errs = errors(&text);
        assert_eq!(errs.len(), 1, "{}: expected one error, got:\n{errs:#?}", row.field);
        let e = &errs[0];
        assert_eq!(e.field, row.field);
        assert_eq!((e.line, e.column), at(&text, row.needle), "position of: {e}");
        assert!(e.message.contains("not modelled"), "{e}");
    }
}

#[test]
fn fields_no_proxy_acts_on_are_accepted() {
    // Zones without hints, a load-balancer class, an app protocol, a disabled topology mode.
    let text = edit(KUBECTL, SLICE_ENDPOINT, "  nodeName: node-a\n  zone: zone-a\n  hints: {}\n  targetRef:");
    let text =
        edit(&text, "  sessionAffinity: None\n", "  sessionAffinity: None\n  trafficDistribution: \"\"\n");
    let text = edit(&text, "    targetPort: http\n", "    targetPort: http\n    appProtocol: http\n");
    let text = edit(
        &text,
        "  creationTimestamp: \"2024-05-01T10:00:00Z\"\n  labels:\n    app: web\n",
        "    service.kubernetes.io/topology-mode: Disabled\n  creationTimestamp: \"2024-05-01T10:00:00Z\"\n  labels:\n    app: web\n",
    );
    load(&text);
}
