//! A watch, turned into what client-go's shared informer hands kube-proxy's handlers: adds
//! and updates with the object they replace, deletes, and once, the end of the first list
//! (`OnServiceSynced`, `OnEndpointSlicesSynced`). A re-list after a broken watch reports
//! what changed meanwhile, objects gone included, as the informer's `Replace` does.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::Resource;
use kube::runtime::watcher;

/// Namespace (empty for cluster-scoped kinds) and name.
pub type Key = (String, String);

pub fn key<K: Resource>(object: &K) -> Key {
    let meta = object.meta();
    (meta.namespace.clone().unwrap_or_default(), meta.name.clone().unwrap_or_default())
}

#[derive(Debug, Clone, PartialEq)]
pub enum Change<K> {
    /// Added (`old` none) or updated.
    Upsert { old: Option<Arc<K>>, new: Arc<K> },
    /// Deleted: the object as last seen.
    Delete(Arc<K>),
    /// The first list is complete.
    Synced,
}

/// The informer's store, and the list in progress.
#[derive(Debug)]
pub struct Informer<K> {
    known: BTreeMap<Key, Arc<K>>,
    listing: Option<BTreeMap<Key, Arc<K>>>,
    synced: bool,
}

impl<K> Default for Informer<K> {
    fn default() -> Self {
        Informer { known: BTreeMap::new(), listing: None, synced: false }
    }
}

impl<K: Resource> Informer<K> {
    /// The handler calls one watch event makes.
    pub fn handle(&mut self, event: watcher::Event<K>) -> Vec<Change<K>> {
        match event {
            watcher::Event::Apply(object) => {
                let new = Arc::new(object);
                let old = self.known.insert(key(&*new), Arc::clone(&new));
                vec![Change::Upsert { old, new }]
            }
            watcher::Event::Delete(object) => {
                let last = self.known.remove(&key(&object)).unwrap_or_else(|| Arc::new(object));
                vec![Change::Delete(last)]
            }
            watcher::Event::Init => {
                self.listing = Some(BTreeMap::new());
                Vec::new()
            }
            watcher::Event::InitApply(object) => {
                self.listing.get_or_insert_with(BTreeMap::new).insert(key(&object), Arc::new(object));
                Vec::new()
            }
            watcher::Event::InitDone => {
                let listed = self.listing.take().unwrap_or_default();
                let mut changes: Vec<Change<K>> = Vec::new();
                for (k, gone) in &self.known {
                    if !listed.contains_key(k) {
                        changes.push(Change::Delete(Arc::clone(gone)));
                    }
                }
                for (k, new) in &listed {
                    changes.push(Change::Upsert { old: self.known.get(k).cloned(), new: Arc::clone(new) });
                }
                self.known = listed;
                if !self.synced {
                    self.synced = true;
                    changes.push(Change::Synced);
                }
                changes
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Service;

    fn svc(name: &str, port: i32) -> Service {
        serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": "default", "name": name},
            "spec": {"clusterIP": "10.96.0.10", "ports": [{"port": port}]}
        }))
        .unwrap()
    }

    fn names(changes: &[Change<Service>]) -> Vec<String> {
        changes
            .iter()
            .map(|c| match c {
                Change::Upsert { old: None, new } => format!("add {}", key(&**new).1),
                Change::Upsert { old: Some(_), new } => format!("update {}", key(&**new).1),
                Change::Delete(o) => format!("delete {}", key(&**o).1),
                Change::Synced => "synced".into(),
            })
            .collect()
    }

    #[test]
    fn the_first_list_ends_in_synced_and_a_relist_reports_what_went_away() {
        let mut i = Informer::default();
        assert!(i.handle(watcher::Event::Init).is_empty());
        assert!(i.handle(watcher::Event::InitApply(svc("a", 80))).is_empty());
        assert!(i.handle(watcher::Event::InitApply(svc("b", 80))).is_empty());
        assert_eq!(names(&i.handle(watcher::Event::InitDone)), ["add a", "add b", "synced"]);
        let update = i.handle(watcher::Event::Apply(svc("a", 81)));
        assert_eq!(names(&update), ["update a"]);
        let Change::Upsert { old: Some(old), .. } = &update[0] else { panic!() };
        assert_eq!(old.spec.as_ref().unwrap().ports.as_ref().unwrap()[0].port, 80, "the object it replaces");
        // The watch broke; meanwhile b went away and c came.
        i.handle(watcher::Event::Init);
        i.handle(watcher::Event::InitApply(svc("a", 81)));
        i.handle(watcher::Event::InitApply(svc("c", 80)));
        assert_eq!(names(&i.handle(watcher::Event::InitDone)), ["delete b", "update a", "add c"]);
        assert_eq!(names(&i.handle(watcher::Event::Delete(svc("c", 80)))), ["delete c"]);
    }
}
