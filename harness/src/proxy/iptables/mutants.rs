//! Deliberately broken rulesets, each a bug a real proxy has shipped or could ship, for tests
//! that prove the harness's checks can fail.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use super::ladder;
use super::naming;
use super::ruleset::{Rule, RuleSet, args};
use crate::model::Cluster;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mutant {
    NoHairpinMasq,
    NoNodePortMasq,
    NoOffClusterMasq,
    LastEndpointNeverChosen,
    DropInsteadOfReject,
    DnatToServicePort,
}

impl Mutant {
    pub const ALL: [Mutant; 6] = [
        Mutant::NoHairpinMasq,
        Mutant::NoNodePortMasq,
        Mutant::NoOffClusterMasq,
        Mutant::LastEndpointNeverChosen,
        Mutant::DropInsteadOfReject,
        Mutant::DnatToServicePort,
    ];

    /// The name the command line selects it by, e.g. `no-hairpin-masq`.
    pub fn name(self) -> &'static str {
        match self {
            Mutant::NoHairpinMasq => "no-hairpin-masq",
            Mutant::NoNodePortMasq => "no-node-port-masq",
            Mutant::NoOffClusterMasq => "no-off-cluster-masq",
            Mutant::LastEndpointNeverChosen => "last-endpoint-never-chosen",
            Mutant::DropInsteadOfReject => "drop-instead-of-reject",
            Mutant::DnatToServicePort => "dnat-to-service-port",
        }
    }

    pub fn description(self) -> &'static str {
        match self {
            Mutant::NoHairpinMasq => {
                "KUBE-SEP chains lack the hairpin rule: a pod reaching itself through its service is not masqueraded"
            }
            Mutant::NoNodePortMasq => {
                "KUBE-EXT chains do not mark for masquerade: node-port traffic forwarded to another node keeps the client address"
            }
            Mutant::NoOffClusterMasq => {
                "KUBE-SVC chains lack the `! -s <pod CIDR>` rule: off-cluster clients of a cluster IP are not masqueraded"
            }
            Mutant::LastEndpointNeverChosen => {
                "the probability ladder is computed for n-1 endpoints, so the next-to-last rule always matches and the last endpoint never gets traffic"
            }
            Mutant::DropInsteadOfReject => {
                "a service port without endpoints silently drops packets instead of rejecting them with ICMP port unreachable"
            }
            Mutant::DnatToServicePort => {
                "KUBE-SEP chains DNAT to the endpoint IP with the service port instead of the target port"
            }
        }
    }

    /// Breaks `rules` (generated for `cluster`) the way this mutant says.
    pub fn apply(self, cluster: &Cluster, rules: &mut RuleSet) {
        let masq_from = |prefixes: &'static [&'static str]| {
            move |r: &Rule| {
                prefixes.iter().any(|p| r.chain.starts_with(p)) && r.target() == Some("KUBE-MARK-MASQ")
            }
        };
        match self {
            Mutant::NoHairpinMasq => rules.nat.rules.retain(|r| !masq_from(&["KUBE-SEP-"])(r)),
            Mutant::NoNodePortMasq => rules.nat.rules.retain(|r| !masq_from(&["KUBE-EXT-"])(r)),
            Mutant::NoOffClusterMasq => {
                rules.nat.rules.retain(|r| !masq_from(&["KUBE-SVC-", "KUBE-SVL-"])(r))
            }
            Mutant::LastEndpointNeverChosen => off_by_one_ladders(rules),
            Mutant::DropInsteadOfReject => reject_to_drop(rules),
            Mutant::DnatToServicePort => dnat_to_service_port(cluster, rules),
        }
    }
}

/// Rule `i` of `n` gets `1/(n-1-i)` instead of `1/(n-i)`: `computeProbability(n - i - 1)`.
fn off_by_one_ladders(rules: &mut RuleSet) {
    let chains: Vec<String> = rules
        .nat
        .chains
        .iter()
        .filter(|c| c.name.starts_with("KUBE-SVC-") || c.name.starts_with("KUBE-SVL-"))
        .map(|c| c.name.clone())
        .collect();
    for chain in chains {
        let ladder: Vec<usize> = (0..rules.nat.rules.len())
            .filter(|&i| {
                let r = &rules.nat.rules[i];
                r.chain == chain && r.target().is_some_and(|t| t.starts_with("KUBE-SEP-"))
            })
            .collect();
        let n = ladder.len();
        for (i, &at) in ladder.iter().enumerate().take(n.saturating_sub(1)) {
            rules.nat.rules[at].set_value("--probability", &ladder::probability(n - 1 - i));
        }
    }
}

fn reject_to_drop(rules: &mut RuleSet) {
    for rule in rules.filter.rules.iter_mut().filter(|r| r.target() == Some("REJECT")) {
        let at = rule.args.iter().position(|a| a == "-j").expect("a rule with a target has -j");
        rule.args.truncate(at);
        rule.args.extend(args!["-j", "DROP"]);
    }
}

fn dnat_to_service_port(cluster: &Cluster, rules: &mut RuleSet) {
    for svc in &cluster.services {
        for port in &svc.ports {
            let name = naming::service_port_name(svc, port);
            for ep in port.endpoints.iter().filter(|ep| matches!(ep.ip, IpAddr::V4(_))) {
                let chain = naming::sep_chain(&name, port.protocol, ep.address());
                let wrong = SocketAddr::new(ep.ip, port.port).to_string();
                for rule in rules.nat.rules.iter_mut().filter(|r| r.chain == chain) {
                    rule.set_value("--to-destination", &wrong);
                }
            }
        }
    }
}

impl fmt::Display for Mutant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Mutant {
    type Err = String;

    fn from_str(s: &str) -> Result<Mutant, String> {
        Mutant::ALL.into_iter().find(|m| m.name() == s).ok_or_else(|| {
            let known: Vec<&str> = Mutant::ALL.iter().map(|m| m.name()).collect();
            format!("unknown mutant {s:?} (known: {})", known.join(", "))
        })
    }
}
