//! The objects the API server serves, each stamped with a resourceVersion from one counter,
//! and the log of every change, which watches replay from any resourceVersion.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use serde_json::Value;
use tokio::sync::watch;

/// The resources served. Every object of a kind is stored as the JSON the server returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Node,
    Service,
    EndpointSlice,
    /// Stored as networking.k8s.io/v1alpha1 and served in v1beta1 and v1 too (`http`), the
    /// versions kube-proxy reads it in behind the MultiCIDRServiceAllocator gate: v1alpha1 in
    /// v1.30, v1beta1 in v1.31-v1.32, v1 from v1.33 (where the gate is on).
    ServiceCidr,
}

impl Kind {
    pub fn kind(self) -> &'static str {
        match self {
            Kind::Node => "Node",
            Kind::Service => "Service",
            Kind::EndpointSlice => "EndpointSlice",
            Kind::ServiceCidr => "ServiceCIDR",
        }
    }

    pub(crate) fn api_version(self) -> &'static str {
        match self {
            Kind::Node | Kind::Service => "v1",
            Kind::EndpointSlice => "discovery.k8s.io/v1",
            Kind::ServiceCidr => "networking.k8s.io/v1alpha1",
        }
    }
}

/// One change, as a watch sends it.
#[derive(Debug, Clone)]
pub struct Event {
    pub resource_version: u64,
    pub kind: Kind,
    /// `ADDED`, `MODIFIED` or `DELETED`.
    pub change: &'static str,
    /// Shared with the stored object: at 10,000 Services the log of changes would otherwise
    /// hold a second copy of every object.
    pub object: Arc<Value>,
    /// The object before a MODIFIED change, so a filtered watch can tell an object that
    /// entered or left its selection.
    pub previous: Option<Arc<Value>>,
}

#[derive(Default)]
struct Inner {
    resource_version: u64,
    /// By kind, then `namespace/name` (or `name` for cluster-scoped objects).
    objects: BTreeMap<Kind, BTreeMap<String, Arc<Value>>>,
    /// Every change since the start, oldest first (runs are short: nothing is compacted).
    events: Vec<Event>,
    closed: bool,
    /// Requests served, oldest first, at most [`LOG_LINES`].
    log: std::collections::VecDeque<String>,
    /// Requests answered with an error, oldest first, at most [`LOG_LINES`].
    refusals: Vec<Refusal>,
}

/// A request the server answered with an error: what a proxy asked for that this server does
/// not serve, or refused, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Who asked, when the connection says.
    pub client: Option<std::net::IpAddr>,
    /// `GET /api/v1/services?…`.
    pub request: String,
    pub code: u16,
    /// The `Status` document's reason and message.
    pub reason: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} -> {}", self.request, self.code)?;
        if !self.reason.is_empty() {
            write!(f, " ({})", self.reason)?;
        }
        if let Some(client) = self.client {
            write!(f, ", asked by {client}")?;
        }
        Ok(())
    }
}

/// Requests kept in the log; a run makes a few dozen per node.
const LOG_LINES: usize = 10_000;

/// The server's state. Changing it wakes every watch.
pub struct Store {
    inner: Mutex<Inner>,
    changed: watch::Sender<u64>,
}

impl Default for Store {
    fn default() -> Self {
        Store { inner: Mutex::default(), changed: watch::channel(0).0 }
    }
}

/// `namespace/name`, or `name` when the object has no namespace.
pub(crate) fn key_of(object: &Value) -> Result<String> {
    let meta = &object["metadata"];
    let name = meta["name"].as_str().context("an object without metadata.name")?;
    Ok(match meta["namespace"].as_str() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_string(),
    })
}

/// The object without what the server itself sets, for telling real changes from repeats.
fn content(object: &Value) -> Value {
    let mut o = object.clone();
    if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
        meta.remove("uid");
        meta.remove("creationTimestamp");
    }
    o
}

impl Store {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The resourceVersion of the latest change.
    pub fn resource_version(&self) -> u64 {
        self.lock().resource_version
    }

    /// Makes the objects of `kind` exactly `objects`: new ones are ADDED, changed ones
    /// MODIFIED, missing ones DELETED; identical ones cause no event. Returns the number of
    /// events.
    pub fn replace(&self, kind: Kind, objects: Vec<Value>) -> Result<usize> {
        let mut wanted = BTreeMap::new();
        for mut o in objects {
            let key = key_of(&o)?;
            o["kind"] = kind.kind().into();
            o["apiVersion"] = kind.api_version().into();
            wanted.insert(key, o);
        }
        let mut inner = self.lock();
        let current = inner.objects.get(&kind).cloned().unwrap_or_default();
        let mut changes = 0;
        for (key, old) in &current {
            if !wanted.contains_key(key) {
                inner.record(kind, key, "DELETED", Value::clone(old));
                changes += 1;
            }
        }
        for (key, new) in wanted {
            let change = match current.get(&key) {
                Some(old) if content(old) == content(&new) => continue,
                Some(_) => "MODIFIED",
                None => "ADDED",
            };
            inner.record(kind, &key, change, new);
            changes += 1;
        }
        let rv = inner.resource_version;
        drop(inner);
        if changes > 0 {
            self.changed.send_replace(rv);
        }
        Ok(changes)
    }

    /// Applies one object (ADDED or MODIFIED), as a controller's write would.
    pub fn apply(&self, kind: Kind, mut object: Value) -> Result<()> {
        let key = key_of(&object)?;
        object["kind"] = kind.kind().into();
        object["apiVersion"] = kind.api_version().into();
        let mut inner = self.lock();
        let change = match inner.objects.get(&kind).and_then(|m| m.get(&key)) {
            Some(old) if content(old) == content(&object) => return Ok(()),
            Some(_) => "MODIFIED",
            None => "ADDED",
        };
        inner.record(kind, &key, change, object);
        let rv = inner.resource_version;
        drop(inner);
        self.changed.send_replace(rv);
        Ok(())
    }

    /// Deletes one object by `namespace/name` (or `name`); false when there was none.
    pub fn delete(&self, kind: Kind, key: &str) -> bool {
        let mut inner = self.lock();
        let Some(old) = inner.objects.get(&kind).and_then(|m| m.get(key)).map(|o| Value::clone(o)) else {
            return false;
        };
        inner.record(kind, key, "DELETED", old);
        let rv = inner.resource_version;
        drop(inner);
        self.changed.send_replace(rv);
        true
    }

    /// One object by key.
    pub fn get(&self, kind: Kind, key: &str) -> Option<Value> {
        self.lock().objects.get(&kind)?.get(key).map(|o| Value::clone(o))
    }

    /// Every object of `kind`, by key, and the resourceVersion they are current at.
    pub fn list(&self, kind: Kind) -> (u64, Vec<(String, Value)>) {
        let inner = self.lock();
        let items =
            inner.objects.get(&kind).map(|m| m.iter().map(|(k, v)| (k.clone(), Value::clone(v))).collect());
        (inner.resource_version, items.unwrap_or_default())
    }

    /// One page of a LIST: up to `limit` objects of `kind` that `wanted` selects, with keys
    /// after `after`, in key order; the resourceVersion they are current at; and how many
    /// selected objects follow the page. Only the page is copied: a client paging through N
    /// objects costs N copies, not N per page.
    pub(crate) fn list_page(
        &self,
        kind: Kind,
        after: Option<&str>,
        limit: Option<usize>,
        wanted: impl Fn(&Value) -> bool,
    ) -> (u64, Vec<(String, Value)>, usize) {
        use std::ops::Bound;
        let inner = self.lock();
        let Some(objects) = inner.objects.get(&kind) else { return (inner.resource_version, Vec::new(), 0) };
        let start = after.map_or(Bound::Unbounded, Bound::Excluded);
        let mut selected = objects.range::<str, _>((start, Bound::Unbounded)).filter(|(_, o)| wanted(o));
        let page: Vec<(String, Value)> = selected
            .by_ref()
            .take(limit.unwrap_or(usize::MAX))
            .map(|(k, v)| (k.clone(), Value::clone(v)))
            .collect();
        (inner.resource_version, page, selected.count())
    }

    /// The changes of `kind` after `resource_version`, and the resourceVersion they reach.
    pub(crate) fn events_after(&self, kind: Kind, resource_version: u64) -> (u64, Vec<Event>) {
        let inner = self.lock();
        // Events are in resourceVersion order: skip to the first newer one.
        let start = inner.events.partition_point(|e| e.resource_version <= resource_version);
        let events = inner.events[start..].iter().filter(|e| e.kind == kind).cloned().collect();
        (inner.resource_version, events)
    }

    /// Notified on every change, and when the store closes.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Ends every watch (the server is stopping).
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.changed.send_modify(|_| {});
    }

    /// Adds a line to the request log, dropping the oldest past [`LOG_LINES`].
    pub fn log(&self, line: String) {
        let mut inner = self.lock();
        if inner.log.len() == LOG_LINES {
            inner.log.pop_front();
        }
        inner.log.push_back(line);
    }

    /// Records a refused request (the first [`LOG_LINES`] are kept: the first says why).
    pub(crate) fn refuse(&self, refusal: Refusal) {
        let mut inner = self.lock();
        if inner.refusals.len() < LOG_LINES {
            inner.refusals.push(refusal);
        }
    }

    /// The requests refused so far, oldest first.
    pub fn refusals(&self) -> Vec<Refusal> {
        self.lock().refusals.clone()
    }

    /// The request log, one request a line.
    pub fn request_log(&self) -> String {
        self.lock().log.iter().map(|l| format!("{l}\n")).collect()
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.lock().closed
    }
}

impl Inner {
    fn record(&mut self, kind: Kind, key: &str, change: &'static str, mut object: Value) {
        self.resource_version += 1;
        let rv = self.resource_version;
        object["metadata"]["resourceVersion"] = rv.to_string().into();
        if change != "DELETED" && object["metadata"].get("uid").is_none() {
            object["metadata"]["uid"] = format!("pp-{}-{key}", kind.kind().to_lowercase()).into();
        }
        let object = Arc::new(object);
        let objects = self.objects.entry(kind).or_default();
        let previous = if change == "DELETED" {
            objects.remove(key);
            None
        } else {
            objects.insert(key.to_string(), Arc::clone(&object)).filter(|_| change == "MODIFIED")
        };
        self.events.push(Event { resource_version: rv, kind, change, object, previous });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn svc(name: &str, port: u16) -> Value {
        json!({"metadata": {"name": name, "namespace": "default"}, "spec": {"ports": [{"port": port}]}})
    }

    #[test]
    fn replacing_records_only_real_changes_with_increasing_versions() {
        let store = Store::default();
        assert_eq!(store.replace(Kind::Service, vec![svc("a", 80), svc("b", 80)]).unwrap(), 2);
        assert_eq!(store.replace(Kind::Service, vec![svc("a", 80), svc("b", 80)]).unwrap(), 0);
        assert_eq!(store.replace(Kind::Service, vec![svc("a", 81)]).unwrap(), 2);
        let (rv, events) = store.events_after(Kind::Service, 2);
        assert_eq!(rv, 4);
        let seen: Vec<(&str, String, u64)> =
            events.iter().map(|e| (e.change, key_of(&e.object).unwrap(), e.resource_version)).collect();
        assert_eq!(seen, [("DELETED", "default/b".into(), 3), ("MODIFIED", "default/a".into(), 4)]);
        let (_, items) = store.list(Kind::Service);
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].1["metadata"]["resourceVersion"], "4");
        assert_eq!(items[0].1["kind"], "Service");
        assert!(store.events_after(Kind::Node, 0).1.is_empty());
    }

    #[test]
    fn a_page_holds_the_selected_objects_after_the_key_and_counts_the_rest() {
        let store = Store::default();
        let names = ["a", "b", "c", "d", "e"];
        store.replace(Kind::Service, names.iter().map(|n| svc(n, 80)).collect()).unwrap();
        let not_c = |o: &Value| o["metadata"]["name"] != "c";
        let keys = |page: &[(String, Value)]| page.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
        let (rv, page, rest) = store.list_page(Kind::Service, None, Some(2), not_c);
        assert_eq!((rv, keys(&page), rest), (5, vec!["default/a".into(), "default/b".into()], 2));
        let (_, page, rest) = store.list_page(Kind::Service, Some("default/b"), Some(2), not_c);
        assert_eq!((keys(&page), rest), (vec!["default/d".into(), "default/e".into()], 0));
        let (_, page, rest) = store.list_page(Kind::Service, None, None, |_| true);
        assert_eq!((page.len(), rest), (5, 0));
        assert_eq!(store.list_page(Kind::Node, None, Some(1), |_| true).1.len(), 0);
    }
}
