//! Temporary directories of a matrix run, all under `$TMPDIR/packetproof-vm.<pid>/`: removed
//! when dropped, all of this process's at once on an interrupt, and those of dead processes
//! (a `kill -9`) at the start of the next run.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{Context, Result};

const PREFIX: &str = "packetproof-vm.";

/// A directory removed with its contents when dropped.
#[derive(Debug)]
pub struct Scratch(PathBuf);

static NEXT: AtomicU32 = AtomicU32::new(0);

impl Scratch {
    pub fn new(what: &str) -> Result<Scratch> {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = own_root().join(format!("{what}-{n}"));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Scratch(dir))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        // The last one out removes the process's directory too (fails while others remain).
        let _ = std::fs::remove_dir(own_root());
    }
}

fn own_root() -> PathBuf {
    std::env::temp_dir().join(format!("{PREFIX}{}", std::process::id()))
}

/// Removes every scratch directory of this process.
pub fn remove_own() {
    let _ = std::fs::remove_dir_all(own_root());
}

/// Removes the scratch directories of processes that no longer exist; returns them.
pub fn remove_stale() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return Vec::new() };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(PREFIX).and_then(|p| p.parse::<u32>().ok()) else { continue };
        if !Path::new("/proc").join(pid.to_string()).exists() && std::fs::remove_dir_all(entry.path()).is_ok()
        {
            removed.push(entry.path());
        }
    }
    removed
}
