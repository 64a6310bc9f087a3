//! The image the stand-in nodes' containers run, made offline from this machine's own tools
//! as the kernel matrix's initramfs is: a root filesystem holding only a static busybox
//! (a node container only idles; packetproof and the node's proxy reach it from this machine
//! through its network namespace), imported with `ENGINE import`. No registry is needed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use anyhow::{Context, Result, bail, ensure};

/// The stand-in nodes' image, as `ENGINE import` tags it.
pub(crate) const IMAGE: &str = "localhost/packetproof-node:latest";

/// The container engine: `podman`, or what `ENGINE` names (e.g. `docker`), as the CI scripts
/// take it.
pub(crate) fn engine() -> String {
    std::env::var("ENGINE").ok().filter(|e| !e.is_empty()).unwrap_or_else(|| "podman".into())
}

/// Makes sure the engine holds [`IMAGE`], importing it if missing. One import at a time in
/// this process: tests start stand-in clusters in parallel.
pub(crate) fn ensure(engine: &str) -> Result<()> {
    static IMPORTING: Mutex<()> = Mutex::new(());
    let _one = IMPORTING.lock().unwrap_or_else(|e| e.into_inner());
    let inspect = Command::new(engine)
        .args(["image", "inspect", IMAGE])
        .output()
        .with_context(|| format!("no container engine: running `{engine}`"))?;
    if inspect.status.success() {
        return Ok(());
    }
    let busybox = static_busybox()?;
    let dir = tempfile_dir()?;
    let result = import(engine, &busybox, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn import(engine: &str, busybox: &Path, dir: &Path) -> Result<()> {
    let root = dir.join("root");
    let bin = root.join("bin");
    std::fs::create_dir_all(&bin).with_context(|| format!("creating {}", bin.display()))?;
    std::fs::copy(busybox, bin.join("busybox")).context("copying busybox into the node image")?;
    for applet in ["sh", "sleep"] {
        std::os::unix::fs::symlink("busybox", bin.join(applet))?;
    }
    let tarball = dir.join("root.tar");
    run(Command::new("tar").arg("-C").arg(&root).arg("-cf").arg(&tarball).arg("."))?;
    run(Command::new(engine)
        .args(["import", "--change", r#"ENTRYPOINT ["/bin/sleep"]"#, "--change", r#"CMD ["infinity"]"#])
        .arg(&tarball)
        .arg(IMAGE))
    .with_context(|| format!("importing the stand-in node image {IMAGE}"))
}

fn run(command: &mut Command) -> Result<()> {
    let out = command.output().with_context(|| format!("running {command:?}"))?;
    if !out.status.success() {
        bail!("{command:?}: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

fn tempfile_dir() -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("packetproof-{}-node-image", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// A busybox that runs without this machine's libraries (Debian's busybox-static).
fn static_busybox() -> Result<PathBuf> {
    let path = ["/bin/busybox", "/usr/bin/busybox"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .context("no busybox to make the stand-in node image from (install busybox-static)")?;
    let elf = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    ensure!(!has_interpreter(&elf)?, "{} is not static (install busybox-static)", path.display());
    Ok(path)
}

/// Whether a 64-bit little-endian ELF file names a dynamic loader (a `PT_INTERP` header).
fn has_interpreter(elf: &[u8]) -> Result<bool> {
    const PT_INTERP: u32 = 3;
    let u16_at = |i: usize| elf.get(i..i + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let u32_at = |i: usize| elf.get(i..i + 4).map(|b| u32::from_le_bytes(b.try_into().unwrap()));
    let u64_at = |i: usize| elf.get(i..i + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap()));
    ensure!(elf.starts_with(b"\x7fELF\x02\x01"), "not a 64-bit little-endian ELF file");
    let (Some(phoff), Some(entry_size), Some(count)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38)) else {
        bail!("a truncated ELF header");
    };
    for n in 0..usize::from(count) {
        let at = usize::try_from(phoff)? + n * usize::from(entry_size);
        match u32_at(at) {
            Some(PT_INTERP) => return Ok(true),
            Some(_) => {}
            None => bail!("a truncated ELF program header"),
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dynamic_program_names_its_loader_and_garbage_is_refused() {
        let own = std::fs::read("/proc/self/exe").unwrap();
        assert!(has_interpreter(&own).unwrap(), "the test binary is dynamically linked");
        assert!(has_interpreter(b"#!/bin/sh\n").is_err());
        assert!(has_interpreter(b"\x7fELF\x02\x01\x01").is_err());
    }
}
