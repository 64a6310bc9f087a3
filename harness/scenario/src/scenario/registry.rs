//! Named things a scenario refers to by bare name (nodes, pods, services, ...), and lookups
//! that report unknown names without cascading: a name whose definition was itself broken
//! resolves to nothing, silently, because its definition already carries the error.

use std::collections::{HashMap, HashSet};

use super::error::{Diagnostics, Site};
use super::yaml::{FieldPath, Pos};

pub(crate) struct Registry<T> {
    /// How messages call the thing: `Pod`, `Service`, `node`, `external host`.
    what: &'static str,
    entries: Vec<Entry<T>>,
    /// Where each name is in `entries`: files define names by the hundred thousand.
    index: HashMap<String, usize>,
    /// Some definition failed before its name could be read: an unknown name may be that one.
    incomplete: bool,
    /// Names of documents whose kind could not be read: they may be definitions of this.
    tolerated: HashSet<String>,
    /// Why a name that is not defined is not, when its document says (a hostNetwork pod).
    notes: HashMap<String, String>,
}

struct Entry<T> {
    name: String,
    /// `None` when the definition had errors.
    value: Option<T>,
    defined_at: Pos,
}

pub(crate) enum Lookup<'a, T> {
    Found(&'a T),
    Broken,
    Missing,
}

impl<T> Registry<T> {
    pub fn new(what: &'static str) -> Self {
        Registry {
            what,
            entries: Vec::new(),
            index: HashMap::new(),
            incomplete: false,
            tolerated: HashSet::new(),
            notes: HashMap::new(),
        }
    }

    /// Room for `more` definitions, made at once rather than by doubling as they come.
    pub(crate) fn reserve(&mut self, more: usize) {
        self.entries.reserve(more);
        self.index.reserve(more);
    }

    /// Adds a definition; on a duplicate name, keeps the first and returns where it is.
    pub fn insert(&mut self, name: &str, value: Option<T>, defined_at: Pos) -> Result<(), Pos> {
        if let Some(&first) = self.index.get(name) {
            return Err(self.entries[first].defined_at);
        }
        self.index.insert(name.to_string(), self.entries.len());
        self.entries.push(Entry { name: name.to_string(), value, defined_at });
        Ok(())
    }

    /// Inserts, reporting a duplicate name at `path` of `site`.
    pub(crate) fn define(
        &mut self,
        name: &str,
        value: Option<T>,
        site: &Site<'_>,
        path: &FieldPath,
        diag: &mut Diagnostics,
    ) {
        let at = site.doc.value_pos(path);
        if let Err(first) = self.insert(name, value, at) {
            diag.value(
                site,
                path,
                format!(
                    "duplicate {} name {name:?} (first defined at line {}); names must be unique across the scenario, \
                     whatever the namespace, because probes refer to bare names",
                    self.what, first.line
                ),
            );
        }
    }

    /// Some definition could not be read (see [`Registry::mark_incomplete`]).
    pub(crate) fn is_incomplete(&self) -> bool {
        self.incomplete
    }

    pub(crate) fn mark_incomplete(&mut self) {
        self.incomplete = true;
    }

    /// `name` may be defined by a document that could not be read: don't report it as unknown.
    pub(crate) fn tolerate(&mut self, name: Option<&str>) {
        match name {
            Some(name) => {
                self.tolerated.insert(name.to_string());
            }
            None => self.incomplete = true,
        }
    }

    pub fn get(&self, name: &str) -> Lookup<'_, T> {
        match self.index.get(name).map(|&i| &self.entries[i]) {
            Some(Entry { value: Some(v), .. }) => Lookup::Found(v),
            Some(_) => Lookup::Broken,
            None if self.incomplete || self.tolerated.contains(name) => Lookup::Broken,
            None => Lookup::Missing,
        }
    }

    /// Looks `name` up; reports an unknown name at `path`, listing the known ones.
    pub fn resolve(
        &self,
        name: &str,
        site: &Site<'_>,
        path: &FieldPath,
        diag: &mut Diagnostics,
    ) -> Option<&T> {
        match self.get(name) {
            Lookup::Found(v) => Some(v),
            Lookup::Broken => None,
            Lookup::Missing => {
                diag.value(site, path, self.missing_message(name));
                None
            }
        }
    }

    /// Says why `name`, which the file has but this registry does not define, is absent: a
    /// reference to it is told that rather than the known names.
    pub(crate) fn note(&mut self, name: &str, why: String) {
        self.notes.insert(name.to_string(), why);
    }

    pub(crate) fn missing_message(&self, name: &str) -> String {
        if let Some(why) = self.notes.get(name) {
            return format!("{} {name:?} {why}", self.what);
        }
        format!("no {} named {name:?} in the scenario (known: {})", self.what, known(self.names()))
    }

    /// Every name with where it is defined, in file order.
    pub(crate) fn names_with_places(&self) -> impl Iterator<Item = (&str, Pos)> {
        self.entries.iter().map(|e| (e.name.as_str(), e.defined_at))
    }

    /// How messages call the thing (`Pod`, `node`, ...).
    pub fn what(&self) -> &'static str {
        self.what
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|e| e.name.as_str())
    }

    /// Every valid definition, in file order.
    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.entries.iter().filter_map(|e| e.value.as_ref())
    }

    pub(crate) fn into_values(self) -> impl Iterator<Item = T> {
        self.entries.into_iter().filter_map(|e| e.value)
    }
}

/// `a, b, c` sorted, or `none`.
pub(crate) fn known<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let mut names: Vec<&str> = names.collect();
    if names.is_empty() {
        return "none".to_string();
    }
    names.sort_unstable();
    names.dedup();
    names.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_distinguish_missing_from_broken() {
        let mut r: Registry<u32> = Registry::new("Pod");
        r.insert("coredns-b", Some(2), Pos::default()).unwrap();
        r.insert("client", Some(1), Pos::default()).unwrap();
        r.insert("broken", None, Pos::default()).unwrap();
        assert!(r.insert("client", Some(3), Pos::default()).is_err());
        assert!(matches!(r.get("client"), Lookup::Found(1)));
        assert!(matches!(r.get("broken"), Lookup::Broken));
        assert!(matches!(r.get("clinet"), Lookup::Missing));
        assert_eq!(
            r.missing_message("clinet"),
            "no Pod named \"clinet\" in the scenario (known: broken, client, coredns-b)"
        );
        r.mark_incomplete();
        assert!(matches!(r.get("clinet"), Lookup::Broken));
    }
}
