//! Debian kernels by version (`5.10`, `6.12.117`) or suite (`trixie-backports`): resolved with
//! apt under a private configuration (the host's own apt state is never touched), downloaded
//! from deb.debian.org once, unpacked into the cache, with their networking modules packed as
//! an initramfs archive.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};

use crate::modules;

/// The suites whose kernels can be asked for (every kernel of the measured matrix is in one).
const SUITES: &[(&str, &str)] = &[
    ("debian", "bullseye"),
    ("debian-security", "bullseye-security"),
    ("debian", "bookworm"),
    ("debian-security", "bookworm-security"),
    ("debian", "bookworm-backports"),
    ("debian", "trixie"),
    ("debian-security", "trixie-security"),
    ("debian", "trixie-backports"),
];

const MIRROR: &str = "http://deb.debian.org";
const KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";

/// A kernel ready to boot.
#[derive(Debug, Clone)]
pub struct Kernel {
    /// What was asked for (`5.10`, `trixie`).
    pub spec: String,
    /// The package version it resolved to (`5.10.262-1`).
    pub version: String,
    /// `uname -r` inside (`5.10.0-46-amd64`).
    pub release: String,
    pub vmlinuz: PathBuf,
    /// The networking modules (with modules.dep) as a cpio archive.
    pub modules: PathBuf,
}

/// The cache directory: `$PACKETPROOF_CACHE`, else `$XDG_CACHE_HOME/packetproof`, else
/// `~/.cache/packetproof`.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("PACKETPROOF_CACHE") {
        return PathBuf::from(dir);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/var/cache"));
    base.join("packetproof")
}

/// The kernel `spec` from the cache, fetching and unpacking it first if it is not there.
pub fn get(spec: &str) -> Result<Kernel> {
    ensure!(
        !spec.is_empty() && spec.chars().all(|c| c.is_ascii_alphanumeric() || ".-+~".contains(c)),
        "kernel {spec:?}: expected a version (5.10, 6.12.117) or a Debian suite (trixie-backports)"
    );
    let dir = cache_dir().join("kernels").join(spec);
    let _lock = CacheLock::take()?;
    if cached(spec, &dir).is_none() {
        fetch(spec, &dir).with_context(|| format!("fetching kernel {spec} from Debian's archive"))?;
    }
    let kernel = cached(spec, &dir).context("the kernel vanished from the cache")?;
    if !kernel.modules.exists() {
        // Built from the cached modules when the selection changed (a new archive name).
        let partial = kernel.modules.with_extension("partial");
        modules::archive(&dir.join(MODULE_TREE), &kernel.release, &partial)?;
        std::fs::rename(&partial, &kernel.modules)?;
    }
    Ok(kernel)
}

/// An exclusive lock on the cache while a kernel is looked up, fetched or completed. Matrix
/// runs at once (`cargo test` runs the VM tests in parallel) share the private apt state, whose
/// lists apt writes without its own locking, and the half-built archives: on an empty cache
/// three fetches at once corrupted each other's lists ("BADSIG", "Failed to stat
/// …/lists/partial/…"). The lock goes with the file, when this is dropped or the process dies.
struct CacheLock {
    _held: std::fs::File,
}

impl CacheLock {
    fn take() -> Result<CacheLock> {
        use std::os::fd::AsRawFd;
        let dir = cache_dir();
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join("lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        // SAFETY: flock on a descriptor this function owns; it blocks until the lock is free.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("locking {}", path.display()));
        }
        Ok(CacheLock { _held: file })
    }
}

/// The kernel's modules (its `lib/modules/<release>`), kept whole in the cache.
const MODULE_TREE: &str = "modules";

fn cached(spec: &str, dir: &Path) -> Option<Kernel> {
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok().map(|s| s.trim().to_string());
    let (version, release) = (read("version")?, read("release")?);
    let (vmlinuz, modules) = (dir.join("vmlinuz"), dir.join(modules::ARCHIVE_NAME));
    (vmlinuz.exists() && dir.join(MODULE_TREE).is_dir()).then(|| Kernel {
        spec: spec.into(),
        version,
        release,
        vmlinuz,
        modules,
    })
}

fn fetch(spec: &str, dir: &Path) -> Result<()> {
    let apt = PrivateApt::new(&cache_dir().join("apt"))?;
    apt.update()?;
    let version = apt.resolve(spec)?;
    let packages = apt.packages_of("linux-image-amd64", &version)?;
    // Unpack into a scratch directory beside the final one, then rename: a fetch that dies
    // half-way leaves no kernel that looks complete.
    // Named after the whole spec: `with_extension` would turn both 6.1 and 6.12 into `6.partial`.
    let scratch = dir.with_file_name(format!("{spec}.partial"));
    let _ = std::fs::remove_dir_all(&scratch);
    let unpacked = scratch.join("root");
    std::fs::create_dir_all(&unpacked).with_context(|| format!("creating {}", unpacked.display()))?;
    for deb in apt.download(&packages, &version, &scratch)? {
        run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&unpacked))?;
        std::fs::remove_file(&deb).with_context(|| format!("removing {}", deb.display()))?;
    }
    let (release, vmlinuz) = find_vmlinuz(&unpacked)?;
    std::fs::rename(&vmlinuz, scratch.join("vmlinuz")).context("moving vmlinuz")?;
    let tree = ["usr/lib/modules", "lib/modules"]
        .iter()
        .map(|d| unpacked.join(d).join(&release))
        .find(|d| d.is_dir())
        .with_context(|| format!("no modules for {release} in the packages {packages:?}"))?;
    std::fs::rename(&tree, scratch.join(MODULE_TREE)).context("moving the modules")?;
    std::fs::remove_dir_all(&unpacked).context("removing the unpacked packages")?;
    std::fs::write(scratch.join("version"), &version)?;
    std::fs::write(scratch.join("release"), &release)?;
    let _ = std::fs::remove_dir_all(dir);
    std::fs::rename(&scratch, dir).with_context(|| format!("moving the kernel into {}", dir.display()))
}

/// The kernel image and its release: `/boot/vmlinuz-<release>` up to 6.x, and
/// `/usr/lib/modules/<release>/vmlinuz` in 7.x's split packages.
fn find_vmlinuz(root: &Path) -> Result<(String, PathBuf)> {
    if let Ok(entries) = std::fs::read_dir(root.join("boot")) {
        for entry in entries {
            let name = entry?.file_name().to_string_lossy().into_owned();
            if let Some(release) = name.strip_prefix("vmlinuz-") {
                return Ok((release.to_string(), root.join("boot").join(&name)));
            }
        }
    }
    for modules in ["usr/lib/modules", "lib/modules"] {
        let Ok(entries) = std::fs::read_dir(root.join(modules)) else { continue };
        for entry in entries {
            let entry = entry?;
            if entry.path().join("vmlinuz").exists() {
                return Ok((entry.file_name().to_string_lossy().into_owned(), entry.path().join("vmlinuz")));
            }
        }
    }
    bail!("no /boot/vmlinuz-* nor /usr/lib/modules/*/vmlinuz in the kernel's packages")
}

/// apt with its own sources, lists and cache under `root`, never the host's: neither its
/// state nor its configuration. `APT_CONFIG` is read before anything else and moves
/// `Dir::Etc` (and with it `apt.conf.d`) under `root`, so the host's settings never apply:
/// container images' `docker-clean` turns off the package cache (every `apt-cache` call then
/// re-parsed all eight suites' lists, about 4 s of CPU each), and desktop hooks run after
/// `update` (appstream, packagekit).
struct PrivateApt {
    config: PathBuf,
}

impl PrivateApt {
    fn new(root: &Path) -> Result<PrivateApt> {
        ensure!(Path::new(KEYRING).exists(), "{KEYRING} is missing (install debian-archive-keyring)");
        // Checked before anything is written there. apt's configuration syntax quotes values:
        // a quote, brace, semicolon or line break in the path would end one early.
        let path = root.to_string_lossy();
        ensure!(
            !path.contains(['"', '{', '}', ';', '\n']),
            "the kernel cache's path {path:?} holds a character apt's configuration cannot quote \
             (set PACKETPROOF_CACHE to another folder)"
        );
        for d in ["etc/apt.conf.d", "etc/preferences.d", "state/lists/partial", "cache/archives/partial"] {
            std::fs::create_dir_all(root.join(d)).with_context(|| format!("creating {}", root.display()))?;
        }
        let sources: String = SUITES
            .iter()
            .map(|(archive, suite)| format!("deb [signed-by={KEYRING}] {MIRROR}/{archive} {suite} main\n"))
            .collect();
        std::fs::write(root.join("etc/sources.list"), sources)?;
        let config = root.join("apt.conf");
        std::fs::write(&config, private_config(root))?;
        Ok(PrivateApt { config })
    }

    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        cmd.env("APT_CONFIG", &self.config);
        cmd
    }

    /// Refreshes the lists, once per process (every kernel of a matrix shares them).
    fn update(&self) -> Result<()> {
        static UPDATED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if UPDATED.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok(());
        }
        let mut cmd = self.command("apt-get");
        cmd.args(["-q", "update"]);
        run(&mut cmd).context("apt-get update (private configuration)")?;
        UPDATED.store(true, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// The newest `linux-image-amd64` version matching `spec`.
    fn resolve(&self, spec: &str) -> Result<String> {
        let mut cmd = self.command("apt-cache");
        cmd.args(["madison", "linux-image-amd64"]);
        let listing = run(&mut cmd)?;
        let candidates = madison(&listing);
        pick(&candidates, spec).with_context(|| {
            let known: Vec<String> = candidates.iter().map(|(v, s)| format!("{v} ({s})")).collect();
            format!("no Debian kernel matches {spec:?}; the archive has {}", known.join(", "))
        })
    }

    /// The packages holding `meta`'s kernel: its dependencies pinned to its exact version,
    /// followed down (7.x splits the image into image, binary and modules packages).
    fn packages_of(&self, meta: &str, version: &str) -> Result<Vec<String>> {
        let mut found = Vec::new();
        let mut queue = vec![meta.to_string()];
        while let Some(package) = queue.pop() {
            let mut cmd = self.command("apt-cache");
            cmd.arg("show").arg(format!("{package}={version}"));
            let text = run(&mut cmd)?;
            for dep in pinned_dependencies(&text, version) {
                if !found.contains(&dep) {
                    found.push(dep.clone());
                    queue.push(dep);
                }
            }
        }
        ensure!(!found.is_empty(), "{meta} {version} depends on no kernel package");
        Ok(found)
    }

    fn download(&self, packages: &[String], version: &str, into: &Path) -> Result<Vec<PathBuf>> {
        let mut cmd = self.command("apt-get");
        cmd.args(["-q", "download"]).current_dir(into);
        cmd.args(packages.iter().map(|p| format!("{p}={version}")));
        run(&mut cmd)?;
        let mut debs = Vec::new();
        for entry in std::fs::read_dir(into)? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "deb") {
                debs.push(path);
            }
        }
        Ok(debs)
    }
}

/// The whole configuration of [`PrivateApt`] under `root` (an `APT_CONFIG` file).
fn private_config(root: &Path) -> String {
    let r = root.display();
    format!(
        "Dir::Etc \"{r}/etc\";\n\
         Dir::Etc::main \"apt.conf\";\n\
         Dir::Etc::parts \"apt.conf.d\";\n\
         Dir::Etc::sourcelist \"sources.list\";\n\
         Dir::Etc::sourceparts \"-\";\n\
         Dir::Etc::preferencesparts \"preferences.d\";\n\
         Dir::State \"{r}/state\";\n\
         Dir::State::status \"/dev/null\";\n\
         Dir::Cache \"{r}/cache\";\n\
         Dir::Cache::pkgcache \"pkgcache.bin\";\n\
         Dir::Cache::srcpkgcache \"srcpkgcache.bin\";\n\
         APT::Architecture \"amd64\";\n\
         Acquire::Languages \"none\";\n\
         Debug::NoLocking \"true\";\n"
    )
}

/// `apt-cache madison` lines → (version, suite).
fn madison(listing: &str) -> Vec<(String, String)> {
    listing
        .lines()
        .filter_map(|line| {
            let mut cols = line.split('|').map(str::trim);
            let (_, version, source) = (cols.next()?, cols.next()?, cols.next()?);
            let suite = source.split_whitespace().nth(1)?.split('/').next()?;
            Some((version.to_string(), suite.to_string()))
        })
        .collect()
}

/// The version `spec` names: a suite's own, or the newest whose upstream part is `spec` or
/// starts with `spec.` (madison lists newest first).
fn pick(candidates: &[(String, String)], spec: &str) -> Option<String> {
    candidates
        .iter()
        .find(|(v, s)| {
            s == spec || v == spec || v.starts_with(&format!("{spec}.")) || v.starts_with(&format!("{spec}-"))
        })
        .map(|(v, _)| v.clone())
}

/// `Depends:` entries of a `apt-cache show` record pinned with `(= version)`.
fn pinned_dependencies(record: &str, version: &str) -> Vec<String> {
    let pin = format!("(= {version})");
    record
        .lines()
        .filter_map(|l| l.strip_prefix("Depends:"))
        .flat_map(|deps| deps.split(','))
        .filter(|dep| !dep.contains('|') && dep.contains(&pin))
        .filter_map(|dep| dep.split_whitespace().next().map(str::to_string))
        .filter(|name| name.starts_with("linux-"))
        .collect()
}

/// Runs a command, returns its stdout, and fails with its stderr.
fn run(cmd: &mut Command) -> Result<String> {
    let output = cmd.output().with_context(|| format!("running {:?}", cmd.get_program()))?;
    ensure!(
        output.status.success(),
        "{:?} {:?} failed ({}): {}",
        cmd.get_program(),
        cmd.get_args().filter(|a| !a.to_string_lossy().starts_with("Dir")).collect::<Vec<_>>(),
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_private_apt_reads_and_keeps_everything_under_its_own_root() {
        let config = private_config(Path::new("/cache/apt"));
        for line in config.lines() {
            let value = line.split('"').nth(1).expect("a quoted value");
            assert!(!value.starts_with("/etc") && !value.starts_with("/var"), "{line}");
        }
        // Its own configuration folder (under Dir::Etc), not the host's apt.conf.d hooks, and
        // the package cache on, whatever the host's configuration turns off.
        assert!(config.contains("Dir::Etc \"/cache/apt/etc\";"), "{config}");
        assert!(config.contains("Dir::Etc::parts \"apt.conf.d\";"), "{config}");
        assert!(config.contains("Dir::Cache::pkgcache \"pkgcache.bin\";"), "{config}");
    }

    const MADISON: &str = "\
linux-image-amd64 | 7.3.4-1~bpo13+1 | http://deb.debian.org/debian trixie-backports/main amd64 Packages
linux-image-amd64 | 6.12.117-1 | http://deb.debian.org/debian trixie/main amd64 Packages
linux-image-amd64 |  6.1.192-2 | http://deb.debian.org/debian-security bookworm-security/main amd64 Packages
linux-image-amd64 |  6.1.176-1 | http://deb.debian.org/debian bookworm/main amd64 Packages
linux-image-amd64 | 5.10.262-1 | http://deb.debian.org/debian-security bullseye-security/main amd64 Packages
";

    #[test]
    fn a_spec_picks_the_newest_matching_version_or_a_suites_own() {
        let c = madison(MADISON);
        assert_eq!(pick(&c, "5.10").as_deref(), Some("5.10.262-1"));
        assert_eq!(pick(&c, "6.1").as_deref(), Some("6.1.192-2"), "6.1 is not 6.12");
        assert_eq!(pick(&c, "6.12").as_deref(), Some("6.12.117-1"));
        assert_eq!(pick(&c, "7.3").as_deref(), Some("7.3.4-1~bpo13+1"));
        assert_eq!(pick(&c, "bookworm").as_deref(), Some("6.1.176-1"));
        assert_eq!(pick(&c, "6.1.176").as_deref(), Some("6.1.176-1"));
        assert_eq!(pick(&c, "4.19"), None);
    }

    #[test]
    fn follows_only_exactly_pinned_kernel_packages() {
        let record = "Package: linux-image-7.3.4+deb13-amd64\nDepends: dracut | initramfs-tools (>= 0.120+deb8u2) | linux-initramfs-tool, linux-base-7.3.4+deb13-amd64 (= 7.3.4-1~bpo13+1), linux-modules-7.3.4+deb13-amd64 (= 7.3.4-1~bpo13+1), kmod\n";
        assert_eq!(
            pinned_dependencies(record, "7.3.4-1~bpo13+1"),
            ["linux-base-7.3.4+deb13-amd64", "linux-modules-7.3.4+deb13-amd64"]
        );
    }
}
