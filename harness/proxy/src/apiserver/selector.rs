//! Label and field selectors, in the forms clients send. Labels: `key`, `!key`, `key=value`,
//! `key==value`, `key!=value` terms joined by commas (set-based `in`/`notin` are refused, not
//! ignored). Fields: `=`, `==` and `!=` terms on the fields kube-apiserver lets a client select
//! each kind by (its field label conversion functions, pkg/apis/core/v1/conversion.go, and the
//! registries' `SelectableFields`): `metadata.name` everywhere, `metadata.namespace` on
//! namespaced kinds, a Service's `spec.clusterIP` and `spec.type` (kube-proxy v1.32+ leaves out
//! headless Services with `spec.clusterIP!=None`), a Node's `spec.unschedulable`.

use anyhow::{Result, bail};
use serde_json::Value;

use super::store::Kind;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Term {
    Exists(String),
    NotExists(String),
    Equals(String, String),
    NotEquals(String, String),
}

/// A parsed selector; the empty one selects everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    terms: Vec<Term>,
}

impl Selector {
    pub fn parse(text: &str) -> Result<Selector> {
        let mut terms = Vec::new();
        for raw in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let term = if let Some((k, v)) = raw.split_once("!=") {
                Term::NotEquals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = raw.split_once("==").or_else(|| raw.split_once('=')) {
                Term::Equals(k.trim().into(), v.trim().into())
            } else if let Some(k) = raw.strip_prefix('!') {
                Term::NotExists(k.trim().into())
            } else if raw.contains(' ') || raw.contains('(') {
                bail!("unsupported selector term {raw:?} (set-based terms are not served)");
            } else {
                Term::Exists(raw.into())
            };
            terms.push(term);
        }
        Ok(Selector { terms })
    }

    /// Whether a map of labels (or of fields) satisfies every term.
    pub fn matches(&self, get: impl Fn(&str) -> Option<String>) -> bool {
        self.terms.iter().all(|t| match t {
            Term::Exists(k) => get(k).is_some(),
            Term::NotExists(k) => get(k).is_none(),
            Term::Equals(k, v) => get(k).as_deref() == Some(v.as_str()),
            Term::NotEquals(k, v) => get(k).as_deref() != Some(v.as_str()),
        })
    }

    /// Whether an object's labels satisfy every term.
    pub fn matches_labels(&self, object: &Value) -> bool {
        let labels = &object["metadata"]["labels"];
        self.matches(|k| labels.get(k).and_then(Value::as_str).map(str::to_string))
    }
}

/// A field selector, checked against the fields the server selects `kind` by.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FieldSelector {
    kind: Option<Kind>,
    terms: Vec<(String, bool, String)>,
}

impl FieldSelector {
    /// Parses `text` for a collection of `kind`: only `=`, `==`, `!=` terms on the kind's
    /// selectable fields, as kube-apiserver accepts them; anything else is refused with its
    /// words (`field label not supported: …`).
    pub(crate) fn parse(kind: Kind, text: &str) -> Result<FieldSelector> {
        let mut terms = Vec::new();
        for raw in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            if raw.contains('\\') {
                bail!("field selector {raw:?}: escaped values are not served");
            }
            let (key, equal, value) = if let Some((k, v)) = raw.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = raw.split_once("==").or_else(|| raw.split_once('=')) {
                (k, true, v)
            } else {
                bail!("invalid selector: '{raw}'; can't understand '{raw}'");
            };
            let key = key.trim();
            if !selectable_fields(kind).contains(&key) {
                bail!(
                    "field label not supported: {key} (a {} is selected by {})",
                    kind.kind(),
                    selectable_fields(kind).join(", ")
                );
            }
            terms.push((key.to_string(), equal, value.trim().to_string()));
        }
        Ok(FieldSelector { kind: Some(kind), terms })
    }

    /// Whether `object` (of the selector's kind) satisfies every term.
    pub(crate) fn matches(&self, object: &Value) -> bool {
        let Some(kind) = self.kind else { return true };
        self.terms.iter().all(|(key, equal, value)| (field_value(kind, object, key) == *value) == *equal)
    }
}

/// The fields kube-apiserver selects `kind` by.
fn selectable_fields(kind: Kind) -> &'static [&'static str] {
    match kind {
        Kind::Node => &["metadata.name", "spec.unschedulable"],
        Kind::Service => &["metadata.name", "metadata.namespace", "spec.clusterIP", "spec.type"],
        Kind::EndpointSlice | Kind::ServiceCidr => &["metadata.name", "metadata.namespace"],
    }
}

/// A selectable field's value as the server compares it: absent fields read as the server's
/// defaults (a Service's type ClusterIP, a Node schedulable), other absent ones as "".
fn field_value(kind: Kind, object: &Value, key: &str) -> String {
    let text = |v: &Value| v.as_str().map(str::to_string);
    let value = match key {
        "metadata.name" => text(&object["metadata"]["name"]),
        "metadata.namespace" => text(&object["metadata"]["namespace"]),
        "spec.clusterIP" => text(&object["spec"]["clusterIP"]),
        "spec.type" => text(&object["spec"]["type"]).or(Some("ClusterIP".into())),
        "spec.unschedulable" => Some(object["spec"]["unschedulable"].as_bool().unwrap_or(false).to_string()),
        _ => None,
    };
    debug_assert!(selectable_fields(kind).contains(&key), "{key} is not a field of {kind:?}");
    value.unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kube_proxys_selector_leaves_out_headless_and_foreign_services() {
        let s = Selector::parse("!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name")
            .unwrap();
        let with = |labels: Value| json!({"metadata": {"name": "x", "labels": labels}});
        assert!(s.matches_labels(&json!({"metadata": {"name": "x"}})));
        assert!(s.matches_labels(&with(json!({"app": "web"}))));
        assert!(!s.matches_labels(&with(json!({"service.kubernetes.io/headless": ""}))));
        assert!(!s.matches_labels(&with(json!({"service.kubernetes.io/service-proxy-name": "other"}))));
    }

    #[test]
    fn label_equality_terms() {
        let obj = json!({"metadata": {"name": "node-a", "labels": {"zone": "a"}}});
        let labels = |t: &str| Selector::parse(t).unwrap();
        assert!(labels("zone=a").matches_labels(&obj));
        assert!(labels("zone==a,zone").matches_labels(&obj));
        assert!(!labels("zone!=a").matches_labels(&obj));
        assert!(!labels("zone=b").matches_labels(&obj));
        assert!(Selector::parse("zone in (a,b)").is_err());
    }

    /// kube-proxy v1.32+ lists Services with `spec.clusterIP!=None`; v1.31+ its own Node
    /// with `metadata.name=NODE`.
    #[test]
    fn field_selectors_select_by_the_kind_s_fields() {
        let fields = |kind, t: &str| FieldSelector::parse(kind, t).unwrap();
        let service = |ip: &str| json!({"metadata": {"name": "web", "namespace": "default"}, "spec": {"clusterIP": ip}});
        let not_headless = fields(Kind::Service, "spec.clusterIP!=None");
        assert!(not_headless.matches(&service("10.96.0.10")));
        assert!(!not_headless.matches(&service("None")));
        assert!(fields(Kind::Service, "spec.clusterIP==None").matches(&service("None")));
        assert!(
            fields(Kind::Service, "spec.type=ClusterIP,metadata.namespace=default").matches(&service("None"))
        );
        assert!(!fields(Kind::Service, "spec.type=NodePort").matches(&service("None")));

        let node = json!({"metadata": {"name": "node-a"}, "spec": {}});
        assert!(fields(Kind::Node, "metadata.name=node-a").matches(&node));
        assert!(!fields(Kind::Node, "metadata.name=node-b").matches(&node));
        assert!(fields(Kind::Node, "spec.unschedulable=false").matches(&node));
        assert!(FieldSelector::default().matches(&node));
    }

    #[test]
    fn fields_a_kind_is_not_selected_by_are_refused_in_the_server_s_words() {
        let refusal = |kind, t: &str| FieldSelector::parse(kind, t).unwrap_err().to_string();
        assert!(
            refusal(Kind::EndpointSlice, "spec.clusterIP!=None")
                .starts_with("field label not supported: spec.clusterIP")
        );
        assert!(refusal(Kind::Node, "metadata.namespace=x").contains("metadata.name, spec.unschedulable"));
        assert!(refusal(Kind::Service, "spec.clusterIP").starts_with("invalid selector"));
        assert!(refusal(Kind::Service, r"metadata.name=a\,b").contains("escaped"));
    }
}
