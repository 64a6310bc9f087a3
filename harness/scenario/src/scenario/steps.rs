//! Live changes: `kind: Step` documents. A Step document and the Kubernetes objects after it
//! (up to the next Step) make one step: those objects are applied (created, or replacing the
//! object of the same kind, namespace and name), the ones in `spec.delete` are deleted, and
//! then the step's own `spec.probes` run against the changed state.
//!
//! A step changes Services and EndpointSlices only: nodes and pods are the topology, built
//! once. Each state is checked like the file's first one, by the same pipeline.

use std::collections::{HashMap, HashSet};

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::Value;

use super::de::typed;
use super::error::{Diagnostics, Site};
use super::spec::{API_VERSION, Metadata, ProbeSpec};
use super::yaml::{Document, FieldPath};

pub(crate) const KIND: &str = "Step";

/// One Step document and the objects that follow it.
pub(crate) struct StepDocs<'a> {
    pub doc: &'a Document,
    pub applied: Vec<&'a Document>,
}

/// The file's first state (every document before the first Step), then its steps.
pub(crate) fn split(docs: &[Document]) -> (Vec<&Document>, Vec<StepDocs<'_>>) {
    let mut first = Vec::new();
    let mut steps: Vec<StepDocs<'_>> = Vec::new();
    for doc in docs {
        match steps.last_mut() {
            _ if is_step(doc) => steps.push(StepDocs { doc, applied: Vec::new() }),
            Some(step) => step.applied.push(doc),
            None => first.push(doc),
        }
    }
    (first, steps)
}

fn is_step(doc: &Document) -> bool {
    doc.value.get("apiVersion").and_then(Value::as_str) == Some(API_VERSION)
        && doc.value.get("kind").and_then(Value::as_str) == Some(KIND)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct StepEnvelope {
    #[allow(dead_code)]
    api_version: IgnoredAny,
    #[allow(dead_code)]
    kind: IgnoredAny,
    #[allow(dead_code)]
    metadata: IgnoredAny,
    spec: StepSections,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct StepSections {
    description: Option<String>,
    #[serde(default)]
    delete: Vec<IgnoredAny>,
    /// `restartProxy: true`: the proxy is stopped and started again with the new state.
    #[serde(default)]
    restart_proxy: bool,
    probes: Vec<IgnoredAny>,
}

/// An object a step deletes: `{kind: EndpointSlice, namespace: default, name: web-abc}`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq, Hash)]
#[serde(deny_unknown_fields)]
pub(crate) struct ObjectRef {
    pub kind: String,
    #[serde(default = "default_namespace")]
    pub namespace: String,
    pub name: String,
}

fn default_namespace() -> String {
    "default".to_string()
}

/// A Step document, read.
pub(crate) struct StepDoc<'a> {
    pub site: Site<'a>,
    pub name: Option<String>,
    pub description: Option<String>,
    pub deletes: Vec<(FieldPath, ObjectRef)>,
    pub probes: Vec<(usize, FieldPath, ProbeSpec)>,
    /// The `held` checks among the probes (assembled from their openers).
    pub held: Vec<(usize, FieldPath, ProbeSpec)>,
    pub restart_proxy: bool,
}

pub(crate) fn read<'a>(doc: &'a Document, diag: &mut Diagnostics) -> StepDoc<'a> {
    let site = Site::new(doc, "");
    let name = typed::<Metadata>(&site, &FieldPath::parse("metadata"), diag).map(|m| m.name);
    let mut step = StepDoc {
        site: site.clone(),
        name,
        description: None,
        deletes: Vec::new(),
        probes: Vec::new(),
        held: Vec::new(),
        restart_proxy: false,
    };
    let Some(envelope) = typed::<StepEnvelope>(&site, &FieldPath::root(), diag) else { return step };
    let spec = FieldPath::parse("spec");
    if envelope.spec.probes.is_empty() {
        diag.value(&site, &spec.key("probes"), "a step needs at least one probe: what should the change do?");
    }
    for i in 0..envelope.spec.delete.len() {
        let path = spec.key("delete").index(i);
        if let Some(object) = typed::<ObjectRef>(&site, &path, diag) {
            step.deletes.push((path, object));
        }
    }
    for i in 0..envelope.spec.probes.len() {
        let path = spec.key("probes").index(i);
        if let Some(probe) = typed::<ProbeSpec>(&site, &path, diag) {
            let to = if super::held::is_check(&probe) { &mut step.held } else { &mut step.probes };
            to.push((i, path, probe));
        }
    }
    step.description = envelope.spec.description;
    step.restart_proxy = envelope.spec.restart_proxy;
    step
}

/// Kinds a step may apply or delete.
const CHANGEABLE: [&str; 2] = ["Service", "EndpointSlice"];

/// The documents of the state after `step`: `state` with `applied` put in (replacing the
/// object of the same kind, namespace and name) and the step's deletions taken out. Reports
/// deletions of objects that do not exist and objects a step may not change.
pub(crate) fn next_state<'a>(
    state: &[&'a Document],
    step: &StepDoc<'_>,
    applied: &[&'a Document],
    diag: &mut Diagnostics,
) -> Vec<&'a Document> {
    // Objects are found by identity, each read once: a state holds objects by the hundred
    // thousand, and a step may apply thousands.
    let mut present: HashSet<ObjectRef> = state.iter().filter_map(|doc| identity(doc)).collect();
    let mut deleted: HashSet<&ObjectRef> = HashSet::new();
    for (path, object) in &step.deletes {
        if !CHANGEABLE.contains(&object.kind.as_str()) {
            diag.value(
                &step.site,
                &path.key("kind"),
                format!("a step deletes Services and EndpointSlices only, not {}", object.kind),
            );
            continue;
        }
        if present.remove(object) {
            deleted.insert(object);
        } else {
            diag.value(
                &step.site,
                path,
                format!("no {} {}/{} to delete at this step", object.kind, object.namespace, object.name),
            );
        }
    }
    let mut next: Vec<&Document> = Vec::with_capacity(state.len() + applied.len());
    let mut place: HashMap<ObjectRef, usize> = HashMap::new();
    for &doc in state {
        let id = identity(doc);
        if id.as_ref().is_some_and(|id| deleted.contains(id)) {
            continue;
        }
        if let Some(id) = id {
            place.entry(id).or_insert(next.len());
        }
        next.push(doc);
    }
    for doc in applied {
        let Some(id) = identity(doc) else {
            // Without kind or name it can replace nothing: the pipeline reports what is missing.
            next.push(doc);
            continue;
        };
        if !CHANGEABLE.contains(&id.kind.as_str()) {
            diag.value(
                &Site::new(doc, ""),
                &FieldPath::parse("kind"),
                format!(
                    "a step applies Services and EndpointSlices only (nodes and pods are the topology, \
                     built once), not {}",
                    id.kind
                ),
            );
            continue;
        }
        match place.get(&id) {
            Some(&i) => next[i] = doc,
            None => {
                place.insert(id, next.len());
                next.push(doc);
            }
        }
    }
    next
}

/// A Kubernetes document's kind, namespace and name.
fn identity(doc: &Document) -> Option<ObjectRef> {
    let text = |pointer: &str| doc.value.pointer(pointer).and_then(Value::as_str).map(str::to_string);
    Some(ObjectRef {
        kind: text("/kind")?,
        namespace: text("/metadata/namespace").filter(|n| !n.is_empty()).unwrap_or_else(default_namespace),
        name: text("/metadata/name")?,
    })
}
