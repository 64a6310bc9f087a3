//! Sorting documents by `kind` and parsing the Kubernetes ones into k8s-openapi types.
//!
//! k8s-openapi ignores fields it doesn't know, and accepts a document without `kind` as any
//! kind, so both are checked here: `kind` is required and dispatched on, and a field of the
//! input that does not survive a deserialize/serialize round trip is reported as unknown.

use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::de;
use super::error::{Diagnostics, Site};
use super::fields;
use super::kind::Kind;
use super::spec;
use super::yaml::{Document, FieldPath, Segment};

const SUPPORTED: &str = "Scenario, Step, Service, EndpointSlice, Pod, Node, and List of them";

/// One parsed Kubernetes object and where it came from.
pub(crate) struct Parsed<'a, T> {
    pub object: T,
    pub site: Site<'a>,
    pub namespace: String,
    pub name: String,
}

/// A document of a known kind that could not be parsed; its name (if readable) must still
/// count as defined, so references to it don't produce a second, misleading error.
pub(crate) struct Unparsed<'a> {
    pub kind: Kind,
    pub name: Option<String>,
    pub site: Site<'a>,
}

/// The documents of one file, by kind.
#[derive(Default)]
pub(crate) struct Classified<'a> {
    pub scenarios: Vec<&'a Document>,
    pub services: Vec<Parsed<'a, Service>>,
    pub slices: Vec<Parsed<'a, EndpointSlice>>,
    pub pods: Vec<Parsed<'a, Pod>>,
    pub nodes: Vec<Parsed<'a, Node>>,
    pub unparsed: Vec<Unparsed<'a>>,
    /// `metadata.name` of documents whose kind is missing or unsupported: whatever they were
    /// meant to be, references to them must not add errors.
    pub kindless: Vec<Option<String>>,
    /// A document meant as the Scenario (by its apiVersion) could not be read.
    pub scenario_unreadable: bool,
}

/// From this many documents on, each half is sorted on a thread of its own: typing objects
/// is the largest part of the build, each document's alone, and a second core is idle then.
const IN_TWO_FROM: usize = 2_000;

pub(crate) fn classify<'a>(docs: &[&'a Document], diag: &mut Diagnostics) -> Classified<'a> {
    if docs.len() >= IN_TWO_FROM { in_two(docs, diag) } else { in_order(docs, diag) }
}

/// [`classify`] of each half of `docs` on a thread of its own, joined in the file's order.
fn in_two<'a>(docs: &[&'a Document], diag: &mut Diagnostics) -> Classified<'a> {
    let (first, second) = docs.split_at(docs.len() / 2);
    let file = diag.file().to_path_buf();
    std::thread::scope(|scope| {
        let second = scope.spawn(move || {
            let mut diag = Diagnostics::new(file);
            (in_order(second, &mut diag), diag)
        });
        // Room for both halves from the start: the second is moved in, not the first moved out.
        let mut out = Classified::default();
        out.reserve(docs);
        out.sort(first, diag);
        let (rest, rest_diag) = second.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        out.append(rest);
        diag.append(rest_diag);
        out
    })
}

fn in_order<'a>(docs: &[&'a Document], diag: &mut Diagnostics) -> Classified<'a> {
    let mut out = Classified::default();
    out.reserve(docs);
    out.sort(docs, diag);
    out
}

impl<'a> Classified<'a> {
    /// Adds each of `docs` where its kind goes.
    fn sort(&mut self, docs: &[&'a Document], diag: &mut Diagnostics) {
        for &doc in docs {
            let name = metadata(&doc.value, "name").map(str::to_string);
            let ours = doc.value.get("apiVersion").and_then(Value::as_str) == Some(spec::API_VERSION);
            match kind_of(doc, diag) {
                Ok(Kind::Scenario) => self.scenarios.push(doc),
                Ok(kind) => self.parse(kind, doc, name, diag),
                Err(Some(Kind::Scenario)) => self.scenario_unreadable = true,
                Err(_) if ours => self.scenario_unreadable = true,
                Err(Some(kind)) => {
                    self.unparsed.push(Unparsed { kind, site: Site::new(doc, label(kind, doc, &name)), name })
                }
                Err(None) => self.kindless.push(name),
            }
        }
    }

    /// `later`'s documents after these.
    fn append(&mut self, mut later: Classified<'a>) {
        self.scenarios.append(&mut later.scenarios);
        self.services.append(&mut later.services);
        self.slices.append(&mut later.slices);
        self.pods.append(&mut later.pods);
        self.nodes.append(&mut later.nodes);
        self.unparsed.append(&mut later.unparsed);
        self.kindless.append(&mut later.kindless);
        self.scenario_unreadable |= later.scenario_unreadable;
    }

    /// Room for the objects of each kind `docs` name: parsed objects are large and a file's
    /// are by the hundred thousand, so made at once rather than by doubling as they come.
    fn reserve(&mut self, docs: &[&Document]) {
        let (mut services, mut slices, mut pods, mut nodes) = (0, 0, 0, 0);
        for doc in docs {
            match doc.value.get("kind").and_then(Value::as_str).and_then(Kind::parse) {
                Some(Kind::Service) => services += 1,
                Some(Kind::EndpointSlice) => slices += 1,
                Some(Kind::Pod) => pods += 1,
                Some(Kind::Node) => nodes += 1,
                Some(Kind::Scenario) | None => {}
            }
        }
        self.services.reserve(services);
        self.slices.reserve(slices);
        self.pods.reserve(pods);
        self.nodes.reserve(nodes);
    }

    fn parse(&mut self, kind: Kind, doc: &'a Document, name: Option<String>, diag: &mut Diagnostics) {
        let namespace = namespace_of(doc);
        let site = Site::new(doc, label(kind, doc, &name));
        let parsed = match kind {
            Kind::Scenario => unreachable!("the Scenario document is not a Kubernetes object"),
            Kind::Service => {
                parse_as(&site, diag).map(|o| self.services.push(Parsed::new(o, &site, &namespace)))
            }
            Kind::EndpointSlice => {
                parse_as(&site, diag).map(|o| self.slices.push(Parsed::new(o, &site, &namespace)))
            }
            Kind::Pod => parse_as(&site, diag).map(|o| self.pods.push(Parsed::new(o, &site, &namespace))),
            Kind::Node => parse_as(&site, diag).map(|o| self.nodes.push(Parsed::new(o, &site, &namespace))),
        };
        match parsed {
            Some(()) => fields::refuse_unmodelled(kind, &site, diag),
            None => self.unparsed.push(Unparsed { kind, name, site }),
        }
    }
}

/// `metadata.<field>`, if a string (read directly: a JSON pointer is parsed anew at each use).
fn metadata<'v>(value: &'v Value, field: &str) -> Option<&'v str> {
    value.get("metadata")?.get(field)?.as_str()
}

/// `metadata.namespace`, defaulted as the API server does.
fn namespace_of(doc: &Document) -> String {
    let ns = metadata(&doc.value, "namespace");
    ns.filter(|ns| !ns.is_empty()).unwrap_or("default").to_string()
}

/// How messages name an object: `Service kube-system/kube-dns`.
fn label(kind: Kind, doc: &Document, name: &Option<String>) -> String {
    match name {
        // Cluster-scoped.
        Some(n) if kind == Kind::Node => format!("Node {n}"),
        Some(n) => format!("{} {}/{n}", kind.name(), namespace_of(doc)),
        None => format!("{} <no name>", kind.name()),
    }
}

impl<'a, T> Parsed<'a, T> {
    fn new(object: T, site: &Site<'a>, namespace: &str) -> Self {
        let name = metadata(&site.doc.value, "name").unwrap_or_default();
        Parsed { object, site: site.clone(), namespace: namespace.to_string(), name: name.to_string() }
    }
}

/// The document's kind, if it has a supported one with the matching apiVersion; else the
/// kind it names, if supported.
fn kind_of(doc: &Document, diag: &mut Diagnostics) -> Result<Kind, Option<Kind>> {
    let site = Site::new(doc, "");
    let root = FieldPath::root();
    if !doc.value.is_object() {
        diag.value(
            &site,
            &root,
            format!("a document must be a mapping with apiVersion and kind (supported kinds: {SUPPORTED})"),
        );
        return Err(None);
    }
    let kind_path = FieldPath::parse("kind");
    let kind = match doc.value.get("kind") {
        None | Some(Value::Null) => {
            diag.value(
                &site,
                &kind_path,
                format!("required field `kind` is missing (supported kinds: {SUPPORTED})"),
            );
            return Err(None);
        }
        Some(Value::String(k)) => k,
        Some(other) => {
            diag.value(&site, &kind_path, format!("kind must be a string, not {other}"));
            return Err(None);
        }
    };
    let Some(parsed) = Kind::parse(kind) else {
        diag.value(&site, &kind_path, format!("unsupported kind {kind:?} (supported kinds: {SUPPORTED})"));
        return Err(None);
    };
    let want = parsed.api_version();
    let api_path = FieldPath::parse("apiVersion");
    match doc.value.get("apiVersion").and_then(Value::as_str) {
        Some(v) if v == want => Ok(parsed),
        Some(v) => {
            diag.value(&site, &api_path, format!("kind {kind} needs apiVersion {want}, not {v:?}"));
            Err(Some(parsed))
        }
        None => {
            diag.value(
                &site,
                &api_path,
                format!("required field `apiVersion` is missing (kind {kind} needs apiVersion {want})"),
            );
            Err(Some(parsed))
        }
    }
}

/// Parses the whole document as `T` and reports input fields `T` does not have.
fn parse_as<T: DeserializeOwned + Serialize>(site: &Site<'_>, diag: &mut Diagnostics) -> Option<T> {
    let object: T = de::typed(site, &FieldPath::root(), diag)?;
    if metadata(&site.doc.value, "name").is_none_or(str::is_empty) {
        diag.value(site, &FieldPath::parse("metadata.name"), "required field `name` is missing");
        return None;
    }
    let round_trip = serde_json::to_value(&object).expect("k8s-openapi objects serialize to JSON");
    let mut unknown = Vec::new();
    unknown_fields(&site.doc.value, &round_trip, &mut FieldPath::root(), &mut unknown);
    for (path, key) in unknown {
        diag.key(
            site,
            &path,
            format!(
                "unknown field `{key}`: not in the Kubernetes 1.33 API packetproof reads (check the spelling; \
                 remove it if it comes from a newer cluster)"
            ),
        );
    }
    Some(object)
}

/// Fields set in `input` (not null) that `output`, its round trip, lost; `path` is where
/// both are, and is again on return (grown and shrunk in place, not copied per field).
fn unknown_fields(input: &Value, output: &Value, path: &mut FieldPath, found: &mut Vec<(FieldPath, String)>) {
    match (input, output) {
        (Value::Object(input), Value::Object(output)) => {
            for (key, value) in input.iter().filter(|(_, v)| !v.is_null()) {
                match output.get(key) {
                    None => found.push((path.key(key), key.clone())),
                    Some(out) => {
                        path.push(Segment::Key(key.clone()));
                        unknown_fields(value, out, path, found);
                        path.pop();
                    }
                }
            }
        }
        (Value::Array(input), Value::Array(output)) => {
            for (i, (value, out)) in input.iter().zip(output).enumerate() {
                path.push(Segment::Index(i));
                unknown_fields(value, out, path, found);
                path.pop();
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::yaml;

    /// What sorting found, in order, and the errors it reported.
    fn found(classified: &Classified<'_>, diag: Diagnostics) -> String {
        let names = |parsed: Vec<&str>| parsed.join(",");
        format!(
            "scenarios {}; services {}; slices {}; pods {}; nodes {}; unparsed {:?}; kindless {:?}; \
             unreadable {}; errors {:?}",
            classified.scenarios.len(),
            names(classified.services.iter().map(|p| p.name.as_str()).collect()),
            names(classified.slices.iter().map(|p| p.name.as_str()).collect()),
            names(classified.pods.iter().map(|p| p.name.as_str()).collect()),
            names(classified.nodes.iter().map(|p| p.name.as_str()).collect()),
            classified.unparsed.iter().map(|u| (u.kind, u.name.clone())).collect::<Vec<_>>(),
            classified.kindless,
            classified.scenario_unreadable,
            diag.into_errors().errors,
        )
    }

    #[test]
    fn two_halves_sort_as_the_whole_does() {
        let mut text = String::from(crate::scenario::tests::WEB);
        for i in 0..6 {
            text += &format!(
                "---\napiVersion: v1\nkind: Service\nmetadata: {{name: s{i}}}\nspec: {{ports: [{{port: 80}}], x{i}: 1}}\n\
                 ---\napiVersion: v1\nkind: Pod\nmetadata: {{name: p{i}}}\n---\nkind: Gadget\nmetadata: {{name: g{i}}}\n\
                 ---\napiVersion: v2\nkind: Node\nmetadata: {{name: n{i}}}\n---\napiVersion: v1\nkind: Service\nspec: {{}}\n"
            );
        }
        let docs = yaml::parse(&text).unwrap();
        let docs: Vec<&Document> = docs.iter().collect();
        let mut whole = Diagnostics::new("x.yaml".into());
        let mut halves = Diagnostics::new("x.yaml".into());
        let in_order = in_order(&docs, &mut whole);
        let in_two = in_two(&docs, &mut halves);
        assert_eq!(found(&in_two, halves), found(&in_order, whole));
    }
}
