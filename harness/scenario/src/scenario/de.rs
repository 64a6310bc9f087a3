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
    } else if let Some(plain) = whole_number_wanted(&message) {
        diag.value(site, &path, plain);
    } else {
        diag.value(site, &path, message);
    }
}

/// serde's "invalid type: floating point `1e+23`, expected u32" (or an out-of-range integer)
/// where a whole number is wanted, in words: which number, and which range.
fn whole_number_wanted(message: &str) -> Option<String> {
    let (found, wanted) = message.strip_prefix("invalid ")?.split_once(", expected ")?;
    let max = match wanted {
        "u8" => u64::from(u8::MAX),
        "u16" => u64::from(u16::MAX),
        "u32" => u64::from(u32::MAX),
        "u64" | "usize" => u64::MAX,
        _ => return None,
    };
    let value = found.split('`').nth(1)?;
    Some(format!("{value} is not a whole number from 0 to {max}"))
}

#[cfg(test)]
mod tests {
    use super::whole_number_wanted;

    #[test]
    fn numbers_out_of_place_are_named_in_words() {
        assert_eq!(
            whole_number_wanted("invalid type: floating point `1e+23`, expected u32").as_deref(),
            Some("1e+23 is not a whole number from 0 to 4294967295")
        );
        assert_eq!(
            whole_number_wanted("invalid value: integer `-1`, expected u16").as_deref(),
            Some("-1 is not a whole number from 0 to 65535")
        );
        assert_eq!(whole_number_wanted("invalid type: string \"x\", expected a map"), None);
    }
}
