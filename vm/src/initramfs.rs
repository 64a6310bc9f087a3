//! The guest's userland as one initramfs archive, built from the host's own programs: busybox
//! (static) for the shell and mounts, the networking tools packetproof runs (iproute2,
//! iptables, nftables, conntrack, kmod) with every library they load, the packetproof binary
//! and the scenario files. Built once per matrix run and shared by every kernel.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};

use crate::{cpio, guest};

/// Programs the guest needs, by name; each is looked up in the host's sbin/bin directories.
/// Those marked required fail the build when missing; the rest are taken when present.
const TOOLS: &[(&str, bool)] = &[
    ("ip", true),
    ("bridge", false),
    ("iptables", true),
    ("iptables-save", true),
    ("iptables-restore", true),
    ("ip6tables", true),
    ("ip6tables-save", true),
    ("ip6tables-restore", true),
    ("iptables-legacy", false),
    ("iptables-legacy-save", false),
    ("iptables-legacy-restore", false),
    ("ip6tables-legacy", false),
    ("ip6tables-legacy-save", false),
    ("ip6tables-legacy-restore", false),
    ("iptables-nft", false),
    ("iptables-nft-save", false),
    ("iptables-nft-restore", false),
    ("ip6tables-nft", false),
    ("ip6tables-nft-save", false),
    ("ip6tables-nft-restore", false),
    ("nft", true),
    ("conntrack", true),
    ("modprobe", true),
    ("ipset", false),
    ("ipvsadm", false),
];

const SEARCH: &[&str] = &["/usr/sbin", "/sbin", "/usr/bin", "/bin"];

/// Libraries loaded with dlopen, which ldd cannot see: glibc's thread cancellation needs
/// libgcc_s (measured: without it a tool aborts inside the guest).
const DLOPENED: &[&str] = &["libgcc_s.so.1"];

/// Plain files the tools read.
const DATA: &[&str] = &["/etc/protocols", "/etc/services", "/etc/ethertypes", "/etc/iproute2"];

/// What goes into the archive besides the tools.
pub struct Payload<'a> {
    /// The packetproof binary; the guest runs it as `/usr/bin/packetproof`.
    pub binary: &'a Path,
    /// Host files or directories copied under the guest's working directory, at the same
    /// relative path (`scenarios/sctp.yaml` → `/work/scenarios/sctp.yaml`).
    pub files: &'a [PathBuf],
    /// Programs of the user's (a proxy and what it needs), each at
    /// `/usr/local/bin/NAME` ([`guest::PROGRAMS`], on the guest's PATH), with the shared
    /// libraries it loads.
    pub programs: &'a [GuestProgram],
}

/// A host file carried into the guest as `/usr/local/bin/NAME`: `--guest-file [NAME=]PATH`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestProgram {
    pub name: String,
    pub source: PathBuf,
}

impl GuestProgram {
    /// `PATH` (named as its file) or `NAME=PATH`. The name must be a plain file name, since
    /// it becomes a path in the guest: letters, digits, `.`, `_`, `+`, `-`, not starting with
    /// `.` or `-`. The source must be a regular file (symlinks followed).
    pub fn parse(text: &str) -> Result<GuestProgram> {
        let (name, source) = match text.split_once('=') {
            Some((name, source)) => (name.to_string(), PathBuf::from(source)),
            None => {
                let source = PathBuf::from(text);
                let name = source
                    .file_name()
                    .with_context(|| format!("{text:?} names no file"))?
                    .to_str()
                    .with_context(|| format!("{text:?}: the file name is not UTF-8"))?
                    .to_string();
                (name, source)
            }
        };
        check_name(&name)?;
        let meta = std::fs::metadata(&source).with_context(|| format!("guest file {}", source.display()))?;
        ensure!(meta.is_file(), "guest file {} is not a regular file", source.display());
        Ok(GuestProgram { name, source })
    }

    /// Where it lands in the guest.
    pub fn guest_path(&self) -> String {
        format!("{}/{}", guest::PROGRAMS, self.name)
    }
}

/// A guest file's name: one path component the guest cannot misread.
fn check_name(name: &str) -> Result<()> {
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '+' | '-');
    ensure!(
        !name.is_empty()
            && name.len() <= 64
            && name.chars().all(plain)
            && !name.starts_with('.')
            && !name.starts_with('-'),
        "guest file name {name:?}: it becomes {}/NAME, so it must be a plain file name \
         (letters, digits, `.`, `_`, `+`, `-`; not starting with `.` or `-`; at most 64)",
        guest::PROGRAMS
    );
    Ok(())
}

/// Programs [`TOOLS`] lists as optional that this host lacks, so the guest lacks them too:
/// for the caller to say so (kube-proxy's IPVS mode runs `ipset`).
pub fn missing_tools() -> Vec<&'static str> {
    TOOLS.iter().filter(|(name, required)| !required && find(name).is_none()).map(|(n, _)| *n).collect()
}

/// Writes the archive to `out`.
pub fn build(payload: &Payload<'_>, out: &Path) -> Result<()> {
    let mut tree = Tree::default();
    let busybox = static_busybox()?;
    tree.file("bin/busybox", &busybox, true)?;
    for (name, required) in TOOLS {
        match find(name) {
            Some(path) => tree.program(&format!("usr/sbin/{name}"), &path)?,
            None if *required => bail!("{name} is not installed on this host (see ci/install-deps.sh)"),
            None => {}
        }
    }
    for dir in ["/usr/lib/x86_64-linux-gnu/xtables", "/usr/lib/xtables", "/usr/lib64/xtables"] {
        if let Ok(entries) = std::fs::read_dir(dir) {
            for entry in entries {
                let path = entry?.path();
                tree.program(path.to_str().context("a non-UTF-8 path")?.trim_start_matches('/'), &path)?;
            }
        }
    }
    for name in DLOPENED {
        let path = library_dir().join(name);
        ensure!(path.exists(), "{} is missing on this host", path.display());
        tree.program(path.to_str().expect("UTF-8").trim_start_matches('/'), &path)?;
    }
    for data in DATA.iter().filter(|d| Path::new(d).exists()) {
        tree.copy_any(Path::new(data), data.trim_start_matches('/'))?;
    }
    let binary = without_debug_sections(payload.binary, &out.with_extension("packetproof"))?;
    tree.program("usr/bin/packetproof", &binary)?;
    for file in payload.files {
        ensure!(
            file.is_relative(),
            "{}: scenario paths must be relative to the working directory",
            file.display()
        );
        tree.copy_any(file, &format!("{}/{}", guest::WORKDIR.trim_start_matches('/'), file.display()))?;
    }
    let mut names = std::collections::BTreeSet::new();
    for program in payload.programs {
        check_name(&program.name)?;
        ensure!(names.insert(&program.name), "two guest files are named {}", program.name);
        // Its own copy, never a symlink into the host's tree: the name is the user's.
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(&program.source)
            .with_context(|| format!("guest file {}", program.source.display()))?;
        ensure!(meta.is_file(), "guest file {} is not a regular file", program.source.display());
        // An ELF file goes without its debug sections, as packetproof's own binary does: a
        // kube-proxy built from source carries 25 MB of DWARF the guest never reads.
        let source = match is_elf(&program.source)? {
            true => without_debug_sections(
                &program.source,
                &out.with_extension(format!("guest-{}", program.name)),
            )?,
            false => program.source.clone(),
        };
        let path = program.guest_path();
        tree.file(path.trim_start_matches('/'), &source, meta.permissions().mode() & 0o111 != 0)?;
    }
    tree.text("init", &guest::init_script(), true);
    tree.add_libraries()?;
    tree.write(out)
}

/// Whether `path` starts as an ELF file does.
fn is_elf(path: &Path) -> Result<bool> {
    use std::io::Read;
    let mut magic = [0u8; 4];
    let mut file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    Ok(file.read(&mut magic)? == 4 && magic == *b"\x7fELF")
}

/// `binary` without its debug sections, written to `stripped` (a debug build (`cargo test`'s
/// binary) is 290 MB, nearly all DWARF the guest never reads, and the initramfs lives in the
/// guest's memory. `strip --strip-debug` keeps the symbols, so backtraces still name functions.
fn without_debug_sections(binary: &Path, stripped: &Path) -> Result<PathBuf> {
    let status = Command::new("strip")
        .arg("--strip-debug")
        .arg("-o")
        .arg(stripped)
        .arg(binary)
        .status()
        .context("running strip (install binutils)")?;
    ensure!(status.success(), "strip --strip-debug {} failed ({status})", binary.display());
    Ok(stripped.to_path_buf())
}

fn find(name: &str) -> Option<PathBuf> {
    SEARCH.iter().map(|d| Path::new(d).join(name)).find(|p| p.exists())
}

/// This machine's busybox, which must be static (Debian's busybox-static): a guest, or a
/// container image made from it, has none of this machine's libraries.
pub fn static_busybox() -> Result<PathBuf> {
    let path = ["/bin/busybox", "/usr/bin/busybox"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .context("busybox is not installed (install busybox-static)")?;
    ensure!(libraries(&path)?.is_empty(), "{} is not static (install busybox-static)", path.display());
    Ok(path)
}

fn library_dir() -> PathBuf {
    ["/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64"]
        .iter()
        .map(PathBuf::from)
        .find(|d| d.join("libc.so.6").exists())
        .unwrap_or_else(|| PathBuf::from("/lib/x86_64-linux-gnu"))
}

/// The shared libraries `binary` loads (with the dynamic loader), as ldd resolves them.
fn libraries(binary: &Path) -> Result<Vec<PathBuf>> {
    libraries_of(&[binary.to_path_buf()])
}

/// Every shared library any of `binaries` loads (ldd resolves them transitively).
fn libraries_of(binaries: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let output = Command::new("ldd").args(binaries).output().context("running ldd")?;
    // ldd exits non-zero when one is static ("not a dynamic executable").
    let text = String::from_utf8_lossy(&output.stdout);
    let missing = not_found(&text);
    ensure!(
        missing.is_empty(),
        "this host lacks libraries the guest's programs load: {}",
        missing.join(", ")
    );
    let mut libs = parse_ldd(&text);
    libs.sort();
    libs.dedup();
    Ok(libs)
}

/// `libfoo.so.1 => not found`, with the program whose list it is in.
fn not_found(text: &str) -> Vec<String> {
    let mut program = "";
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(header) = line.strip_suffix(':') {
            program = header;
        } else if let Some((library, _)) = line.split_once("=> not found") {
            out.push(format!("{} (for {program})", library.trim()));
        }
    }
    out
}

fn parse_ldd(text: &str) -> Vec<PathBuf> {
    text.lines()
        .filter_map(|line| {
            let line = line.trim();
            if line.ends_with(':') {
                return None; // `/usr/sbin/nft:`, the header of one file's list
            }
            let path = match line.split_once("=>") {
                Some((_, right)) => right.split_whitespace().next()?,
                None => line.split_whitespace().next()?,
            };
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

/// The archive's contents, by guest path (no leading `/`).
#[derive(Default)]
struct Tree {
    entries: BTreeMap<String, Node>,
}

enum Node {
    Dir,
    File { source: PathBuf, executable: bool },
    Text { text: String, executable: bool },
    Symlink(String),
}

impl Tree {
    fn parents(&mut self, path: &str) {
        let mut dir = Path::new(path).parent();
        while let Some(d) = dir.filter(|d| !d.as_os_str().is_empty()) {
            self.entries.entry(d.to_string_lossy().into_owned()).or_insert(Node::Dir);
            dir = d.parent();
        }
    }

    fn file(&mut self, path: &str, source: &Path, executable: bool) -> Result<()> {
        self.parents(path);
        self.entries.insert(path.into(), Node::File { source: source.to_path_buf(), executable });
        Ok(())
    }

    fn text(&mut self, path: &str, text: &str, executable: bool) {
        self.parents(path);
        self.entries.insert(path.into(), Node::Text { text: text.into(), executable });
    }

    /// A program (or library) at `path` with the libraries it loads. A symlink on the host
    /// (`iptables` → `/etc/alternatives/iptables` → `xtables-nft-multi`) becomes a symlink to
    /// the real file, kept at its own path: multi-call programs dispatch on their name.
    fn program(&mut self, path: &str, source: &Path) -> Result<()> {
        let is_link = std::fs::symlink_metadata(source).is_ok_and(|m| m.file_type().is_symlink());
        let real = source.canonicalize().with_context(|| format!("resolving {}", source.display()))?;
        let real_guest = match is_link {
            true => real.to_str().context("a non-UTF-8 path")?.trim_start_matches('/').to_string(),
            false => path.to_string(),
        };
        if real_guest != path {
            self.parents(path);
            self.entries.insert(path.into(), Node::Symlink(format!("/{real_guest}")));
        }
        if self.entries.contains_key(&real_guest) {
            return Ok(());
        }
        self.file(&real_guest, &real, true)
    }

    /// Adds the libraries every executable loads, asking ldd once for all of them (one ldd
    /// per file took seconds for iptables' hundred extensions).
    fn add_libraries(&mut self) -> Result<()> {
        let executables: Vec<PathBuf> = self
            .entries
            .values()
            .filter_map(|n| match n {
                Node::File { source, executable: true } => Some(source.clone()),
                _ => None,
            })
            .collect();
        for lib in libraries_of(&executables)? {
            // The loader's own path (/lib64/ld-linux-x86-64.so.2) must exist as named.
            let named = lib.to_str().context("a non-UTF-8 path")?.trim_start_matches('/').to_string();
            if !self.entries.contains_key(&named) {
                self.program(&named, &lib)?;
            }
        }
        Ok(())
    }

    /// A file or a whole directory, copied as it is.
    fn copy_any(&mut self, source: &Path, path: &str) -> Result<()> {
        let meta = std::fs::metadata(source).with_context(|| format!("reading {}", source.display()))?;
        if meta.is_dir() {
            self.parents(path);
            self.entries.insert(path.into(), Node::Dir);
            for entry in std::fs::read_dir(source)? {
                let entry = entry?;
                let name = entry.file_name();
                self.copy_any(&entry.path(), &format!("{path}/{}", name.to_string_lossy()))?;
            }
        } else {
            use std::os::unix::fs::PermissionsExt;
            self.file(path, source, meta.permissions().mode() & 0o111 != 0)?;
        }
        Ok(())
    }

    fn write(&self, out: &Path) -> Result<()> {
        let file = std::fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
        let mut w = cpio::Writer::new(std::io::BufWriter::new(file));
        // BTreeMap order puts a directory before its contents.
        for (path, node) in &self.entries {
            match node {
                Node::Dir => w.add(path, cpio::Entry::Dir)?,
                Node::File { source, executable } => {
                    let data =
                        std::fs::read(source).with_context(|| format!("reading {}", source.display()))?;
                    w.add(path, cpio::Entry::File { data: &data, executable: *executable })?
                }
                Node::Text { text, executable } => {
                    w.add(path, cpio::Entry::File { data: text.as_bytes(), executable: *executable })?
                }
                Node::Symlink(target) => w.add(path, cpio::Entry::Symlink(target))?,
            }
        }
        w.finish()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_output_gives_every_library_and_the_loader() {
        let text = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibzstd.so.1 => /lib/x86_64-linux-gnu/libzstd.so.1 (0x1)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x2)\n\t/lib64/ld-linux-x86-64.so.2 (0x3)\n";
        assert_eq!(
            parse_ldd(text),
            [
                PathBuf::from("/lib/x86_64-linux-gnu/libzstd.so.1"),
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2"),
            ]
        );
        assert!(parse_ldd("\tnot a dynamic executable\n").is_empty());
    }

    #[test]
    fn a_library_ldd_cannot_find_is_named_with_its_program() {
        let text =
            "/tmp/kp:\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x2)\n\tlibgone.so.3 => not found\n";
        assert_eq!(not_found(text), ["libgone.so.3 (for /tmp/kp)"]);
    }

    #[test]
    fn a_guest_file_is_named_by_a_plain_file_name_and_lands_in_usr_local_bin() {
        let p = GuestProgram::parse("/bin/sh").unwrap();
        assert_eq!((p.name.as_str(), p.guest_path()), ("sh", "/usr/local/bin/sh".to_string()));
        let p = GuestProgram::parse("kube-proxy=/bin/sh").unwrap();
        assert_eq!(p.guest_path(), "/usr/local/bin/kube-proxy");
        for hostile in [
            "../x=/bin/sh",
            "a/b=/bin/sh",
            "..=/bin/sh",
            ".hidden=/bin/sh",
            "-rf=/bin/sh",
            "=/bin/sh",
            "a b=/bin/sh",
            "x\n=/bin/sh",
        ] {
            let e = GuestProgram::parse(hostile).unwrap_err().to_string();
            assert!(e.contains("plain file name"), "{hostile}: {e}");
        }
        assert!(GuestProgram::parse("/").is_err(), "no file name");
        assert!(GuestProgram::parse("/tmp").unwrap_err().to_string().contains("not a regular file"));
        assert!(GuestProgram::parse("/nonexistent/kube-proxy").is_err());
    }

    #[test]
    fn a_symlinked_tool_keeps_its_name_and_its_target() {
        let mut tree = Tree::default();
        tree.program("usr/sbin/sh-link", Path::new("/bin/sh")).unwrap();
        let real = std::fs::canonicalize("/bin/sh").unwrap();
        let real = real.to_str().unwrap().trim_start_matches('/');
        assert!(matches!(tree.entries.get(real), Some(Node::File { .. })));
        if real != "usr/sbin/sh-link" {
            assert!(
                matches!(tree.entries.get("usr/sbin/sh-link"), Some(Node::Symlink(t)) if t == &format!("/{real}"))
            );
        }
        assert!(matches!(tree.entries.get("usr/sbin"), Some(Node::Dir)));
    }
}
