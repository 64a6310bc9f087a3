//! `spec.generate`: many Services in a few lines, for scale scenarios. Each entry adds `services`
//! ClusterIP Services named `<name>-<i>` (`i` zero-padded to the count's width, from 0), with
//! the entry's ports and selector, their cluster IPs taken in order from the (primary) service
//! CIDR past every address the file writes. They become Service documents before anything is
//! read, so they are checked, served and proxied as written ones are, and probes name them
//! like any Service (`to: {service: gen-09999, port: http}`); an error in one points at its
//! entry. Their endpoints come from the written pods the selector picks: a generated Service
//! needs no pod, and so no namespace, of its own.

use std::collections::{BTreeMap, HashSet};
use std::net::IpAddr;

use ipnet::IpNet;
use serde::Deserialize;
use serde_json::{Value, json};

use super::de::typed;
use super::error::{Diagnostics, Site};
use super::yaml::{Document, FieldPath};

/// The most Services one file may generate: beyond what a scale run needs, and a bound on what
/// a hostile file can make the reader build.
pub(crate) const MAX_GENERATED: usize = 100_000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Generator {
    /// How many Services.
    services: usize,
    /// The names' stem: `<name>-<i>`.
    name: String,
    #[serde(default = "default_namespace")]
    namespace: String,
    /// Which written pods back every generated Service.
    selector: BTreeMap<String, String>,
    /// As a Service's `spec.ports`.
    ports: Vec<Value>,
}

fn default_namespace() -> String {
    "default".into()
}

/// `docs` with the generated Services added to the first state, after its own documents.
pub(crate) fn expand(mut docs: Vec<Document>, diag: &mut Diagnostics) -> Vec<Document> {
    let Some(scenario) =
        docs.iter().find(|d| d.value.get("kind").and_then(Value::as_str) == Some("Scenario"))
    else {
        return docs;
    };
    let path = FieldPath::parse("spec.generate");
    if path.lookup(&scenario.value).is_none_or(Value::is_null) {
        return docs;
    }
    let site = Site::new(scenario, "");
    let Some(generators) = typed::<Vec<Generator>>(&site, &path, diag) else { return docs };
    let total: usize = generators.iter().map(|g| g.services).sum();
    if total > MAX_GENERATED {
        diag.value(&site, &path, format!("{total} Services to generate: at most {MAX_GENERATED}"));
        return docs;
    }
    // The reader reports a missing or broken service CIDR; nothing can be allocated without it.
    let Some(cidr) = primary_service_cidr(&scenario.value) else { return docs };
    let written = written_cluster_ips(&docs);
    let mut free = cidr.hosts().filter(move |ip| !written.contains(ip));
    let mut generated = Vec::with_capacity(total);
    for (i, g) in generators.iter().enumerate() {
        let at = scenario.value_pos(&path.index(i));
        let width = g.services.saturating_sub(1).to_string().len();
        for n in 0..g.services {
            let Some(ip) = free.next() else {
                diag.value(
                    &site,
                    &path.index(i).key("services"),
                    format!(
                        "the service CIDR {cidr} has no address left for generated Service {n} of this entry"
                    ),
                );
                return docs;
            };
            let service = json!({
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": format!("{}-{n:0width$}", g.name), "namespace": g.namespace},
                "spec": {"type": "ClusterIP", "clusterIP": ip.to_string(), "selector": g.selector, "ports": g.ports},
            });
            generated.push(Document::generated(service, at));
        }
    }
    // Before the first Step: every document after a Step is that step's.
    let first_step = docs
        .iter()
        .position(|d| d.value.get("kind").and_then(Value::as_str) == Some("Step"))
        .unwrap_or(docs.len());
    docs.splice(first_step..first_step, generated);
    docs
}

fn primary_service_cidr(scenario: &Value) -> Option<IpNet> {
    let value = scenario.pointer("/spec/cluster/serviceCIDR")?;
    let text = match value {
        Value::String(s) => s.as_str(),
        Value::Array(items) => items.first()?.as_str()?,
        _ => return None,
    };
    text.parse().ok()
}

/// Every cluster IP the file's documents write, which generated Services must not take.
fn written_cluster_ips(docs: &[Document]) -> HashSet<IpAddr> {
    let mut ips = HashSet::new();
    for doc in docs {
        let spec = doc.value.get("spec");
        let one = spec.and_then(|s| s.get("clusterIP")).and_then(Value::as_str);
        let many = spec.and_then(|s| s.get("clusterIPs")).and_then(Value::as_array).into_iter().flatten();
        for text in one.into_iter().chain(many.filter_map(Value::as_str)) {
            if let Ok(ip) = text.parse() {
                ips.insert(ip);
            }
        }
    }
    ips
}

#[cfg(test)]
mod tests {
    use super::super::tests::{WEB, edit, errors, load};

    fn with_generate(entry: &str) -> String {
        edit(WEB, "  probes:\n", &format!("  generate:\n    - {entry}\n  probes:\n"))
    }

    #[test]
    fn services_are_generated_in_order_past_the_written_addresses() {
        let text = with_generate(
            "{services: 12, name: gen, selector: {app: web}, ports: [{name: http, port: 80, targetPort: http}]}",
        );
        let s = load(&text);
        let generated: Vec<_> =
            s.cluster.services.iter().filter(|svc| svc.name.starts_with("gen-")).collect();
        assert_eq!(generated.len(), 12);
        assert_eq!(generated[0].name, "gen-00");
        assert_eq!(generated[11].name, "gen-11");
        let ips: Vec<_> = generated.iter().map(|svc| svc.cluster_ip()).collect();
        assert!(!ips.iter().any(|ip| {
            s.cluster.services.iter().any(|w| !w.name.starts_with("gen-") && w.cluster_ip() == *ip)
        }));
        // The same pods back every generated Service.
        assert!(
            generated.iter().all(|svc| svc.ports[0].endpoints.len() == generated[0].ports[0].endpoints.len())
        );
        assert!(!generated[0].ports[0].endpoints.is_empty());
    }

    #[test]
    fn too_many_or_a_wrong_entry_is_refused_at_the_entry() {
        let errs = errors(&with_generate("{services: 100001, name: gen, selector: {app: web}, ports: []}"));
        assert!(errs.iter().any(|e| e.message.contains("at most 100000")), "{errs:?}");
        let errs =
            errors(&with_generate("{services: 2, name: gen, selector: {app: web}, ports: [], colour: red}"));
        assert!(errs.iter().any(|e| e.field.contains("spec.generate")), "{errs:?}");
    }
}
