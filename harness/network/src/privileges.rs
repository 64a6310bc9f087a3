//! The one privilege gate of every test: where scenarios cannot run here (no root, no
//! namespaces, …) a test is skipped and says why, unless `PACKETPROOF_REQUIRE_PRIVILEGES=1`
//! (set by `.ci/run`) makes that a failure. Any other value, or none, means skip.

/// The environment variable that turns a skip for want of privileges into a failure.
pub const REQUIRE_ENV: &str = "PACKETPROOF_REQUIRE_PRIVILEGES";

/// Whether a missing privilege (or tool) must fail instead of skip.
pub fn required() -> bool {
    std::env::var(REQUIRE_ENV).is_ok_and(|v| v == "1")
}

/// Why scenarios cannot run on this machine at all, if they cannot (checked once per run).
/// Root alone is not enough: a container or `capsh --drop` can take the capabilities away,
/// and then the first mount or link fails with a bare EPERM.
pub fn preflight() -> Option<String> {
    const NEEDS: &str = "needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) to create network namespaces";
    if !nix::unistd::geteuid().is_root() {
        return Some(NEEDS.into());
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let missing = missing_capabilities(&status);
    (!missing.is_empty())
        .then(|| format!("{NEEDS}: this process runs as root without {}", missing.join(" and ")))
}

/// The capabilities scenarios need that the effective set (`CapEff:` of /proc/self/status)
/// lacks; an unreadable set counts as complete, as root's is by default.
fn missing_capabilities(status: &str) -> Vec<&'static str> {
    const NEEDED: [(u32, &str); 2] = [(21, "CAP_SYS_ADMIN"), (12, "CAP_NET_ADMIN")];
    let effective = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok());
    let Some(effective) = effective else { return Vec::new() };
    NEEDED.iter().filter(|(bit, _)| effective & (1 << bit) == 0).map(|(_, name)| *name).collect()
}

/// Whether scenarios can run here; if not, prints the reason and returns false, or panics
/// when privileges are required.
pub fn scenarios_can_run() -> bool {
    match preflight() {
        None => true,
        Some(reason) => {
            assert!(!required(), "{REQUIRE_ENV}=1 but {reason}");
            eprintln!("skipped: {reason}");
            false
        }
    }
}

/// Whether a tool a test needs is here (`found`); if not, prints `missing` and returns false,
/// or panics when privileges (a complete CI machine) are required.
pub fn tool_or_skip(found: bool, missing: &str) -> bool {
    if !found {
        assert!(!required(), "{REQUIRE_ENV}=1 but {missing}");
        eprintln!("skipped: {missing}");
    }
    found
}

#[cfg(test)]
mod tests {
    use super::missing_capabilities;

    #[test]
    fn capabilities_are_read_from_the_effective_set() {
        assert!(missing_capabilities("CapInh:\t0\nCapEff:\t000001ffffffffff\n").is_empty());
        // Root with CAP_NET_ADMIN (bit 12) and CAP_SYS_ADMIN (bit 21) dropped.
        let dropped = format!("CapEff:\t{:016x}\n", 0x1ff_ffff_ffffu64 & !(1 << 12) & !(1 << 21));
        assert_eq!(missing_capabilities(&dropped), ["CAP_SYS_ADMIN", "CAP_NET_ADMIN"]);
        assert!(missing_capabilities("no such line").is_empty());
    }
}
