//! Deliberately broken proxies, each a bug a real proxy has shipped or could ship, for tests
//! that prove the harness's checks can fail. Most edit the finished rules ([`Mutant::apply`]);
//! wrong choices of endpoints are made by the generator itself ([`Mutant::deviations`]); one
//! breaks the health check server instead ([`Mutant::breaks_health_checks`]).

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;

use super::endpoints::{PortPolicy, Terminating};
use super::generate::{Deviations, node_ports_jump_all};
use super::ladder;
use super::naming;
use super::ruleset::{Rule, RuleSet, args};
use crate::model::{Cluster, IpFamily, Service, ServicePort};
use crate::proxy::kube::topology::Hints;
use crate::proxy::node_ports::NodePortAddresses;

/// The mutants whose bug is not in the finished rules, as a pattern for the `apply` of
/// either mode: the generator makes the endpoint-choice bugs ([`Mutant::deviations`]), the
/// health check server and the conntrack cleanup the other two.
macro_rules! outside_the_rules {
    () => {
        $crate::proxy::iptables::Mutant::EtpLocalUsesRemoteEndpoints
            | $crate::proxy::iptables::Mutant::ItpLocalFallsBackToRemote
            | $crate::proxy::iptables::Mutant::TerminatingUsedWhileReady
            | $crate::proxy::iptables::Mutant::TerminatingNeverFallback
            | $crate::proxy::iptables::Mutant::HealthCheckAlwaysOk
            | $crate::proxy::iptables::Mutant::StaleUdpConntrackKept
            | $crate::proxy::iptables::Mutant::HintsIgnored
            | $crate::proxy::iptables::Mutant::HintsUsedWhenIncomplete
            | $crate::proxy::iptables::Mutant::IpModeProxyIgnored
            | $crate::proxy::iptables::Mutant::StaleUdpKeptWhenScaledToZero
            | $crate::proxy::iptables::Mutant::StaleUdpKeptWhenDeleted
            | $crate::proxy::iptables::Mutant::AffinityLostOnSync
            | $crate::proxy::iptables::Mutant::UdpConntrackClearedWhenNotReady
            | $crate::proxy::iptables::Mutant::DetectLocalModeIgnored
            | $crate::proxy::iptables::Mutant::AffinityToNotReady
            | $crate::proxy::iptables::Mutant::UdpConntrackFlushedOnRestart
            | $crate::proxy::iptables::Mutant::HealthCheckKeptWhenEndpointsGo
            | $crate::proxy::iptables::Mutant::ServiceAddressesNotBound
    };
}
pub(crate) use outside_the_rules;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mutant {
    NoHairpinMasq,
    NoNodePortMasq,
    NoOffClusterMasq,
    LastEndpointNeverChosen,
    DropInsteadOfReject,
    DnatToServicePort,
    /// Seen in kube-proxy's IPVS mode: <https://github.com/kubernetes/kubernetes/issues/89869>,
    /// <https://github.com/kubernetes/kubernetes/issues/62537>.
    EtpLocalMasquerades,
    /// Seen in kube-proxy's IPVS mode: <https://github.com/kubernetes/kubernetes/issues/97073>.
    EtpLocalUsesRemoteEndpoints,
    EtpLocalNoDrop,
    ItpLocalFallsBackToRemote,
    /// Seen in kube-proxy's IPVS mode: <https://github.com/kubernetes/kubernetes/issues/88698>;
    /// reported against Cilium: <https://github.com/cilium/cilium/issues/34903>.
    SourceRangesNotEnforced,
    /// Seen in kube-proxy's IPVS mode: <https://github.com/kubernetes/kubernetes/issues/89358>;
    /// kube-router ignored the timeout: <https://github.com/cloudnativelabs/kube-router/pull/882>.
    AffinityWithoutTimeout,
    NoAffinity,
    /// The rule kube-proxy had before KEP-1669 was settled (fall back only when nothing is ready).
    TerminatingUsedWhileReady,
    /// kube-proxy before v1.26 (ProxyTerminatingEndpoints):
    /// <https://github.com/kubernetes/kubernetes/issues/85643>.
    TerminatingNeverFallback,
    /// Like <https://github.com/kubernetes/kubernetes/issues/82163> and
    /// <https://github.com/kubernetes/kubernetes/issues/61953>, for the node ports themselves.
    NodePortOnAllAddresses,
    /// Reported against Cilium: <https://github.com/cilium/cilium/issues/11043>.
    HealthCheckAlwaysOk,
    NodePortsNotLast,
    /// kube-proxy before the fixes of <https://github.com/kubernetes/kubernetes/issues/59368>
    /// and <https://github.com/kubernetes/kubernetes/issues/72336>.
    StaleUdpConntrackKept,
    /// CVE-2020-8558: <https://github.com/kubernetes/kubernetes/issues/90259>.
    LocalnetNotFirewalled,
    /// kube-proxy before <https://github.com/kubernetes/kubernetes/pull/43415>
    /// (<https://github.com/kubernetes/kubernetes/issues/43212>): the node's own stack answers.
    NodePortWithoutEndpointsNotRejected,
    /// A proxy that does not implement topology-aware hints.
    HintsIgnored,
    /// The `canUseTopology` check that every endpoint is hinted left out.
    HintsUsedWhenIncomplete,
    /// kube-proxy before v1.29 (KEP-1860, gate LoadBalancerIPMode), and every proxy that reads
    /// `status.loadBalancer.ingress[].ip` alone.
    IpModeProxyIgnored,
    /// kube-proxy before the fix of <https://github.com/kubernetes/kubernetes/issues/74839>;
    /// nftables mode still lacks the rule: <https://github.com/kubernetes/kubernetes/issues/122663>.
    InvalidNotDropped,
    /// <https://github.com/kubernetes/kubernetes/issues/139628>,
    /// <https://github.com/kubernetes/kubernetes/issues/139629> (statsd black-holed for hours).
    StaleUdpKeptWhenScaledToZero,
    /// <https://github.com/kubernetes/kubernetes/issues/141371>.
    StaleUdpKeptWhenDeleted,
    /// kube-proxy's nftables mode lost affinity on restart:
    /// <https://github.com/kubernetes/kubernetes/issues/123162>; here every sync loses it.
    AffinityLostOnSync,
    /// <https://github.com/kubernetes/kubernetes/issues/134143>.
    UdpConntrackClearedWhenNotReady,
    /// A proxy that detects pod traffic by the cluster CIDR whatever `detectLocalMode` says
    /// (as proxies without the setting do).
    DetectLocalModeIgnored,
    /// kube-proxy v1.22's iptables mode (fixed by
    /// <https://github.com/kubernetes/kubernetes/pull/106030>);
    /// <https://github.com/kubernetes/kubernetes/issues/110302>.
    AffinityToNotReady,
    /// kube-proxy before <https://github.com/kubernetes/kubernetes/pull/109826>: the rules
    /// letting the node's own traffic (sent from a VIP local to it) through were nested per
    /// LB IP, each block ending in a drop.
    SourceRangesNodeReachesFirstLbIpOnly,
    /// kube-proxy v1.30's first sync treats every Service as new and clears all its UDP
    /// entries: <https://github.com/kubernetes/kubernetes/issues/122740>.
    UdpConntrackFlushedOnRestart,
    /// <https://github.com/kubernetes/kubernetes/issues/44311>: the server's count of local
    /// endpoints was not refreshed once a Service had none left on the node.
    HealthCheckKeptWhenEndpointsGo,
    /// IPVS mode only: the service addresses are missing from the dummy link `kube-ipvs0`, so
    /// the node does not take their packets as its own and IPVS (at LOCAL_IN) never sees them:
    /// cluster IPs unreachable on a node until kube-proxy restarts
    /// (<https://github.com/kubernetes/kubernetes/issues/85422>,
    /// <https://github.com/kubernetes/kubernetes/issues/72197>).
    ServiceAddressesNotBound,
}

impl Mutant {
    pub const ALL: [Mutant; 35] = [
        Mutant::NoHairpinMasq,
        Mutant::NoNodePortMasq,
        Mutant::NoOffClusterMasq,
        Mutant::LastEndpointNeverChosen,
        Mutant::DropInsteadOfReject,
        Mutant::DnatToServicePort,
        Mutant::EtpLocalMasquerades,
        Mutant::EtpLocalUsesRemoteEndpoints,
        Mutant::EtpLocalNoDrop,
        Mutant::ItpLocalFallsBackToRemote,
        Mutant::SourceRangesNotEnforced,
        Mutant::AffinityWithoutTimeout,
        Mutant::NoAffinity,
        Mutant::TerminatingUsedWhileReady,
        Mutant::TerminatingNeverFallback,
        Mutant::NodePortOnAllAddresses,
        Mutant::HealthCheckAlwaysOk,
        Mutant::NodePortsNotLast,
        Mutant::StaleUdpConntrackKept,
        Mutant::LocalnetNotFirewalled,
        Mutant::NodePortWithoutEndpointsNotRejected,
        Mutant::HintsIgnored,
        Mutant::HintsUsedWhenIncomplete,
        Mutant::IpModeProxyIgnored,
        Mutant::InvalidNotDropped,
        Mutant::StaleUdpKeptWhenScaledToZero,
        Mutant::StaleUdpKeptWhenDeleted,
        Mutant::AffinityLostOnSync,
        Mutant::UdpConntrackClearedWhenNotReady,
        Mutant::DetectLocalModeIgnored,
        Mutant::AffinityToNotReady,
        Mutant::SourceRangesNodeReachesFirstLbIpOnly,
        Mutant::UdpConntrackFlushedOnRestart,
        Mutant::HealthCheckKeptWhenEndpointsGo,
        Mutant::ServiceAddressesNotBound,
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
            Mutant::EtpLocalMasquerades => "etp-local-masquerades",
            Mutant::EtpLocalUsesRemoteEndpoints => "etp-local-uses-remote-endpoints",
            Mutant::EtpLocalNoDrop => "etp-local-no-drop",
            Mutant::ItpLocalFallsBackToRemote => "itp-local-falls-back-to-remote",
            Mutant::SourceRangesNotEnforced => "source-ranges-not-enforced",
            Mutant::AffinityWithoutTimeout => "affinity-without-timeout",
            Mutant::NoAffinity => "no-affinity",
            Mutant::TerminatingUsedWhileReady => "terminating-used-while-ready",
            Mutant::TerminatingNeverFallback => "terminating-never-fallback",
            Mutant::NodePortOnAllAddresses => "node-port-on-all-addresses",
            Mutant::HealthCheckAlwaysOk => "health-check-always-ok",
            Mutant::NodePortsNotLast => "node-ports-not-last",
            Mutant::StaleUdpConntrackKept => "stale-udp-conntrack-kept",
            Mutant::LocalnetNotFirewalled => "localnet-not-firewalled",
            Mutant::NodePortWithoutEndpointsNotRejected => "node-port-without-endpoints-not-rejected",
            Mutant::HintsIgnored => "hints-ignored",
            Mutant::HintsUsedWhenIncomplete => "hints-used-when-incomplete",
            Mutant::IpModeProxyIgnored => "ip-mode-proxy-ignored",
            Mutant::InvalidNotDropped => "invalid-not-dropped",
            Mutant::StaleUdpKeptWhenScaledToZero => "stale-udp-kept-when-scaled-to-zero",
            Mutant::StaleUdpKeptWhenDeleted => "stale-udp-kept-when-deleted",
            Mutant::AffinityLostOnSync => "affinity-lost-on-sync",
            Mutant::UdpConntrackClearedWhenNotReady => "udp-conntrack-cleared-when-not-ready",
            Mutant::DetectLocalModeIgnored => "detect-local-mode-ignored",
            Mutant::AffinityToNotReady => "affinity-to-not-ready",
            Mutant::SourceRangesNodeReachesFirstLbIpOnly => "source-ranges-node-reaches-first-lb-ip-only",
            Mutant::UdpConntrackFlushedOnRestart => "udp-conntrack-flushed-on-restart",
            Mutant::HealthCheckKeptWhenEndpointsGo => "health-check-kept-when-endpoints-go",
            Mutant::ServiceAddressesNotBound => "service-addresses-not-bound",
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
            Mutant::EtpLocalMasquerades => {
                "externalTrafficPolicy Local traffic from outside is masqueraded anyway: the endpoint sees a node address instead of the client's"
            }
            Mutant::EtpLocalUsesRemoteEndpoints => {
                "externalTrafficPolicy Local sends outside traffic to every endpoint in the cluster, including other nodes', instead of only this node's"
            }
            Mutant::EtpLocalNoDrop => {
                "a node without local endpoints for an externalTrafficPolicy Local service does not drop outside traffic to its node port, external IPs and LB IPs"
            }
            Mutant::ItpLocalFallsBackToRemote => {
                "internalTrafficPolicy Local falls back to other nodes' endpoints when this node has none, instead of dropping"
            }
            Mutant::SourceRangesNotEnforced => {
                "loadBalancerSourceRanges is ignored: LB IPs accept traffic from every source"
            }
            Mutant::AffinityWithoutTimeout => {
                "the ClientIP affinity check lacks `--seconds`: a client sticks to its endpoint forever instead of for timeoutSeconds"
            }
            Mutant::NoAffinity => {
                "sessionAffinity ClientIP is ignored: the `recent` rules are missing and every connection is balanced anew"
            }
            Mutant::TerminatingUsedWhileReady => {
                "serving-but-terminating endpoints get traffic although ready endpoints exist"
            }
            Mutant::TerminatingNeverFallback => {
                "no fallback to serving-but-terminating endpoints when none is ready: the service rejects instead"
            }
            Mutant::NodePortOnAllAddresses => {
                "--nodeport-addresses is ignored: node ports answer on every local address"
            }
            Mutant::HealthCheckAlwaysOk => {
                "the health check node port answers 200 on every node, also on nodes without local endpoints"
            }
            Mutant::NodePortsNotLast => {
                "the KUBE-NODEPORTS jump comes first in nat KUBE-SERVICES instead of last, so node ports win over service IPs that are local addresses"
            }
            Mutant::StaleUdpConntrackKept => {
                "UDP conntrack entries are not cleared when an endpoint goes away: a client that keeps its source port keeps reaching the gone endpoint"
            }
            Mutant::LocalnetNotFirewalled => {
                "route_localnet is set for localhost node ports but KUBE-FIREWALL lacks the localnet DROP: adjacent hosts reach services listening on the node's 127.0.0.1"
            }
            Mutant::NodePortWithoutEndpointsNotRejected => {
                "a node port of a service without endpoints is not rejected: the packet goes on to the node's own stack, whose TCP reset (or a listener on that port) answers instead"
            }
            Mutant::HintsIgnored => {
                "topology hints are ignored: a node whose zone the hints name still sends traffic to endpoints hinted for other zones"
            }
            Mutant::HintsUsedWhenIncomplete => {
                "topology hints are used although some ready endpoint has none: that endpoint never gets traffic, instead of hints being ignored"
            }
            Mutant::IpModeProxyIgnored => {
                "ipMode is ignored: load-balancer IPs with ipMode Proxy are intercepted on the nodes like VIP ones, so traffic from inside the cluster never reaches the proxying balancer"
            }
            Mutant::StaleUdpKeptWhenScaledToZero => {
                "a UDP Service port scaled to zero keeps the conntrack entries of the endpoints it lost: a client that keeps its source port still reaches a gone endpoint instead of being rejected"
            }
            Mutant::StaleUdpKeptWhenDeleted => {
                "a deleted UDP Service keeps its conntrack entries: a client that keeps its source port still reaches the old endpoint through an address no Service holds"
            }
            Mutant::UdpConntrackClearedWhenNotReady => {
                "UDP conntrack entries of an endpoint that turns not ready are cleared although it still serves (terminating): its UDP clients are moved mid-stream"
            }
            Mutant::AffinityLostOnSync => {
                "every sync (and a restart) empties the tables before loading them, so ClientIP affinity (the `recent` lists, the nftables affinity sets) is forgotten and clients move to other backends"
            }
            Mutant::DetectLocalModeIgnored => {
                "detectLocalMode is ignored: pod traffic is told by the cluster CIDR, so a pod of another node is short-circuited at a Local node port (NodeCIDR, BridgeInterface) and pods' cluster-IP traffic keeps its source under an interface prefix that matches none of their interfaces"
            }
            Mutant::InvalidNotDropped => {
                "KUBE-FORWARD lacks the conntrack INVALID DROP: an out-of-window segment crosses the node un-translated, and the client's RST kills a healthy connection"
            }
            Mutant::AffinityToNotReady => {
                "ClientIP affinity checks are written for not-ready endpoints too: a client that stuck to an endpoint keeps reaching it after it turns not ready"
            }
            Mutant::SourceRangesNodeReachesFirstLbIpOnly => {
                "with loadBalancerSourceRanges holding the node's IP, only the first LB IP admits the node's own traffic (sent from the VIP when the VIP is local): the node cannot reach its Service on the second LB IP"
            }
            Mutant::UdpConntrackFlushedOnRestart => {
                "the first sync after a (re)start clears every UDP conntrack entry of every Service: a UDP client whose endpoint still serves is moved to another one"
            }
            Mutant::HealthCheckKeptWhenEndpointsGo => {
                "the health check node port keeps its last answer when the node's last local endpoint goes: it answers 200 to the load balancer although the node has none"
            }
            Mutant::ServiceAddressesNotBound => {
                "(IPVS mode) kube-ipvs0 holds no service address: packets to a cluster IP are not the node's own, so IPVS never sees them and they are routed on untranslated"
            }
        }
    }

    /// The endpoint-choice bugs, which the generator itself must make.
    pub fn deviations(self) -> Deviations {
        let mut d = Deviations::default();
        match self {
            Mutant::EtpLocalUsesRemoteEndpoints => d.etp_local_uses_cluster = true,
            Mutant::ItpLocalFallsBackToRemote => d.itp_local_falls_back = true,
            Mutant::TerminatingUsedWhileReady => d.terminating = Terminating::AlwaysUsed,
            Mutant::TerminatingNeverFallback => d.terminating = Terminating::NeverUsed,
            Mutant::HintsIgnored => d.hints = Hints::Ignored,
            Mutant::HintsUsedWhenIncomplete => d.hints = Hints::UsedWhenIncomplete,
            Mutant::AffinityToNotReady => d.affinity_to_not_ready = true,
            _ => {}
        }
        d
    }

    /// The cluster as the broken proxy reads it: the same, except for the mutants whose bug
    /// is in reading the Service objects.
    pub fn misread(self, cluster: &Cluster) -> Option<Cluster> {
        match self {
            Mutant::IpModeProxyIgnored => {
                let mut misread = cluster.clone();
                for svc in &mut misread.services {
                    let proxied = std::mem::take(&mut svc.proxied_load_balancer_ips);
                    svc.load_balancer_ips.extend(proxied);
                }
                Some(misread)
            }
            Mutant::DetectLocalModeIgnored => {
                let mut misread = cluster.clone();
                misread.proxy.detect_local = crate::model::DetectLocal::ClusterCidr;
                Some(misread)
            }
            _ => None,
        }
    }

    /// Whether nftables mode can have this bug: it sets no route_localnet, so it has no localnet
    /// guard to leave out, and (v1.30) drops no conntrack-invalid packets.
    pub fn exists_in_nftables(self) -> bool {
        !matches!(self, Mutant::LocalnetNotFirewalled | Mutant::InvalidNotDropped) && !self.only_in_ipvs()
    }

    /// A bug of IPVS mode's own machinery (virtual servers, the dummy link), which the
    /// iptables and nftables modes do not have.
    pub fn only_in_ipvs(self) -> bool {
        self == Mutant::ServiceAddressesNotBound
    }

    /// Whether the proxy leaves stale UDP conntrack entries behind after a change.
    pub fn keeps_stale_conntrack(self) -> bool {
        self.cleanup_lapse().is_some()
    }

    /// Which stale UDP conntrack entries the proxy leaves behind after a change.
    pub fn cleanup_lapse(self) -> Option<crate::proxy::conntrack_cleanup::Lapse> {
        use crate::proxy::conntrack_cleanup::Lapse;
        match self {
            Mutant::StaleUdpConntrackKept => Some(Lapse::Everything),
            Mutant::StaleUdpKeptWhenScaledToZero => Some(Lapse::ScaledToZero),
            Mutant::StaleUdpKeptWhenDeleted => Some(Lapse::Deleted),
            Mutant::UdpConntrackClearedWhenNotReady => Some(Lapse::NotReadyCleared),
            Mutant::UdpConntrackFlushedOnRestart => Some(Lapse::FlushedOnStart),
            _ => None,
        }
    }

    /// Whether the proxy's loading of its rules is the bug (the rules are right).
    pub fn breaks_loading(self) -> bool {
        self == Mutant::AffinityLostOnSync
    }

    /// Whether the node's health check servers are the bug.
    pub fn breaks_health_checks(self) -> bool {
        self.health_bug().is_some()
    }

    /// How the node's health check servers answer wrong, if they do.
    pub fn health_bug(self) -> Option<crate::proxy::healthcheck::Bug> {
        use crate::proxy::healthcheck::Bug;
        match self {
            Mutant::HealthCheckAlwaysOk => Some(Bug::AlwaysOk),
            Mutant::HealthCheckKeptWhenEndpointsGo => Some(Bug::KeptWhenEndpointsGo),
            _ => None,
        }
    }

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
            outside_the_rules!() => {}
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
