//! The kernel matrix's machinery: Debian kernels fetched and cached ([`kernel`]), the guest's
//! userland built from the host's tools ([`initramfs`]), and one VM per kernel under qemu
//! ([`boot`]) that runs packetproof command lines and hands their results back through a 9p
//! share. Nothing here knows about scenarios or verdicts: the harness's `matrix` command does.

mod cpio;
mod guest;
mod initramfs;
mod kernel;
mod modules;
mod qemu;
mod scratch;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

pub use guest::PROGRAMS as GUEST_PROGRAMS;
pub use guest::{GuestRun, RunClock, Timeline, timeline};
pub use initramfs::{GuestProgram, Payload, missing_tools, static_busybox};
pub use kernel::{Kernel, cache_dir, get as kernel};
pub use qemu::{Accel, Machine};
pub use scratch::{Scratch, remove_stale as remove_stale_scratch};

/// Why VMs cannot run here, if they cannot (no qemu).
pub fn unavailable() -> Option<String> {
    qemu::binary().is_none().then(|| "qemu-system-x86_64 is not installed (install qemu-system-x86)".into())
}

/// Builds the userland archive every VM of a run shares.
pub fn build_userland(payload: &Payload<'_>, out: &Path) -> Result<()> {
    initramfs::build(payload, out).context("building the guest's userland")
}

/// What one VM left behind: its console and, per run, its exit code and files, as far as it
/// got: a VM killed at its limit keeps the runs it finished and the output of the one it was in.
#[derive(Debug)]
pub struct Booted {
    pub console: String,
    pub runs: Vec<RunResult>,
    /// Why the VM ended before its runs did (killed at its limit, or qemu failed); `None`
    /// when it shut down on its own.
    pub stopped: Option<String>,
}

#[derive(Debug)]
pub struct RunResult {
    pub name: String,
    /// `None` when the guest never finished the run (crashed, hung, killed).
    pub exit_code: Option<i32>,
    /// The run's directory on the host: output.txt and whatever the run wrote.
    pub dir: PathBuf,
}

/// Boots `kernel` with `userland`, runs `runs` inside one after another, and returns their
/// results, which stay in `share` (a directory of the caller's, usually a [`Scratch`]), also
/// when the VM did not end on its own ([`Booted::stopped`]).
pub fn boot(
    kernel: &Kernel,
    userland: &Path,
    machine: &Machine,
    runs: &[GuestRun],
    share: &Path,
) -> Result<Booted> {
    let work = Scratch::new("boot")?;
    let initrd = work.path().join("initrd.cpio");
    concatenate(&[userland, &kernel.modules], &initrd)?;
    std::fs::create_dir_all(share)?;
    std::fs::write(share.join(guest::JOB_FILE), guest::job_script(runs))?;
    let console = work.path().join("console.log");
    let cmd = qemu::command(&kernel.vmlinuz, &initrd, share, &console, machine)?;
    let ran = qemu::run(cmd, machine.limit);
    let console = std::fs::read_to_string(&console).unwrap_or_default();
    let stopped = ran.err().map(|e| format!("kernel {} ({}): {e:#}", kernel.spec, kernel.version));
    let runs = runs
        .iter()
        .map(|run| {
            let dir = share.join(&run.name);
            let exit_code =
                std::fs::read_to_string(dir.join("exit-code")).ok().and_then(|s| s.trim().parse().ok());
            RunResult { name: run.name.clone(), exit_code, dir }
        })
        .collect();
    Ok(Booted { console, runs, stopped })
}

/// Kills every running VM and removes this process's scratch directories: for an interrupt.
pub fn abort_all() {
    qemu::kill_all();
    scratch::remove_own();
}

/// The last `n` lines of `text`.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The guest kernel's complaint that the initramfs did not unpack (`Initramfs unpacking
/// failed: write error`: the archive and its files did not fit the guest's memory, so the
/// modules and the share's driver are missing), if its console holds one.
pub fn unpack_failure(console: &str) -> Option<String> {
    let line = console.lines().find(|l| l.contains("Initramfs unpacking failed"))?;
    let message = line.split_once("] ").map_or(line, |(_, m)| m).trim();
    Some(format!("{message}: the guest's userland does not fit its memory (give more --memory-mib)"))
}

/// The guest kernel's own account of a crash, if its console holds one: the first oops line
/// (`Oops:`, `BUG:`, `general protection fault`), the task it hit, and the panic line.
pub fn kernel_crash(console: &str) -> Option<String> {
    // Console lines carry the kernel's timestamp, `[  645.050908] `.
    let message = |line: &str| match line.strip_prefix('[').and_then(|l| l.split_once("] ")) {
        Some((_, rest)) => rest.to_string(),
        None => line.to_string(),
    };
    let lines: Vec<String> = console.lines().map(message).collect();
    let oops = ["Oops:", "BUG:", "general protection fault"];
    let first = lines.iter().position(|l| oops.iter().any(|o| l.starts_with(o)));
    let panic = lines.iter().find(|l| l.starts_with("Kernel panic"));
    let mut parts = Vec::new();
    if let Some(at) = first {
        // `CPU: 0 UID: 0 PID: 20163 Comm: tokio-rt-worker Not tainted …`: the pid and the name.
        let task = lines[at..].iter().take(5).find_map(|l| {
            let (_, rest) = l.split_once(" PID: ")?;
            let words: Vec<&str> = rest.split_whitespace().take(3).collect();
            Some(format!(" (PID: {})", words.join(" ")))
        });
        parts.push(format!("{}{}", lines[at], task.unwrap_or_default()));
    }
    parts.extend(panic.cloned());
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// Several cpio archives one after another: the kernel unpacks them all as one initramfs.
fn concatenate(parts: &[&Path], out: &Path) -> Result<()> {
    let mut file = std::fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    for part in parts {
        let mut input = std::fs::File::open(part).with_context(|| format!("opening {}", part.display()))?;
        std::io::copy(&mut input, &mut file).with_context(|| format!("copying {}", part.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_crash_is_told_by_its_oops_its_task_and_its_panic() {
        let console = "[  644.999305] IPVS: starting estimator thread 0...
[  645.049354] traps: PANIC: double fault, error_code: 0x0
[  645.050908] Oops: double fault: 0000 [#1] PREEMPT SMP NOPTI
[  645.051335] CPU: 0 UID: 0 PID: 20163 Comm: tokio-rt-worker Not tainted 6.12.118+deb13-amd64 #1  Debian 6.12.118-1
[  645.053389]  sock_alloc_inode+0x22/0x90
[  645.059574] Kernel panic - not syncing: Fatal exception in interrupt
";
        assert_eq!(
            kernel_crash(console).as_deref(),
            Some(
                "Oops: double fault: 0000 [#1] PREEMPT SMP NOPTI (PID: 20163 Comm: tokio-rt-worker); \
                 Kernel panic - not syncing: Fatal exception in interrupt"
            )
        );
        assert_eq!(kernel_crash("[    1.0] packetproof-guest: up\n"), None);
        assert_eq!(
            unpack_failure("[    9.27] Trying to unpack rootfs image as initramfs...\n[   40.70] Initramfs unpacking failed: write error\n").as_deref(),
            Some("Initramfs unpacking failed: write error: the guest's userland does not fit its memory (give more --memory-mib)")
        );
        assert_eq!(unpack_failure("[ 1.0] Freeing initrd memory\n"), None);
        let tainted = "[ 9.1] BUG: kernel NULL pointer dereference, address: 0000000000000008
[ 9.2] CPU: 0 PID: 77 Comm: packetproof Tainted: G      D            6.1.0-56-amd64 #1  Debian";
        assert_eq!(
            kernel_crash(tainted).as_deref(),
            Some(
                "BUG: kernel NULL pointer dereference, address: 0000000000000008 (PID: 77 Comm: packetproof)"
            )
        );
    }
}
