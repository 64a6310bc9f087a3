//! The evidence a scenario leaves, so that a reviewer can fix a failure without re-running it:
//! one folder per scenario with a pcap per capture point, each node's rules, conntrack table
//! and conntrack events as the run ended, the proxy's own files, and the flow table.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use anyhow::{Context, Result};

use crate::model::Cluster;
use crate::observe::{Flow, Frame, write_pcap};
use crate::verdict::ProbeVerdict;

/// One node as the run ended, read for its evidence files.
pub struct NodeState<'a> {
    pub name: &'a str,
    /// Its data plane as the proxy loaded it, or why it could not be read.
    pub rules: Result<String>,
    pub conntrack: Result<Vec<Flow>>,
    /// The conntrack events announced during the run.
    pub events: &'a str,
}

/// The folder for `name`'s evidence under `root`, emptied of an earlier run's. `name` must be
/// one plain path component: the reader allows only DNS-1123 names, and this refuses anything
/// else again, since the folder is written as root.
pub fn clear(root: &Path, name: &str) -> Result<PathBuf> {
    let mut components = Path::new(name).components();
    let single =
        matches!(components.next(), Some(Component::Normal(c)) if c == name) && components.next().is_none();
    if !single || name.contains(['/', '\\', '\0']) {
        anyhow::bail!(
            "scenario name {name:?} cannot name an evidence folder: it must be one plain path component"
        );
    }
    let dir = root.join(name);
    match std::fs::symlink_metadata(&dir) {
        // A link is removed, never followed.
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(&dir),
        Ok(_) => std::fs::remove_file(&dir),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
    .with_context(|| format!("removing the earlier evidence in {}", dir.display()))?;
    Ok(dir)
}

/// Writes the kernel's evidence into `dir` (cleared by [`clear`]): a pcap per capture point,
/// each node's rules, conntrack table and conntrack events, and the proxy's files
/// (`proxy-NAME`). The flow table comes later, from [`summary`].
pub fn keep(
    dir: &Path,
    frames: &BTreeMap<String, Vec<Frame>>,
    nodes: &[NodeState<'_>],
    proxy_files: Vec<(String, Vec<u8>)>,
) -> Result<()> {
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
    };
    create(dir)?;
    for (key, frames) in frames {
        write_pcap(&dir.join(format!("{}.pcap", key.replace('/', "-"))), frames)?;
    }
    for node in nodes {
        let rules = match &node.rules {
            Ok(rules) => rules.clone(),
            Err(e) => format!("(no dump: {e:#})"),
        };
        write(&format!("node-{}.rules", node.name), &rules)?;
        let table = match &node.conntrack {
            Ok(flows) => flows.iter().map(|f| format!("{f}\n")).collect(),
            Err(e) => format!("(no conntrack table: {e:#})\n"),
        };
        write(&format!("node-{}.conntrack", node.name), &table)?;
        write(&format!("node-{}.conntrack-events", node.name), node.events)?;
    }
    write_proxy_files(dir, proxy_files)
}

/// The evidence of a proxy that failed at its job: its log (`log`: file name → contents),
/// and the error that says how.
pub fn proxy_failure(dir: &Path, log: &[(String, Vec<u8>)], message: &str) -> Result<()> {
    create(dir)?;
    let mut files = log.to_vec();
    files.push(("failure.txt".into(), format!("{message}\n").into_bytes()));
    write_proxy_files(dir, files)
}

/// The flow table of a judged scenario, beside its kernel's evidence (`summary.txt`).
pub fn summary(dir: &Path, cluster: &Cluster, verdicts: &[ProbeVerdict]) -> Result<()> {
    let path = dir.join("summary.txt");
    std::fs::write(&path, super::flow_table(cluster, verdicts))
        .with_context(|| format!("writing {}", path.display()))
}

/// Creates `dir`, and the folders above it. `dir` itself must be new (cleared when the
/// scenario started): creating it fails rather than write through anything planted there since.
fn create(dir: &Path) -> Result<()> {
    if let Some(root) = dir.parent() {
        std::fs::create_dir_all(root).with_context(|| format!("creating {}", root.display()))?;
    }
    std::fs::create_dir(dir).with_context(|| format!("creating {}", dir.display()))
}

fn write_proxy_files(dir: &Path, files: Vec<(String, Vec<u8>)>) -> Result<()> {
    for (name, contents) in files {
        let path = dir.join(format!("proxy-{name}"));
        std::fs::write(&path, contents).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
