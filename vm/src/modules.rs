//! A kernel's networking modules as one initramfs archive: the modules the suite can need
//! (netfilter, bridge, veth, SCTP, 9p for the results share, the libraries they use), their
//! modules.dep from the host's depmod, and the list the guest preloads at boot.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, ensure};

use crate::cpio;

/// Directories (under `kernel/`) whose modules go into the archive.
const INCLUDED: &[&str] = &[
    "net/",
    "lib/",
    "crypto/",
    "arch/x86/crypto/",
    "fs/9p/",
    "fs/netfs/",
    "fs/fscache/",
    // virtio's PCI transport is a module up to 6.1 (built in from 6.12): the 9p share needs it.
    "drivers/virtio/",
    "drivers/net/veth.",
    "drivers/net/dummy.",
];

/// Modules loaded at boot rather than on demand (the rest load on demand through modprobe).
/// `br_netfilter` is never loaded on demand; veth is preloaded because a veth creation failed
/// once on 5.10 right after boot while its module was loading (measured, issue 11); the core
/// of both built-in modes is preloaded so that the first scenarios do not race their loading.
/// Preloading everything under net/netfilter took 57 s under TCG: only these.
const PRELOADED: &[&str] = &[
    "veth",
    "bridge",
    "br_netfilter",
    "nf_conntrack",
    "nf_nat",
    "nf_conntrack_netlink",
    "nf_tables",
    "nft_chain_nat",
    "nft_ct",
    "nft_nat",
    "nft_masq",
    "nft_compat",
    "nft_reject_inet",
    "nft_numgen",
    "ip_tables",
    "iptable_nat",
    "iptable_filter",
    "ip6_tables",
    "ip6table_nat",
    "ip6table_filter",
    "xt_conntrack",
    "xt_comment",
    "xt_mark",
    "xt_MASQUERADE",
    "xt_nat",
    "xt_statistic",
    "xt_addrtype",
    "xt_tcpudp",
    "xt_multiport",
    "sctp",
    // kube-proxy's IPVS mode (builtin-ipvs): virtual servers, its ipsets and their matches.
    "dummy",
    "ip_vs",
    "ip_vs_rr",
    "ip_set",
    "ip_set_hash_ip",
    "ip_set_hash_ipport",
    "ip_set_hash_ipportip",
    "ip_set_hash_ipportnet",
    "ip_set_bitmap_port",
    "xt_set",
    "xt_ipvs",
    "xt_physdev",
    "virtio_pci",
    "9pnet_virtio",
    "9p",
];

/// The archive's file name in the kernel's cache: a new name whenever the selection above
/// changes, so that cached kernels get a fresh archive.
pub const ARCHIVE_NAME: &str = "modules-v6.cpio";

/// Where the guest finds the preload list.
pub const PRELOAD_LIST: &str = "etc/packetproof/preload";

/// Writes the archive of `tree` (a `lib/modules/<release>` directory) to `out`.
pub fn archive(tree: &Path, release: &str, out: &Path) -> Result<()> {
    let stage = out.with_extension("stage");
    let _ = std::fs::remove_dir_all(&stage);
    let dest = stage.join("lib/modules").join(release);
    let mut files = Vec::new();
    walk(&tree.join("kernel"), &mut files)?;
    let mut preload = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(tree.join("kernel")).expect("walked under kernel/").to_string_lossy();
        if !INCLUDED.iter().any(|p| rel.starts_with(p)) {
            continue;
        }
        let target = dest.join("kernel").join(rel.as_ref());
        std::fs::create_dir_all(target.parent().expect("a file has a parent"))?;
        if PRELOADED.contains(&module_name(&rel).as_str()) {
            preload.push(module_name(&rel));
            copy_decompressed(file, &target)?;
        } else {
            // Loaded on demand, if ever: compressed keeps the initramfs small (9 MB against
            // 51 MB for 6.12 all decompressed, whose unpacking cost 4 s of boot).
            std::fs::copy(file, &target).with_context(|| format!("copying {}", file.display()))?;
        }
    }
    for extra in ["modules.order", "modules.builtin", "modules.builtin.modinfo"] {
        if tree.join(extra).exists() {
            std::fs::copy(tree.join(extra), dest.join(extra))?;
        }
    }
    let status = Command::new(depmod())
        .arg("-b")
        .arg(&stage)
        .arg(release)
        .status()
        .context("running depmod (install kmod)")?;
    ensure!(status.success(), "depmod -b {} {release} failed ({status})", stage.display());
    preload.sort();
    std::fs::create_dir_all(stage.join("etc/packetproof"))?;
    std::fs::write(stage.join(PRELOAD_LIST), preload.join("\n") + "\n")?;

    let mut entries = Vec::new();
    walk_all(&stage, &stage, &mut entries)?;
    let file = std::fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    // Inodes from 1<<24 on: the tools' archive numbers from 1.
    let mut writer = cpio::Writer::with_first_inode(std::io::BufWriter::new(file), 1 << 24);
    for (rel, path) in &entries {
        if path.is_dir() {
            writer.add(rel, cpio::Entry::Dir)?;
        } else {
            let data = std::fs::read(path)?;
            writer.add(rel, cpio::Entry::File { data: &data, executable: false })?;
        }
    }
    writer.finish()?;
    std::fs::remove_dir_all(&stage).context("removing the module stage")?;
    Ok(())
}

/// Copies a module, decompressed: kmod decompressing xz in the guest cost most of the
/// module loading time under TCG (measured: 8.5 s for 32 modules on 6.12).
fn copy_decompressed(file: &Path, target: &Path) -> Result<()> {
    let name = file.to_string_lossy();
    let tool = match name.rsplit('.').next() {
        Some("xz") => "xz",
        Some("zst") => "zstd",
        Some("gz") => "gzip",
        _ => {
            std::fs::copy(file, target).with_context(|| format!("copying {}", file.display()))?;
            return Ok(());
        }
    };
    let target = target.with_extension("");
    let out = std::fs::File::create(&target).with_context(|| format!("creating {}", target.display()))?;
    let status = Command::new(tool).arg("-dc").arg(file).stdout(out).status().with_context(|| {
        format!("running {tool} (install it: the kernel's modules are compressed with it)")
    })?;
    ensure!(status.success(), "{tool} -dc {name} failed ({status})");
    Ok(())
}

fn depmod() -> &'static str {
    ["/usr/sbin/depmod", "/sbin/depmod"].into_iter().find(|p| Path::new(p).exists()).unwrap_or("depmod")
}

/// `net/sctp/sctp.ko.xz` → `sctp`.
fn module_name(rel: &str) -> String {
    let file = rel.rsplit('/').next().unwrap_or(rel);
    file.split(".ko").next().unwrap_or(file).to_string()
}

fn walk(dir: &Path, files: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() { walk(&path, files)? } else { files.push(path) }
    }
    Ok(())
}

/// Every directory (before its contents) and file under `dir`, relative to `root`.
fn walk_all(root: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) -> Result<()> {
    let mut entries: Vec<_> =
        std::fs::read_dir(dir)?.map(|e| e.map(|e| e.path())).collect::<Result<_, _>>()?;
    entries.sort();
    for path in entries {
        let rel = path.strip_prefix(root).expect("under root").to_string_lossy().into_owned();
        out.push((rel, path.clone()));
        if path.is_dir() {
            walk_all(root, &path, out)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_names_drop_the_compression_suffix() {
        assert_eq!(module_name("net/sctp/sctp.ko.xz"), "sctp");
        assert_eq!(module_name("net/bridge/br_netfilter.ko"), "br_netfilter");
        assert_eq!(module_name("net/netfilter/nf_nat.ko.zst"), "nf_nat");
    }
}
