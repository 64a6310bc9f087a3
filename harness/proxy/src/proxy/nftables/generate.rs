//! The `kube-proxy` table kube-proxy's nftables mode writes on one node for one family
//! (`setupNFTables` and `syncProxyRules` in pkg/proxy/nftables/proxier.go): `cluster-ips-check`,
//! the split `service-endpoints-check` / `nodeport-endpoints-check`, in the base-chain
//! [`Layout`] of v1.31–v1.33.4 (`filter-output-post-dnat`) or of v1.34.
//!
//! Dispatch is by verdict maps, not rule lists: `service-ips` (cluster, external and
//! load-balancer IPs), `service-nodeports`, `no-endpoint-services` /
//! `no-endpoint-nodeports` (REJECT or DROP before DNAT, in the filter chains) and
//! `firewall-ips` (`loadBalancerSourceRanges`). Behaviour that differs from iptables mode and
//! is kube-proxy's own, kept here on purpose:
//! - node ports answer only on the addresses in `nodeport-ips` (`--nodeport-addresses`,
//!   which nftables mode defaults to the node's primary IPs: see `super::effective_cluster`),
//!   never on loopback (no `route_localnet`);
//! - a cluster IP on a port that is not a service port is REJECTed, and an address of the
//!   service CIDR that is no Service's is DROPped (`cluster-ips-check`);
//! - `loadBalancerSourceRanges` applies even when the Service has no endpoints.
//!
//! Written for the configuration the model carries: local-traffic detection by cluster
//! CIDR, masquerade bit 14, the service CIDR as the only ServiceCIDR. Not modelled:
//! topology hints, `ipMode: Proxy`.

use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;

use super::naming::{self, PortChains};
use super::ruleset::{Hook, RuleSet, Set};
use crate::kubernetes::local_detect::{self, LocalDetector};
use crate::model::{Cluster, Endpoint, IpFamily, Service, ServicePort, ServiceType, SessionAffinity};
use crate::proxy::endpoint_choice::Choice;
use crate::proxy::endpoint_choice::Deviations;
use crate::proxy::node_ports::NodePortAddresses;

/// The mark that asks `masquerading` to masquerade (kube-proxy's default bit 14).
pub(crate) const MASQ_MARK: &str = "0x4000";

pub const SERVICES: &str = "services";
pub(crate) const SERVICE_IPS: &str = "service-ips";
pub(crate) const SERVICE_NODEPORTS: &str = "service-nodeports";
pub(crate) const NODEPORT_IPS: &str = "nodeport-ips";
pub(crate) const CLUSTER_IPS: &str = "cluster-ips";
pub(crate) const SERVICE_ENDPOINTS_CHECK: &str = "service-endpoints-check";
pub(crate) const NODEPORT_ENDPOINTS_CHECK: &str = "nodeport-endpoints-check";
pub(crate) const NO_ENDPOINT_SERVICES: &str = "no-endpoint-services";
pub(crate) const NO_ENDPOINT_NODEPORTS: &str = "no-endpoint-nodeports";
pub(crate) const REJECT_CHAIN: &str = "reject-chain";
pub(crate) const CLUSTER_IPS_CHECK: &str = "cluster-ips-check";
pub(crate) const FIREWALL_IPS: &str = "firewall-ips";
pub(crate) const FIREWALL_CHECK: &str = "firewall-check";
pub(crate) const MARK_MASQ: &str = "mark-for-masquerade";
pub(crate) const MASQUERADING: &str = "masquerading";

/// `jump mark-for-masquerade`, the verdict of every masquerade rule.
pub(crate) const JUMP_MASQ: &str = "jump mark-for-masquerade";

/// Which release's table layout to write. The two differ in where the filter chains sit
/// relative to DNAT, which decides whether this node's own traffic to an external IP or LB IP
/// of an `externalTrafficPolicy: Local` Service without local endpoints is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Layout {
    /// v1.31 to v1.33.4: `filter-input`/`-forward`/`-output` run before DNAT (`dstnat - 10`),
    /// `filter-output-post-dnat` after it. The node's own traffic to a Local-policy external
    /// IP is checked before it is short-circuited, and dropped
    /// (<https://github.com/kubernetes/kubernetes/issues/131765>).
    V1_31,
    /// v1.34 (and v1.33.5): the filter chains run after DNAT (priority 0), only
    /// `filter-prerouting-pre-dnat` and `filter-output-pre-dnat` before it
    /// (<https://github.com/kubernetes/kubernetes/pull/132456>); the cluster-IP masquerade rule
    /// no longer repeats the port (its chain is per port).
    #[default]
    V1_34,
}

/// A base chain: name, type, hook, priority.
type BaseChain = (&'static str, &'static str, &'static str, i32);

/// `nftablesBaseChains`. The nat chains are the same in both layouts.
fn base_chains(layout: Layout) -> Vec<BaseChain> {
    let filter: &[BaseChain] = match layout {
        Layout::V1_31 => &[
            ("filter-prerouting", "filter", "prerouting", -110),
            ("filter-input", "filter", "input", -110),
            ("filter-forward", "filter", "forward", -110),
            ("filter-output", "filter", "output", -110),
            ("filter-output-post-dnat", "filter", "output", -90),
        ],
        Layout::V1_34 => &[
            ("filter-prerouting-pre-dnat", "filter", "prerouting", -110),
            ("filter-output-pre-dnat", "filter", "output", -110),
            ("filter-forward", "filter", "forward", 0),
            ("filter-input", "filter", "input", 0),
            ("filter-output", "filter", "output", 0),
        ],
    };
    let nat: &[BaseChain] = &[
        ("nat-prerouting", "nat", "prerouting", -100),
        ("nat-output", "nat", "output", -100),
        ("nat-postrouting", "nat", "postrouting", 100),
    ];
    filter.iter().chain(nat).copied().collect()
}

/// `nftablesJumpChains`: (target, from, match), in kube-proxy's order.
fn jumps(layout: Layout) -> Vec<(&'static str, &'static str, &'static str)> {
    let (prerouting, output_pre_dnat, output_post_dnat) = match layout {
        Layout::V1_31 => ("filter-prerouting", "filter-output", "filter-output-post-dnat"),
        Layout::V1_34 => ("filter-prerouting-pre-dnat", "filter-output-pre-dnat", "filter-output"),
    };
    vec![
        (NODEPORT_ENDPOINTS_CHECK, "filter-input", "ct state new"),
        (SERVICE_ENDPOINTS_CHECK, "filter-input", "ct state new"),
        (SERVICE_ENDPOINTS_CHECK, "filter-forward", "ct state new"),
        (SERVICE_ENDPOINTS_CHECK, "filter-output", "ct state new"),
        (FIREWALL_CHECK, prerouting, "ct state new"),
        (FIREWALL_CHECK, output_pre_dnat, "ct state new"),
        (SERVICES, "nat-output", ""),
        (SERVICES, "nat-prerouting", ""),
        (MASQUERADING, "nat-postrouting", ""),
        (CLUSTER_IPS_CHECK, "filter-forward", "ct state new"),
        (CLUSTER_IPS_CHECK, output_post_dnat, "ct state new"),
    ]
}

/// The table kube-proxy would write on `node` for `cluster` (a single-family cluster or
/// view, with `--nodeport-addresses` already defaulted).
pub fn node_rules(cluster: &Cluster, node: &str) -> RuleSet {
    node_rules_with(cluster, node, Deviations::default(), Layout::default())
}

/// [`node_rules`] with `deviations` switched on.
pub(crate) fn node_rules_with(
    cluster: &Cluster,
    node: &str,
    deviations: Deviations,
    layout: Layout,
) -> RuleSet {
    let family = cluster.ip_family();
    let mut rules = RuleSet::new(family);
    write_setup(&mut rules, cluster, node, layout);
    let node_ip = cluster.node(node).map(|n| n.ip()).filter(|ip| IpFamily::of(*ip) == family);
    for svc in cluster.services.iter().filter(|s| IpFamily::of(s.cluster_ip()) == family) {
        for port in &svc.ports {
            let p = Port::new(cluster, svc, port, node, node_ip, deviations, layout);
            write_service_port(&mut rules, &p);
        }
    }
    rules
}

/// `ipv4_addr` or `ipv6_addr`.
fn addr_type(family: IpFamily) -> &'static str {
    match family {
        IpFamily::V4 => "ipv4_addr",
        IpFamily::V6 => "ipv6_addr",
    }
}

/// The match that keeps node ports off loopback when they answer on every local address.
pub(crate) fn no_localhost(family: IpFamily) -> &'static str {
    match family {
        IpFamily::V4 => "ip daddr != 127.0.0.0/8",
        IpFamily::V6 => "ip6 daddr != ::1",
    }
}

fn set(name: &str, type_: String, comment: &str) -> Set {
    Set {
        name: name.into(),
        map: false,
        type_,
        flags: Vec::new(),
        timeout: None,
        comment: Some(comment.into()),
    }
}

fn map(name: &str, type_: String, comment: &str) -> Set {
    Set { map: true, ..set(name, type_, comment) }
}

/// Everything that does not depend on the Services (`setupNFTables`).
fn write_setup(rules: &mut RuleSet, cluster: &Cluster, node: &str, layout: Layout) {
    let family = rules.family;
    let ip = rules.ip();
    let addr = addr_type(family);
    for (name, kind, hook, priority) in base_chains(layout) {
        rules.push_chain(super::ruleset::Chain {
            name: name.into(),
            hook: Some(Hook { kind, hook, priority }),
            comment: None,
        });
    }
    for (target, from, matches) in jumps(layout) {
        rules.add_chain(target);
        let text =
            if matches.is_empty() { format!("jump {target}") } else { format!("{matches} jump {target}") };
        rules.rule(from, text);
    }
    for chain in [SERVICES, CLUSTER_IPS_CHECK, MASQUERADING, MARK_MASQ] {
        rules.add_chain(chain);
    }
    rules.rule(MARK_MASQ, format!("mark set mark or {MASQ_MARK}"));
    rules.rule(MASQUERADING, format!("mark and {MASQ_MARK} == 0 return"));
    rules.rule(MASQUERADING, format!("mark set mark xor {MASQ_MARK}"));
    rules.rule(MASQUERADING, "masquerade fully-random");

    rules.add_set(set(CLUSTER_IPS, addr.into(), "Active ClusterIPs"));
    rules.rule_commented(
        CLUSTER_IPS_CHECK,
        format!("{ip} daddr @{CLUSTER_IPS} reject"),
        "Reject traffic to invalid ports of ClusterIPs",
    );
    rules.rule_commented(
        CLUSTER_IPS_CHECK,
        format!("{ip} daddr {{ {} }} drop", cluster.service_cidr.trunc()),
        "Drop traffic to unallocated ClusterIPs",
    );

    // Node ports: on every local address but loopback, or on the listed ones.
    let addresses = NodePortAddresses::new(&cluster.proxy, family);
    if !addresses.match_all() {
        rules.add_set(set(NODEPORT_IPS, addr.into(), "IPs that accept NodePort traffic"));
        for node_ip in addresses.node_ips(cluster.node(node)) {
            // kube-proxy: "--nodeport-addresses includes localhost but localhost NodePorts
            // are not supported".
            if !node_ip.is_loopback() {
                rules.element(NODEPORT_IPS, &[&node_ip.to_string()], None, None);
            }
        }
    }
    let service_key = format!("{addr} . inet_proto . inet_service : verdict");
    let port_key = "inet_proto . inet_service : verdict".to_string();
    rules.add_set(map(
        NO_ENDPOINT_SERVICES,
        service_key.clone(),
        "vmap to drop or reject packets to services with no endpoints",
    ));
    rules.add_set(map(
        NO_ENDPOINT_NODEPORTS,
        port_key.clone(),
        "vmap to drop or reject packets to service nodeports with no endpoints",
    ));
    rules.push_chain(super::ruleset::Chain {
        name: REJECT_CHAIN.into(),
        hook: None,
        comment: Some("helper for @no-endpoint-services / @no-endpoint-nodeports".into()),
    });
    rules.rule(REJECT_CHAIN, "reject");
    rules.rule(
        SERVICE_ENDPOINTS_CHECK,
        format!("{ip} daddr . meta l4proto . th dport vmap @{NO_ENDPOINT_SERVICES}"),
    );
    let node_port_match = node_port_destination(family, addresses.match_all());
    let check_match =
        if addresses.match_all() { no_localhost(family).to_string() } else { node_port_match.clone() };
    rules.rule(
        NODEPORT_ENDPOINTS_CHECK,
        format!("{check_match} meta l4proto . th dport vmap @{NO_ENDPOINT_NODEPORTS}"),
    );

    rules.add_set(map(
        FIREWALL_IPS,
        service_key.clone(),
        "destinations that are subject to LoadBalancerSourceRanges",
    ));
    rules.rule(FIREWALL_CHECK, format!("{ip} daddr . meta l4proto . th dport vmap @{FIREWALL_IPS}"));

    rules.add_set(map(SERVICE_IPS, service_key, "ClusterIP, ExternalIP and LoadBalancer IP traffic"));
    rules.add_set(map(SERVICE_NODEPORTS, port_key, "NodePort traffic"));
    rules.rule(SERVICES, format!("{ip} daddr . meta l4proto . th dport vmap @{SERVICE_IPS}"));
    rules.rule(SERVICES, format!("{node_port_match} meta l4proto . th dport vmap @{SERVICE_NODEPORTS}"));
}

/// Where node ports answer, as the `services` chain matches it: every local address but
/// loopback, or `@nodeport-ips`.
pub(crate) fn node_port_destination(family: IpFamily, match_all: bool) -> String {
    if match_all {
        format!("fib daddr type local {}", no_localhost(family))
    } else {
        format!("{} daddr @{NODEPORT_IPS}", super::ruleset::nft_family(family))
    }
}

/// Everything one service port needs, computed once.
struct Port<'a> {
    svc: &'a Service,
    port: &'a ServicePort,
    /// `namespace/name[:port]`, the comment of `no-endpoint-*` elements.
    name: String,
    proto: &'static str,
    ip: &'static str,
    cluster_ip: String,
    port_number: String,
    node_port: Option<String>,
    external_ips: Vec<String>,
    lb_ips: Vec<String>,
    source_ranges: Vec<IpNet>,
    node_ip: Option<IpAddr>,
    affinity: Option<u32>,
    masquerade_all: bool,
    /// kube-proxy's local-traffic detector (`None`: its no-op detector).
    local: Option<LocalDetector>,
    choice: Choice<'a>,
    chains: PortChains,
    layout: Layout,
}

impl<'a> Port<'a> {
    fn new(
        cluster: &Cluster,
        svc: &'a Service,
        port: &'a ServicePort,
        node: &str,
        node_ip: Option<IpAddr>,
        dev: Deviations,
        layout: Layout,
    ) -> Port<'a> {
        let choice = dev.choose(cluster, svc, port, node);
        let family = IpFamily::of(svc.cluster_ip());
        let ours = |ip: &&IpAddr| IpFamily::of(**ip) == family;
        let texts = |ips: &[IpAddr]| ips.iter().filter(ours).map(|ip| ip.to_string()).collect();
        let external_type = matches!(svc.service_type, ServiceType::NodePort | ServiceType::LoadBalancer);
        Port {
            svc,
            port,
            name: crate::kubernetes::service_port_name(svc, port),
            proto: naming::proto(port.protocol),
            ip: super::ruleset::nft_family(family),
            cluster_ip: svc.cluster_ip().to_string(),
            port_number: port.port.to_string(),
            node_port: port.node_port.filter(|_| external_type).map(|p| p.to_string()),
            external_ips: texts(&svc.external_ips),
            lb_ips: texts(&svc.load_balancer_ips),
            source_ranges: svc
                .load_balancer_source_ranges
                .iter()
                .filter(|n| IpFamily::of_net(n) == family)
                .map(IpNet::trunc)
                .collect(),
            node_ip,
            affinity: match svc.session_affinity {
                SessionAffinity::ClientIp { timeout_seconds } => Some(timeout_seconds),
                SessionAffinity::None => None,
            },
            masquerade_all: cluster.proxy.masquerade_all,
            local: local_detect::detector(cluster, node),
            choice,
            chains: PortChains::new(svc, port),
            layout,
        }
    }

    fn internal_chain(&self) -> &str {
        if self.choice.policy.internal_local { &self.chains.local } else { &self.chains.cluster }
    }

    fn external_policy_chain(&self) -> &str {
        if self.choice.external_local() { &self.chains.local } else { &self.chains.cluster }
    }

    fn uses_cluster_chain(&self) -> bool {
        !self.choice.eps.cluster.is_empty() && self.choice.policy.uses_cluster_endpoints()
    }

    fn uses_local_chain(&self) -> bool {
        !self.choice.eps.local.is_empty() && self.choice.policy.uses_local_endpoints()
    }

    fn uses_firewall_chain(&self) -> bool {
        !self.lb_ips.is_empty() && !self.source_ranges.is_empty()
    }

    /// What the filter chains do with traffic that has nowhere to go: REJECT when the port
    /// has no endpoints at all, DROP when only the policy's local ones are missing.
    fn filter_verdict(&self) -> String {
        if self.choice.eps.has_any { "drop".into() } else { format!("goto {REJECT_CHAIN}") }
    }

    fn endpoint_chain(&self, ep: &Endpoint) -> String {
        naming::endpoint_chain(self.svc, self.port, ep.address())
    }

    fn affinity_set(&self, ep: &Endpoint) -> String {
        naming::affinity_set(self.svc, self.port, ep.address())
    }
}

/// One service port: its map elements, then its chains (kube-proxy's order within
/// `syncProxyRules`).
fn write_service_port(rules: &mut RuleSet, p: &Port) {
    for ep in p.choice.eps.reachable.iter().chain(&p.choice.stale_affinity) {
        rules.add_chain(&p.endpoint_chain(ep));
    }
    if p.uses_cluster_chain() {
        rules.add_chain(&p.chains.cluster);
    }
    if p.uses_local_chain() {
        rules.add_chain(&p.chains.local);
    }
    if p.choice.uses_external_chain() {
        rules.add_chain(&p.chains.external);
    }
    write_elements(rules, p);
    write_internal_masquerade(rules, p);
    write_external_chain(rules, p);
    write_firewall_chain(rules, p);
    write_affinity_sets(rules, p);
    if p.uses_cluster_chain() {
        write_balancing(rules, p, &p.chains.cluster, &p.choice.eps.cluster);
    }
    if p.uses_local_chain() {
        write_balancing(rules, p, &p.chains.local, &p.choice.eps.local);
    }
    for ep in p.choice.eps.reachable.iter().chain(&p.choice.stale_affinity) {
        write_endpoint_chain(rules, p, ep);
    }
}

/// `service-ips`, `no-endpoint-*`, `service-nodeports` and `firewall-ips` entries.
fn write_elements(rules: &mut RuleSet, p: &Port) {
    let goto = |chain: &str| Some(format!("goto {chain}"));
    // `IP . proto . port`; the `no-endpoint-*` entries carry the port's name as a comment.
    let add = |rules: &mut RuleSet, set: &str, ip: &str, value: Option<String>| {
        let comment = (set == NO_ENDPOINT_SERVICES).then_some(p.name.as_str());
        rules.element(set, &[ip, p.proto, &p.port_number], value, comment);
    };

    rules.element(CLUSTER_IPS, &[&p.cluster_ip], None, None);
    if p.choice.has_internal_endpoints() {
        add(rules, SERVICE_IPS, &p.cluster_ip, goto(p.internal_chain()));
    } else {
        add(rules, NO_ENDPOINT_SERVICES, &p.cluster_ip, Some(p.filter_verdict()));
    }
    for ip in &p.external_ips {
        if p.choice.eps.has_any {
            add(rules, SERVICE_IPS, ip, goto(&p.chains.external));
        }
        if !p.choice.has_external_endpoints() {
            add(rules, NO_ENDPOINT_SERVICES, ip, Some(p.filter_verdict()));
        }
    }
    if p.uses_firewall_chain() {
        rules.add_chain(&p.chains.firewall);
    }
    for ip in &p.lb_ips {
        if p.choice.eps.has_any {
            add(rules, SERVICE_IPS, ip, goto(&p.chains.external));
        }
        if p.uses_firewall_chain() {
            add(rules, FIREWALL_IPS, ip, goto(&p.chains.firewall));
        }
    }
    if !p.choice.has_external_endpoints() {
        for ip in &p.lb_ips {
            add(rules, NO_ENDPOINT_SERVICES, ip, Some(p.filter_verdict()));
        }
    }
    if let Some(node_port) = &p.node_port {
        let key = [p.proto, node_port.as_str()];
        if p.choice.eps.has_any {
            rules.element(SERVICE_NODEPORTS, &key, goto(&p.chains.external), None);
        }
        if !p.choice.has_external_endpoints() {
            rules.element(NO_ENDPOINT_NODEPORTS, &key, Some(p.filter_verdict()), Some(&p.name));
        }
    }
}

/// With `--masquerade-all` every cluster-IP connection is masqueraded; otherwise traffic
/// from outside the pod network (a node routing the service range) is.
fn write_internal_masquerade(rules: &mut RuleSet, p: &Port) {
    if !p.choice.has_internal_endpoints() {
        return;
    }
    let dest = match p.layout {
        Layout::V1_31 => format!("{} daddr {} {} dport {}", p.ip, p.cluster_ip, p.proto, p.port_number),
        Layout::V1_34 => format!("{} daddr {}", p.ip, p.cluster_ip),
    };
    let text = if p.masquerade_all {
        format!("{dest} {JUMP_MASQ}")
    } else if let Some(local) = &p.local {
        format!("{dest} {} {JUMP_MASQ}", local.nft_if_not_local(p.ip))
    } else {
        return;
    };
    rules.rule(p.internal_chain(), text);
}

/// `external-…`: masquerade everything (Cluster policy), or keep the client address for
/// outside traffic and short-circuit traffic from pods and from this node (Local policy).
fn write_external_chain(rules: &mut RuleSet, p: &Port) {
    if !p.choice.uses_external_chain() {
        return;
    }
    let ext = p.chains.external.as_str();
    if !p.choice.policy.external_local {
        rules.rule(ext, JUMP_MASQ);
    } else {
        let cluster = &p.chains.cluster;
        if let Some(local) = &p.local {
            rules.rule_commented(
                ext,
                format!("{} goto {cluster}", local.nft_if_local(p.ip)),
                "short-circuit pod traffic",
            );
        }
        rules.rule_commented(ext, format!("fib saddr type local {JUMP_MASQ}"), "masquerade local traffic");
        rules.rule_commented(
            ext,
            format!("fib saddr type local goto {cluster}"),
            "short-circuit local traffic",
        );
    }
    if p.choice.has_external_endpoints() {
        rules.rule(ext, format!("goto {}", p.external_policy_chain()));
    }
}

/// `firewall-…`: drops sources outside `loadBalancerSourceRanges` (and, when a range holds
/// this node's IP, lets the LB IPs themselves through: a node reaching a VIP local to it
/// sends from the VIP).
fn write_firewall_chain(rules: &mut RuleSet, p: &Port) {
    if !p.uses_firewall_chain() {
        return;
    }
    let mut sources: Vec<String> = p.source_ranges.iter().map(|r| r.to_string()).collect();
    let allow_from_node = p.node_ip.is_some_and(|ip| p.source_ranges.iter().any(|r| r.contains(&ip)));
    if allow_from_node {
        sources.extend(p.lb_ips.iter().cloned());
    }
    rules.rule(&p.chains.firewall, format!("{} saddr != {{ {} }} drop", p.ip, sources.join(" , ")));
}

/// One set per reachable endpoint, of the clients recently sent there, expiring after the
/// affinity timeout.
fn write_affinity_sets(rules: &mut RuleSet, p: &Port) {
    let Some(seconds) = p.affinity else { return };
    for ep in p.choice.eps.reachable.iter().chain(&p.choice.stale_affinity) {
        rules.add_set(Set {
            name: p.affinity_set(ep),
            map: false,
            type_: addr_type(rules.family).into(),
            flags: vec!["dynamic", "timeout"],
            timeout: Some(seconds),
            comment: None,
        });
    }
}

/// A `service-…`/`local-…` chain: with ClientIP affinity first a check per endpoint (a client
/// seen within the timeout goes back to its endpoint), then a random pick.
fn write_balancing(rules: &mut RuleSet, p: &Port, chain: &str, endpoints: &[&Endpoint]) {
    if p.affinity.is_some() {
        for ep in endpoints.iter().chain(&p.choice.stale_affinity) {
            rules
                .rule(chain, format!("{} saddr @{} goto {}", p.ip, p.affinity_set(ep), p.endpoint_chain(ep)));
        }
    }
    rules.rule(chain, numgen(endpoints.len(), endpoints.iter().map(|ep| p.endpoint_chain(ep))));
}

/// `numgen random mod N vmap { 0 : goto A , 1 : goto B }` over `targets`, with `modulo`
/// picks (kube-proxy: one per endpoint).
pub fn numgen(modulo: usize, targets: impl IntoIterator<Item = String>) -> String {
    let arms: Vec<String> = targets.into_iter().enumerate().map(|(i, t)| format!("{i} : goto {t}")).collect();
    format!("numgen random mod {modulo} vmap {{ {} }}", arms.join(" , "))
}

/// An `endpoint-…` chain: masquerade hairpin traffic (an endpoint reaching itself through the
/// service), record the client for affinity, DNAT.
fn write_endpoint_chain(rules: &mut RuleSet, p: &Port, ep: &Endpoint) {
    let chain = p.endpoint_chain(ep);
    rules.rule(&chain, format!("{} saddr {} {JUMP_MASQ}", p.ip, ep.ip));
    if p.affinity.is_some() {
        rules.rule(&chain, format!("update @{} {{ {} saddr }}", p.affinity_set(ep), p.ip));
    }
    rules.rule(&chain, dnat(p.proto, ep.address()));
}

/// `meta l4proto tcp dnat to 10.0.0.1:80` (`[addr]:port` for IPv6).
pub fn dnat(proto: &str, to: SocketAddr) -> String {
    format!("meta l4proto {proto} dnat to {to}")
}
