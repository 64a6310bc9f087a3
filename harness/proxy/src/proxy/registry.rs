//! Every proxy this build knows, declared once: its name, what it is and how it is built.
//! Commands, tests and defaults ask here, never match on a name; a new proxy is one entry here
//! and its module.

use std::path::Path;

use anyhow::Result;
use serde_json::Value;

use super::kube_proxy_config::Mode;
use super::{Mutant, Proxy, apiserver, cluster, command, iptables, ipvs, nftables, ruleset};
use crate::model::Cluster;

/// One proxy.
pub struct Entry {
    /// The name a scenario or the command line selects it by.
    pub name: &'static str,
    pub kind: Kind,
}

pub enum Kind {
    /// Programs a node as kube-proxy's `mode` does, and can be broken by a mutant.
    BuiltIn(BuiltIn),
    /// Drives a proxy packetproof does not contain (or runs its own as a separate program),
    /// configured by its options.
    Adapter(Adapter),
}

pub struct BuiltIn {
    pub mode: Mode,
    /// The proxy, broken by a mutant or (`None`) as it should be.
    pub make: fn(Option<Mutant>) -> Box<dyn Proxy>,
    /// What it loads on a node (for `packetproof rules`).
    pub render: fn(&Cluster, &str, Option<Mutant>) -> String,
    /// The catalogued bugs it can have.
    pub catalog: fn() -> Vec<Mutant>,
    /// Bugs it can have that no scenario can show, with why: named as not hunted.
    pub not_observable: &'static [(Mutant, &'static str)],
}

pub struct Adapter {
    /// Built from its options (an object), which name files relative to the scenario's folder.
    pub build: fn(&Value, &Path) -> Result<Box<dyn Proxy>>,
    /// The built-in proxy of the mode the options choose (a second implementation of it).
    pub mode: fn(&serde_json::Map<String, Value>) -> Mode,
}

/// The proxies this build knows; the default of scenario files and commands is
/// [`crate::model::DEFAULT_PROXY`], the built-in of iptables mode.
pub static ENTRIES: [Entry; 10] = [
    Entry {
        name: iptables::NAME,
        kind: Kind::BuiltIn(BuiltIn {
            mode: Mode::Iptables,
            make: |mutant| Box::new(iptables::BuiltinIptables { mutant }),
            render: iptables::render_node,
            catalog: || rule_catalog(false, false),
            not_observable: &[],
        }),
    },
    Entry {
        name: nftables::NAME,
        kind: Kind::BuiltIn(BuiltIn {
            mode: Mode::Nftables,
            make: |mutant| Box::new(nftables::BuiltinNftables { mutant, ..Default::default() }),
            render: nftables::render_node,
            catalog: || rule_catalog(true, false),
            not_observable: &[],
        }),
    },
    Entry {
        name: nftables::NAME_V1_31,
        kind: Kind::BuiltIn(BuiltIn {
            mode: Mode::Nftables,
            make: |mutant| Box::new(nftables::BuiltinNftables { mutant, layout: nftables::Layout::V1_31 }),
            render: |cluster, node, mutant| {
                nftables::render_node_in(cluster, node, mutant, nftables::Layout::V1_31)
            },
            // v1.31's layout has the bug `etp-local-filtered-before-dnat` by design: the mutant
            // would change nothing.
            catalog: || rule_catalog(true, true),
            not_observable: &[],
        }),
    },
    Entry {
        name: ipvs::NAME,
        kind: Kind::BuiltIn(BuiltIn {
            mode: Mode::Ipvs,
            make: |mutant| Box::new(ipvs::BuiltinIpvs { mutant }),
            render: ipvs::render_node,
            catalog: || ipvs::mutants::CATALOG.to_vec(),
            not_observable: &ipvs::mutants::NOT_OBSERVABLE,
        }),
    },
    Entry {
        name: ruleset::NAME,
        kind: Kind::Adapter(Adapter {
            build: |options, dir| match options.as_object().is_some_and(|o| !o.is_empty()) {
                false => Ok(Box::new(ruleset::Ruleset::default())),
                true => Ok(Box::new(ruleset::Ruleset::from_options(options, dir)?)),
            },
            mode: |_| Mode::Iptables,
        }),
    },
    Entry {
        name: command::NAME,
        kind: Kind::Adapter(Adapter {
            build: |options, dir| match options.as_object().is_some_and(|o| !o.is_empty()) {
                false => Ok(Box::new(command::CommandProxy::default())),
                true => Ok(Box::new(command::CommandProxy::from_options(options, dir)?)),
            },
            mode: |_| Mode::Iptables,
        }),
    },
    Entry {
        name: apiserver::NAME,
        kind: Kind::Adapter(Adapter {
            build: |options, _| Ok(Box::new(apiserver::ApiServerProxy::from_options(options)?)),
            mode: mode_option,
        }),
    },
    Entry {
        name: apiserver::REFERENCE_IPTABLES,
        kind: Kind::Adapter(Adapter {
            build: |options, _| {
                Ok(Box::new(apiserver::ApiServerProxy::reference_from_options(Mode::Iptables, options)?))
            },
            mode: |_| Mode::Iptables,
        }),
    },
    Entry {
        name: apiserver::REFERENCE_NFTABLES,
        kind: Kind::Adapter(Adapter {
            build: |options, _| {
                Ok(Box::new(apiserver::ApiServerProxy::reference_from_options(Mode::Nftables, options)?))
            },
            mode: |_| Mode::Nftables,
        }),
    },
    Entry {
        name: cluster::NAME,
        kind: Kind::Adapter(Adapter {
            build: |options, _| Ok(Box::new(cluster::ClusterProxy::from_options(options)?)),
            mode: mode_option,
        }),
    },
];

/// The proxy named `name`.
pub fn find(name: &str) -> Option<&'static Entry> {
    ENTRIES.iter().find(|e| e.name == name)
}

/// The built-in proxy named `name`.
pub fn built_in(name: &str) -> Option<&'static BuiltIn> {
    match &find(name)?.kind {
        Kind::BuiltIn(b) => Some(b),
        Kind::Adapter(_) => None,
    }
}

/// Every name, in the order declared.
pub fn names() -> Vec<&'static str> {
    ENTRIES.iter().map(|e| e.name).collect()
}

/// The built-in proxy that programs a node as `mode` does (its current layout).
pub fn built_in_of_mode(mode: Mode) -> &'static str {
    ENTRIES
        .iter()
        .find(|e| matches!(&e.kind, Kind::BuiltIn(b) if b.mode == mode))
        .map(|e| e.name)
        .expect("every mode has a built-in proxy")
}

/// The mode a proxy chosen with `options` programs: a built-in's own, an adapter's from its
/// options (iptables unless told).
pub fn mode_of(name: &str, options: &serde_json::Map<String, Value>) -> Mode {
    match find(name).map(|e| &e.kind) {
        Some(Kind::BuiltIn(b)) => b.mode,
        Some(Kind::Adapter(a)) => (a.mode)(options),
        None => mode_option(options),
    }
}

/// The `mode` option of kube-proxy's adapters; iptables unless told (or not understood: the
/// adapter itself refuses that).
fn mode_option(options: &serde_json::Map<String, Value>) -> Mode {
    options.get("mode").and_then(Value::as_str).and_then(|m| Mode::parse(m).ok()).unwrap_or(Mode::Iptables)
}

/// The rule backends' catalog: every mutant of kube-proxy's iptables or nftables rules, less
/// those that are IPVS mode's; `v1_31` leaves out the one that layout has by design.
fn rule_catalog(nftables: bool, v1_31: bool) -> Vec<Mutant> {
    Mutant::ALL
        .into_iter()
        .filter(|m| {
            !m.only_in_ipvs() && if nftables { m.exists_in_nftables() } else { !m.only_in_nftables() }
        })
        .filter(|m| !(v1_31 && *m == Mutant::EtpLocalFilteredBeforeDnat))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_the_default_is_the_iptables_built_in() {
        let mut names = names();
        let count = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), count);
        assert_eq!(crate::model::DEFAULT_PROXY, built_in_of_mode(Mode::Iptables));
    }

    #[test]
    fn every_mode_has_a_built_in_of_that_mode() {
        for mode in [Mode::Iptables, Mode::Nftables, Mode::Ipvs] {
            assert_eq!(built_in(built_in_of_mode(mode)).map(|b| b.mode), Some(mode));
        }
    }
}
