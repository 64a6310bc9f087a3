//! Typed deserialization of one field of a document, with serde failures located in the file.

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::error::{Diagnostics, Site};
use super::yaml::FieldPath;

/// Deserializes the value at `path` of the site's document into `T`; on failure, reports
/// serde's message at the exact field that failed and returns `None`.
pub(crate) fn typed<T: DeserializeOwned>(
    site: &Site<'_>,
    path: &FieldPath,
    diag: &mut Diagnostics,
) -> Option<T> {
    // Read in place: a file's objects are not copied to be typed.
    let value = path.lookup(&site.doc.value).unwrap_or(&Value::Null);
    match serde_path_to_error::deserialize::<_, T>(value) {
        Ok(v) => Some(v),
        Err(e) => {
            report(site, path.join_serde(e.path()), e.inner().to_string(), diag);
            None
        }
    }
}

fn report(site: &Site<'_>, path: FieldPath, message: String, diag: &mut Diagnostics) {
    // serde names a missing field in the message and points at its parent: name the field,
    // point at the parent mapping.
    if let Some(field) = message.strip_prefix("missing field `").and_then(|rest| rest.strip_suffix('`')) {
        diag.value(site, &path.key(field), format!("required field `{field}` is missing"));
    } else if message.starts_with("unknown field") {
        diag.key(site, &path, message);
    } else {
        diag.value(site, &path, message);
    }
}
