//! `spec.minKernel`: the oldest kernel a scenario's outcome holds on (`"5.15"`). On an older
//! kernel the scenario is skipped with the reason, never passed (runner::unsupported).

use serde_json::Value;

use super::error::{Diagnostics, Site};
use super::yaml::FieldPath;
use crate::kernel::KernelVersion;

pub(super) fn read(site: &Site<'_>, diag: &mut Diagnostics) -> Option<KernelVersion> {
    let path = FieldPath::parse("spec.minKernel");
    match path.lookup(&site.doc.value)? {
        Value::String(text) => match KernelVersion::parse(text) {
            Ok(version) => Some(version),
            Err(e) => {
                diag.value(site, &path, e);
                None
            }
        },
        // Unquoted, YAML reads `6.10` as the number 6.1: a version must be a string.
        Value::Number(n) => {
            diag.value(site, &path, format!("write the kernel version as a string (minKernel: \"{n}\"): unquoted, YAML reads 6.10 as the number 6.1"));
            None
        }
        other => {
            diag.value(site, &path, format!("expected a kernel version such as \"5.15\", found {other}"));
            None
        }
    }
}
