//! The one privilege gate of every test: where scenarios cannot run here (no root, no
//! namespaces, …) a test is skipped and says why, unless `PACKETPROOF_REQUIRE_PRIVILEGES=1`
//! (set by `.ci/run`) makes that a failure. Any other value, or none, means skip.

/// The environment variable that turns a skip for want of privileges into a failure.
pub const REQUIRE_ENV: &str = "PACKETPROOF_REQUIRE_PRIVILEGES";

/// Whether a missing privilege (or tool) must fail instead of skip.
pub fn required() -> bool {
    std::env::var(REQUIRE_ENV).is_ok_and(|v| v == "1")
}

/// Whether scenarios can run here; if not, prints the reason and returns false, or panics
/// when privileges are required.
pub fn scenarios_can_run() -> bool {
    match crate::runner::preflight() {
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
