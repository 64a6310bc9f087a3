//! `spec.minKernel`: read as a version, refused with its position when it is not one.

use super::*;
use crate::kernel::KernelVersion;

fn with_min_kernel(value: &str) -> String {
    edit(WEB, "spec:\n  cluster:", &format!("spec:\n  minKernel: {value}\n  cluster:"))
}

#[test]
fn a_quoted_version_is_read() {
    let scenario = parse(&with_min_kernel("\"5.15\""));
    assert_eq!(scenario.min_kernel, Some(KernelVersion { major: 5, minor: 15, patch: 0 }));
    assert_eq!(parse(WEB).min_kernel, None, "optional");
}

#[test]
fn bad_versions_are_refused_at_their_position() {
    for (value, message) in [
        ("\"5.x\"", "\"5.x\" is not a kernel version: expected MAJOR.MINOR or MAJOR.MINOR.PATCH"),
        ("\"6\"", "\"6\" is not a kernel version"),
        (
            "6.10",
            "write the kernel version as a string (minKernel: \"6.1\"): unquoted, YAML reads 6.10 as the number 6.1",
        ),
        ("[5, 15]", "expected a kernel version such as \"5.15\""),
    ] {
        let text = with_min_kernel(value);
        let errors = parse_errors(&text);
        assert_eq!(errors.len(), 1, "{value}: {errors:?}");
        assert_has(&errors, at_in(&text, &format!("minKernel: {value}"), value), "spec.minKernel", message);
    }
}
