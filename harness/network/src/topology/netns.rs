//! Named network namespaces owned by this process: creation, running code and commands inside
//! them, removal, and removal of what a killed run left behind.
//!
//! Every namespace is named `pp-<pid>-…` so that leftovers can be traced to the run that made
//! them, and is recorded in a process-wide registry so that Ctrl-C can remove it.
//! Code never calls `setns` on a shared thread: it runs on a thread of its own that entered the
//! namespace (see `../shared/STYLE.md`), and commands enter it between fork and exec.

use std::collections::BTreeSet;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;

use anyhow::{Context, Result, bail};
use nix::sched::{CloneFlags, setns};

/// Every namespace this harness creates starts with this.
pub const NAME_PREFIX: &str = "pp-";
/// Where named namespaces are bind-mounted (the `ip netns` convention).
pub const NETNS_DIR: &str = "/run/netns";

/// Names of the namespaces this process created and has not yet removed.
static LIVE: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// The prefix of every namespace of this process: `pp-<pid>-`.
pub fn process_prefix() -> String {
    format!("{NAME_PREFIX}{}-", std::process::id())
}

/// A named network namespace created by this process. Removing it is explicit ([`Netns::remove`]);
/// the topology that owns it does that on every path out, and Ctrl-C does it via the registry.
#[derive(Debug, Clone)]
pub struct Netns {
    name: String,
    file: Arc<File>,
}

impl Netns {
    /// Creates `/run/netns/<name>`. The name must carry [`process_prefix`].
    pub fn create(name: &str) -> Result<Netns> {
        if !name.starts_with(&process_prefix()) {
            bail!("refusing to create namespace {name:?}: it lacks this run's prefix {:?}", process_prefix());
        }
        // Registered before it exists, under the lock, so an interrupt either sees it or waits.
        let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
        live.insert(name.to_string());
        let created =
            netns_rs::NetNs::new(name).with_context(|| format!("creating network namespace {name}"));
        let ns = match created {
            Ok(ns) => ns,
            Err(e) => {
                live.remove(name);
                return Err(e);
            }
        };
        let file = ns.file().try_clone().with_context(|| format!("opening network namespace {name}"))?;
        Ok(Netns { name: name.to_string(), file: Arc::new(file) })
    }

    /// An existing namespace by name (`/run/netns/<name>`), e.g. one a parent process made,
    /// to run code and commands in. It is not registered for removal: its maker removes it.
    pub fn open(name: &str) -> Result<Netns> {
        let path = Path::new(NETNS_DIR).join(name);
        let file =
            File::open(&path).with_context(|| format!("opening network namespace {}", path.display()))?;
        Ok(Netns { name: name.to_string(), file: Arc::new(file) })
    }

    /// A namespace this harness did not make, by path (`/proc/PID/ns/net`, a bind mount):
    /// an existing node. Never registered, never removed: its name is its path.
    pub fn open_path(path: &Path) -> Result<Netns> {
        let file =
            File::open(path).with_context(|| format!("opening network namespace {}", path.display()))?;
        Ok(Netns { name: path.to_string_lossy().into_owned(), file: Arc::new(file) })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn path(&self) -> PathBuf {
        // One opened by path is named by its absolute path, which `join` returns as it is.
        Path::new(NETNS_DIR).join(&self.name)
    }

    /// A command that runs inside this namespace (it enters between fork and exec).
    pub fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        let file = Arc::clone(&self.file);
        // SAFETY: setns is async-signal-safe; the closure allocates nothing.
        unsafe {
            cmd.pre_exec(move || setns(&*file, CloneFlags::CLONE_NEWNET).map_err(std::io::Error::from));
        }
        cmd
    }

    /// Runs `program args…` inside the namespace with `stdin` fed to it; fails with the
    /// command's stderr when it exits non-zero.
    ///
    /// Started from a thread inside the namespace, whose namespace the child inherits: with
    /// nothing to run between fork and exec, the standard library spawns it without copying
    /// this process's page tables (posix_spawn), where [`Netns::command`] must fork. Scenarios
    /// run `iptables-restore` and `nft` this way by the hundred, several at once.
    pub fn exec(&self, program: &str, args: &[&str], stdin: Option<&[u8]>) -> Result<Output> {
        let what = || format!("running `{program} {}` in namespace {}", args.join(" "), self.name);
        let mut child = self
            .run(|| {
                Command::new(program)
                    .args(args)
                    .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
            })?
            .with_context(what)?;
        if let Some(input) = stdin {
            use std::io::Write;
            let mut pipe = child.stdin.take().expect("stdin was piped");
            pipe.write_all(input).with_context(what)?;
        }
        let output = child.wait_with_output().with_context(what)?;
        if !output.status.success() {
            bail!("{}: {}: {}", what(), output.status, String::from_utf8_lossy(&output.stderr).trim());
        }
        Ok(output)
    }

    /// Runs `f` on a fresh thread that entered this namespace, and returns its result.
    /// Sockets created by `f` stay in this namespace wherever they are used afterwards.
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T> {
        thread::scope(|scope| {
            scope
                .spawn(|| {
                    setns(&*self.file, CloneFlags::CLONE_NEWNET)
                        .with_context(|| format!("entering network namespace {}", self.name))?;
                    Ok(f())
                })
                .join()
                .map_err(|_| anyhow::anyhow!("a thread inside namespace {} panicked", self.name))?
        })
    }

    /// A long-lived thread inside this namespace, for work that runs there many times.
    pub fn thread(&self) -> Result<NsThread> {
        NsThread::start(self)
    }

    /// Unmounts and deletes the namespace; the kernel frees it once no socket holds it.
    pub fn remove(&self) -> Result<()> {
        if self.name.starts_with('/') {
            bail!("refusing to remove namespace {}: packetproof did not make it", self.name);
        }
        remove_by_name(&self.name)
    }
}

/// A thread that entered a namespace once and runs jobs there, so repeated work (probes)
/// pays no thread start-up.
pub struct NsThread {
    jobs: Option<mpsc::Sender<Box<dyn FnOnce() + Send>>>,
    handle: Option<thread::JoinHandle<()>>,
    netns: String,
}

impl NsThread {
    fn start(ns: &Netns) -> Result<NsThread> {
        let (tx, rx) = mpsc::channel::<Box<dyn FnOnce() + Send>>();
        let (ready_tx, ready_rx) = mpsc::channel();
        let file = Arc::clone(&ns.file);
        let handle = thread::Builder::new()
            .name(format!("ns:{}", ns.name))
            .spawn(move || {
                let entered = setns(&*file, CloneFlags::CLONE_NEWNET);
                let ok = entered.is_ok();
                let _ = ready_tx.send(entered);
                if ok {
                    for job in rx {
                        job();
                    }
                }
            })
            .with_context(|| format!("starting a thread for namespace {}", ns.name))?;
        ready_rx
            .recv()
            .context("namespace thread died")?
            .with_context(|| format!("entering network namespace {}", ns.name))?;
        Ok(NsThread { jobs: Some(tx), handle: Some(handle), netns: ns.name.clone() })
    }

    /// Runs `f` inside the namespace and waits for its result.
    pub fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> Result<T> {
        let (tx, rx) = mpsc::channel();
        let job: Box<dyn FnOnce() + Send> = Box::new(move || {
            let _ = tx.send(f());
        });
        self.jobs
            .as_ref()
            .expect("jobs channel lives until drop")
            .send(job)
            .map_err(|_| anyhow::anyhow!("thread of namespace {} has stopped", self.netns))?;
        rx.recv().map_err(|_| anyhow::anyhow!("a job in namespace {} panicked", self.netns))
    }
}

impl Drop for NsThread {
    fn drop(&mut self) {
        drop(self.jobs.take());
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn remove_by_name(name: &str) -> Result<()> {
    let result = remove_unregistered(name);
    LIVE.lock().unwrap_or_else(|e| e.into_inner()).remove(name);
    result
}

fn remove_unregistered(name: &str) -> Result<()> {
    let path = Path::new(NETNS_DIR).join(name);
    match netns_rs::NetNs::get(name) {
        Ok(ns) => match ns.remove() {
            Ok(()) => Ok(()),
            // No namespace mounted on the file: a run stopped by a signal after netns-rs made
            // the file and before it mounted the namespace there. Left, it failed every later
            // run's clean-up ("Failed to unmount ..., EINVAL"); only the file is to go.
            Err(_)
                if nix::mount::umount2(&path, nix::mount::MntFlags::MNT_DETACH)
                    == Err(nix::errno::Errno::EINVAL) =>
            {
                std::fs::remove_file(&path)
                    .with_context(|| format!("removing {}, on which no namespace is mounted", path.display()))
            }
            Err(e) => Err(e).with_context(|| format!("removing network namespace {name}")),
        },
        Err(_) if !path.exists() => Ok(()),
        Err(e) => Err(e).with_context(|| format!("opening network namespace {name} to remove it")),
    }
}

/// Removes every namespace this process holds and creates none after: the registry stays
/// locked until the process exits, so a topology still being built on another thread cannot
/// add one behind the cleanup. For the signal handler, which exits next.
pub(super) fn remove_all_live_and_stop() {
    let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    for name in std::mem::take(&mut *live) {
        if let Err(e) = remove_unregistered(&name) {
            eprintln!("packetproof: {e:#}");
        }
    }
    std::mem::forget(live);
}

/// The files of every namespace this process holds, for a signal's sweep of their processes.
pub(super) fn live_paths() -> Vec<PathBuf> {
    LIVE.lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|name| Path::new(NETNS_DIR).join(name))
        .collect()
}

/// Removes every namespace this process still holds; for Ctrl-C and fatal paths.
pub fn remove_all_live() {
    let names: Vec<String> = LIVE.lock().unwrap_or_else(|e| e.into_inner()).iter().cloned().collect();
    for name in names {
        if let Err(e) = remove_by_name(&name) {
            eprintln!("packetproof: {e:#}");
        }
    }
}

/// Lists namespaces named by this harness; `include_live` also lists those of running processes.
pub fn leftover_namespaces(include_live: bool) -> Result<Vec<String>> {
    let dir = match std::fs::read_dir(NETNS_DIR) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("listing {NETNS_DIR}")),
    };
    let mut found = Vec::new();
    for entry in dir {
        let name = entry.with_context(|| format!("listing {NETNS_DIR}"))?.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(owner) = owner_pid(name) else { continue };
        let owner_alive = Path::new("/proc").join(owner.to_string()).exists();
        if include_live || !owner_alive || owner == std::process::id() && !is_live(name) {
            found.push(name.to_string());
        }
    }
    found.sort();
    Ok(found)
}

/// Removes namespaces left by runs that no longer exist (all of ours with `include_live`).
pub fn cleanup(include_live: bool) -> Result<Vec<String>> {
    let names = leftover_namespaces(include_live)?;
    // A killed run's proxies may still run inside them.
    let paths: Vec<PathBuf> = names.iter().map(|name| Path::new(NETNS_DIR).join(name)).collect();
    crate::containment::kill_namespace_holders(&paths);
    for name in &names {
        remove_by_name(name)?;
    }
    Ok(names)
}

fn is_live(name: &str) -> bool {
    LIVE.lock().unwrap_or_else(|e| e.into_inner()).contains(name)
}

/// The pid in `pp-<pid>-…`, or `None` for names this harness did not make.
fn owner_pid(name: &str) -> Option<u32> {
    name.strip_prefix(NAME_PREFIX)?.split('-').next()?.parse().ok()
}

/// Raw fd of a namespace file, for netlink messages that move links (`IFLA_NET_NS_FD`).
impl Netns {
    pub fn raw_fd(&self) -> i32 {
        self.file.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_no_namespace_was_mounted_on_is_removed() {
        // As a run stopped between netns-rs making the file and mounting on it leaves it.
        if !nix::unistd::geteuid().is_root() || !Path::new(NETNS_DIR).is_dir() {
            return;
        }
        let name = format!("{}unmounted-{}", process_prefix(), line!());
        let path = Path::new(NETNS_DIR).join(&name);
        std::fs::write(&path, "").unwrap();
        remove_by_name(&name).unwrap();
        assert!(!path.exists());
    }

    #[test]
    fn owner_pid_reads_only_our_names() {
        assert_eq!(owner_pid("pp-1234-0-n-node-a"), Some(1234));
        assert_eq!(owner_pid("pp-x-0"), None);
        assert_eq!(owner_pid("cni-1234"), None);
    }
}
