//! Errors that point into the scenario file, compiler style: `FILE:LINE:COL: FIELD: MESSAGE`.

use std::collections::HashSet;
use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;

use ipnet::IpNet;

use crate::model::IpFamily;

use super::families::Families;
use super::yaml::{Document, FieldPath, Pos};

/// One problem in a scenario file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioError {
    pub file: PathBuf,
    /// 1-based.
    pub line: usize,
    /// 1-based, in characters.
    pub column: usize,
    /// Where inside the document, e.g. `spec.probes[2].to.service` or
    /// `Service kube-system/kube-dns: spec.ports[1].protocol`; empty for YAML syntax errors.
    pub field: String,
    pub message: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}: ", self.file.display(), self.line, self.column)?;
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ScenarioError {}

/// Every problem found in one file, in the order found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioErrors {
    pub errors: Vec<ScenarioError>,
}

impl fmt::Display for ScenarioErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.errors.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ScenarioErrors {}

/// One document plus how its fields are named in messages: the Scenario document's fields
/// are bare (`spec.nodes[0].ip`), other objects' are prefixed (`Pod default/web: status.podIP`).
#[derive(Clone)]
pub(crate) struct Site<'a> {
    pub doc: &'a Document,
    /// Empty for the Scenario document, else e.g. `Service kube-system/kube-dns`.
    pub label: String,
}

impl<'a> Site<'a> {
    pub fn new(doc: &'a Document, label: impl Into<String>) -> Self {
        Site { doc, label: label.into() }
    }

    /// The FIELD part of a message for `path`; a whole-document error is named by the label.
    pub fn field(&self, path: &FieldPath) -> String {
        match (self.label.is_empty(), path.is_root()) {
            (true, true) => "kind".to_string(),
            (true, false) => path.to_string(),
            (false, true) => self.label.clone(),
            (false, false) => format!("{}: {path}", self.label),
        }
    }
}

/// Collects errors for one file, and the file's address family (every reader that parses
/// an address asks it, through [`Diagnostics::one_family`] in `families`).
pub(crate) struct Diagnostics {
    file: PathBuf,
    errors: Vec<ScenarioError>,
    pub(super) families: Families,
}

impl Diagnostics {
    pub fn new(file: PathBuf) -> Self {
        Diagnostics { file, errors: Vec::new(), families: Families::default() }
    }

    pub fn push(&mut self, pos: Pos, field: String, message: impl Into<String>) {
        self.errors.push(ScenarioError {
            file: self.file.clone(),
            line: pos.line,
            column: pos.column,
            field,
            message: message.into(),
        });
    }

    /// An error about the value at `path` (or, when it is missing, the nearest enclosing one).
    pub fn value(&mut self, site: &Site<'_>, path: &FieldPath, message: impl Into<String>) {
        self.push(site.doc.value_pos(path), site.field(path), message);
    }

    /// An error about the key of `path` itself, e.g. an unknown field.
    pub fn key(&mut self, site: &Site<'_>, path: &FieldPath, message: impl Into<String>) {
        self.push(site.doc.key_pos(path), site.field(path), message);
    }

    /// The folder of the file being read, which relative paths in it start from.
    pub fn file(&self) -> &std::path::Path {
        &self.file
    }

    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }

    pub fn count(&self) -> usize {
        self.errors.len()
    }

    /// The errors `later` found in documents after those this one was given, read apart by a
    /// stage that reads no address (so neither has a family to agree on).
    pub(crate) fn append(&mut self, mut later: Diagnostics) {
        debug_assert!(later.families.untouched());
        self.errors.append(&mut later.errors);
    }

    /// The errors; of those about an address of the other family, only the first in the file.
    pub(crate) fn into_errors(mut self) -> ScenarioErrors {
        let mut dual_stack = std::mem::take(&mut self.families.reported);
        dual_stack.sort_by_key(|&i| (self.errors[i].line, self.errors[i].column));
        let later: HashSet<usize> = dual_stack.into_iter().skip(1).collect();
        let errors = self.errors.into_iter().enumerate().filter(|(i, _)| !later.contains(i)).map(|(_, e)| e);
        ScenarioErrors { errors: errors.collect() }
    }
}

impl Diagnostics {
    /// Whether a value of `family` (`shown`: the address, CIDR or family name) at `path` may
    /// be in this scenario; reports the first that may not.
    pub(crate) fn one_family(
        &mut self,
        site: &Site<'_>,
        path: &FieldPath,
        family: IpFamily,
        shown: &str,
    ) -> bool {
        if self.families.settled(family) {
            return true;
        }
        let line = site.doc.value_pos(path).line;
        match self.families.admit(site.field(path), line, family, shown) {
            Ok(()) => true,
            Err(message) => {
                self.families.reported.push(self.count());
                self.value(site, path, message);
                false
            }
        }
    }

    /// [`Diagnostics::one_family`] for an address.
    pub(crate) fn ip_family(&mut self, site: &Site<'_>, path: &FieldPath, ip: IpAddr) -> bool {
        let family = IpFamily::of(ip);
        self.families.settled(family) || self.one_family(site, path, family, &ip.to_string())
    }

    /// [`Diagnostics::one_family`] for a CIDR.
    pub(crate) fn net_family(&mut self, site: &Site<'_>, path: &FieldPath, net: &IpNet) -> bool {
        let family = IpFamily::of_net(net);
        self.families.settled(family) || self.one_family(site, path, family, &net.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displays_compiler_style() {
        let e = ScenarioError {
            file: "scenarios/x.yaml".into(),
            line: 12,
            column: 5,
            field: "spec.probes[2].to.service".into(),
            message: "no Service named \"web2\" in the scenario (known: web)".into(),
        };
        assert_eq!(
            e.to_string(),
            "scenarios/x.yaml:12:5: spec.probes[2].to.service: no Service named \"web2\" in the scenario (known: web)"
        );
        let all = ScenarioErrors { errors: vec![e.clone(), ScenarioError { field: String::new(), ..e }] };
        assert_eq!(all.to_string().lines().count(), 2);
        assert!(all.to_string().lines().nth(1).unwrap().starts_with("scenarios/x.yaml:12:5: no Service"));
    }
}
