//! The user's processes inside a node namespace: started in a process group of their own
//! (so stopping one stops what it started), output kept in files (never a pipe nobody reads),
//! waited for with a deadline, stopped with SIGTERM and then SIGKILL. Whatever a process
//! leaves running in its group when it exits is killed too: nothing outlives the run.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

use crate::topology::Netns;

/// How often a deadline-bound wait looks again.
const POLL: Duration = Duration::from_millis(20);

/// A started process and where its output goes.
pub struct Process {
    child: Child,
    /// `program args…`, for messages.
    pub shown: String,
    pub stderr: PathBuf,
}

impl Process {
    /// Starts `argv` inside `netns`, in `cwd`, appending its output to `stdout` and `stderr`.
    pub fn spawn(
        netns: &Netns,
        argv: &[String],
        cwd: &Path,
        stdout: &Path,
        stderr: &Path,
    ) -> Result<Process> {
        let shown = argv.join(" ");
        let open = |p: &Path| {
            File::options()
                .create(true)
                .append(true)
                .open(p)
                .with_context(|| format!("opening {}", p.display()))
        };
        let mut command = netns.command(&argv[0]);
        command
            .args(&argv[1..])
            .current_dir(cwd)
            .stdin(Stdio::null())
            .stdout(open(stdout)?)
            .stderr(open(stderr)?)
            .process_group(0);
        let child = crate::containment::spawn(&mut command).with_context(|| {
            format!("starting `{shown}` in namespace {} (in {})", netns.name(), cwd.display())
        })?;
        Ok(Process { child, shown, stderr: stderr.to_path_buf() })
    }

    /// Its exit status if it has exited.
    pub fn exited(&mut self) -> Result<Option<ExitStatus>> {
        self.child.try_wait().with_context(|| format!("checking on `{}`", self.shown))
    }

    /// Waits for it to exit, up to `timeout`; `None` when it is still running then.
    pub(crate) fn wait_for(&mut self, timeout: Duration) -> Result<Option<ExitStatus>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exited()? {
                return Ok(Some(status));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(POLL);
        }
    }

    /// Sends `signal` to the process itself (not its group: a helper it is running, such as
    /// `iptables-restore`, must not die of a reload request).
    pub fn signal(&mut self, signal: Signal) -> Result<()> {
        if let Some(status) = self.exited()? {
            bail!("`{}` is no longer running ({status}); its stderr:\n{}", self.shown, self.stderr_tail());
        }
        kill(self.pgid(), signal).with_context(|| format!("sending {signal} to `{}`", self.shown))
    }

    /// SIGTERM to the group, up to `grace` to exit, then SIGKILL; returns how it ended.
    pub fn stop(&mut self, grace: Duration) -> Result<ExitStatus> {
        if let Some(status) = self.exited()? {
            // Its children may outlive it in the group; they go too.
            let _ = killpg(self.pgid(), Signal::SIGKILL);
            return Ok(status);
        }
        let _ = killpg(self.pgid(), Signal::SIGTERM);
        let status = match self.wait_for(grace)? {
            Some(status) => status,
            None => {
                let _ = killpg(self.pgid(), Signal::SIGKILL);
                self.child.wait().with_context(|| format!("waiting for `{}` after SIGKILL", self.shown))?
            }
        };
        let _ = killpg(self.pgid(), Signal::SIGKILL);
        Ok(status)
    }

    fn pgid(&self) -> Pid {
        // process_group(0) made the child its group's leader.
        Pid::from_raw(self.child.id() as i32)
    }

    /// The end of its stderr, for an error message.
    pub(crate) fn stderr_tail(&self) -> String {
        tail(&self.stderr)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.stop(Duration::from_secs(2));
    }
}

/// The last lines of a log file (or a note that it is empty).
pub fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let shown = lines[lines.len().saturating_sub(20)..].join("\n");
    if shown.trim().is_empty() { "(stderr empty)".to_string() } else { shown }
}

/// Runs `argv` to its end, up to `timeout`: `Ok(Some(status))` if it exited, `Ok(None)` if it
/// had to be killed.
pub fn run(
    netns: &Netns,
    argv: &[String],
    cwd: &Path,
    stdout: &Path,
    stderr: &Path,
    timeout: Duration,
) -> Result<(Option<ExitStatus>, Process)> {
    let mut process = Process::spawn(netns, argv, cwd, stdout, stderr)?;
    let status = process.wait_for(timeout)?;
    if status.is_none() {
        process.stop(Duration::from_secs(1))?;
    }
    Ok((status, process))
}
