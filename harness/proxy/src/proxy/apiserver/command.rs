//! The proxy command line, from a template with placeholders filled per node.

use anyhow::{Result, bail};

/// Placeholders a template may use.
pub const PLACEHOLDERS: &[&str] = &[
    "{kubeconfig}",
    "{node}",
    "{nodeIP}",
    "{netns}",
    "{clusterCIDR}",
    "{serviceCIDR}",
    "{healthzPort}",
    "{metricsPort}",
    "{config}",
    "{proxyFlags}",
];

/// A command template: words split on whitespace (no shell quoting). `{proxyFlags}` stands
/// alone and becomes zero or more words: the cluster's proxy configuration as kube-proxy flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    words: Vec<String>,
}

/// The values of the placeholders for one node.
#[derive(Debug, Clone)]
pub struct Vars {
    pub kubeconfig: String,
    pub node: String,
    pub node_ip: String,
    pub netns: String,
    pub cluster_cidr: String,
    pub service_cidr: String,
    pub healthz_port: Option<u16>,
    pub metrics_port: Option<u16>,
    /// The node's KubeProxyConfiguration file.
    pub config: String,
    pub proxy_flags: Vec<String>,
}

impl Template {
    pub fn parse(text: &str) -> Result<Template> {
        Template::from_words(text.split_whitespace().map(str::to_string).collect())
    }

    pub(crate) fn from_words(words: Vec<String>) -> Result<Template> {
        if words.is_empty() {
            bail!("the proxy command is empty");
        }
        for w in &words {
            let mut rest = w.as_str();
            while let Some(start) = rest.find('{') {
                let Some(len) = rest[start..].find('}') else { break };
                let name = &rest[start..start + len + 1];
                if !PLACEHOLDERS.contains(&name) {
                    bail!(
                        "unknown placeholder {name} in the proxy command (known: {})",
                        PLACEHOLDERS.join(" ")
                    );
                }
                rest = &rest[start + len + 1..];
            }
            if w.contains("{proxyFlags}") && w != "{proxyFlags}" {
                bail!("{{proxyFlags}} must be a word of its own in the proxy command");
            }
        }
        Ok(Template { words })
    }

    pub fn uses(&self, placeholder: &str) -> bool {
        self.words.iter().any(|w| w.contains(placeholder))
    }

    /// The command line for one node: program first.
    pub(crate) fn expand(&self, v: &Vars) -> Result<Vec<String>> {
        if self.uses("{healthzPort}") && v.healthz_port.is_none() {
            bail!("the proxy command uses {{healthzPort}} but no healthz port is configured");
        }
        if self.uses("{metricsPort}") && v.metrics_port.is_none() {
            bail!("the proxy command uses {{metricsPort}} but no metrics port is configured");
        }
        let port = |p: Option<u16>| p.map(|p| p.to_string()).unwrap_or_default();
        let mut out = Vec::new();
        for w in &self.words {
            if w == "{proxyFlags}" {
                out.extend(v.proxy_flags.iter().cloned());
                continue;
            }
            out.push(
                w.replace("{kubeconfig}", &v.kubeconfig)
                    .replace("{node}", &v.node)
                    .replace("{nodeIP}", &v.node_ip)
                    .replace("{netns}", &v.netns)
                    .replace("{clusterCIDR}", &v.cluster_cidr)
                    .replace("{serviceCIDR}", &v.service_cidr)
                    .replace("{healthzPort}", &port(v.healthz_port))
                    .replace("{metricsPort}", &port(v.metrics_port))
                    .replace("{config}", &v.config),
            );
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> Vars {
        Vars {
            kubeconfig: "/tmp/k".into(),
            node: "node-a".into(),
            node_ip: "192.168.50.11".into(),
            netns: "pp-1-0-n-node-a".into(),
            cluster_cidr: "10.244.0.0/16".into(),
            service_cidr: "10.96.0.0/12".into(),
            healthz_port: Some(10256),
            metrics_port: Some(10249),
            config: "/tmp/c".into(),
            proxy_flags: vec!["--masquerade-all".into()],
        }
    }

    #[test]
    fn placeholders_are_filled_and_proxy_flags_spread() {
        let t = Template::parse(
            "kube-proxy --kubeconfig={kubeconfig} --hostname-override {node} \
             --healthz-bind-address=0.0.0.0:{healthzPort} {proxyFlags} --v=2 --config={config} {metricsPort}",
        )
        .unwrap();
        assert_eq!(
            t.expand(&vars()).unwrap(),
            [
                "kube-proxy",
                "--kubeconfig=/tmp/k",
                "--hostname-override",
                "node-a",
                "--healthz-bind-address=0.0.0.0:10256",
                "--masquerade-all",
                "--v=2",
                "--config=/tmp/c",
                "10249"
            ]
        );
    }

    #[test]
    fn unknown_placeholders_and_missing_values_are_errors() {
        assert!(Template::parse("proxy {nodeName}").is_err());
        assert!(Template::parse("proxy --x={proxyFlags}").is_err());
        assert!(Template::parse("  ").is_err());
        let t = Template::parse("proxy --port {healthzPort}").unwrap();
        assert!(t.expand(&Vars { healthz_port: None, ..vars() }).is_err());
    }
}
