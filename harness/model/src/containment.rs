//! Nothing a run starts outlives it: not a proxy, not a daemon a proxy forked, not a scratch
//! directory, after success, failure, panic or a signal.
//!
//! A process that matters to a run lives in one of the run's network namespaces (every proxy
//! runs inside a node's), so membership, read from `/proc/*/ns/net`, finds it wherever it went:
//! out of its process group (`setsid`), or reparented to init by a double fork. Before a
//! namespace goes, whatever is still in it is killed ([`kill_namespace_holders`]). On a signal
//! the process is about to exit without running any destructor, so [`stop_everything`] does
//! the destructors' work at once: it lets no new process start, kills every descendant and
//! every process in the run's namespaces, and removes the registered scratch directories.
//!
//! (Seen before this module: SIGTERM during `run`, while the `command` adapter's daemons ran,
//! left two `python3 … --daemon` processes reparented to init, each holding its node's
//! namespace alive after `ip netns` no longer listed it.)

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Held (shared) across every long-lived spawn, from fork to exec; a signal's cleanup takes it
/// for good, so no process can be forked behind its sweep.
static SPAWNING: RwLock<()> = RwLock::new(());
/// The thread running a signal's cleanup: it may still start the commands that undo things.
static STOPPING: Mutex<Option<std::thread::ThreadId>> = Mutex::new(None);
/// Scratch directories of this process not yet removed.
static SCRATCH: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());

/// How long killed processes may take to leave before the sweep gives up on them (they are
/// SIGKILLed: only a process stuck in the kernel takes longer).
const GONE_WITHIN: Duration = Duration::from_secs(5);
const POLL: Duration = Duration::from_millis(5);

/// Spawns `command`; while a signal's cleanup runs, blocks for good (the process is exiting),
/// so that the cleanup's sweep sees every process there will ever be.
pub fn spawn(command: &mut Command) -> io::Result<Child> {
    let current = std::thread::current().id();
    if *STOPPING.lock().unwrap_or_else(|e| e.into_inner()) == Some(current) {
        return command.spawn();
    }
    let _gate = SPAWNING.read().unwrap_or_else(|e| e.into_inner());
    // `spawn` returns after the child's exec (or its failure): the gate covers the fork.
    command.spawn()
}

/// A directory for one start's files, removed when dropped, or by [`stop_everything`] if a
/// signal comes first.
#[derive(Debug)]
pub struct ScratchDir {
    path: PathBuf,
}

impl ScratchDir {
    /// Creates `path` afresh (removing a stale one) and registers it.
    pub fn create(path: PathBuf) -> io::Result<ScratchDir> {
        SCRATCH.lock().unwrap_or_else(|e| e.into_inner()).insert(path.clone());
        let made = (|| {
            if path.exists() {
                std::fs::remove_dir_all(&path)?;
            }
            std::fs::create_dir_all(&path)
        })();
        match made {
            Ok(()) => Ok(ScratchDir { path }),
            Err(e) => {
                SCRATCH.lock().unwrap_or_else(|e| e.into_inner()).remove(&path);
                Err(e)
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
        SCRATCH.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.path);
    }
}

/// Removes the scratch directories (`packetproof-…<pid>…` in the temporary directory) of
/// runs no longer alive, which a SIGKILL left behind; returns what it removed.
pub fn remove_stale_scratch() -> Vec<PathBuf> {
    let tmp = std::env::temp_dir();
    let Ok(entries) = std::fs::read_dir(&tmp) else { return Vec::new() };
    let stale: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_str().and_then(owner_of_scratch).is_some_and(|pid| !alive(pid)))
        .map(|e| e.path())
        .collect();
    stale.into_iter().filter(|dir| std::fs::remove_dir_all(dir).is_ok()).collect()
}

/// The pid in a scratch directory's name: the first number after `packetproof-`
/// (`packetproof-command-4242-0`, `packetproof-pp-4242-3-cp`, `packetproof-4242-node-image`).
fn owner_of_scratch(name: &str) -> Option<u32> {
    name.strip_prefix("packetproof-")?.split('-').find_map(|part| part.parse().ok())
}

fn alive(pid: u32) -> bool {
    Path::new("/proc").join(pid.to_string()).exists()
}

/// Kills (SIGKILL) every process, but this one, whose network namespace is one of
/// `namespaces` (paths of namespace files, `/run/netns/NAME`), and waits until none is left.
/// Returns what it killed, as `pid (command)`, for a warning.
pub fn kill_namespace_holders(namespaces: &[PathBuf]) -> Vec<String> {
    let wanted = namespace_ids(namespaces);
    if wanted.is_empty() {
        return Vec::new();
    }
    sweep(|| processes().into_iter().filter(|p| p.netns.is_some_and(|ns| wanted.contains(&ns))).collect())
}

/// Every process, but this one, whose network namespace is one of `namespaces`, as `pid
/// (command)`: what would keep a namespace from being used again as it was built.
pub fn namespace_holders(namespaces: &[PathBuf]) -> Vec<String> {
    let wanted = namespace_ids(namespaces);
    if wanted.is_empty() {
        return Vec::new();
    }
    let inside = processes().into_iter().filter(|p| p.netns.is_some_and(|ns| wanted.contains(&ns)));
    inside.map(|p| format!("{} ({})", p.pid, p.command)).collect()
}

/// For a signal's cleanup, about to exit: lets no process start after it (but on this
/// thread), kills every descendant of this process and every process in `namespaces`, and
/// removes every scratch directory.
pub fn stop_everything(namespaces: &[PathBuf]) {
    *STOPPING.lock().unwrap_or_else(|e| e.into_inner()) = Some(std::thread::current().id());
    std::mem::forget(SPAWNING.write().unwrap_or_else(|e| e.into_inner()));
    let me = std::process::id();
    let wanted = namespace_ids(namespaces);
    sweep(|| {
        let all = processes();
        let descendants = descendants_of(me, &all);
        all.into_iter()
            .filter(|p| descendants.contains(&p.pid) || p.netns.is_some_and(|ns| wanted.contains(&ns)))
            .collect()
    });
    for dir in std::mem::take(&mut *SCRATCH.lock().unwrap_or_else(|e| e.into_inner())) {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// The (device, inode) of each namespace file that still exists: what `/proc/PID/ns/net` of a
/// process inside it resolves to.
fn namespace_ids(namespaces: &[PathBuf]) -> BTreeSet<(u64, u64)> {
    namespaces.iter().filter_map(|p| std::fs::metadata(p).ok()).map(|m| (m.dev(), m.ino())).collect()
}

/// Kills what `find` lists until it lists nothing (a killed process's children may appear
/// in between) or [`GONE_WITHIN`] passes; returns every process it killed.
fn sweep(find: impl Fn() -> Vec<ProcessEntry>) -> Vec<String> {
    let mut killed = BTreeMap::new();
    let give_up = Instant::now() + GONE_WITHIN;
    loop {
        let found = find();
        if found.is_empty() || Instant::now() >= give_up {
            return killed.into_values().collect();
        }
        for p in found {
            let _ = kill(Pid::from_raw(p.pid as i32), Signal::SIGKILL);
            killed.entry(p.pid).or_insert_with(|| format!("{} ({})", p.pid, p.command));
        }
        std::thread::sleep(POLL);
    }
}

/// One live process (not a zombie: a zombie holds no namespace and runs nothing).
#[derive(Debug, Clone)]
struct ProcessEntry {
    pid: u32,
    parent: u32,
    command: String,
    /// Its network namespace's (device, inode); `None` once it is exiting.
    netns: Option<(u64, u64)>,
}

/// Every live process but this one.
fn processes() -> Vec<ProcessEntry> {
    let me = std::process::id();
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let (command, state, parent) = parse_stat(&stat)?;
            if state == 'Z' || state == 'X' {
                return None;
            }
            let netns = std::fs::metadata(format!("/proc/{pid}/ns/net")).ok().map(|m| (m.dev(), m.ino()));
            Some(ProcessEntry { pid, parent, command, netns })
        })
        .collect()
}

/// The command, state and parent pid of a `/proc/PID/stat` line. The command is in
/// parentheses and may itself hold spaces and parentheses: the last `)` ends it.
pub fn parse_stat(stat: &str) -> Option<(String, char, u32)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let command = stat.get(open + 1..close)?.to_string();
    let mut rest = stat.get(close + 1..)?.split_whitespace();
    let state = rest.next()?.chars().next()?;
    let parent = rest.next()?.parse().ok()?;
    Some((command, state, parent))
}

/// The pids descending from `root` among `all`.
fn descendants_of(root: u32, all: &[ProcessEntry]) -> BTreeSet<u32> {
    let mut children: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for p in all {
        children.entry(p.parent).or_default().push(p.pid);
    }
    let mut found = BTreeSet::new();
    let mut todo = vec![root];
    while let Some(pid) = todo.pop() {
        for &child in children.get(&pid).into_iter().flatten() {
            if found.insert(child) {
                todo.push(child);
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_is_read_past_a_command_with_parentheses_and_spaces() {
        let line = "4242 (python3 (x) y) S 17 4242 4242 0 -1 4194560 0 0";
        assert_eq!(parse_stat(line), Some(("python3 (x) y".to_string(), 'S', 17)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn a_scratch_directory_names_its_run() {
        assert_eq!(owner_of_scratch("packetproof-command-4242-0"), Some(4242));
        assert_eq!(owner_of_scratch("packetproof-pp-4242-3-cp"), Some(4242));
        assert_eq!(owner_of_scratch("packetproof-4242-node-image"), Some(4242));
        assert_eq!(owner_of_scratch("packetproof-bench-rounds-4242"), Some(4242));
        assert_eq!(owner_of_scratch("packetproof-notes"), None);
        assert_eq!(owner_of_scratch("pp-4242-0"), None);
    }

    #[test]
    fn descendants_are_followed_through_every_generation() {
        let p = |pid, parent| ProcessEntry { pid, parent, command: String::new(), netns: None };
        let all = [p(2, 1), p(3, 2), p(4, 3), p(5, 1), p(6, 4)];
        assert_eq!(descendants_of(2, &all), BTreeSet::from([3, 4, 6]));
        assert!(descendants_of(6, &all).is_empty());
    }

    #[test]
    fn a_process_in_a_namespace_is_killed_before_it_goes() {
        if !nix::unistd::Uid::effective().is_root() {
            eprintln!("skipped: needs root for unshare");
            return;
        }
        // `unshare` execs `sleep` in a namespace of its own, which only membership can find.
        let mut child = Command::new("unshare").args(["--net", "sleep", "60"]).spawn().expect("unshare runs");
        let ns = PathBuf::from(format!("/proc/{}/ns/net", child.id()));
        let give_up = Instant::now() + Duration::from_secs(5);
        while std::fs::read_link(&ns).ok() == std::fs::read_link("/proc/self/ns/net").ok() {
            assert!(Instant::now() < give_up, "unshare never entered its namespace");
            std::thread::sleep(POLL);
        }
        let killed = kill_namespace_holders(std::slice::from_ref(&ns));
        assert_eq!(killed.len(), 1, "{killed:?}");
        let status = child.wait().unwrap();
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9));
    }
}
