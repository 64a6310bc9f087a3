//! `--proxy-option KEY=VALUE` checks shared by the proxies that take options as JSON: unknown
//! keys are refused (never silently ignored) and `profile` names the choices a proxy is judged by.

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::model::Profile;

/// Refuses every key of `options` that is not in `known`, naming them all and what is accepted.
pub(crate) fn refuse_unknown(proxy: &str, options: &Value, known: &[&str]) -> Result<()> {
    let unknown: Vec<&String> = options
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, _)| k)
        .filter(|k| !known.contains(&k.as_str()))
        .collect();
    if !unknown.is_empty() {
        bail!("proxy {proxy} has no option {unknown:?} (options: {})", known.join(", "));
    }
    Ok(())
}

/// The `profile` option, or `default` when it is absent.
pub(crate) fn profile(options: &Value, default: Profile) -> Result<Profile> {
    match options.get("profile") {
        None => Ok(default),
        Some(v) => v
            .as_str()
            .context("option `profile` must be a string")?
            .parse()
            .map_err(|e| anyhow::anyhow!("option `profile`: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_keys_are_all_named() {
        let err = refuse_unknown("p", &json!({"a": 1, "zz": 2, "yy": 3}), &["a"]).unwrap_err().to_string();
        assert!(err.contains(r#"["yy", "zz"]"#) && err.contains("options: a"), "{err}");
        refuse_unknown("p", &json!({"a": 1}), &["a"]).unwrap();
        refuse_unknown("p", &Value::Null, &["a"]).unwrap();
    }

    #[test]
    fn profile_defaults_and_refuses_non_strings() {
        assert_eq!(profile(&json!({}), Profile::KUBERNETES).unwrap(), Profile::KUBERNETES);
        assert!(
            profile(&json!({"profile": 3}), Profile::KUBERNETES).unwrap_err().to_string().contains("string")
        );
        assert!(profile(&json!({"profile": "nonsense"}), Profile::KUBERNETES).is_err());
    }
}
