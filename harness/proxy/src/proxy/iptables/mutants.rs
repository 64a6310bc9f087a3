//! The iptables mode's half of the mutation catalog (`proxy::mutant`): how each mutant whose
//! bug is in the finished rules edits them ([`Mutant::apply`]).

use std::net::SocketAddr;

use super::generate::node_ports_jump_all;
use super::ladder;
use super::naming;
use super::ruleset::{Rule, RuleSet, args};
use crate::kubernetes::endpoints::PortPolicy;
use crate::model::{Cluster, IpFamily, Service, ServicePort};
use crate::proxy::mutant::{Mutant, outside_the_rules};
use crate::proxy::node_ports::NodePortAddresses;

impl Mutant {
    /// Breaks `rules` (generated for `cluster` with [`Mutant::deviations`]) the way this
    /// mutant says; mutants that live in the generator or the health server change nothing here.
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
            Mutant::EtpLocalMasquerades => masquerade_local_policy(cluster, rules),
            Mutant::EtpLocalNoDrop => rules.filter.rules.retain(|r| {
                !(r.chain == "KUBE-EXTERNAL-SERVICES"
                    && r.target() == Some("DROP")
                    && r.comment().is_some_and(|c| c.ends_with(" has no local endpoints")))
            }),
            Mutant::SourceRangesNotEnforced => ignore_source_ranges(rules),
            Mutant::AffinityWithoutTimeout => affinity_forever(rules),
            Mutant::NoAffinity => no_affinity(rules),
            Mutant::NodePortOnAllAddresses => node_ports_everywhere(cluster, rules),
            Mutant::NodePortsNotLast => node_ports_first(rules),
            Mutant::LocalnetNotFirewalled => {
                rules.filter.rules.retain(|r| r.comment() != Some("block incoming localnet connections"))
            }
            Mutant::NodePortWithoutEndpointsNotRejected => rules.filter.rules.retain(|r| {
                !(r.chain == "KUBE-EXTERNAL-SERVICES"
                    && r.target() == Some("REJECT")
                    && r.args.iter().any(|a| a == "addrtype"))
            }),
            Mutant::InvalidNotDropped => {
                rules.filter.rules.retain(|r| !(r.has("INVALID") && r.target() == Some("DROP")))
            }
            Mutant::SourceRangesNodeReachesFirstLbIpOnly => node_admitted_on_first_lb_ip_only(cluster, rules),
            Mutant::EtpLocalPodsNotShortCircuited => rules.nat.rules.retain(|r| {
                !(r.chain.starts_with("KUBE-EXT-")
                    && r.comment().is_some_and(|c| c.starts_with("pod traffic for ")))
            }),
            Mutant::EtpLocalAffinityIgnored => {
                rules.nat.rules.retain(|r| !(r.chain.starts_with("KUBE-SVL-") && r.has("--rcheck")))
            }
            outside_the_rules!() => {}
            // nftables mode's own bugs (`Mutant::only_in_nftables`).
            Mutant::EtpLocalFilteredBeforeDnat
            | Mutant::InterfacePrefixMatchedByIndex
            | Mutant::SourceRangesCheckedAfterDnat
            | Mutant::RemoteHairpinNotMasqueraded => {}
        }
    }
}

/// Every service port of the cluster's family with its kube-proxy name.
fn service_ports(cluster: &Cluster) -> impl Iterator<Item = (&Service, &ServicePort, String)> {
    let family = cluster.ip_family();
    cluster
        .services
        .iter()
        .filter(move |s| IpFamily::of(s.cluster_ip()) == family)
        .flat_map(|s| s.ports.iter().map(move |p| (s, p, naming::service_port_name(s, p))))
}

/// Before the final `-j KUBE-SVL-…` of every Local-policy `KUBE-EXT-…` chain (outside
/// traffic; pods and the node were short-circuited earlier), the Cluster policy's masquerade.
fn masquerade_local_policy(cluster: &Cluster, rules: &mut RuleSet) {
    for (svc, port, name) in service_ports(cluster) {
        if !PortPolicy::of(svc, port).external_local {
            continue;
        }
        let ext = naming::ext_chain(&name, port.protocol);
        let svl = naming::svl_chain(&name, port.protocol);
        let last = rules.nat.rules.iter().position(|r| r.chain == ext && r.args == args!["-j", &svl]);
        if let Some(at) = last {
            let comment = format!("masquerade traffic for {name} external destinations");
            let masq = Rule {
                chain: ext,
                args: args!["-m", "comment", "--comment", comment, "-j", "KUBE-MARK-MASQ"],
            };
            rules.nat.rules.insert(at, masq);
        }
    }
}

/// LB IPs jump straight to `KUBE-EXT-…`; the `KUBE-FW-…` chains and the
/// `KUBE-PROXY-FIREWALL` drops are gone (what kube-proxy writes without source ranges).
fn ignore_source_ranges(rules: &mut RuleSet) {
    let firewalls: Vec<String> =
        rules.nat.chains.iter().filter(|c| c.name.starts_with("KUBE-FW-")).map(|c| c.name.clone()).collect();
    for fw in firewalls {
        let ext = fw.replacen("KUBE-FW-", "KUBE-EXT-", 1);
        for rule in
            rules.nat.rules.iter_mut().filter(|r| r.chain == "KUBE-SERVICES" && r.target() == Some(&fw))
        {
            rule.set_value("-j", &ext);
        }
        rules.nat.remove_chain(&fw);
    }
    rules.filter.rules.retain(|r| r.chain != "KUBE-PROXY-FIREWALL");
}

/// In every `KUBE-FW-…` chain, the `-s <LB IP>` rules that admit the node's own traffic keep
/// only the first LB IP's (what the pre-#109826 nesting let the second LB IP's traffic reach).
fn node_admitted_on_first_lb_ip_only(cluster: &Cluster, rules: &mut RuleSet) {
    let family = cluster.ip_family();
    let lb_hosts: Vec<String> = cluster
        .services
        .iter()
        .flat_map(|s| &s.load_balancer_ips)
        .filter(|ip| IpFamily::of(**ip) == family)
        .map(|ip| format!("{ip}/{}", family.host_prefix()))
        .collect();
    let mut seen_in: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    rules.nat.rules.retain(|r| {
        let from_lb_ip = r.chain.starts_with("KUBE-FW-")
            && r.value_of("-s").is_some_and(|s| lb_hosts.iter().any(|h| h == s));
        // The first LB IP rule of each chain stays; later ones go.
        !from_lb_ip || seen_in.insert(r.chain.clone())
    });
}

/// `--rcheck --seconds T --reap` becomes `--rcheck` (`--reap` needs `--seconds`).
fn affinity_forever(rules: &mut RuleSet) {
    for rule in rules.nat.rules.iter_mut().filter(|r| r.has("--rcheck")) {
        if let Some(at) = rule.args.iter().position(|a| a == "--seconds") {
            rule.args.drain(at..at + 2);
        }
        rule.args.retain(|a| a != "--reap");
    }
}

/// The `--rcheck` rules go, and the `--set` matches with them.
fn no_affinity(rules: &mut RuleSet) {
    rules.nat.rules.retain(|r| !r.has("--rcheck"));
    for rule in rules.nat.rules.iter_mut().filter(|r| r.has("--set")) {
        let at = rule.args.iter().position(|a| a == "recent").expect("--set belongs to -m recent") - 1;
        let end = rule.args.iter().position(|a| a == "--rsource").expect("saved form ends in --rsource") + 1;
        rule.args.drain(at..end);
    }
}

/// The per-address node-port jumps become the every-address one.
fn node_ports_everywhere(cluster: &Cluster, rules: &mut RuleSet) {
    let family = cluster.ip_family();
    if NodePortAddresses::new(&cluster.proxy, family).match_all() {
        return;
    }
    let is_jump = |r: &Rule| r.chain == "KUBE-SERVICES" && r.target() == Some("KUBE-NODEPORTS");
    let at = rules.nat.rules.iter().position(is_jump).unwrap_or_else(|| {
        // No node address matched: the jump goes where the last one would have been.
        rules
            .nat
            .rules
            .iter()
            .rposition(|r| r.chain == "KUBE-SERVICES")
            .map_or(rules.nat.rules.len(), |i| i + 1)
    });
    rules.nat.rules.retain(|r| !is_jump(r));
    let everywhere = Rule {
        chain: "KUBE-SERVICES".into(),
        args: node_ports_jump_all(cluster.proxy.localhost_node_ports, family),
    };
    rules.nat.rules.insert(at.min(rules.nat.rules.len()), everywhere);
}

/// The node-port jumps move to the front of nat `KUBE-SERVICES`.
fn node_ports_first(rules: &mut RuleSet) {
    let is_jump = |r: &Rule| r.chain == "KUBE-SERVICES" && r.target() == Some("KUBE-NODEPORTS");
    let jumps: Vec<Rule> = rules.nat.rules.iter().filter(|r| is_jump(r)).cloned().collect();
    rules.nat.rules.retain(|r| !is_jump(r));
    let first =
        rules.nat.rules.iter().position(|r| r.chain == "KUBE-SERVICES").unwrap_or(rules.nat.rules.len());
    for (i, jump) in jumps.into_iter().enumerate() {
        rules.nat.rules.insert(first + i, jump);
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
            for ep in port.endpoints.iter().filter(|ep| IpFamily::of(ep.ip) == cluster.ip_family()) {
                let chain = naming::sep_chain(&name, port.protocol, ep.address());
                let wrong = SocketAddr::new(ep.ip, port.port).to_string();
                for rule in rules.nat.rules.iter_mut().filter(|r| r.chain == chain) {
                    rule.set_value("--to-destination", &wrong);
                }
            }
        }
    }
}
