//! Service proxy implementations behind one small trait, and a factory that picks one by name.
//!
//! A proxy sees only the desired state (the cluster's Services and endpoints, as the model and
//! as Kubernetes objects), never the oracle's expectations. Starting one returns a [`Running`]
//! proxy: the runner changes its state between steps, reads its data plane for evidence and
//! stops it before the namespaces go.

pub mod apiserver;
pub(crate) mod changes;
pub mod cluster;
mod cluster_settings;
pub mod command;
pub(crate) mod conntrack_cleanup;
pub(crate) mod endpoint_choice;
pub(crate) mod healthcheck;
pub mod iptables;
pub mod iptables_rules;
pub mod ipvs;
pub mod kube_proxy_config;
mod loader;
mod lookaside;
pub mod mutant;
pub mod nftables;
pub(crate) mod node_ports;
mod options;
mod programmed;
pub mod reference;
pub mod registry;
pub mod ruleset;
#[cfg(test)]
pub(crate) mod test_support;

use std::path::Path;

use anyhow::Result;

use crate::model::{Cluster, Objects, Profile, ProxyChoice};
use crate::topology::{NodeHandle, Topology};

pub use mutant::Mutant;
pub use programmed::{NodeProgrammer, NodeState, program_nodes};

/// The proxy under test failed at its own job: it counted failed syncs. That is
/// the proxy failing its scenario (exit 1), not the input or the machine (exit 2); `log` is its
/// evidence, as files (name, contents) for the scenario's evidence folder.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct ProxyFailed {
    pub message: String,
    pub log: Vec<(String, Vec<u8>)>,
}

/// Something that makes node namespaces implement Services.
pub trait Proxy: Send + Sync {
    /// The name a scenario or the command line selects it by.
    fn name(&self) -> &str;

    /// The profile its outcomes are judged by unless the run names one: the implementation
    /// it is, or just the Kubernetes contract.
    fn profile(&self) -> Profile {
        Profile::KUBERNETES
    }

    /// Starts the proxy on every node of `env.topology` and returns once every node
    /// implements `state`.
    fn start<'a>(&'a self, state: &State<'_>, env: &Env<'a>) -> Result<Box<dyn Running + 'a>>;

    /// Why this machine cannot run the proxy at all (a kernel without what it needs), if it
    /// cannot: every scenario is then skipped with the reason, never passed.
    fn unavailable(&self) -> Option<String> {
        None
    }

    /// Checks the files the proxy will read for the scenario file `source` with these nodes
    /// (a rule dump per node), so that `check` refuses what `run` could not set up.
    fn check_inputs(&self, _source: &Path, _nodes: &[&str]) -> Result<()> {
        Ok(())
    }

    /// Whether this proxy, a built-in one broken by a mutant, does in `cluster`'s state exactly
    /// what the unbroken one does: the bug is all in the rules, and they come out the same on
    /// every node. A scenario in whose every state that holds cannot tell the two apart, so a
    /// hunt need not run it. `false` wherever that is not known.
    fn same_as_unbroken(&self, _cluster: &Cluster) -> bool {
        false
    }
}

/// A started proxy. Dropping it must stop whatever it started, as [`Running::stop`] does
/// (an error or a panic drops it without a stop).
pub trait Running {
    /// Makes every node implement a changed state (a scenario step), and returns once it does.
    fn update(&mut self, state: &State<'_>) -> Result<()>;

    /// The node's data-plane state as loaded (e.g. `iptables-save`), for failure reports.
    fn dump_node(&self, node: &NodeHandle) -> Result<String>;

    /// Files to keep with a failure's evidence besides the rules (logs, input files):
    /// file name → contents.
    fn artifacts(&self) -> Vec<(String, Vec<u8>)> {
        Vec::new()
    }

    /// Restarts the proxy on every node with `state`, keeping what surrounds it (an API
    /// server), and returns once every node implements `state` again; `false` when the proxy
    /// has nothing of its own to restart with, and is stopped and started whole instead.
    fn restart(&mut self, _state: &State<'_>) -> Result<bool> {
        Ok(false)
    }

    /// Stops whatever the proxy started (processes, servers).
    fn stop(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

/// The desired state: the model, and the same state as the Kubernetes objects it came from.
#[derive(Debug, Clone, Copy)]
pub struct State<'s> {
    pub cluster: &'s Cluster,
    pub objects: &'s Objects,
}

/// Where a proxy runs.
pub struct Env<'a> {
    pub topology: &'a Topology,
    /// The run's async runtime, for servers a proxy starts (health checks, an API server).
    pub runtime: tokio::runtime::Handle,
    /// The scenario file, for adapters whose inputs sit beside it (rule dumps).
    pub source: &'a Path,
}

/// Builds a built-in proxy, broken by a mutant or (`None`) as it should be.
pub type Breakable = fn(Option<Mutant>) -> Box<dyn Proxy>;

/// The built-in proxy named `name`, to be broken by a mutant (or not).
pub fn breakable(name: &str) -> Option<Breakable> {
    registry::built_in(name).map(|b| b.make)
}

/// Bugs the built-in proxy `name` can have that no scenario can show, with why (IPVS mode's
/// own connection table hides conntrack bugs): named as not hunted.
pub fn not_observable(name: &str) -> &'static [(Mutant, &'static str)] {
    registry::built_in(name).map_or(&[], |b| b.not_observable)
}

/// The catalogued bugs the built-in proxy `name` can have.
pub fn catalog(name: &str) -> Vec<Mutant> {
    registry::built_in(name).map_or_else(Vec::new, |b| (b.catalog)())
}

/// The option that names a built-in's mutant (`mutant: NAME` in a file, `--proxy-option
/// mutant=NAME`): read and written only here, so the rest of the harness passes a [`Mutant`].
const MUTANT_OPTION: &str = "mutant";

/// The built-in proxy `name` broken by `mutant`, as a choice a run or a file can carry.
pub fn broken(name: &str, mutant: Mutant) -> ProxyChoice {
    let mut choice = ProxyChoice::named(name);
    choice.options.insert(MUTANT_OPTION.into(), mutant.name().into());
    choice
}

/// The mutant `choice` names, if it names one: an error if its option is not a catalogued
/// bug's name.
pub fn mutant_of(choice: &ProxyChoice) -> Result<Option<Mutant>> {
    match choice.options.get(MUTANT_OPTION) {
        None => Ok(None),
        Some(serde_json::Value::String(name)) => name.parse::<Mutant>().map(Some).map_err(anyhow::Error::msg),
        Some(_) => anyhow::bail!("option `{MUTANT_OPTION}` must be a mutant's name"),
    }
}

/// `choice` without its mutant: the proxy as it should be.
pub fn unbroken(choice: &ProxyChoice) -> ProxyChoice {
    let mut unbroken = choice.clone();
    unbroken.options.remove(MUTANT_OPTION);
    unbroken
}

/// A second implementation of what `choice` implements, to tell a rare failure of this proxy
/// from one of the expectation: the proxy without its mutant, the other built-in mode for a
/// built-in (iptables for IPVS), the built-in of its mode for an adapter.
pub fn second_opinion(choice: &ProxyChoice) -> ProxyChoice {
    use kube_proxy_config::Mode;
    if choice.options.contains_key(MUTANT_OPTION) && breakable(&choice.name).is_some() {
        return unbroken(choice);
    }
    let name = match (
        registry::find(&choice.name).map(|e| &e.kind),
        registry::mode_of(&choice.name, &choice.options),
    ) {
        (Some(registry::Kind::BuiltIn(_)), Mode::Iptables) => registry::built_in_of_mode(Mode::Nftables),
        (Some(registry::Kind::BuiltIn(_)), Mode::Nftables | Mode::Ipvs) => {
            registry::built_in_of_mode(Mode::Iptables)
        }
        (_, mode) => registry::built_in_of_mode(mode),
    };
    ProxyChoice::named(name)
}

/// A built-in proxy from its one option, `mutant: NAME` (a deliberately broken build of it,
/// e.g. for `diff` against the original).
fn built_in(choice: &ProxyChoice, breakable: Breakable) -> Result<Box<dyn Proxy>> {
    if let Some(other) = choice.options.keys().find(|k| *k != MUTANT_OPTION) {
        anyhow::bail!("{} takes only the option `{MUTANT_OPTION}`, but {other:?} was given", choice.name)
    }
    let mutant = mutant_of(choice)?;
    if let Some(m) = mutant {
        if let Some((_, why)) = not_observable(&choice.name).iter().find(|(n, _)| *n == m) {
            anyhow::bail!("{} cannot show the bug {}: {why}", choice.name, m.name());
        }
        anyhow::ensure!(
            catalog(&choice.name).contains(&m),
            "{} cannot have the bug {}",
            choice.name,
            m.name()
        );
    }
    Ok(breakable(mutant))
}

/// Builds the proxy a scenario or the command line names. Adapter options name files
/// relative to `scenario_dir`; without options, `ruleset` and `command` find their inputs
/// beside the scenario file (their module docs).
pub fn build(choice: &ProxyChoice, scenario_dir: &Path) -> Result<Box<dyn Proxy>> {
    match registry::find(&choice.name).map(|e| &e.kind) {
        Some(registry::Kind::BuiltIn(b)) => built_in(choice, b.make),
        Some(registry::Kind::Adapter(a)) => {
            (a.build)(&serde_json::Value::Object(choice.options.clone()), scenario_dir)
        }
        None => anyhow::bail!("unknown proxy {:?} (known: {})", choice.name, registry::names().join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choice(name: &str, options: serde_json::Value) -> ProxyChoice {
        ProxyChoice { name: name.into(), options: options.as_object().cloned().unwrap_or_default() }
    }

    #[test]
    fn a_mutant_travels_typed_and_its_option_is_read_back_or_refused() {
        let m = catalog(iptables::NAME)[0];
        let broken = broken(iptables::NAME, m);
        assert_eq!(mutant_of(&broken).unwrap(), Some(m));
        assert_eq!(mutant_of(&unbroken(&broken)).unwrap(), None);
        assert_eq!(unbroken(&broken), ProxyChoice::named(iptables::NAME));
        assert!(mutant_of(&choice(iptables::NAME, serde_json::json!({"mutant": 3}))).is_err());
        assert!(mutant_of(&choice(iptables::NAME, serde_json::json!({"mutant": "no-such-bug"}))).is_err());
        assert!(build(&choice(iptables::NAME, serde_json::json!({"other": 1})), Path::new(".")).is_err());
    }

    #[test]
    fn a_second_opinion_implements_the_same_mode_elsewhere() {
        let named = |c: &ProxyChoice| second_opinion(c).name;
        assert_eq!(named(&choice(iptables::NAME, serde_json::json!({}))), nftables::NAME);
        assert_eq!(named(&choice(nftables::NAME, serde_json::json!({}))), iptables::NAME);
        assert_eq!(
            second_opinion(&choice(nftables::NAME, serde_json::json!({"mutant": "drop-instead-of-reject"}))),
            ProxyChoice::named(nftables::NAME),
            "a mutant is judged against the proxy it breaks"
        );
        let kube_proxy =
            |mode: &str| choice(apiserver::NAME, serde_json::json!({"command": "kp", "mode": mode}));
        assert_eq!(named(&kube_proxy("nftables")), nftables::NAME);
        assert_eq!(named(&kube_proxy("iptables")), iptables::NAME);
        assert_eq!(named(&kube_proxy("ipvs")), ipvs::NAME);
        assert_eq!(named(&choice(command::NAME, serde_json::json!({}))), iptables::NAME);
    }
}
