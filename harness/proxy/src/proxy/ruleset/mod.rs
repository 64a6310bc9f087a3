//! The `ruleset` adapter: replays rule dumps taken from real nodes into the node namespaces,
//! so the harness judges what a real kube-proxy (or any proxy) wrote, not what we generate.
//!
//! A dump is `iptables-save` output (loaded with `iptables-restore -w`, or `ip6tables-restore -w`
//! when it is IPv6) or `nft list ruleset` output (`nft -f`); the format is read off the text
//! (see [`dump::Format::detect`]). A dual-stack node's dump is `iptables-save` output followed
//! by `ip6tables-save` output, each part loaded with its tool ([`dump::sections`]). Besides
//! the rules, the node gets what kube-proxy sets when the rules need it:
//! `net.ipv4.conf.all.route_localnet=1` when the dump lets node ports answer on 127.0.0.1.
//!
//! # Options (a JSON object; relative paths are relative to the scenario file's directory)
//!
//! ```json
//! {"rulesets": {"node-a": "rulesets/a.rules", "node-b": "rulesets/b.rules"},
//!  "ruleset": "rulesets/every-other-node.rules"}
//! ```
//! - `rulesets`: a dump per node name; every name must be a node of the scenario.
//! - `ruleset`: the dump for every node `rulesets` does not name.
//!
//! # Convention (no option for a node)
//!
//! For a scenario file `<dir>/<stem>.yaml`, a node's dump is `<dir>/rulesets/<stem>.<node>.rules`
//! if that file exists, else `<dir>/rulesets/<stem>.rules`. This is how `spec.proxy: ruleset`
//! finds its dumps until scenario files can carry adapter options.
//!
//! A replay is static: [`Running::update`] fails (a scenario step changes the desired state,
//! and replayed rules cannot follow it), rather than judging new state against stale rules.

pub mod dump;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::Deserialize;

use crate::model::IpFamily;
use crate::proxy::{Env, Proxy, Running, State};
use crate::topology::NodeHandle;
use dump::Format;

pub const NAME: &str = "ruleset";

/// Where the node ports on 127.0.0.1 need the kernel to route loopback-addressed packets.
const ROUTE_LOCALNET: &str = "/proc/sys/net/ipv4/conf/all/route_localnet";

/// Replays dumps into node namespaces. The default finds every dump by convention.
#[derive(Debug, Clone, Default)]
pub struct Ruleset {
    /// `rulesets`: a dump per node name.
    per_node: BTreeMap<String, PathBuf>,
    /// `ruleset`: the dump of every other node.
    every: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    #[serde(default)]
    rulesets: BTreeMap<String, PathBuf>,
    ruleset: Option<PathBuf>,
}

impl Ruleset {
    /// From the adapter options of a scenario in `scenario_dir` (see the module doc); `null`
    /// or `{}` finds every dump by convention.
    pub fn from_options(options: &serde_json::Value, scenario_dir: &Path) -> Result<Ruleset> {
        if options.is_null() {
            return Ok(Ruleset::default());
        }
        let options: Options = serde_json::from_value(options.clone()).context(
            "reading the ruleset adapter's options ({\"ruleset\": FILE} or {\"rulesets\": {NODE: FILE}})",
        )?;
        Ok(Ruleset {
            per_node: options.rulesets.into_iter().map(|(node, p)| (node, scenario_dir.join(p))).collect(),
            every: options.ruleset.map(|p| scenario_dir.join(p)),
        })
    }

    /// The dump for `node` of the scenario file `source`.
    fn dump_for(&self, node: &str, source: &Path) -> Result<PathBuf> {
        if let Some(path) = self.per_node.get(node).or(self.every.as_ref()) {
            return Ok(path.clone());
        }
        let candidates = conventional_paths(source, node);
        match candidates.iter().find(|p| p.is_file()) {
            Some(found) => Ok(found.clone()),
            None => {
                let tried: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
                bail!(
                    "no rule dump for node {node}: no ruleset option names one, and none of {} exists",
                    tried.join(", ")
                )
            }
        }
    }
}

/// `<dir>/rulesets/<stem>.<node>.rules`, then `<dir>/rulesets/<stem>.rules`.
pub(crate) fn conventional_paths(source: &Path, node: &str) -> Vec<PathBuf> {
    let dir = crate::model::folder_of(source).join("rulesets");
    let stem = source.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    vec![dir.join(format!("{stem}.{node}.rules")), dir.join(format!("{stem}.rules"))]
}

impl Proxy for Ruleset {
    fn name(&self) -> &str {
        NAME
    }

    fn check_inputs(&self, source: &Path, nodes: &[&str]) -> Result<()> {
        for node in nodes {
            let path = self.dump_for(node, source)?;
            anyhow::ensure!(path.is_file(), "the rule dump {} for node {node} is not a file", path.display());
        }
        Ok(())
    }

    fn start<'a>(&'a self, _state: &State<'_>, env: &Env<'a>) -> Result<Box<dyn Running + 'a>> {
        let nodes = &env.topology.nodes;
        if let Some(unknown) = self.per_node.keys().find(|n| !nodes.iter().any(|node| &node.name == *n)) {
            let known: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
            bail!(
                "the rulesets option names node {unknown:?}, which the scenario lacks (nodes: {})",
                known.join(", ")
            );
        }
        let mut replayed = Replayed { nodes: Vec::new(), inputs: Vec::new() };
        for node in nodes {
            let path = self.dump_for(&node.name, env.source)?;
            let text = std::fs::read_to_string(&path).with_context(|| {
                format!("reading the rule dump {} for node {}", path.display(), node.name)
            })?;
            let parts =
                dump::sections(&text).with_context(|| format!("reading the rule dump {}", path.display()))?;
            for (format, part) in &parts {
                replay(node, part, *format).with_context(|| {
                    format!("replaying {} ({}) on node {}", path.display(), format.describe(), node.name)
                })?;
            }
            let file = path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
            replayed.inputs.push((format!("ruleset-{}-{file}", node.name), text.into_bytes()));
            replayed.nodes.push((node.name.clone(), parts.into_iter().map(|(f, _)| f).collect()));
        }
        Ok(Box::new(replayed))
    }
}

/// Loads `text` into the node, with what kube-proxy sets besides rules when they need it.
fn replay(node: &NodeHandle, text: &str, format: Format) -> Result<()> {
    if format == Format::Iptables(IpFamily::V4) && dump::has_localhost_node_ports(text) {
        node.netns
            .run(|| std::fs::write(ROUTE_LOCALNET, "1"))?
            .context("setting route_localnet (the dump lets node ports answer on 127.0.0.1)")?;
    }
    // No --noflush: the namespace is fresh and ours alone. -w waits for the xtables lock,
    // which iptables-legacy shares across namespaces.
    let (program, args): (&str, &[&str]) = match format {
        Format::Iptables(IpFamily::V4) => ("iptables-restore", &["-w"]),
        Format::Iptables(IpFamily::V6) => ("ip6tables-restore", &["-w"]),
        Format::Nftables => ("nft", &["-f", "-"]),
    };
    node.netns.exec(program, args, Some(text.as_bytes()))?;
    Ok(())
}

/// The dumps loaded, per node.
struct Replayed {
    /// What each node was loaded with (two iptables families on a dual-stack node).
    nodes: Vec<(String, Vec<Format>)>,
    /// The dumps as replayed, kept with a failure's evidence.
    inputs: Vec<(String, Vec<u8>)>,
}

impl Running for Replayed {
    fn update(&mut self, _state: &State<'_>) -> Result<()> {
        bail!(
            "the ruleset proxy replays fixed rule dumps and cannot follow a change of the desired \
             state (a scenario step); give each state its own scenario and dump"
        )
    }

    fn dump_node(&self, node: &NodeHandle) -> Result<String> {
        let formats =
            self.nodes.iter().find(|(n, _)| *n == node.name).map(|(_, f)| f.clone()).unwrap_or_default();
        let mut dump = String::new();
        for format in formats {
            let (program, args): (&str, &[&str]) = match format {
                Format::Iptables(IpFamily::V4) => ("iptables-save", &[]),
                Format::Iptables(IpFamily::V6) => ("ip6tables-save", &[]),
                Format::Nftables => ("nft", &["list", "ruleset"]),
            };
            let out = node
                .netns
                .exec(program, args, None)
                .with_context(|| format!("dumping the rules of node {}", node.name))?;
            dump.push_str(&crate::observe::nftrace::without_trace_table(&String::from_utf8_lossy(
                &out.stdout,
            )));
        }
        Ok(dump)
    }

    fn artifacts(&self) -> Vec<(String, Vec<u8>)> {
        self.inputs.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_resolve_relative_to_the_scenario() {
        let options =
            serde_json::json!({"rulesets": {"node-a": "rulesets/a.rules"}, "ruleset": "/abs/all.rules"});
        let r = Ruleset::from_options(&options, Path::new("/suite")).unwrap();
        let source = Path::new("/suite/x.yaml");
        assert_eq!(r.dump_for("node-a", source).unwrap(), Path::new("/suite/rulesets/a.rules"));
        assert_eq!(r.dump_for("node-b", source).unwrap(), Path::new("/abs/all.rules"));
    }

    #[test]
    fn unknown_options_are_refused() {
        let e = Ruleset::from_options(&serde_json::json!({"rules": "x"}), Path::new("/")).unwrap_err();
        assert!(format!("{e:#}").contains("unknown field `rules`"), "{e:#}");
    }

    #[test]
    fn convention_prefers_the_node_file_and_says_what_it_tried() {
        let dir = std::env::temp_dir().join(format!("pp-ruleset-test-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("rulesets")).unwrap();
        let source = dir.join("seed.yaml");
        std::fs::write(dir.join("rulesets/seed.rules"), "*nat\nCOMMIT\n").unwrap();
        std::fs::write(dir.join("rulesets/seed.node-b.rules"), "*nat\nCOMMIT\n").unwrap();
        let r = Ruleset::from_options(&serde_json::Value::Null, &dir).unwrap();
        assert_eq!(r.dump_for("node-a", &source).unwrap(), dir.join("rulesets/seed.rules"));
        assert_eq!(r.dump_for("node-b", &source).unwrap(), dir.join("rulesets/seed.node-b.rules"));
        let e = r.dump_for("node-a", &dir.join("other.yaml")).unwrap_err();
        assert!(format!("{e}").contains("other.node-a.rules"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
