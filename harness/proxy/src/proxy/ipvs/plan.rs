//! What kube-proxy's IPVS mode programs on one node for one family (`syncProxyRules` and
//! `writeIptablesRules` in pkg/proxy/ipvs/proxier.go, v1.30.3): virtual servers with their
//! real servers, the addresses bound to the dummy interface `kube-ipvs0`, the ipsets, and the
//! iptables rules that match them (masquerade marks, source-range firewall, the filter that
//! rejects new connections to a service address's unused ports).
//!
//! Endpoint choice differs from the iptables mode in one way kube-proxy's code states
//! (`syncEndpoint`): a virtual server whose policy is Local falls back to the Cluster
//! endpoints when the node has no local ones ("Allow access from local PODs even if no local
//! endpoints exist", kubernetes/kubernetes#97081), for internal and external policy alike;
//! a virtual server without real servers answers new connections with ICMP port unreachable
//! (the kernel's `ip_vs_leave`). Not modelled: `--ipvs-exclude-cidrs`, `--ipvs-strict-arp`,
//! schedulers other than `rr`, the IPVS timeouts flags.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;

use super::ipset::{SetName, Sets, ip_port};
use super::virtual_servers::{RealServer, ServiceKey, Table, VirtualServer};
use crate::kubernetes::local_detect;
use crate::model::{
    Cluster, Endpoint, IpFamily, Node, Protocol, Service, ServicePort, ServiceType, SessionAffinity,
    TrafficPolicy, bridge_address,
};
use crate::proxy::endpoint_choice::Choice;
use crate::proxy::endpoint_choice::Deviations;
use crate::proxy::iptables_rules::{RuleSet, args};
use crate::proxy::node_ports::NodePortAddresses;

/// A row of kube-proxy's `ipsetWithIptablesChain`: the set, whether its rule is in the filter
/// table (else nat), the chain it is matched in, the target, the match type and the protocol.
type SetJump<'a> = (SetName, bool, &'a str, &'a str, &'a str, Option<&'a str>);

/// The name of the dummy interface holding service addresses (`defaultDummyDevice`).
pub(crate) const DUMMY: &str = "kube-ipvs0";

/// The mark that asks `KUBE-POSTROUTING` to masquerade (kube-proxy's default bit 14).
const MASQ_MARK: &str = "0x4000";

const SERVICES: &str = "KUBE-SERVICES";
const PROXY_FIREWALL: &str = "KUBE-PROXY-FIREWALL";
const SOURCE_RANGES_FIREWALL: &str = "KUBE-SOURCE-RANGES-FIREWALL";
const POSTROUTING: &str = "KUBE-POSTROUTING";
const MARK_MASQ: &str = "KUBE-MARK-MASQ";
const NODE_PORT: &str = "KUBE-NODE-PORT";
const FORWARD: &str = "KUBE-FORWARD";
const LOAD_BALANCER: &str = "KUBE-LOAD-BALANCER";
const IPVS_FILTER: &str = "KUBE-IPVS-FILTER";
const IPVS_OUT_FILTER: &str = "KUBE-IPVS-OUT-FILTER";

/// Ways the plan departs from kube-proxy on purpose (all off by default), for mutants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Breaks {
    /// Endpoint-choice bugs shared with the other modes.
    pub deviations: Deviations,
    /// The service addresses are not bound to `kube-ipvs0`.
    pub no_dummy_addresses: bool,
    /// Real servers get the Service's port instead of the endpoint's.
    pub real_server_on_service_port: bool,
    /// The last endpoint of every virtual server is left out.
    pub last_endpoint_missing: bool,
    /// ClientIP affinity is not turned into persistence.
    pub no_persistence: bool,
    /// Persistence for a day, whatever the Service's timeout.
    pub persistence_ignores_timeout: bool,
}

/// One family's programming of one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FamilyPlan {
    pub family: IpFamily,
    pub sets: Sets,
    pub rules: RuleSet,
    pub servers: Table,
    /// Addresses bound to `kube-ipvs0` (also the `KUBE-IPVS-IPS` set).
    pub bound: BTreeSet<IpAddr>,
}

/// The addresses node ports answer on: with no `--nodeport-addresses`, every non-loopback
/// address of the family on the node's interfaces but `kube-ipvs0` (node network addresses
/// and the pod bridge's gateway); otherwise the node's addresses inside the CIDRs, loopback
/// left out (`nodeIPs` in `syncProxyRules`; `isValidForSet` in netlink_linux.go).
pub(crate) fn node_port_ips(cluster: &Cluster, node: Option<&Node>) -> Vec<IpAddr> {
    let family = cluster.ip_family();
    let addresses = NodePortAddresses::new(&cluster.proxy, family);
    let mut ips: Vec<IpAddr> = if addresses.match_all() {
        node.map(|n| n.node_network_ips().chain([bridge_address(&n.pod_cidr())]).collect())
            .unwrap_or_default()
    } else {
        addresses.node_ips(node)
    };
    ips.retain(|ip| IpFamily::of(*ip) == family && !ip.is_loopback());
    ips.dedup();
    ips
}

/// Addresses of the node of `family` on other interfaces than `kube-ipvs0`: an external or
/// load-balancer IP that is one of them is not bound to the dummy interface.
fn node_addresses(cluster: &Cluster, node: Option<&Node>) -> BTreeSet<IpAddr> {
    let family = cluster.ip_family();
    node.map(|n| n.node_network_ips().chain([bridge_address(&n.pod_cidr())]).collect::<BTreeSet<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter(|ip| IpFamily::of(*ip) == family)
        .collect()
}

/// The plan for `node` of a single-family `cluster` (a family view).
pub(crate) fn family_plan(cluster: &Cluster, node_name: &str, breaks: Breaks) -> FamilyPlan {
    let family = cluster.ip_family();
    let node = cluster.node(node_name);
    let mut plan = Planner {
        cluster,
        node_name,
        breaks,
        family,
        node_port_ips: node_port_ips(cluster, node),
        node_addresses: node_addresses(cluster, node),
        node_ip: node.map(|n| n.ip()).filter(|ip| IpFamily::of(*ip) == family),
        sets: Sets::new(family),
        servers: Table::new(),
        bound: BTreeSet::new(),
        no_node_access: Vec::new(),
    };
    for svc in cluster.services.iter().filter(|s| IpFamily::of(s.cluster_ip()) == family) {
        for port in &svc.ports {
            plan.service_port(svc, port);
        }
    }
    for ip in &plan.bound {
        plan.sets.insert(SetName::IpvsIps, ip.to_string());
    }
    // The addresses go from the link, as in kubernetes#85422; the sets still name them.
    if breaks.no_dummy_addresses {
        plan.bound.clear();
    }
    let rules = plan.iptables_rules();
    FamilyPlan { family, sets: plan.sets, rules, servers: plan.servers, bound: plan.bound }
}

struct Planner<'c> {
    cluster: &'c Cluster,
    node_name: &'c str,
    breaks: Breaks,
    family: IpFamily,
    node_port_ips: Vec<IpAddr>,
    node_addresses: BTreeSet<IpAddr>,
    node_ip: Option<IpAddr>,
    sets: Sets,
    servers: Table,
    bound: BTreeSet<IpAddr>,
    /// Load-balancer `(IP, protocol, port)` the node itself may not reach (source ranges
    /// that leave out the node's IP: `lbNoNodeAccessIPPortProtocolEntries`).
    no_node_access: Vec<(IpAddr, &'static str, u16)>,
}

impl Planner<'_> {
    fn service_port(&mut self, svc: &Service, port: &ServicePort) {
        let proto = port.protocol.as_lower();
        let choice = self.breaks.deviations.choose(self.cluster, svc, port, self.node_name);
        let persistent = match svc.session_affinity {
            _ if self.breaks.no_persistence => None,
            SessionAffinity::ClientIp { .. } if self.breaks.persistence_ignores_timeout => Some(86400),
            SessionAffinity::ClientIp { timeout_seconds } => Some(timeout_seconds),
            SessionAffinity::None => None,
        };
        let family = self.family;
        let ours = move |ip: &&IpAddr| IpFamily::of(**ip) == family;
        let external_local = choice.external_local();

        // Hairpin: this node's endpoints reaching themselves through the Service.
        for ep in port.endpoints.iter().filter(|ep| IpFamily::of(ep.ip) == self.family) {
            if ep.node.as_deref() == Some(self.node_name) {
                self.sets.insert(SetName::LoopBack, format!("{},{proto}:{},{}", ep.ip, ep.port, ep.ip));
            }
        }

        self.sets.insert(SetName::ClusterIp, ip_port(svc.cluster_ip(), proto, port.port));
        let reals = self.reals(&choice, port, choice.policy.internal_local);
        self.add_server(svc.cluster_ip(), port, persistent, &reals, true);

        let external_reals = self.reals(&choice, port, external_local);
        for &ip in svc.external_ips.iter().filter(ours) {
            let set =
                if choice.policy.external_local { SetName::ExternalIpLocal } else { SetName::ExternalIp };
            self.sets.insert(set, ip_port(ip, proto, port.port));
            let bind = !self.node_addresses.contains(&ip);
            self.add_server(ip, port, persistent, &external_reals, bind);
        }

        for &ip in svc.load_balancer_ips.iter().filter(ours) {
            let entry = ip_port(ip, proto, port.port);
            self.sets.insert(SetName::LoadBalancer, entry.clone());
            if choice.policy.external_local {
                self.sets.insert(SetName::LoadBalancerLocal, entry.clone());
            }
            let ranges: Vec<IpNet> = svc
                .load_balancer_source_ranges
                .iter()
                .filter(|n| IpFamily::of_net(n) == self.family)
                .map(IpNet::trunc)
                .collect();
            if !ranges.is_empty() {
                self.sets.insert(SetName::LoadBalancerFw, entry.clone());
                for range in &ranges {
                    self.sets.insert(SetName::LoadBalancerSourceCidr, format!("{entry},{range}"));
                }
                let allow_from_node = self.node_ip.is_some_and(|n| ranges.iter().any(|r| r.contains(&n)));
                if allow_from_node {
                    self.sets.insert(SetName::LoadBalancerSourceIp, format!("{entry},{ip}"));
                } else {
                    self.no_node_access.push((ip, proto, port.port));
                }
            }
            let bind = !self.node_addresses.contains(&ip);
            self.add_server(ip, port, persistent, &external_reals, bind);
        }

        let external_type = matches!(svc.service_type, ServiceType::NodePort | ServiceType::LoadBalancer);
        if let Some(node_port) = port.node_port.filter(|_| external_type && !self.node_port_ips.is_empty()) {
            let (set, local_set) = node_port_sets(port.protocol);
            let entries: Vec<String> = match port.protocol {
                Protocol::Sctp => {
                    self.node_port_ips.iter().map(|ip| ip_port(*ip, proto, node_port)).collect()
                }
                _ => vec![node_port.to_string()],
            };
            for entry in &entries {
                self.sets.insert(set, entry.clone());
                if choice.policy.external_local {
                    self.sets.insert(local_set, entry.clone());
                }
            }
            for ip in self.node_port_ips.clone() {
                let key = ServiceKey { protocol: port.protocol, address: SocketAddr::new(ip, node_port) };
                self.insert_server(key, persistent, &external_reals);
            }
        }

        let needs_health_check = svc.service_type == ServiceType::LoadBalancer
            && svc.external_traffic_policy == TrafficPolicy::Local;
        if let Some(hc) = svc.health_check_node_port.filter(|_| needs_health_check) {
            self.sets.insert(SetName::HealthCheckNodePort, hc.to_string());
        }
    }

    /// The endpoints of a virtual server (`syncEndpoint`): the Local set when the policy is
    /// Local and the node has local endpoints, else the Cluster set.
    fn reals<'e>(&self, choice: &Choice<'e>, port: &ServicePort, only_local: bool) -> Vec<SocketAddr> {
        let chosen: &[&Endpoint] =
            if only_local && !choice.eps.local.is_empty() { &choice.eps.local } else { &choice.eps.cluster };
        let mut reals: Vec<SocketAddr> = chosen
            .iter()
            .map(|ep| {
                let p = if self.breaks.real_server_on_service_port { port.port } else { ep.port };
                SocketAddr::new(ep.ip, p)
            })
            .collect();
        if self.breaks.last_endpoint_missing && reals.len() > 1 {
            reals.pop();
        }
        reals
    }

    fn add_server(
        &mut self,
        ip: IpAddr,
        port: &ServicePort,
        persistent: Option<u32>,
        reals: &[SocketAddr],
        bind: bool,
    ) {
        let key = ServiceKey { protocol: port.protocol, address: SocketAddr::new(ip, port.port) };
        self.insert_server(key, persistent, reals);
        if bind {
            self.bound.insert(ip);
        }
    }

    fn insert_server(&mut self, key: ServiceKey, persistent: Option<u32>, reals: &[SocketAddr]) {
        let mut vs = VirtualServer::new(key, persistent);
        for real in reals {
            vs.reals.insert(*real, RealServer { weight: 1, connections: 0 });
        }
        self.servers.insert(key, vs);
    }

    fn set(&self, set: SetName) -> String {
        set.in_family(self.family)
    }

    /// `-m comment --comment C -m set --match-set SET TYPE`: how kube-proxy matches one of
    /// its sets in a rule, named by the set's comment.
    fn commented_match(&self, set: SetName, match_type: &str) -> Vec<String> {
        args![
            "-m",
            "comment",
            "--comment",
            set.comment(),
            "-m",
            "set",
            "--match-set",
            self.set(set),
            match_type
        ]
    }

    /// `createAndLinkKubeChain` and `writeIptablesRules`, in their order.
    fn iptables_rules(&self) -> RuleSet {
        let mut rules = RuleSet::default();
        for chain in [SERVICES, POSTROUTING, NODE_PORT, LOAD_BALANCER, MARK_MASQ] {
            rules.nat.add_chain(chain);
        }
        for chain in
            [FORWARD, NODE_PORT, PROXY_FIREWALL, SOURCE_RANGES_FIREWALL, IPVS_FILTER, IPVS_OUT_FILTER]
        {
            rules.filter.add_chain(chain);
        }
        // The jumps kube-proxy prepends (`iptablesJumpChain`), so the last listed comes first.
        let hook = |comment: &str, to: &str| args!["-m", "comment", "--comment", comment, "-j", to];
        rules.nat.append("PREROUTING", hook("kubernetes service portals", SERVICES));
        rules.nat.append("OUTPUT", hook("kubernetes service portals", SERVICES));
        rules.nat.append("POSTROUTING", hook("kubernetes postrouting rules", POSTROUTING));
        rules.filter.append("INPUT", hook("kubernetes ipvs access filter", IPVS_FILTER));
        rules.filter.append("INPUT", hook("kube-proxy firewall rules", PROXY_FIREWALL));
        rules.filter.append("INPUT", hook("kubernetes health check rules", NODE_PORT));
        rules.filter.append("FORWARD", hook("kube-proxy firewall rules", PROXY_FIREWALL));
        rules.filter.append("FORWARD", hook("kubernetes forwarding rules", FORWARD));
        rules.filter.append("OUTPUT", hook("kubernetes ipvs access filter", IPVS_OUT_FILTER));

        let loopback = match self.family {
            IpFamily::V4 => "127.0.0.0/8",
            IpFamily::V6 => "::1/128",
        };
        rules.nat.append(SERVICES, args!["-s", loopback, "-j", "RETURN"]);

        // `ipsetWithIptablesChain`: one rule per non-empty set, in that list's order.
        let with_chain: [SetJump<'_>; 12] = [
            (SetName::LoopBack, false, POSTROUTING, "MASQUERADE", "dst,dst,src", None),
            (SetName::LoadBalancer, false, SERVICES, LOAD_BALANCER, "dst,dst", None),
            (SetName::LoadBalancerLocal, false, LOAD_BALANCER, "RETURN", "dst,dst", None),
            (SetName::NodePortLocalTcp, false, NODE_PORT, "RETURN", "dst", Some("tcp")),
            (SetName::NodePortTcp, false, NODE_PORT, MARK_MASQ, "dst", Some("tcp")),
            (SetName::NodePortLocalUdp, false, NODE_PORT, "RETURN", "dst", Some("udp")),
            (SetName::NodePortUdp, false, NODE_PORT, MARK_MASQ, "dst", Some("udp")),
            (SetName::NodePortLocalSctp, false, NODE_PORT, "RETURN", "dst,dst", Some("sctp")),
            (SetName::NodePortSctp, false, NODE_PORT, MARK_MASQ, "dst,dst", Some("sctp")),
            (SetName::LoadBalancerFw, true, PROXY_FIREWALL, SOURCE_RANGES_FIREWALL, "dst,dst", None),
            (SetName::LoadBalancerSourceCidr, true, SOURCE_RANGES_FIREWALL, "RETURN", "dst,dst,src", None),
            (SetName::LoadBalancerSourceIp, true, SOURCE_RANGES_FIREWALL, "RETURN", "dst,dst,src", None),
        ];
        for (set, filter, from, to, match_type, protocol) in with_chain {
            if self.sets.is_empty(set) {
                continue;
            }
            let mut rule = Vec::new();
            if let Some(p) = protocol {
                rule.extend(args!["-p", p]);
            }
            rule.extend(self.commented_match(set, match_type));
            rule.extend(args!["-j", to]);
            let table = if filter { &mut rules.filter } else { &mut rules.nat };
            table.append(from, rule);
        }

        if !self.sets.is_empty(SetName::ClusterIp) {
            let mut rule = self.commented_match(SetName::ClusterIp, "dst,dst");
            // Off-cluster sources are masqueraded, as the local-traffic detector (detectLocalMode)
            // tells them; without a detector, traffic sent from a service address (proxier.go).
            match local_detect::detector(self.cluster, self.node_name) {
                _ if self.cluster.proxy.masquerade_all => {}
                Some(local) => rule = [local.iptables_if_not_local(), rule].concat(),
                None => *rule.last_mut().expect("the set's match type") = "src,dst".to_string(),
            }
            rules.nat.append(SERVICES, [rule, args!["-j", MARK_MASQ]].concat());
        }

        // External IPs: masquerade (Cluster policy), and accept what comes from off the machine
        // or is addressed to a local address.
        for (set, masquerade) in [(SetName::ExternalIp, true), (SetName::ExternalIpLocal, false)] {
            if self.sets.is_empty(set) {
                continue;
            }
            let base = self.commented_match(set, "dst,dst");
            if masquerade {
                rules.nat.append(SERVICES, [base.clone(), args!["-j", MARK_MASQ]].concat());
            }
            let off_machine = args![
                "-m",
                "physdev",
                "!",
                "--physdev-is-in",
                "-m",
                "addrtype",
                "!",
                "--src-type",
                "LOCAL",
                "-j",
                "ACCEPT"
            ];
            rules.nat.append(SERVICES, [base.clone(), off_machine].concat());
            rules.nat.append(
                SERVICES,
                [base, args!["-m", "addrtype", "--dst-type", "LOCAL", "-j", "ACCEPT"]].concat(),
            );
        }

        rules.nat.append(SERVICES, args!["-m", "addrtype", "--dst-type", "LOCAL", "-j", NODE_PORT]);
        rules.nat.append(LOAD_BALANCER, args!["-j", MARK_MASQ]);
        rules.filter.append(SOURCE_RANGES_FIREWALL, args!["-j", "DROP"]);
        for (ip, proto, port) in &self.no_node_access {
            #[rustfmt::skip]
            rules.filter.append(IPVS_OUT_FILTER, args!["-s", ip.to_string(), "-m", "ipvs", "--vaddr", ip.to_string(), "--vproto", *proto, "--vport", port.to_string(), "-j", "DROP"]);
        }
        // `acceptIPVSTraffic`.
        for set in [SetName::ClusterIp, SetName::LoadBalancer] {
            if !self.sets.is_empty(set) {
                rules.nat.append(
                    SERVICES,
                    args!["-m", "set", "--match-set", self.set(set), "dst,dst", "-j", "ACCEPT"],
                );
            }
        }
        let masq_mark = format!("{MASQ_MARK}/{MASQ_MARK}");
        #[rustfmt::skip]
        rules.filter.append(FORWARD, args!["-m", "comment", "--comment", "kubernetes forwarding rules", "-m", "mark", "--mark", &masq_mark, "-j", "ACCEPT"]);
        #[rustfmt::skip]
        rules.filter.append(FORWARD, args!["-m", "comment", "--comment", "kubernetes forwarding conntrack rule", "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT"]);
        let hc = SetName::HealthCheckNodePort;
        #[rustfmt::skip]
        rules.filter.append(NODE_PORT, [self.commented_match(hc, "dst"), args!["-j", "ACCEPT"]].concat());

        // New connections to a service address on a port no virtual server has are rejected
        // (kubernetes/kubernetes#72236): the node's own ports are not reachable through a VIP.
        for (set, match_type) in [
            (SetName::LoadBalancer, "dst,dst"),
            (SetName::ClusterIp, "dst,dst"),
            (SetName::ExternalIp, "dst,dst"),
            (SetName::ExternalIpLocal, "dst,dst"),
            (SetName::HealthCheckNodePort, "dst"),
        ] {
            rules.filter.append(
                IPVS_FILTER,
                args!["-m", "set", "--match-set", self.set(set), match_type, "-j", "RETURN"],
            );
        }
        #[rustfmt::skip]
        rules.filter.append(IPVS_FILTER, args!["-m", "conntrack", "--ctstate", "NEW", "-m", "set", "--match-set", self.set(SetName::IpvsIps), "dst", "-j", "REJECT"]);

        rules.nat.append(POSTROUTING, args!["-m", "mark", "!", "--mark", &masq_mark, "-j", "RETURN"]);
        rules.nat.append(POSTROUTING, args!["-j", "MARK", "--xor-mark", MASQ_MARK]);
        #[rustfmt::skip]
        rules.nat.append(POSTROUTING, args!["-m", "comment", "--comment", "kubernetes service traffic requiring SNAT", "-j", "MASQUERADE", "--random-fully"]);
        rules.nat.append(MARK_MASQ, args!["-j", "MARK", "--or-mark", MASQ_MARK]);
        rules
    }
}

/// The node-port set and its Local twin for a protocol.
fn node_port_sets(protocol: Protocol) -> (SetName, SetName) {
    match protocol {
        Protocol::Tcp => (SetName::NodePortTcp, SetName::NodePortLocalTcp),
        Protocol::Udp => (SetName::NodePortUdp, SetName::NodePortLocalUdp),
        Protocol::Sctp => (SetName::NodePortSctp, SetName::NodePortLocalSctp),
    }
}
