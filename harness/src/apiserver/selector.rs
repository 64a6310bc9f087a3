//! Label and field selectors, in the forms proxies send: `key`, `!key`, `key=value`,
//! `key==value`, `key!=value` terms joined by commas (set-based `in`/`notin` are refused, not
//! ignored), and `metadata.name=`/`metadata.namespace=` field selectors.

use anyhow::{Result, bail};
use serde_json::Value;

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

    /// Checks that only fields the server can select on are named.
    pub(crate) fn check_fields(&self) -> Result<()> {
        for t in &self.terms {
            let (Term::Equals(k, _) | Term::NotEquals(k, _) | Term::Exists(k) | Term::NotExists(k)) = t;
            if !FIELDS.contains(&k.as_str()) {
                bail!("field selector on {k:?} is not supported (only {})", FIELDS.join(", "));
            }
        }
        Ok(())
    }
}

const FIELDS: &[&str] = &["metadata.name", "metadata.namespace"];

/// Whether `object` passes a label selector and a field selector.
pub fn selects(labels: &Selector, fields: &Selector, object: &Value) -> bool {
    let meta = &object["metadata"];
    let label = |k: &str| meta["labels"].get(k).and_then(Value::as_str).map(str::to_string);
    let field = |k: &str| {
        let key = k.strip_prefix("metadata.")?;
        Some(meta.get(key).and_then(Value::as_str).unwrap_or("").to_string())
    };
    labels.matches(label) && fields.matches(field)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kube_proxys_selector_leaves_out_headless_and_foreign_services() {
        let s = Selector::parse("!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name")
            .unwrap();
        let none = Selector::default();
        let with = |labels: Value| json!({"metadata": {"name": "x", "labels": labels}});
        assert!(selects(&s, &none, &json!({"metadata": {"name": "x"}})));
        assert!(selects(&s, &none, &with(json!({"app": "web"}))));
        assert!(!selects(&s, &none, &with(json!({"service.kubernetes.io/headless": ""}))));
        assert!(!selects(&s, &none, &with(json!({"service.kubernetes.io/service-proxy-name": "other"}))));
    }

    #[test]
    fn equality_terms_and_field_selectors() {
        let obj = json!({"metadata": {"name": "node-a", "labels": {"zone": "a"}}});
        let none = Selector::default();
        let labels = |t: &str| Selector::parse(t).unwrap();
        assert!(selects(&labels("zone=a"), &none, &obj));
        assert!(selects(&labels("zone==a,zone"), &none, &obj));
        assert!(!selects(&labels("zone!=a"), &none, &obj));
        assert!(!selects(&labels("zone=b"), &none, &obj));
        assert!(selects(&none, &labels("metadata.name=node-a"), &obj));
        assert!(!selects(&none, &labels("metadata.name=node-b"), &obj));
        assert!(labels("spec.nodeName=x").check_fields().is_err());
        assert!(Selector::parse("zone in (a,b)").is_err());
    }
}
