//! The mutation catalog ([`Mutant`], shared with iptables mode) expressed in nftables rules:
//! the same bug, written the way it would show up in kube-proxy's nftables tables.
//!
//! Every variant exists in nftables mode. Endpoint-choice bugs are made by the generator
//! ([`Mutant::deviations`]) and the health check bug by the server
//! ([`Mutant::breaks_health_checks`]); the rest edit the finished table here. Where the
//! iptables description names iptables machinery, the nftables form is:
//! - `last-endpoint-never-chosen`: `numgen random mod N` is computed for N-1 endpoints, so
//!   the last vmap arm is never taken;
//! - `drop-instead-of-reject`: `reject-chain` drops (the verdict of every no-endpoints entry);
//! - `affinity-without-timeout`: the `affinity-…` sets have no timeout, entries never expire;
//! - `source-ranges-not-enforced`: no `firewall-ips` entries and no `firewall-…` chains;
//! - `node-port-on-all-addresses`: the `@nodeport-ips` matches become the every-local-address
//!   form (so `--nodeport-addresses`, and nftables mode's default of the primary node IP, are
//!   ignored);
//! - `node-ports-not-last`: the `service-nodeports` vmap rule comes before the `service-ips`
//!   one in chain `services`;
//! - `node-port-without-endpoints-not-rejected`: no `no-endpoint-nodeports` entries that
//!   reject (the DROPs of Local policy stay).

use std::collections::BTreeSet;
use std::net::SocketAddr;

use super::generate::{
    CLUSTER_IPS, CLUSTER_IPS_CHECK, FIREWALL_CHECK, FIREWALL_IPS, JUMP_MASQ, NO_ENDPOINT_NODEPORTS,
    NO_ENDPOINT_SERVICES, NODEPORT_ENDPOINTS_CHECK, NODEPORT_IPS, REJECT_CHAIN, SERVICES, dnat, no_localhost,
    node_port_destination,
};
use super::naming::{self, PortChains};
use super::ruleset::{Rule, RuleSet};
use crate::kubernetes::endpoints::PortPolicy;
use crate::model::{Cluster, IpFamily, ServicePort};
use crate::proxy::Mutant;
use crate::proxy::mutant::outside_the_rules;

/// Breaks `rules` (one family's table, generated with [`Mutant::deviations`]) the way
/// `mutant` says; mutants that live in the generator or the health server change nothing.
pub fn apply(mutant: Mutant, cluster: &Cluster, node: &str, rules: &mut RuleSet) {
    let masq_in = |prefixes: &'static [&'static str]| {
        move |r: &Rule| prefixes.iter().any(|p| r.chain.starts_with(p)) && r.ends_with(JUMP_MASQ)
    };
    match mutant {
        Mutant::NoHairpinMasq => rules.rules.retain(|r| !masq_in(&["endpoint-"])(r)),
        Mutant::NoNodePortMasq => rules.rules.retain(|r| !masq_in(&["external-"])(r)),
        Mutant::NoOffClusterMasq => rules.rules.retain(|r| !masq_in(&["service-", "local-"])(r)),
        Mutant::LastEndpointNeverChosen => short_numgen(rules),
        Mutant::DropInsteadOfReject => {
            for rule in rules.rules.iter_mut().filter(|r| r.chain == REJECT_CHAIN) {
                rule.text = rule.text.replace("reject", "drop");
            }
        }
        Mutant::DnatToServicePort => dnat_to_service_port(cluster, rules),
        Mutant::EtpLocalMasquerades => masquerade_local_policy(cluster, rules),
        Mutant::EtpLocalNoDrop => keep_external_traffic_without_local_endpoints(rules),
        Mutant::SourceRangesNotEnforced => {
            let firewalls: Vec<String> = rules
                .chains
                .iter()
                // Service chains hold a `/` (kube-proxy's `isServiceChainName`):
                // `firewall-check` stays.
                .filter(|c| c.name.starts_with("firewall-") && c.name.contains('/'))
                .map(|c| c.name.clone())
                .collect();
            rules.elements.retain(|e| e.set != FIREWALL_IPS);
            for fw in firewalls {
                rules.remove_chain(&fw);
            }
        }
        Mutant::AffinityWithoutTimeout => {
            for set in rules.sets.iter_mut().filter(|s| s.name.starts_with("affinity-")) {
                set.flags = vec!["dynamic"];
                set.timeout = None;
            }
        }
        Mutant::NoAffinity => {
            rules.sets.retain(|s| !s.name.starts_with("affinity-"));
            rules.rules.retain(|r| !r.text.contains("@affinity-"));
        }
        Mutant::NodePortOnAllAddresses => node_ports_everywhere(rules),
        Mutant::NodePortsNotLast => node_ports_first(rules),
        Mutant::NodePortWithoutEndpointsNotRejected => rules.elements.retain(|e| {
            !(e.set == NO_ENDPOINT_NODEPORTS && e.value.as_deref().is_some_and(|v| v.ends_with(REJECT_CHAIN)))
        }),
        Mutant::SourceRangesNodeReachesFirstLbIpOnly => node_admitted_on_first_lb_ip_only(cluster, rules),
        Mutant::EtpLocalFilteredBeforeDnat => filter_before_dnat(rules),
        Mutant::InterfacePrefixMatchedByIndex => {
            for rule in rules.rules.iter_mut() {
                rule.text = rule.text.replace("iifname ", "iif ");
            }
        }
        Mutant::SourceRangesCheckedAfterDnat => firewall_check_after_dnat(rules),
        Mutant::RemoteHairpinNotMasqueraded => {
            // v1.36's `hairpin-connections` set holds only this node's endpoints.
            let local: BTreeSet<String> = cluster
                .services
                .iter()
                .flat_map(|s| s.ports.iter())
                .flat_map(|p| p.endpoints.iter())
                .filter(|e| crate::kubernetes::endpoints::is_local(e, node))
                .map(|e| e.ip.to_string())
                .collect();
            rules.rules.retain(|r| {
                let hairpin = masq_in(&["endpoint-"])(r);
                !hairpin || local.iter().any(|ip| r.text.contains(&format!(" saddr {ip} ")))
            });
        }
        Mutant::EtpLocalPodsNotShortCircuited => rules.rules.retain(|r| {
            !(r.chain.starts_with("external-") && r.comment.as_deref() == Some("short-circuit pod traffic"))
        }),
        Mutant::EtpLocalAffinityIgnored => {
            rules.rules.retain(|r| !(r.chain.starts_with("local-") && r.text.contains("@affinity-")))
        }
        outside_the_rules!() => {}
        // No route_localnet, so no localnet guard to leave out (`Mutant::exists_in_nftables`).
        Mutant::LocalnetNotFirewalled => {}
        // v1.30's nftables mode drops no conntrack-invalid packets (kubernetes/kubernetes#122663).
        Mutant::InvalidNotDropped => {}
    }
}

/// A load that fails because of the mutant (`iif "veth*"` names no interface) is the proxy
/// failing at its job, as kube-proxy's sync fails: reported as such, not as the harness's error.
pub(super) fn failed_sync(mutant: Option<Mutant>, error: anyhow::Error) -> anyhow::Error {
    if mutant == Some(Mutant::InterfacePrefixMatchedByIndex) {
        let message = format!("loading the rules failed, as kube-proxy's sync does: {error:#}");
        crate::proxy::ProxyFailed { message, log: Vec::new() }.into()
    } else {
        error
    }
}

/// v1.29's hooks (kubernetes/kubernetes#122614): `firewall-check` is jumped to from
/// `filter-input` and `filter-forward`, not from the prerouting chain. Input and forward come
/// after prerouting's DNAT whatever their priority, so an LB IP's packet there already has its
/// endpoint's address, and `@firewall-ips` matches nothing. The node's own traffic (output,
/// before DNAT) is still checked.
fn firewall_check_after_dnat(rules: &mut RuleSet) {
    let jump = format!("ct state new jump {FIREWALL_CHECK}");
    let Some(at) =
        rules.rules.iter().position(|r| r.chain.starts_with("filter-prerouting") && r.text == jump)
    else {
        return;
    };
    rules.rules.remove(at);
    for chain in ["filter-input", "filter-forward"] {
        rules.rule(chain, jump.clone());
    }
}

/// v1.31's base chains (`Layout::V1_31`), kubernetes/kubernetes#131765: the filter chains
/// that check for endpoints run before DNAT (`dstnat - 10`), so `service-endpoints-check` sees
/// the external IP of the node's own traffic that DNAT would have sent to the Service's
/// endpoints; the check for unallocated cluster IPs stays after DNAT, in
/// `filter-output-post-dnat`.
fn filter_before_dnat(rules: &mut RuleSet) {
    const POST_DNAT: &str = "filter-output-post-dnat";
    let Some(output) = rules.chains.iter().find(|c| c.name == "filter-output").cloned() else { return };
    if rules.chains.iter().any(|c| c.name == POST_DNAT) {
        // v1.31's layout (`builtin-nftables-v1.31`) has the bug already.
        return;
    }
    for chain in &mut rules.chains {
        if let Some(hook) = chain.hook.as_mut().filter(|h| h.kind == "filter" && h.priority == 0) {
            hook.priority = -110;
        }
    }
    let at = rules.chains.iter().position(|c| c.name == output.name).map_or(rules.chains.len(), |i| i + 1);
    let hook = output.hook.map(|h| super::ruleset::Hook { priority: -90, ..h });
    rules.chains.insert(at, super::ruleset::Chain { name: POST_DNAT.into(), hook, comment: output.comment });
    for rule in
        rules.rules.iter_mut().filter(|r| r.chain == output.name && r.text.ends_with(CLUSTER_IPS_CHECK))
    {
        rule.chain = POST_DNAT.into();
    }
}

/// In every service's `firewall-…` chain, the source set keeps the source ranges and only the
/// first of the LB IPs that admit the node's own traffic (the pre-#109826 nesting, in
/// nftables form).
fn node_admitted_on_first_lb_ip_only(cluster: &Cluster, rules: &mut RuleSet) {
    let family = rules.family;
    let lb_ips: Vec<String> = cluster
        .services
        .iter()
        .flat_map(|s| &s.load_balancer_ips)
        .filter(|ip| IpFamily::of(**ip) == family)
        .map(|ip| ip.to_string())
        .collect();
    for rule in rules.rules.iter_mut().filter(|r| r.chain.starts_with("firewall-") && r.chain.contains('/')) {
        let (Some(open), Some(close)) = (rule.text.find('{'), rule.text.rfind('}')) else { continue };
        let mut first_lb_ip_seen = false;
        let kept: Vec<&str> = rule.text[open + 1..close]
            .split(',')
            .map(str::trim)
            .filter(|source| {
                let is_lb_ip = lb_ips.iter().any(|ip| ip == source);
                let keep = !is_lb_ip || !first_lb_ip_seen;
                first_lb_ip_seen |= is_lb_ip;
                keep
            })
            .collect();
        rule.text = format!("{}{{ {} }}{}", &rule.text[..open], kept.join(" , "), &rule.text[close + 1..]);
    }
}

/// `numgen random mod N` with N ≥ 2 becomes `mod N-1` (one endpoint: nothing to miss).
fn short_numgen(rules: &mut RuleSet) {
    for rule in
        rules.rules.iter_mut().filter(|r| r.chain.starts_with("service-") || r.chain.starts_with("local-"))
    {
        let Some(rest) = rule.text.strip_prefix("numgen random mod ") else { continue };
        let (n, tail) = rest.split_once(' ').unwrap_or((rest, ""));
        if let Ok(n) = n.parse::<usize>()
            && n >= 2
        {
            rule.text = format!("numgen random mod {} {tail}", n - 1);
        }
    }
}

/// Every service port of the table's family.
fn service_ports(
    cluster: &Cluster,
    family: IpFamily,
) -> impl Iterator<Item = (&crate::model::Service, &ServicePort)> {
    cluster
        .services
        .iter()
        .filter(move |s| IpFamily::of(s.cluster_ip()) == family)
        .flat_map(|s| s.ports.iter().map(move |p| (s, p)))
}

fn dnat_to_service_port(cluster: &Cluster, rules: &mut RuleSet) {
    for (svc, port) in service_ports(cluster, rules.family) {
        for ep in port.endpoints.iter().filter(|ep| IpFamily::of(ep.ip) == rules.family) {
            let chain = naming::endpoint_chain(svc, port, ep.address());
            let right = dnat(naming::proto(port.protocol), ep.address());
            let wrong = dnat(naming::proto(port.protocol), SocketAddr::new(ep.ip, port.port));
            for rule in rules.rules.iter_mut().filter(|r| r.chain == chain && r.text == right) {
                rule.text = wrong.clone();
            }
        }
    }
}

/// Before the final `goto local-…` of every Local-policy `external-…` chain (outside
/// traffic; pods and the node were short-circuited earlier), the Cluster policy's masquerade.
fn masquerade_local_policy(cluster: &Cluster, rules: &mut RuleSet) {
    for (svc, port) in service_ports(cluster, rules.family) {
        if !PortPolicy::of(svc, port).external_local {
            continue;
        }
        let chains = PortChains::new(svc, port);
        let last = format!("goto {}", chains.local);
        if let Some(at) = rules.rules.iter().position(|r| r.chain == chains.external && r.text == last) {
            let masq = Rule { chain: chains.external.clone(), text: JUMP_MASQ.into(), comment: None };
            rules.rules.insert(at, masq);
        }
    }
}

/// The DROPs of external destinations (node ports, external IPs, LB IPs) on a node without
/// local endpoints go; the DROP of an internalTrafficPolicy Local cluster IP stays.
fn keep_external_traffic_without_local_endpoints(rules: &mut RuleSet) {
    let cluster_ips: BTreeSet<String> = rules.elements_of(CLUSTER_IPS).map(|e| e.key[0].clone()).collect();
    rules.elements.retain(|e| {
        let drop = e.value.as_deref() == Some("drop");
        let external = match e.set.as_str() {
            NO_ENDPOINT_NODEPORTS => true,
            NO_ENDPOINT_SERVICES => !cluster_ips.contains(&e.key[0]),
            _ => false,
        };
        !(drop && external)
    });
}

/// The `@nodeport-ips` matches become the every-local-address ones, and the set goes.
fn node_ports_everywhere(rules: &mut RuleSet) {
    if !rules.sets.iter().any(|s| s.name == NODEPORT_IPS) {
        return;
    }
    let family = rules.family;
    let listed = node_port_destination(family, false);
    for rule in rules.rules.iter_mut() {
        if rule.chain == SERVICES && rule.text.starts_with(&listed) {
            rule.text = rule.text.replacen(&listed, &node_port_destination(family, true), 1);
        } else if rule.chain == NODEPORT_ENDPOINTS_CHECK && rule.text.starts_with(&listed) {
            rule.text = rule.text.replacen(&listed, no_localhost(family), 1);
        }
    }
    rules.remove_set(NODEPORT_IPS);
}

/// The node-port dispatch moves ahead of the service-IP one in `services`.
fn node_ports_first(rules: &mut RuleSet) {
    let is_node_ports = |r: &Rule| r.chain == SERVICES && r.text.ends_with("vmap @service-nodeports");
    let Some(at) = rules.rules.iter().position(is_node_ports) else { return };
    let rule = rules.rules.remove(at);
    let first = rules.rules.iter().position(|r| r.chain == SERVICES).unwrap_or(rules.rules.len());
    rules.rules.insert(first, rule);
}
