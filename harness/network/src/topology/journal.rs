//! The additions to existing nodes, written down as they are made, so that what a run killed
//! outright (SIGKILL, OOM, a power cut of the CI job) added can still be taken back: by
//! `packetproof cleanup` and at the start of the next run, as namespaces left by a killed run are.
//!
//! One file per [`super::existing::Additions`] record, `/run/packetproof/additions/<pid>-<id>`,
//! a JSON object per line, appended before each addition is made and removed once all are undone.
//! Links, routes and settings are written down with the path of the namespace they are in;
//! objects written into a cluster's API server with the kubeconfig they were written through.

use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

/// Where the journals are (tmpfs: they do not outlive a reboot, nor do the additions).
const DIR: &str = "/run/packetproof/additions";

/// One addition as written down: what to run, in which namespace (by path), to take it back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "undo", rename_all = "camelCase")]
pub enum Entry {
    Link {
        netns: PathBuf,
        name: String,
    },
    Route {
        netns: PathBuf,
        args: Vec<String>,
    },
    Sysctl {
        netns: PathBuf,
        key: String,
        value: String,
    },
    /// An object written through the cluster's API: `kind` as `Kind::kind` names it.
    ApiObject {
        kubeconfig: PathBuf,
        kind: String,
        namespace: String,
        name: String,
    },
}

/// The journal of one record of additions.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
}

impl Journal {
    pub fn new(id: u64) -> Journal {
        Journal { path: Path::new(DIR).join(format!("{}-{id}", std::process::id())) }
    }

    /// Appends `entry`, creating the journal on its first entry.
    pub fn append(&self, entry: &Entry) -> Result<()> {
        fs::create_dir_all(DIR).with_context(|| format!("creating {DIR}"))?;
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .with_context(|| format!("opening {}", self.path.display()))?;
        let line = serde_json::to_string(entry).expect("a journal entry serializes");
        writeln!(file, "{line}").with_context(|| format!("writing {}", self.path.display()))?;
        // Written through before the addition is made: that is the point of it.
        file.sync_data().with_context(|| format!("syncing {}", self.path.display()))
    }

    /// Everything was undone: the journal goes.
    pub fn close(&self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// A journal whose run is gone, with its entries in the order they were made.
#[derive(Debug)]
pub struct Orphan {
    pub path: PathBuf,
    pub entries: Vec<Entry>,
}

/// The journals of runs no longer alive (all of them but this process's with `include_live`).
pub fn orphans(include_live: bool) -> Result<Vec<Orphan>> {
    orphans_in(Path::new(DIR), include_live)
}

pub(super) fn orphans_in(dir: &Path, include_live: bool) -> Result<Vec<Orphan>> {
    let listing = match fs::read_dir(dir) {
        Ok(listing) => listing,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("listing {}", dir.display())),
    };
    let mut found = Vec::new();
    for item in listing {
        let path = item.with_context(|| format!("listing {}", dir.display()))?.path();
        let Some(owner) = owner_pid(&path) else { continue };
        let alive = Path::new("/proc").join(owner.to_string()).exists();
        if owner == std::process::id() || (alive && !include_live) {
            continue;
        }
        found.push(Orphan { entries: read(&path)?, path });
    }
    found.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(found)
}

/// The pid in `<pid>-<id>`.
fn owner_pid(path: &Path) -> Option<u32> {
    path.file_name()?.to_str()?.split('-').next()?.parse().ok()
}

/// The entries of a journal; a last line cut short by the kill is skipped.
fn read(path: &Path) -> Result<Vec<Entry>> {
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut entries = Vec::new();
    for line in BufReader::new(file).lines() {
        let line = line.with_context(|| format!("reading {}", path.display()))?;
        if let Ok(entry) = serde_json::from_str(&line) {
            entries.push(entry);
        }
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_read_back_as_written_and_a_torn_last_line_is_skipped() {
        let dir = std::env::temp_dir().join(format!("pp-journal-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        // A pid that cannot be alive (above pid_max's ceiling) owns it.
        let path = dir.join("4194305-7");
        let entries = vec![
            Entry::Sysctl {
                netns: "/proc/1/ns/net".into(),
                key: "net.ipv4.ip_forward".into(),
                value: "0".into(),
            },
            Entry::Link { netns: "/proc/1/ns/net".into(), name: "ppabcx0br".into() },
            Entry::Route { netns: "/proc/1/ns/net".into(), args: vec!["10.244.2.0/24".into()] },
            Entry::ApiObject {
                kubeconfig: "/tmp/k".into(),
                kind: "Service".into(),
                namespace: "default".into(),
                name: "web".into(),
            },
        ];
        let mut text: String = entries.iter().map(|e| serde_json::to_string(e).unwrap() + "\n").collect();
        text.push_str("{\"undo\":\"link\",\"net");
        fs::write(&path, text).unwrap();
        fs::write(dir.join(format!("{}-1", std::process::id())), "").unwrap();
        let found = orphans_in(&dir, false).unwrap();
        fs::remove_dir_all(&dir).unwrap();
        assert_eq!(found.len(), 1, "only the dead run's journal: {found:?}");
        assert_eq!(found[0].entries, entries);
    }
}
