//! Kernel versions: a scenario's `minKernel` and the running kernel's release, compared as
//! numbers (`5.10` < `5.15` < `6.1`), for scenarios whose outcome depends on the kernel.

use std::fmt;

/// `major.minor[.patch]`; a missing patch is 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KernelVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl KernelVersion {
    /// A `minKernel` value: `5.15` or `6.1.27`, digits only; `Err` says what is wrong.
    pub fn parse(text: &str) -> Result<KernelVersion, String> {
        let parts: Vec<&str> = text.split('.').collect();
        let number = |s: &str| -> Option<u32> {
            (!s.is_empty() && s.len() <= 6 && s.bytes().all(|b| b.is_ascii_digit()))
                .then(|| s.parse().ok())?
        };
        let numbers: Option<Vec<u32>> = parts.iter().map(|p| number(p)).collect();
        match (parts.len(), numbers) {
            (2 | 3, Some(n)) => {
                Ok(KernelVersion { major: n[0], minor: n[1], patch: n.get(2).copied().unwrap_or(0) })
            }
            _ => Err(format!(
                "{text:?} is not a kernel version: expected MAJOR.MINOR or MAJOR.MINOR.PATCH, digits only (e.g. \"5.15\")"
            )),
        }
    }

    /// The leading numbers of a kernel release as `uname -r` prints it: `5.10.0-32-amd64` →
    /// 5.10.0, `7.3.4+deb13-amd64` → 7.3.4, `6.12` → 6.12.0.
    pub fn of_release(release: &str) -> Option<KernelVersion> {
        let numeric: String = release.chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
        let mut parts = numeric.split('.').filter(|p| !p.is_empty()).map(|p| p.parse::<u32>().ok());
        let (major, minor) = (parts.next()??, parts.next()??);
        let patch = parts.next().flatten().unwrap_or(0);
        Some(KernelVersion { major, minor, patch })
    }

    /// The running kernel's release (`uname -r`) and its version.
    pub fn running() -> Option<(String, KernelVersion)> {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?.trim().to_string();
        let version = KernelVersion::of_release(&release)?;
        Some((release, version))
    }
}

/// `5.15` when the patch is 0, else `5.15.3`.
impl fmt::Display for KernelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.patch {
            0 => write!(f, "{}.{}", self.major, self.minor),
            p => write!(f, "{}.{}.{p}", self.major, self.minor),
        }
    }
}

/// Why a scenario needing `min` cannot run on the kernel `release` (its version `running`).
pub fn too_old(min: KernelVersion, release: &str, running: KernelVersion) -> Option<String> {
    (running < min).then(|| format!("needs kernel {min} or newer (minKernel); this kernel is {release}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(major: u32, minor: u32, patch: u32) -> KernelVersion {
        KernelVersion { major, minor, patch }
    }

    #[test]
    fn min_kernel_values_are_two_or_three_numbers() {
        assert_eq!(KernelVersion::parse("5.15"), Ok(v(5, 15, 0)));
        assert_eq!(KernelVersion::parse("6.1.27"), Ok(v(6, 1, 27)));
        for bad in ["5", "5.", ".15", "5.15.1.2", "5.x", "v5.15", " 5.15", "5.15-rc1", "", "9999999.1"] {
            let e = KernelVersion::parse(bad).unwrap_err();
            assert!(e.contains("is not a kernel version"), "{bad}: {e}");
        }
    }

    #[test]
    fn releases_compare_by_number_not_by_text() {
        assert_eq!(KernelVersion::of_release("5.10.0-32-amd64"), Some(v(5, 10, 0)));
        assert_eq!(KernelVersion::of_release("7.3.4+deb13-amd64"), Some(v(7, 3, 4)));
        assert_eq!(KernelVersion::of_release("6.12"), Some(v(6, 12, 0)));
        assert_eq!(KernelVersion::of_release("garbage"), None);
        assert!(v(5, 10, 262) < v(5, 15, 0));
        assert!(v(6, 9, 0) < v(6, 10, 0), "6.10 is newer than 6.9");
        assert!(v(6, 1, 0) > v(5, 15, 99));
    }

    #[test]
    fn an_older_kernel_gives_the_reason_an_equal_or_newer_one_none() {
        let min = v(5, 15, 0);
        assert_eq!(
            too_old(min, "5.10.0-32-amd64", v(5, 10, 0)).as_deref(),
            Some("needs kernel 5.15 or newer (minKernel); this kernel is 5.10.0-32-amd64")
        );
        assert_eq!(too_old(min, "5.15.0", v(5, 15, 0)), None);
        assert_eq!(too_old(min, "6.1.0-1", v(6, 1, 0)), None);
    }
}
