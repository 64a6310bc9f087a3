//! One qemu process: its command line, and a life that cannot outlast the harness (qemu gets
//! SIGKILL when the thread that started it dies; an interrupt kills every running VM).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// How a VM is sized and run.
#[derive(Debug, Clone)]
pub struct Machine {
    pub cpus: u32,
    pub memory_mib: u32,
    pub accel: Accel,
    /// A VM still running after this long is killed and reported (a hung guest, never a
    /// verdict: verdicts come from the reports the guest writes).
    pub limit: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accel {
    Kvm,
    Tcg,
}

impl Accel {
    /// `PACKETPROOF_VM_ACCEL=kvm|tcg`; TCG by default: on this project's machine `/dev/kvm`
    /// exists but cannot run stock kernels (issue 11), and TCG boots everywhere.
    pub fn from_env() -> Result<Accel> {
        match std::env::var("PACKETPROOF_VM_ACCEL").as_deref() {
            Err(_) | Ok("") | Ok("tcg") => Ok(Accel::Tcg),
            Ok("kvm") => Ok(Accel::Kvm),
            Ok(other) => bail!("PACKETPROOF_VM_ACCEL={other:?}: expected kvm or tcg"),
        }
    }
}

/// The qemu binary, if installed.
pub fn binary() -> Option<&'static str> {
    ["/usr/bin/qemu-system-x86_64", "/usr/local/bin/qemu-system-x86_64"]
        .into_iter()
        .find(|p| Path::new(p).exists())
}

/// The command line of a VM booting `vmlinuz` with `initrd`, its console written to
/// `console`, and the host directory `share` mounted by the guest (tag `share`).
pub fn command(
    vmlinuz: &Path,
    initrd: &Path,
    share: &Path,
    console: &Path,
    machine: &Machine,
) -> Result<Command> {
    let qemu = binary().context("qemu-system-x86_64 is not installed (install qemu-system-x86)")?;
    let mut cmd = Command::new(qemu);
    let (accel, default_cpu) = match machine.accel {
        Accel::Kvm => ("kvm", "host"),
        Accel::Tcg => ("tcg,thread=multi", "max"),
    };
    // A CPU model to try against the default (PACKETPROOF_VM_CPU=qemu64, say).
    let chosen = std::env::var("PACKETPROOF_VM_CPU").ok().filter(|c| !c.is_empty());
    let cpu = chosen.as_deref().unwrap_or(default_cpu);
    cmd.args(["-nodefaults", "-no-user-config", "-display", "none", "-no-reboot"])
        .args(["-accel", accel, "-cpu", cpu])
        .args(["-smp", &machine.cpus.to_string(), "-m", &machine.memory_mib.to_string()])
        .arg("-kernel")
        .arg(vmlinuz)
        .arg("-initrd")
        .arg(initrd)
        .args([
            "-append",
            &format!("{KERNEL_COMMAND_LINE} {}", std::env::var("PACKETPROOF_VM_APPEND").unwrap_or_default()),
        ])
        .arg("-serial")
        .arg(format!("file:{}", console.display()))
        .arg("-virtfs")
        .arg(format!("local,path={},mount_tag=share,security_model=none,id=share", share.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    Ok(cmd)
}

/// The guest kernel's command line; `PACKETPROOF_VM_APPEND` adds to it (to try options).
/// - panic=-1: a guest that panics powers off at once (with -no-reboot) instead of hanging.
/// - mitigations=off: the guest runs nothing but the harness and the programs under test, and
///   under TCG every retpoline, RSB fill and barrier is emulated (the matrix's guest CPU, in
///   docs/src/measurements.md).
const KERNEL_COMMAND_LINE: &str = "console=ttyS0 panic=-1 rdinit=/init mitigations=off";

/// Every running qemu's pid, for the interrupt handler.
static RUNNING: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// Runs `cmd` to its end (or kills it after `limit`); returns qemu's stderr on failure.
pub fn run(mut cmd: Command, limit: Duration) -> Result<()> {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().context("starting qemu")?;
    RUNNING.lock().unwrap_or_else(|e| e.into_inner()).push(child.id());
    let result = wait(&mut child, limit);
    RUNNING.lock().unwrap_or_else(|e| e.into_inner()).retain(|pid| *pid != child.id());
    result
}

fn wait(child: &mut Child, limit: Duration) -> Result<()> {
    let give_up = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().context("waiting for qemu")? {
            break status;
        }
        if Instant::now() > give_up {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "the VM was still running after {limit:?}; killed (a longer run needs `matrix --vm-limit-minutes`)"
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    if !status.success() {
        let mut stderr = String::new();
        if let Some(mut pipe) = child.stderr.take() {
            use std::io::Read;
            let _ = pipe.read_to_string(&mut stderr);
        }
        bail!("qemu exited with {status}: {}", stderr.trim());
    }
    Ok(())
}

/// Kills every running VM (the interrupt handler calls this).
pub fn kill_all() {
    for pid in RUNNING.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
        // SAFETY: sending a signal to a child we started and have not reaped.
        unsafe {
            libc::kill(pid as libc::pid_t, libc::SIGKILL);
        }
    }
}
