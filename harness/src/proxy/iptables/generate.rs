//! The rules kube-proxy (v1.30, iptables mode, IPv4) writes on one node, in the order it
//! writes them (`syncProxyRules` in pkg/proxy/iptables/proxier.go).
//!
//! Arguments are in the canonical order `iptables-save` prints, so every rendered line reads
//! exactly like the line a dump of a real node shows. Two things kube-proxy does outside its
//! `iptables-restore` are included, because a fresh namespace has neither: the jumps from the
//! built-in chains, and kubelet's `KUBE-FIREWALL` hook.
//!
//! Not modelled (the model has no such fields): external IPs, load-balancer IPs and
//! `KUBE-FW-…` source ranges, health-check node ports, session affinity, topology hints.

use std::net::IpAddr;

use ipnet::IpNet;

use super::endpoints::{PortPolicy, Selection, select};
use super::ladder;
use super::naming;
use super::ruleset::{RuleSet, args};
use crate::model::{Cluster, Endpoint, Protocol, Service, ServicePort};

/// The mark that asks `KUBE-POSTROUTING` to masquerade (kube-proxy's default bit 14).
pub const MASQ_MARK: &str = "0x4000";
const MASQ_MARK_MASK: &str = "0x4000/0x4000";

const SERVICES: &str = "KUBE-SERVICES";
const EXTERNAL_SERVICES: &str = "KUBE-EXTERNAL-SERVICES";
const FORWARD: &str = "KUBE-FORWARD";
const NODEPORTS: &str = "KUBE-NODEPORTS";
const PROXY_FIREWALL: &str = "KUBE-PROXY-FIREWALL";
const FIREWALL: &str = "KUBE-FIREWALL";
const POSTROUTING: &str = "KUBE-POSTROUTING";
const MARK_MASQ: &str = "KUBE-MARK-MASQ";

/// The `iptables-restore` input kube-proxy would write on `node` for `cluster`.
pub fn node_rules(cluster: &Cluster, node: &str) -> RuleSet {
    let mut rules = RuleSet::default();
    write_chains(&mut rules);
    write_hooks(&mut rules);
    write_fixed_rules(&mut rules);
    for svc in cluster.services.iter().filter(|s| matches!(s.cluster_ip, IpAddr::V4(_))) {
        for port in &svc.ports {
            write_service_port(&mut rules, cluster, svc, port, node);
        }
    }
    write_trailer(&mut rules);
    rules
}

/// The top-level chains, in kube-proxy's order (plus kubelet's `KUBE-FIREWALL`).
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

/// Masquerade marking and SNAT, and the localnet guard (route_localnet exposes node ports on
/// 127.0.0.1; kube-proxy writes this rule when localhost node ports are enabled, the default).
fn write_fixed_rules(rules: &mut RuleSet) {
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
    let n = &mut rules.nat;
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

/// The node-port catch-all (last in nat `KUBE-SERVICES`) and the forwarding rules.
fn write_trailer(rules: &mut RuleSet) {
    rules.nat.append(
        SERVICES,
        args![
            "-m",
            "comment",
            "--comment",
            "kubernetes service nodeports; NOTE: this must be the last rule in this chain",
            "-m",
            "addrtype",
            "--dst-type",
            "LOCAL",
            "-j",
            NODEPORTS
        ],
    );
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
    cluster_ip: String,
    port: String,
    node_port: Option<String>,
    pod_cidr: Option<String>,
    policy: PortPolicy,
    eps: Selection<'a>,
    svc_chain: String,
    svl_chain: String,
    ext_chain: String,
}

impl<'a> Port<'a> {
    fn new(cluster: &Cluster, svc: &Service, port: &'a ServicePort, node: &str) -> Port<'a> {
        let name = naming::service_port_name(svc, port);
        let policy = PortPolicy::of(svc, port);
        // kube-proxy's local-traffic detector by cluster CIDR; IPv4 only like the rest.
        let pod_cidr = match cluster.pod_cidr {
            IpNet::V4(net) => Some(net.trunc().to_string()),
            IpNet::V6(_) => None,
        };
        Port {
            protocol: port.protocol,
            proto: port.protocol.as_lower(),
            cluster_ip: format!("{}/32", svc.cluster_ip),
            port: port.port.to_string(),
            node_port: port.node_port.filter(|_| policy.externally_accessible).map(|p| p.to_string()),
            pod_cidr,
            policy,
            eps: select(port, policy, node),
            svc_chain: naming::svc_chain(&name, port.protocol),
            svl_chain: naming::svl_chain(&name, port.protocol),
            ext_chain: naming::ext_chain(&name, port.protocol),
            name,
        }
    }

    fn has_internal_endpoints(&self) -> bool {
        self.eps.has_any && (!self.policy.internal_local || !self.eps.local.is_empty())
    }

    fn has_external_endpoints(&self) -> bool {
        self.eps.has_any && (!self.policy.external_local || !self.eps.local.is_empty())
    }

    fn internal_chain(&self) -> &str {
        if self.policy.internal_local { &self.svl_chain } else { &self.svc_chain }
    }

    fn external_policy_chain(&self) -> &str {
        if self.policy.external_local { &self.svl_chain } else { &self.svc_chain }
    }

    /// Target and comment of filter rules for traffic with nowhere to go: REJECT when the
    /// port has no endpoints at all, DROP when only this node's (Local policy) are missing.
    fn filter_verdict(&self) -> (Vec<String>, String) {
        if self.eps.has_any {
            (args!["-j", "DROP"], format!("{} has no local endpoints", self.name))
        } else {
            (
                args!["-j", "REJECT", "--reject-with", "icmp-port-unreachable"],
                format!("{} has no endpoints", self.name),
            )
        }
    }

    /// `-d VIP/32 -p proto -m comment --comment C -m proto --dport PORT`
    fn cluster_ip_match(&self, comment: &str) -> Vec<String> {
        args![
            "-d",
            &self.cluster_ip,
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
}

fn with(mut head: Vec<String>, tail: Vec<String>) -> Vec<String> {
    head.extend(tail);
    head
}

/// One service port's rules, in kube-proxy's order: entry points (cluster IP, node port),
/// then the EXT, SVC, SVL and SEP chains.
fn write_service_port(rules: &mut RuleSet, cluster: &Cluster, svc: &Service, port: &ServicePort, node: &str) {
    let p = Port::new(cluster, svc, port, node);
    write_cluster_ip(rules, &p);
    write_node_port(rules, &p);
    write_internal_masquerade(rules, &p);
    write_ext_chain(rules, &p);
    if !p.eps.cluster.is_empty() && p.policy.uses_cluster_endpoints() {
        write_ladder(rules, &p, &p.svc_chain, &p.eps.cluster);
    }
    if !p.eps.local.is_empty() && p.policy.uses_local_endpoints() {
        write_ladder(rules, &p, &p.svl_chain, &p.eps.local);
    }
    for ep in &p.eps.reachable {
        write_sep_chain(rules, &p, ep);
    }
}

fn write_cluster_ip(rules: &mut RuleSet, p: &Port) {
    if p.has_internal_endpoints() {
        let comment = format!("{} cluster IP", p.name);
        rules.nat.append(SERVICES, with(p.cluster_ip_match(&comment), args!["-j", p.internal_chain()]));
    } else {
        let (verdict, comment) = p.filter_verdict();
        rules.filter.append(SERVICES, with(p.cluster_ip_match(&comment), verdict));
    }
}

fn write_node_port(rules: &mut RuleSet, p: &Port) {
    let Some(node_port) = &p.node_port else { return };
    if p.eps.has_any {
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
    if !p.has_external_endpoints() {
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

/// Off-cluster sources reaching the cluster IP (a node routing the service range) are
/// masqueraded, since the endpoint may be on another node.
fn write_internal_masquerade(rules: &mut RuleSet, p: &Port) {
    let Some(pod_cidr) = &p.pod_cidr else { return };
    if !p.has_internal_endpoints() {
        return;
    }
    let comment = format!("{} cluster IP", p.name);
    let rule = with(args!["!", "-s", pod_cidr], p.cluster_ip_match(&comment));
    rules.nat.append(p.internal_chain(), with(rule, args!["-j", MARK_MASQ]));
}

/// `KUBE-EXT-…`: masquerade everything (Cluster policy), or keep the client address for
/// outside traffic and short-circuit traffic from pods and from this node (Local policy).
fn write_ext_chain(rules: &mut RuleSet, p: &Port) {
    if !(p.eps.has_any && p.node_port.is_some()) {
        return;
    }
    let ext = p.ext_chain.as_str();
    rules.nat.add_chain(ext);
    if !p.policy.external_local {
        let comment = format!("masquerade traffic for {} external destinations", p.name);
        rules.nat.append(ext, args!["-m", "comment", "--comment", comment, "-j", MARK_MASQ]);
    } else {
        if let Some(pod_cidr) = &p.pod_cidr {
            let comment = format!("pod traffic for {} external destinations", p.name);
            rules.nat.append(
                ext,
                args!["-s", pod_cidr, "-m", "comment", "--comment", comment, "-j", &p.svc_chain],
            );
        }
        // From the node itself the source would be a local address: masquerade and use all
        // endpoints, as if the traffic had gone out to a load balancer and come back.
        let comment = format!("masquerade LOCAL traffic for {} external destinations", p.name);
        rules.nat.append(
            ext,
            args![
                "-m",
                "comment",
                "--comment",
                comment,
                "-m",
                "addrtype",
                "--src-type",
                "LOCAL",
                "-j",
                MARK_MASQ
            ],
        );
        let comment = format!("route LOCAL traffic for {} external destinations", p.name);
        rules.nat.append(
            ext,
            args![
                "-m",
                "comment",
                "--comment",
                comment,
                "-m",
                "addrtype",
                "--src-type",
                "LOCAL",
                "-j",
                &p.svc_chain
            ],
        );
    }
    if p.has_external_endpoints() {
        rules.nat.append(ext, args!["-j", p.external_policy_chain()]);
    }
}

/// A `KUBE-SVC-…`/`KUBE-SVL-…` chain: one rule per endpoint, each taking `1/remaining`.
fn write_ladder(rules: &mut RuleSet, p: &Port, chain: &str, endpoints: &[&Endpoint]) {
    rules.nat.add_chain(chain);
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
/// service), then DNAT to the endpoint.
fn write_sep_chain(rules: &mut RuleSet, p: &Port, ep: &Endpoint) {
    let chain = naming::sep_chain(&p.name, p.protocol, ep.address());
    rules.nat.add_chain(&chain);
    rules.nat.append(
        &chain,
        args!["-s", format!("{}/32", ep.ip), "-m", "comment", "--comment", &p.name, "-j", MARK_MASQ],
    );
    rules.nat.append(
        &chain,
        args![
            "-p",
            p.proto,
            "-m",
            "comment",
            "--comment",
            &p.name,
            "-m",
            p.proto,
            "-j",
            "DNAT",
            "--to-destination",
            ep.address().to_string()
        ],
    );
}
