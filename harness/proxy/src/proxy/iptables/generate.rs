//! The rules kube-proxy (v1.30, iptables mode) writes on one node, in the order it writes
//! them (`syncProxyRules` in pkg/proxy/iptables/proxier.go), for the cluster's family: the
//! IPv4 proxier's for `iptables-restore`, or the IPv6 proxier's for `ip6tables-restore`.
//!
//! The IPv6 rules are the IPv4 ones with `/128` host masks, `icmp6-port-unreachable`
//! rejects and full-length `recent` masks, less what exists for IPv4 only: no localnet guard
//! in `KUBE-FIREWALL` (kube-proxy still hooks the empty chain; kubelet makes none for IPv6), no
//! localhost node ports (the every-address jump excludes `::1/128` instead, and `::1` inside
//! `--nodeport-addresses` is skipped), no `route_localnet`.
//!
//! Arguments are in the canonical order `iptables-save` prints, so every rendered line reads
//! exactly like the line a dump of a real node shows. Two things kube-proxy does outside its
//! `iptables-restore` are included, because a fresh namespace has neither: the jumps from the
//! built-in chains, and kubelet's `KUBE-FIREWALL` hook (kubelet keeps the localnet guard
//! whatever kube-proxy's flags; kube-proxy writes the same rule when localhost node ports are
//! on).
//!
//! Written as kube-proxy writes them where its input depends on the host: no `nfacct`
//! counters (as on a kernel without `nfnetlink_acct`), `--random-fully` available, no
//! `nf_conntrack_tcp_be_liberal`. Not modelled: topology hints, `ipMode: Proxy` ingress IPs.
//!
//! `Deviations` (the kube-proxy core's) switch on bugs that live in endpoint choice rather than in one rule, for
//! the mutants.

use std::net::IpAddr;

use ipnet::IpNet;

use super::ladder;
use super::naming;
use super::ruleset::{RuleSet, Table, args};
use crate::kubernetes::local_detect::{self, LocalDetector};
use crate::model::{
    Cluster, Endpoint, IpFamily, Protocol, Service, ServicePort, ServiceType, SessionAffinity, TrafficPolicy,
};
use crate::proxy::endpoint_choice::{Choice, Deviations};
use crate::proxy::node_ports::{NodePortAddresses, localhost_node_ports};

/// The mark that asks `KUBE-POSTROUTING` to masquerade (kube-proxy's default bit 14).
pub(crate) const MASQ_MARK: &str = "0x4000";
const MASQ_MARK_MASK: &str = "0x4000/0x4000";

const SERVICES: &str = "KUBE-SERVICES";
const EXTERNAL_SERVICES: &str = "KUBE-EXTERNAL-SERVICES";
const FORWARD: &str = "KUBE-FORWARD";
const NODEPORTS: &str = "KUBE-NODEPORTS";
const PROXY_FIREWALL: &str = "KUBE-PROXY-FIREWALL";
const FIREWALL: &str = "KUBE-FIREWALL";
const POSTROUTING: &str = "KUBE-POSTROUTING";
const MARK_MASQ: &str = "KUBE-MARK-MASQ";

const NODEPORTS_COMMENT: &str =
    "kubernetes service nodeports; NOTE: this must be the last rule in this chain";

/// The `iptables-restore` input kube-proxy would write on `node` for `cluster`.
pub fn node_rules(cluster: &Cluster, node: &str) -> RuleSet {
    node_rules_with(cluster, node, Deviations::default())
}

/// [`node_rules`] with `deviations` switched on.
pub(crate) fn node_rules_with(cluster: &Cluster, node: &str, deviations: Deviations) -> RuleSet {
    let family = cluster.ip_family();
    let mut rules = RuleSet::default();
    write_chains(&mut rules);
    write_hooks(&mut rules);
    write_fixed_rules(&mut rules, family);
    for svc in cluster.services.iter().filter(|s| IpFamily::of(s.cluster_ip()) == family) {
        for port in &svc.ports {
            let p = Port::new(cluster, svc, port, node, deviations);
            write_service_port(&mut rules, &p);
        }
    }
    write_trailer(&mut rules, cluster, node);
    rules
}

/// The top-level chains, in kube-proxy's order (plus kubelet's `KUBE-FIREWALL`, which
/// kube-proxy makes and hooks in either family).
fn write_chains(rules: &mut RuleSet) {
    for chain in [SERVICES, EXTERNAL_SERVICES, FORWARD, NODEPORTS, PROXY_FIREWALL, FIREWALL] {
        rules.filter.add_chain(chain);
    }
    for chain in [SERVICES, NODEPORTS, POSTROUTING, MARK_MASQ] {
        rules.nat.add_chain(chain);
    }
}

/// Jumps from the built-in chains. kube-proxy prepends each (`iptablesJumpChains`), after
/// kubelet has appended its `KUBE-FIREWALL` jumps, which is the order a real node shows.
fn write_hooks(rules: &mut RuleSet) {
    let new = ["-m", "conntrack", "--ctstate", "NEW"];
    let hook = |extra: &[&str], comment: &str, target: &str| {
        let mut a: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        a.extend(args!["-m", "comment", "--comment", comment, "-j", target]);
        a
    };
    let f = &mut rules.filter;
    f.append("INPUT", hook(&new, "kubernetes load balancer firewall", PROXY_FIREWALL));
    f.append("INPUT", hook(&[], "kubernetes health check service ports", NODEPORTS));
    f.append("INPUT", hook(&new, "kubernetes externally-visible service portals", EXTERNAL_SERVICES));
    f.append("INPUT", args!["-j", FIREWALL]);
    f.append("FORWARD", hook(&new, "kubernetes load balancer firewall", PROXY_FIREWALL));
    f.append("FORWARD", hook(&[], "kubernetes forwarding rules", FORWARD));
    f.append("FORWARD", hook(&new, "kubernetes service portals", SERVICES));
    f.append("FORWARD", hook(&new, "kubernetes externally-visible service portals", EXTERNAL_SERVICES));
    f.append("OUTPUT", hook(&new, "kubernetes load balancer firewall", PROXY_FIREWALL));
    f.append("OUTPUT", hook(&new, "kubernetes service portals", SERVICES));
    f.append("OUTPUT", args!["-j", FIREWALL]);

    let n = &mut rules.nat;
    n.append("PREROUTING", hook(&[], "kubernetes service portals", SERVICES));
    n.append("OUTPUT", hook(&[], "kubernetes service portals", SERVICES));
    n.append("POSTROUTING", hook(&[], "kubernetes postrouting rules", POSTROUTING));
}

/// Masquerade marking and SNAT, and for IPv4 the localnet guard (route_localnet exposes node
/// ports on 127.0.0.1; kube-proxy writes this rule when localhost node ports are enabled, the
/// default, and kubelet writes it always). IPv6 has no such hole, and no rule.
fn write_fixed_rules(rules: &mut RuleSet, family: IpFamily) {
    if family == IpFamily::V4 {
        write_localnet_guard(rules);
    }
    write_masquerade(&mut rules.nat);
}

fn write_localnet_guard(rules: &mut RuleSet) {
    rules.filter.append(
        FIREWALL,
        args![
            "!",
            "-s",
            "127.0.0.0/8",
            "-d",
            "127.0.0.0/8",
            "-m",
            "comment",
            "--comment",
            "block incoming localnet connections",
            "-m",
            "conntrack",
            "!",
            "--ctstate",
            "RELATED,ESTABLISHED,DNAT",
            "-j",
            "DROP"
        ],
    );
}

fn write_masquerade(n: &mut Table) {
    n.append(POSTROUTING, args!["-m", "mark", "!", "--mark", MASQ_MARK_MASK, "-j", "RETURN"]);
    // Cleared so a packet that re-traverses the stack is not masqueraded twice (--xor-mark).
    n.append(POSTROUTING, args!["-j", "MARK", "--set-xmark", format!("{MASQ_MARK}/0x0")]);
    n.append(
        POSTROUTING,
        args![
            "-m",
            "comment",
            "--comment",
            "kubernetes service traffic requiring SNAT",
            "-j",
            "MASQUERADE",
            "--random-fully"
        ],
    );
    n.append(MARK_MASQ, args!["-j", "MARK", "--set-xmark", MASQ_MARK_MASK]);
}

/// The jump to `KUBE-NODEPORTS` for every local address (no `--nodeport-addresses`), which
/// keeps out 127.0.0.0/8 when localhost node ports are off, and `::1` always for IPv6.
pub(crate) fn node_ports_jump_all(localhost: bool, family: IpFamily) -> Vec<String> {
    let mut rule = match family {
        IpFamily::V6 => args!["!", "-d", "::1/128"],
        IpFamily::V4 if !localhost => args!["!", "-d", "127.0.0.0/8"],
        IpFamily::V4 => Vec::new(),
    };
    rule.extend(args![
        "-m",
        "comment",
        "--comment",
        NODEPORTS_COMMENT,
        "-m",
        "addrtype",
        "--dst-type",
        "LOCAL"
    ]);
    rule.extend(args!["-j", NODEPORTS]);
    rule
}

/// The node-port jumps (last in nat `KUBE-SERVICES`: for every local address, or one per
/// node address inside `--nodeport-addresses`) and the forwarding rules.
fn write_trailer(rules: &mut RuleSet, cluster: &Cluster, node: &str) {
    let family = cluster.ip_family();
    let addresses = NodePortAddresses::new(&cluster.proxy, family);
    let localhost = localhost_node_ports(&cluster.proxy, family);
    if addresses.match_all() {
        rules.nat.append(SERVICES, node_ports_jump_all(localhost, family));
    } else {
        for ip in addresses.node_ips(cluster.node(node)) {
            // Never for IPv6 (kube-proxy logs "localhost NodePorts are not supported on IPv6").
            if ip.is_loopback() && !localhost {
                continue;
            }
            rules.nat.append(
                SERVICES,
                args![
                    "-d",
                    format!("{ip}/{}", family.host_prefix()),
                    "-m",
                    "comment",
                    "--comment",
                    NODEPORTS_COMMENT,
                    "-j",
                    NODEPORTS
                ],
            );
        }
    }
    let f = &mut rules.filter;
    // INVALID packets would otherwise reset connections (nf_conntrack_tcp_be_liberal unset).
    f.append(FORWARD, args!["-m", "conntrack", "--ctstate", "INVALID", "-j", "DROP"]);
    f.append(
        FORWARD,
        args![
            "-m",
            "comment",
            "--comment",
            "kubernetes forwarding rules",
            "-m",
            "mark",
            "--mark",
            MASQ_MARK_MASK,
            "-j",
            "ACCEPT"
        ],
    );
    f.append(
        FORWARD,
        args![
            "-m",
            "comment",
            "--comment",
            "kubernetes forwarding conntrack rule",
            "-m",
            "conntrack",
            "--ctstate",
            "RELATED,ESTABLISHED",
            "-j",
            "ACCEPT"
        ],
    );
}

/// Everything one service port needs, computed once.
struct Port<'a> {
    name: String,
    protocol: Protocol,
    /// `tcp`, `udp` or `sctp`: both the `-p` value and the `-m` match module.
    proto: &'static str,
    family: IpFamily,
    /// `IP/32` or `IP/128`, as `iptables-save` prints a host.
    cluster_ip: String,
    port: String,
    node_port: Option<String>,
    /// `spec.externalIPs` of the family, as hosts.
    external_ips: Vec<String>,
    /// Load-balancer ingress IPs of the family, as hosts.
    lb_ips: Vec<String>,
    /// `loadBalancerSourceRanges` of the family, host bits cleared as Go's `ParseCIDR` clears
    /// them.
    source_ranges: Vec<IpNet>,
    /// A source range holds this node's IP: the LB IPs themselves are allowed as sources too.
    allow_from_node: bool,
    health_check_port: Option<String>,
    /// `sessionAffinity: ClientIP` timeout in seconds.
    affinity: Option<u32>,
    masquerade_all: bool,
    /// kube-proxy's local-traffic detector (`None`: its no-op detector).
    local: Option<LocalDetector>,
    choice: Choice<'a>,
    svc_chain: String,
    svl_chain: String,
    ext_chain: String,
    fw_chain: String,
}

/// `ip` as `iptables-save` prints a host address: `a.b.c.d/32`, `x::y/128`.
fn host(ip: IpAddr) -> String {
    format!("{ip}/{}", IpFamily::of(ip).host_prefix())
}

impl<'a> Port<'a> {
    fn new(cluster: &Cluster, svc: &Service, port: &'a ServicePort, node: &str, dev: Deviations) -> Port<'a> {
        let name = naming::service_port_name(svc, port);
        let choice = dev.choose(cluster, svc, port, node);
        // Each proxier sees only the addresses of its own family.
        let family = IpFamily::of(svc.cluster_ip());
        let ours = |ip: &&IpAddr| IpFamily::of(**ip) == family;
        let external_type = matches!(svc.service_type, ServiceType::NodePort | ServiceType::LoadBalancer);
        let source_ranges: Vec<IpNet> = svc
            .load_balancer_source_ranges
            .iter()
            .filter(|n| IpFamily::of_net(n) == family)
            .map(IpNet::trunc)
            .collect();
        let node_ip = cluster.node(node).map(|n| n.ip()).filter(|ip| IpFamily::of(*ip) == family);
        let allow_from_node = node_ip.is_some_and(|ip| source_ranges.iter().any(|r| r.contains(&ip)));
        // `NeedsHealthCheck`: kube-proxy ignores the port on any other Service.
        let needs_health_check = svc.service_type == ServiceType::LoadBalancer
            && svc.external_traffic_policy == TrafficPolicy::Local;
        let hosts = |ips: &[IpAddr]| ips.iter().filter(ours).map(|ip| host(*ip)).collect();
        Port {
            protocol: port.protocol,
            proto: port.protocol.as_lower(),
            family,
            cluster_ip: host(svc.cluster_ip()),
            port: port.port.to_string(),
            node_port: port.node_port.filter(|_| external_type).map(|p| p.to_string()),
            external_ips: hosts(&svc.external_ips),
            lb_ips: hosts(&svc.load_balancer_ips),
            source_ranges,
            allow_from_node,
            health_check_port: svc
                .health_check_node_port
                .filter(|_| needs_health_check)
                .map(|p| p.to_string()),
            affinity: match svc.session_affinity {
                SessionAffinity::ClientIp { timeout_seconds } => Some(timeout_seconds),
                SessionAffinity::None => None,
            },
            masquerade_all: cluster.proxy.masquerade_all,
            local: local_detect::detector(cluster, node),
            choice,
            svc_chain: naming::svc_chain(&name, port.protocol),
            svl_chain: naming::svl_chain(&name, port.protocol),
            ext_chain: naming::ext_chain(&name, port.protocol),
            fw_chain: naming::fw_chain(&name, port.protocol),
            name,
        }
    }

    fn internal_chain(&self) -> &str {
        if self.choice.policy.internal_local { &self.svl_chain } else { &self.svc_chain }
    }

    fn external_policy_chain(&self) -> &str {
        if self.choice.external_local() { &self.svl_chain } else { &self.svc_chain }
    }

    fn uses_firewall_chain(&self) -> bool {
        self.choice.eps.has_any && !self.lb_ips.is_empty() && !self.source_ranges.is_empty()
    }

    fn load_balancer_chain(&self) -> &str {
        if self.uses_firewall_chain() { &self.fw_chain } else { &self.ext_chain }
    }

    /// Target and comment of filter rules for traffic with nowhere to go: REJECT when the
    /// port has no endpoints at all, DROP when only this node's (Local policy) are missing.
    /// kube-proxy writes a bare `-j REJECT`; the saved form names the family's default.
    fn filter_verdict(&self) -> (Vec<String>, String) {
        if self.choice.eps.has_any {
            (args!["-j", "DROP"], format!("{} has no local endpoints", self.name))
        } else {
            let reject_with = match self.family {
                IpFamily::V4 => "icmp-port-unreachable",
                IpFamily::V6 => "icmp6-port-unreachable",
            };
            (args!["-j", "REJECT", "--reject-with", reject_with], format!("{} has no endpoints", self.name))
        }
    }

    /// `--mask` of the `recent` match as saved: every bit of the client address.
    fn recent_mask(&self) -> &'static str {
        match self.family {
            IpFamily::V4 => "255.255.255.255",
            IpFamily::V6 => "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
        }
    }

    /// `-d IP/32 -p proto -m comment --comment C -m proto --dport PORT`
    fn destination_match(&self, destination: &str, comment: &str) -> Vec<String> {
        args![
            "-d",
            destination,
            "-p",
            self.proto,
            "-m",
            "comment",
            "--comment",
            comment,
            "-m",
            self.proto,
            "--dport",
            &self.port
        ]
    }

    fn cluster_ip_match(&self, comment: &str) -> Vec<String> {
        self.destination_match(&self.cluster_ip, comment)
    }
}

fn with(mut head: Vec<String>, tail: Vec<String>) -> Vec<String> {
    head.extend(tail);
    head
}

/// One service port's rules, in kube-proxy's order: entry points (cluster IP, external IPs,
/// load-balancer IPs, node port, health check port), then the masquerade rule of the
/// internal chain, the EXT, FW, SVC, SVL and SEP chains.
fn write_service_port(rules: &mut RuleSet, p: &Port) {
    write_cluster_ip(rules, p);
    write_external_ips(rules, p);
    write_load_balancer_ips(rules, p);
    write_node_port(rules, p);
    write_health_check(rules, p);
    write_internal_masquerade(rules, p);
    write_ext_chain(rules, p);
    write_fw_chain(rules, p);
    if !p.choice.eps.cluster.is_empty() && p.choice.policy.uses_cluster_endpoints() {
        write_ladder(rules, p, &p.svc_chain, &p.choice.eps.cluster);
    }
    if !p.choice.eps.local.is_empty() && p.choice.policy.uses_local_endpoints() {
        write_ladder(rules, p, &p.svl_chain, &p.choice.eps.local);
    }
    for ep in p.choice.eps.reachable.iter().chain(&p.choice.stale_affinity) {
        write_sep_chain(rules, p, ep);
    }
}

fn write_cluster_ip(rules: &mut RuleSet, p: &Port) {
    if p.choice.has_internal_endpoints() {
        let comment = format!("{} cluster IP", p.name);
        rules.nat.append(SERVICES, with(p.cluster_ip_match(&comment), args!["-j", p.internal_chain()]));
    } else {
        let (verdict, comment) = p.filter_verdict();
        rules.filter.append(SERVICES, with(p.cluster_ip_match(&comment), verdict));
    }
}

/// `spec.externalIPs`: to `KUBE-EXT-…`, and refused in the filter table when no endpoint
/// serves outside traffic here.
fn write_external_ips(rules: &mut RuleSet, p: &Port) {
    for ip in &p.external_ips {
        if p.choice.eps.has_any {
            let comment = format!("{} external IP", p.name);
            rules.nat.append(SERVICES, with(p.destination_match(ip, &comment), args!["-j", &p.ext_chain]));
        }
        if !p.choice.has_external_endpoints() {
            let (verdict, comment) = p.filter_verdict();
            rules.filter.append(EXTERNAL_SERVICES, with(p.destination_match(ip, &comment), verdict));
        }
    }
}

/// Load-balancer ingress IPs: to `KUBE-FW-…` when source ranges apply (with the
/// `KUBE-PROXY-FIREWALL` drop for whatever that chain leaves un-DNATed), else to
/// `KUBE-EXT-…`; refused when no endpoint serves outside traffic here.
fn write_load_balancer_ips(rules: &mut RuleSet, p: &Port) {
    for ip in &p.lb_ips {
        if p.choice.eps.has_any {
            let comment = format!("{} loadbalancer IP", p.name);
            let jump = args!["-j", p.load_balancer_chain()];
            rules.nat.append(SERVICES, with(p.destination_match(ip, &comment), jump));
        }
        if p.uses_firewall_chain() {
            let comment = format!("{} traffic not accepted by {}", p.name, p.fw_chain);
            rules.filter.append(PROXY_FIREWALL, with(p.destination_match(ip, &comment), args!["-j", "DROP"]));
        }
    }
    if !p.choice.has_external_endpoints() {
        for ip in &p.lb_ips {
            let (verdict, comment) = p.filter_verdict();
            rules.filter.append(EXTERNAL_SERVICES, with(p.destination_match(ip, &comment), verdict));
        }
    }
}

fn write_node_port(rules: &mut RuleSet, p: &Port) {
    let Some(node_port) = &p.node_port else { return };
    if p.choice.eps.has_any {
        rules.nat.append(
            NODEPORTS,
            args![
                "-p",
                p.proto,
                "-m",
                "comment",
                "--comment",
                &p.name,
                "-m",
                p.proto,
                "--dport",
                node_port,
                "-j",
                &p.ext_chain
            ],
        );
    }
    if !p.choice.has_external_endpoints() {
        let (verdict, comment) = p.filter_verdict();
        let matches = args![
            "-p",
            p.proto,
            "-m",
            "comment",
            "--comment",
            comment,
            "-m",
            "addrtype",
            "--dst-type",
            "LOCAL",
            "-m",
            p.proto,
            "--dport",
            node_port
        ];
        rules.filter.append(EXTERNAL_SERVICES, with(matches, verdict));
    }
}

/// The health check node port is accepted whether or not this node has endpoints (the
/// answer says which); written once per service port, as kube-proxy writes it.
fn write_health_check(rules: &mut RuleSet, p: &Port) {
    let Some(port) = &p.health_check_port else { return };
    let comment = format!("{} health check node port", p.name);
    rules.filter.append(
        NODEPORTS,
        args![
            "-p",
            "tcp",
            "-m",
            "comment",
            "--comment",
            comment,
            "-m",
            "tcp",
            "--dport",
            port,
            "-j",
            "ACCEPT"
        ],
    );
}

/// With `--masquerade-all` every cluster-IP connection is masqueraded; otherwise off-cluster
/// sources reaching the cluster IP (a node routing the service range) are, since the
/// endpoint may be on another node.
fn write_internal_masquerade(rules: &mut RuleSet, p: &Port) {
    if !p.choice.has_internal_endpoints() {
        return;
    }
    let comment = format!("{} cluster IP", p.name);
    let rule = if p.masquerade_all {
        p.cluster_ip_match(&comment)
    } else if let Some(local) = &p.local {
        with(local.iptables_if_not_local(), p.cluster_ip_match(&comment))
    } else {
        return;
    };
    rules.nat.append(p.internal_chain(), with(rule, args!["-j", MARK_MASQ]));
}

/// `KUBE-EXT-…`: masquerade everything (Cluster policy), or keep the client address for
/// outside traffic and short-circuit traffic from pods and from this node (Local policy).
fn write_ext_chain(rules: &mut RuleSet, p: &Port) {
    if !p.choice.uses_external_chain() {
        return;
    }
    let ext = p.ext_chain.as_str();
    rules.nat.add_chain(ext);
    if !p.choice.policy.external_local {
        let comment = format!("masquerade traffic for {} external destinations", p.name);
        rules.nat.append(ext, args!["-m", "comment", "--comment", comment, "-j", MARK_MASQ]);
    } else {
        if let Some(local) = &p.local {
            let comment = format!("pod traffic for {} external destinations", p.name);
            rules.nat.append(
                ext,
                with(
                    local.iptables_if_local(),
                    args!["-m", "comment", "--comment", comment, "-j", &p.svc_chain],
                ),
            );
        }
        // From the node itself the source would be a local address: masquerade and use all
        // endpoints, as if the traffic had gone out to a load balancer and come back.
        for (verb, target) in [("masquerade", MARK_MASQ), ("route", p.svc_chain.as_str())] {
            let comment = format!("{verb} LOCAL traffic for {} external destinations", p.name);
            #[rustfmt::skip]
            rules.nat.append(ext, args!["-m", "comment", "--comment", comment, "-m", "addrtype", "--src-type", "LOCAL", "-j", target]);
        }
    }
    if p.choice.has_external_endpoints() {
        rules.nat.append(ext, args!["-j", p.external_policy_chain()]);
    }
}

/// `KUBE-FW-…`: sources inside `loadBalancerSourceRanges` (and, when a range holds this
/// node's IP, the LB IPs themselves: a node reaching a VIP that is local to it sends from the
/// VIP) go on to `KUBE-EXT-…`; the rest fall off the end, un-DNATed, into the filter
/// table's `KUBE-PROXY-FIREWALL` drop. Pods are not let through: their sources are pod IPs.
fn write_fw_chain(rules: &mut RuleSet, p: &Port) {
    if !p.uses_firewall_chain() {
        return;
    }
    let fw = p.fw_chain.as_str();
    rules.nat.add_chain(fw);
    let comment = format!("{} loadbalancer IP", p.name);
    let allow =
        |source: String| args!["-s", source, "-m", "comment", "--comment", &comment, "-j", &p.ext_chain];
    for range in &p.source_ranges {
        rules.nat.append(fw, allow(range.to_string()));
    }
    if p.allow_from_node {
        for ip in &p.lb_ips {
            rules.nat.append(fw, allow(ip.clone()));
        }
    }
    let comment = format!("other traffic to {} will be dropped by KUBE-PROXY-FIREWALL", p.name);
    rules.nat.append(fw, args!["-m", "comment", "--comment", comment]);
}

/// A `KUBE-SVC-…`/`KUBE-SVL-…` chain: with ClientIP affinity first one `recent` check per
/// endpoint (a client seen within the timeout goes back to its endpoint), then one rule per
/// endpoint, each taking `1/remaining`.
fn write_ladder(rules: &mut RuleSet, p: &Port, chain: &str, endpoints: &[&Endpoint]) {
    rules.nat.add_chain(chain);
    if let Some(seconds) = p.affinity {
        for ep in endpoints.iter().chain(&p.choice.stale_affinity) {
            let sep = naming::sep_chain(&p.name, p.protocol, ep.address());
            rules.nat.append(
                chain,
                args![
                    "-m",
                    "comment",
                    "--comment",
                    format!("{} -> {}", p.name, ep.address()),
                    "-m",
                    "recent",
                    "--rcheck",
                    "--seconds",
                    seconds.to_string(),
                    "--reap",
                    "--name",
                    &sep,
                    "--mask",
                    p.recent_mask(),
                    "--rsource",
                    "-j",
                    &sep
                ],
            );
        }
    }
    let n = endpoints.len();
    for (i, ep) in endpoints.iter().enumerate() {
        let sep = naming::sep_chain(&p.name, p.protocol, ep.address());
        let mut rule = args!["-m", "comment", "--comment", format!("{} -> {}", p.name, ep.address())];
        if i + 1 < n {
            rule.extend(args![
                "-m",
                "statistic",
                "--mode",
                "random",
                "--probability",
                ladder::probability(n - i)
            ]);
        }
        rule.extend(args!["-j", sep]);
        rules.nat.append(chain, rule);
    }
}

/// A `KUBE-SEP-…` chain: masquerade hairpin traffic (an endpoint reaching itself through the
/// service), then DNAT to the endpoint, recording the client for ClientIP affinity.
fn write_sep_chain(rules: &mut RuleSet, p: &Port, ep: &Endpoint) {
    let chain = naming::sep_chain(&p.name, p.protocol, ep.address());
    rules.nat.add_chain(&chain);
    rules
        .nat
        .append(&chain, args!["-s", host(ep.ip), "-m", "comment", "--comment", &p.name, "-j", MARK_MASQ]);
    let mut dnat = args!["-p", p.proto, "-m", "comment", "--comment", &p.name];
    if p.affinity.is_some() {
        dnat.extend(args!["-m", "recent", "--set", "--name", &chain, "--mask", p.recent_mask(), "--rsource"]);
    }
    dnat.extend(args!["-m", p.proto, "-j", "DNAT", "--to-destination", ep.address().to_string()]);
    rules.nat.append(&chain, dnat);
}
