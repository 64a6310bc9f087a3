//! Scenario files → a validated [`crate::model::Scenario`], with compiler-style errors.
//!
//! A file is multi-document YAML: one `kind: Scenario` document (cluster shape, nodes, probes)
//! plus plain Kubernetes objects (Service, EndpointSlice, Pod, Node) as `kubectl get -o yaml`
//! prints them, alone or in a `kind: List` (`lists`); Node objects may stand for `spec.nodes`
//! (`node_objects`). Every field a proxy acts on is modelled or
//! refused (`fields` holds the audit). Every error points at a line, column and field, and as
//! many as can be found without cascading are reported at once.
//!
//! The stages, one file each: `yaml` (text → JSON values + positions), `objects` (kind
//! dispatch, k8s-openapi parsing), `scenario_doc` (our document) with `proxy_config`, `pods`,
//! `services` with `external` (external IPs, load balancers, health checks), `affinity` and
//! `claims` (what Services share), `endpoints` and `derive` (EndpointSlices), `probes` with
//! `targets`, `target_form` and `duration`, `flows` (generated probes), tied together by `validate`.
//! The objects a proxy is served are the file's as kube-apiserver would store them (`defaults`).
//! Addresses and CIDRs of either family are read through `net`, which holds every one of a
//! single-stack file to the family of its first (`families`); a dual-stack cluster (its
//! networks list a CIDR of each family) admits both.
//!
//! The reader only reads: whether the proxy a file names can be built for it, and whether the
//! oracle can judge its probes, is asked of the stage above it ([`Admission`]), whose answers
//! are reported at the file's lines like the reader's own.

mod addresses;
mod affinity;
mod backend_names;
mod claims;
mod de;
mod defaults;
mod derive;
mod detect_local;
mod duration;
mod endpoints;
mod error;
mod external;
mod families;
mod fields;
mod flows;
mod generate;
mod held;
mod hints;
mod host_network;
mod host_routes;
mod kind;
mod lists;
mod min_kernel;
mod names;
mod net;
mod networks;
mod node_objects;
mod objects;
mod peek;
mod pods;
mod probes;
mod proxy_config;
mod referents;
mod registry;
mod scenario_doc;
mod selectors;
mod services;
mod spec;
mod steps;
mod target_form;
mod targets;
mod validate;
// The YAML reader with positions sits below every layer (proxies read configuration with it).
use crate::yaml;

#[cfg(any(test, feature = "test-support"))]
pub mod fixtures;
#[cfg(test)]
pub(crate) mod tests;

use std::path::{Path, PathBuf};

use anyhow::bail;

use crate::model::{Cluster, Probe, ProxyChoice, Scenario};

pub use error::{ScenarioError, ScenarioErrors};
pub use peek::{Peek, peek};

/// What the reader cannot tell from the file alone, answered by the admission stage (which
/// knows the proxies and the oracle; the reader knows neither).
pub trait Admission {
    /// Why the proxy `choice` cannot run the scenario file `file` with these nodes (its options,
    /// the files they name), if it cannot.
    fn proxy_problem(&self, choice: &ProxyChoice, file: &Path, nodes: &[&str]) -> Option<String>;
    /// Where `probes` disagree with what Kubernetes requires of `cluster`: (probe index, field,
    /// message). A problem at `to` means no outcome can be stated for the probe at all.
    fn probe_problems(&self, cluster: &Cluster, probes: &[Probe]) -> Vec<(usize, &'static str, String)>;
}

/// The field of [`Admission::probe_problems`] that says a probe's outcome is undefined.
pub const UNDEFINED_OUTCOME: &str = "to";

/// Reads and validates one scenario file, asking `admission` what the reader cannot tell.
pub fn load(path: &Path, admission: &dyn Admission) -> Result<Scenario, ScenarioErrors> {
    let text = std::fs::read_to_string(path).map_err(|e| ScenarioErrors {
        errors: vec![ScenarioError {
            file: path.to_path_buf(),
            line: 1,
            column: 1,
            field: String::new(),
            message: format!("cannot read the file: {e}"),
        }],
    })?;
    let mut diag = error::Diagnostics::new(path.to_path_buf());
    let Some(docs) = documents(&text, &mut diag) else { return Err(diag.into_errors()) };
    // The documents hold all the text says: a large file's text need not stay for the build.
    drop(text);
    built(&docs, path, validate::build, admission, diag)
}

/// Validates scenario text; `path` only names the file in errors and in `Scenario::source`.
pub fn load_str(text: &str, path: &Path, admission: &dyn Admission) -> Result<Scenario, ScenarioErrors> {
    load_with(text, path, validate::build, admission)
}

/// How the documents of a file become a scenario (the whole check, or part of it in tests).
type Build = fn(&[yaml::Document], &Path, &dyn Admission, &mut error::Diagnostics) -> Option<Scenario>;

fn load_with(
    text: &str,
    path: &Path,
    build: Build,
    admission: &dyn Admission,
) -> Result<Scenario, ScenarioErrors> {
    let mut diag = error::Diagnostics::new(path.to_path_buf());
    let Some(docs) = documents(text, &mut diag) else { return Err(diag.into_errors()) };
    built(&docs, path, build, admission, diag)
}

/// The documents of `text`, lists and generated Services expanded; none if the YAML itself
/// is wrong (reported).
fn documents(text: &str, diag: &mut error::Diagnostics) -> Option<Vec<yaml::Document>> {
    match yaml::parse(text) {
        Ok(docs) => Some(generate::expand(lists::expand(docs, diag), diag)),
        Err(e) => {
            let field = if e.field.is_root() { String::new() } else { e.field.to_string() };
            diag.push(e.pos, field, e.message);
            None
        }
    }
}

/// The scenario `build` makes of `docs`, or every error found, top to bottom.
fn built(
    docs: &[yaml::Document],
    path: &Path,
    build: Build,
    admission: &dyn Admission,
    mut diag: error::Diagnostics,
) -> Result<Scenario, ScenarioErrors> {
    let scenario = build(docs, path, admission, &mut diag);
    match scenario {
        Some(scenario) if diag.is_empty() => Ok(scenario),
        _ => {
            if diag.is_empty() {
                diag.push(
                    Default::default(),
                    String::new(),
                    "internal error: the scenario was rejected without a reason",
                );
            }
            let mut errors = diag.into_errors();
            // Read top to bottom, like a compiler's output.
            errors.errors.sort_by_key(|e| (e.line, e.column));
            Err(errors)
        }
    }
}

/// Expands directories into their `*.yaml` / `*.yml` files (sorted, not recursive) and keeps
/// files as given. A path that cannot be read (missing, a dangling or looping link), or a
/// directory without scenario files, is an error naming every such path, after all were tried.
pub fn discover(paths: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let (files, bad) = discover_each(paths);
    if !bad.is_empty() {
        bail!("{}", bad.join("\n"));
    }
    Ok(files)
}

/// [`discover`], keeping going: the files found, and a line for each path that was not.
pub fn discover_each(paths: &[PathBuf]) -> (Vec<PathBuf>, Vec<String>) {
    let mut out = Vec::new();
    let mut bad = Vec::new();
    for path in paths {
        match std::fs::metadata(path) {
            Ok(meta) if meta.is_dir() => {
                let mut files = Vec::new();
                let entries = match std::fs::read_dir(path) {
                    Ok(entries) => entries,
                    Err(e) => {
                        bad.push(unreadable(path, &e));
                        continue;
                    }
                };
                for file in entries.filter_map(Result::ok).map(|e| e.path()) {
                    let yaml = matches!(file.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"));
                    if !yaml {
                        continue;
                    }
                    match std::fs::metadata(&file) {
                        Ok(meta) if meta.is_file() => files.push(file),
                        Ok(_) => {}
                        Err(e) => bad.push(unreadable(&file, &e)),
                    }
                }
                if files.is_empty() {
                    bad.push(format!(
                        "{}: no scenario files (*.yaml, *.yml) in this directory",
                        path.display()
                    ));
                }
                files.sort();
                out.extend(files);
            }
            Ok(_) => out.push(path.clone()),
            Err(e) => bad.push(unreadable(path, &e)),
        }
    }
    (out, bad)
}

/// Why `path` cannot be read, in words: a link that points nowhere or in a circle says so.
fn unreadable(path: &Path, error: &std::io::Error) -> String {
    let link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    let why = match error.raw_os_error() {
        Some(libc::ELOOP) => "a symbolic link that loops".to_string(),
        _ if link && error.kind() == std::io::ErrorKind::NotFound => "a symbolic link to nothing".to_string(),
        _ if error.kind() == std::io::ErrorKind::NotFound => "no such file or directory".to_string(),
        _ => error.to_string(),
    };
    format!("{}: {why}", path.display())
}
