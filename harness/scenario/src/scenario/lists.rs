//! `kind: List` documents, which `kubectl get nodes,svc,endpointslices,pods -o yaml` prints, and the
//! typed lists the API server returns (`ServiceList`, `EndpointSliceList`, `PodList`, `NodeList`): each item
//! becomes a document of its own, read as if written alone, with its own lines and columns. A
//! typed list's items may leave out `kind` and `apiVersion`, which the list implies.

use serde_json::Value;

use super::error::{Diagnostics, Site};
use super::yaml::{Document, FieldPath};

/// A list kind, its apiVersion, and the kind (with apiVersion) of its items if typed.
struct ListKind {
    kind: &'static str,
    api_version: &'static str,
    item: Option<(&'static str, &'static str)>,
}

const LISTS: &[ListKind] = &[
    ListKind { kind: "List", api_version: "v1", item: None },
    ListKind { kind: "ServiceList", api_version: "v1", item: Some(("Service", "v1")) },
    ListKind {
        kind: "EndpointSliceList",
        api_version: "discovery.k8s.io/v1",
        item: Some(("EndpointSlice", "discovery.k8s.io/v1")),
    },
    ListKind { kind: "PodList", api_version: "v1", item: Some(("Pod", "v1")) },
    ListKind { kind: "NodeList", api_version: "v1", item: Some(("Node", "v1")) },
];

/// `docs` with every list replaced by its items, in order.
pub(crate) fn expand(docs: Vec<Document>, diag: &mut Diagnostics) -> Vec<Document> {
    let mut out = Vec::with_capacity(docs.len());
    for doc in docs {
        let kind = doc.value.get("kind").and_then(Value::as_str);
        match LISTS.iter().find(|l| Some(l.kind) == kind) {
            Some(list) => out.extend(items(&doc, list, diag)),
            None => out.push(doc),
        }
    }
    out
}

fn items(doc: &Document, list: &ListKind, diag: &mut Diagnostics) -> Vec<Document> {
    let site = Site::new(doc, list.kind);
    let api_path = FieldPath::parse("apiVersion");
    match doc.value.get("apiVersion").and_then(Value::as_str) {
        Some(v) if v == list.api_version => {}
        Some(v) => diag.value(
            &site,
            &api_path,
            format!("kind {} needs apiVersion {}, not {v:?}", list.kind, list.api_version),
        ),
        None => diag.value(
            &site,
            &api_path,
            format!(
                "required field `apiVersion` is missing (kind {} needs apiVersion {})",
                list.kind, list.api_version
            ),
        ),
    }
    for key in doc.value.as_object().into_iter().flat_map(|o| o.keys()) {
        if !matches!(key.as_str(), "apiVersion" | "kind" | "metadata" | "items") {
            diag.key(
                &site,
                &FieldPath::root().key(key),
                format!("unknown field `{key}`: a {} has apiVersion, kind, metadata and items", list.kind),
            );
        }
    }
    let items_path = FieldPath::parse("items");
    match doc.value.get("items") {
        None | Some(Value::Null | Value::Array(_)) => {}
        Some(other) => {
            diag.value(&site, &items_path, format!("items must be a list of objects, not {other}"));
            return Vec::new();
        }
    }
    let mut out = Vec::new();
    for mut item in doc.items(&items_path) {
        if let Some((kind, api_version)) = list.item
            && item.value.is_object()
        {
            match item.value.get("kind").and_then(Value::as_str) {
                Some(other) if other != kind => {
                    diag.value(
                        &Site::new(&item, ""),
                        &FieldPath::parse("kind"),
                        format!("a {} holds {kind} objects, not {other}", list.kind),
                    );
                    continue;
                }
                _ => {
                    item.default_field("kind", kind);
                    item.default_field("apiVersion", api_version);
                }
            }
        }
        out.push(item);
    }
    out
}
