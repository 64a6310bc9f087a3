//! The image the stand-in nodes' containers run, made offline from this machine's own tools
//! as the kernel matrix's initramfs is: a root filesystem holding only the static busybox the
//! initramfs takes (`vm::static_busybox`; a node container only idles, and packetproof and the
//! node's proxy reach it from this machine through its network namespace), imported with
//! `ENGINE import`. No registry is needed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use anyhow::{Context, Result, bail};

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
    let busybox = vm::static_busybox().context("making the stand-in node image")?;
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
