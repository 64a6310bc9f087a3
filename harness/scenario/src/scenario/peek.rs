//! What a test runner needs to name a file's trials, read without validating the file: the
//! proxy its Scenario document names, and whether it names SCTP anywhere. Listing a suite
//! (`cargo nextest` lists it, then runs each trial in a process of its own) must not cost a
//! whole check of every file; the trial that runs a file checks it whole.

use std::path::Path;

use serde_json::Value;

use super::spec;

/// A file read as YAML only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Peek {
    /// `spec.proxy` (its `name` when given with options); `None` when not given or unreadable.
    pub proxy: Option<String>,
    /// Some value of the file is `SCTP`: it may probe SCTP (a superset; only a full check
    /// says whether a probe does).
    pub names_sctp: bool,
}

/// Peeks at `path`; a file that cannot be read or parsed peeks as empty (its trial reports why).
pub fn peek(path: &Path) -> Peek {
    let Ok(text) = std::fs::read_to_string(path) else { return Peek::default() };
    peek_str(&text)
}

pub(crate) fn peek_str(text: &str) -> Peek {
    let Ok(docs) = super::yaml::parse(text) else { return Peek::default() };
    let scenario = docs.iter().find(|d| d.value.get("kind").and_then(Value::as_str) == Some(spec::KIND));
    let proxy = scenario.and_then(|d| d.value.pointer("/spec/proxy")).and_then(|p| match p {
        Value::String(name) => Some(name.clone()),
        Value::Object(options) => options.get("name").and_then(Value::as_str).map(str::to_string),
        _ => None,
    });
    Peek { proxy, names_sctp: docs.iter().any(|d| names_sctp(&d.value)) }
}

fn names_sctp(value: &Value) -> bool {
    match value {
        Value::String(s) => s == "SCTP",
        Value::Array(items) => items.iter().any(names_sctp),
        Value::Object(map) => map.values().any(names_sctp),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_proxy_and_sctp_without_checking_the_file() {
        let text = "apiVersion: packetproof.dev/v1alpha1\nkind: Scenario\nspec:\n  proxy: {name: command, x: 1}\n\
                    ---\nkind: Service\nspec: {ports: [{protocol: SCTP}]}\n";
        assert_eq!(peek_str(text), Peek { proxy: Some("command".into()), names_sctp: true });
        let text = "# SCTP in a comment is no value\nkind: Scenario\nspec: {proxy: builtin-nftables}\n";
        assert_eq!(peek_str(text), Peek { proxy: Some("builtin-nftables".into()), names_sctp: false });
        assert_eq!(peek_str("kind: [unclosed"), Peek::default());
    }
}
