//! Argument templates: `{name}` placeholders in each argument, filled per node.
//!
//! Known names: `{state}` (the state file), `{node}`, `{nodeIP}` (the node's primary
//! InternalIP), `{clusterCIDR}` and `{serviceCIDR}` (comma-separated, primary family first, as
//! kube-proxy's flags take them), `{generation}` (1 at start, +1 on every update),
//! `{proxyConfig}` (the scenario's `spec.proxyConfig` as a KubeProxyConfiguration file). `{{`
//! and `}}` stand for literal braces.

use std::collections::BTreeMap;

use anyhow::{Result, bail};

pub const PLACEHOLDERS: &[&str] =
    &["state", "node", "nodeIP", "clusterCIDR", "serviceCIDR", "generation", "proxyConfig"];

/// An argv with placeholders, checked when the options are read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    args: Vec<String>,
}

impl Template {
    /// Refuses an empty argv, unknown placeholders and unbalanced braces.
    pub fn new(args: Vec<String>) -> Result<Template> {
        if args.is_empty() {
            bail!("the command is empty: give at least the program");
        }
        let probe: BTreeMap<&str, String> = PLACEHOLDERS.iter().map(|p| (*p, String::new())).collect();
        for arg in &args {
            fill(arg, &probe)?;
        }
        Ok(Template { args })
    }

    /// The argv with every placeholder replaced by its value in `vars`.
    pub(crate) fn render(&self, vars: &BTreeMap<&str, String>) -> Result<Vec<String>> {
        self.args.iter().map(|a| fill(a, vars)).collect()
    }

    /// Whether some argument holds `{name}` (a literal `{{name}}` does not count).
    pub fn uses(&self, name: &str) -> bool {
        let marker = "\u{0}";
        let probe: BTreeMap<&str, String> = PLACEHOLDERS
            .iter()
            .map(|p| (*p, if *p == name { marker.to_string() } else { String::new() }))
            .collect();
        self.args.iter().any(|a| fill(a, &probe).is_ok_and(|filled| filled.contains(marker)))
    }

    pub fn program(&self) -> &str {
        &self.args[0]
    }
}

fn fill(arg: &str, vars: &BTreeMap<&str, String>) -> Result<String> {
    let mut out = String::with_capacity(arg.len());
    let mut rest = arg;
    while let Some(at) = rest.find(['{', '}']) {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if let Some(after) = tail.strip_prefix("{{") {
            out.push('{');
            rest = after;
        } else if let Some(after) = tail.strip_prefix("}}") {
            out.push('}');
            rest = after;
        } else if let Some(open) = tail.strip_prefix('{') {
            let Some(end) = open.find('}') else { bail!("unclosed `{{` in argument {arg:?}") };
            let name = &open[..end];
            match vars.get(name) {
                Some(value) => out.push_str(value),
                None => bail!(
                    "unknown placeholder {{{name}}} in argument {arg:?} (known: {}; `{{{{` is a literal brace)",
                    PLACEHOLDERS.iter().map(|p| format!("{{{p}}}")).collect::<Vec<_>>().join(", ")
                ),
            }
            rest = &open[end + 1..];
        } else {
            bail!("a lone `}}` in argument {arg:?} (`}}}}` is a literal brace)");
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> BTreeMap<&'static str, String> {
        BTreeMap::from([
            ("state", "/tmp/s/node-a/state.yaml".to_string()),
            ("node", "node-a".to_string()),
            ("nodeIP", "192.168.50.11".to_string()),
            ("clusterCIDR", "10.244.0.0/16,fd00:10:244::/56".to_string()),
            ("serviceCIDR", "10.96.0.0/12".to_string()),
            ("generation", "2".to_string()),
        ])
    }

    fn render(args: &[&str]) -> Result<Vec<String>> {
        Template::new(args.iter().map(|s| s.to_string()).collect())?.render(&vars())
    }

    #[test]
    fn fills_whole_and_embedded_placeholders() {
        let argv =
            render(&["proxy", "--state", "{state}", "--hostname={node}", "--bind={nodeIP}:10256"]).unwrap();
        assert_eq!(
            argv,
            [
                "proxy",
                "--state",
                "/tmp/s/node-a/state.yaml",
                "--hostname=node-a",
                "--bind=192.168.50.11:10256"
            ]
        );
        let argv = render(&["--cluster-cidr={clusterCIDR}", "{serviceCIDR}", "gen-{generation}"]).unwrap();
        assert_eq!(argv, ["--cluster-cidr=10.244.0.0/16,fd00:10:244::/56", "10.96.0.0/12", "gen-2"]);
    }

    #[test]
    fn doubled_braces_are_literal() {
        assert_eq!(render(&["awk", "{{print $1}}", "{node}"]).unwrap(), ["awk", "{print $1}", "node-a"]);
    }

    #[test]
    fn refuses_unknown_placeholders_and_stray_braces() {
        let e = Template::new(vec!["x".into(), "{nodeName}".into()]).unwrap_err();
        assert!(format!("{e}").contains("unknown placeholder {nodeName}"), "{e}");
        assert!(Template::new(vec!["x".into(), "{state".into()]).is_err());
        assert!(Template::new(vec!["x".into(), "a}b".into()]).is_err());
        assert!(Template::new(vec![]).is_err());
    }
}
