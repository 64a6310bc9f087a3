//! The mutation catalog's vocabulary: deliberately broken proxies, each a bug a real proxy
//! has shipped or could ship, for tests that prove the harness's checks can fail. Each backend
//! breaks its own rules the way a mutant says (`iptables`' and `nftables`' `Mutant::apply`,
//! IPVS mode's `breaks`); wrong choices of endpoints are made by the kube-proxy core itself
//! ([`Mutant::deviations`]); the health check servers and conntrack cleanup break as
//! [`Mutant::health_bug`] and [`Mutant::cleanup_lapse`] say.

use std::fmt;
use std::str::FromStr;

use crate::model::Cluster;
use crate::proxy::endpoint_choice::Hints;
use crate::proxy::endpoint_choice::{Deviations, Terminating};

/// The mutants whose bug is not in the finished rules, as a pattern for the `apply` of
/// either mode: the generator makes the endpoint-choice bugs ([`Mutant::deviations`]), the
/// health check server and the conntrack cleanup the other two.
macro_rules! outside_the_rules {
    () => {
        $crate::proxy::Mutant::EtpLocalUsesRemoteEndpoints
            | $crate::proxy::Mutant::ItpLocalFallsBackToRemote
            | $crate::proxy::Mutant::TerminatingUsedWhileReady
            | $crate::proxy::Mutant::TerminatingNeverFallback
            | $crate::proxy::Mutant::HealthCheckAlwaysOk
            | $crate::proxy::Mutant::StaleUdpConntrackKept
            | $crate::proxy::Mutant::HintsIgnored
            | $crate::proxy::Mutant::HintsUsedWhenIncomplete
            | $crate::proxy::Mutant::IpModeProxyIgnored
            | $crate::proxy::Mutant::StaleUdpKeptWhenScaledToZero
            | $crate::proxy::Mutant::StaleUdpKeptWhenDeleted
            | $crate::proxy::Mutant::AffinityLostOnSync
            | $crate::proxy::Mutant::UdpConntrackClearedWhenNotReady
            | $crate::proxy::Mutant::DetectLocalModeIgnored
            | $crate::proxy::Mutant::AffinityToNotReady
            | $crate::proxy::Mutant::UdpConntrackFlushedOnRestart
            | $crate::proxy::Mutant::HealthCheckKeptWhenEndpointsGo
            | $crate::proxy::Mutant::ServiceAddressesNotBound
            | $crate::proxy::Mutant::PartialSyncMissesEndpoints
            | $crate::proxy::Mutant::ItpLocalFiltersExternalTraffic
            | $crate::proxy::Mutant::EtpLocalSkipsInternalFiltering
            | $crate::proxy::Mutant::HintsCountUnreadyEndpoints
            | $crate::proxy::Mutant::HealthCheckOnAllAddresses
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
    /// A proxy that detects pod traffic by the cluster's pod CIDR whatever `detectLocalMode`
    /// and `clusterCIDR` say (as proxies without the settings do).
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
    /// iptables mode (and nftables mode's partial syncs, which use the same trackers): a
    /// partial sync's change tracker misses an endpoint change, so the Service's chains are not
    /// rewritten and a Local Service's jump to its new local endpoint
    /// never appears (<https://github.com/kubernetes/kubernetes/issues/121362>).
    PartialSyncMissesEndpoints,
    /// nftables mode only: the filter chains holding `service-endpoints-check` run before DNAT
    /// (v1.31's base chains), so the node's own traffic (host-network pods' too) to an external
    /// IP or LB IP of an `externalTrafficPolicy: Local` Service without local endpoints on this
    /// node is dropped instead of short-circuited to the Service's endpoints
    /// (<https://github.com/kubernetes/kubernetes/issues/131765>, fixed by
    /// <https://github.com/kubernetes/kubernetes/pull/132456>). `builtin-nftables-v1.31` has it
    /// by design.
    EtpLocalFilteredBeforeDnat,
    /// nftables mode only: `detectLocalMode: InterfaceNamePrefix` written with `iif` (an
    /// interface index, resolved when the rules load) instead of `iifname`, so `iif "veth*"`
    /// names no interface and every sync fails
    /// (<https://github.com/kubernetes/kubernetes/pull/134024>).
    InterfacePrefixMatchedByIndex,
    /// nftables mode only: `firewall-check` hooked at input and forward (after DNAT) instead of
    /// prerouting, as kube-proxy's alpha nftables mode (v1.29) had it, so traffic to an LB IP
    /// from outside `loadBalancerSourceRanges` is never dropped
    /// (<https://github.com/kubernetes/kubernetes/pull/122614>).
    SourceRangesCheckedAfterDnat,
    /// The short-circuit of pod traffic to an external IP or LB IP of an
    /// `externalTrafficPolicy: Local` Service is missing, so such pods on a node without local
    /// endpoints are dropped (<https://github.com/kubernetes/kubernetes/issues/65387>, fixed in
    /// iptables mode by <https://github.com/kubernetes/kubernetes/pull/77523>; IPVS mode:
    /// <https://github.com/kubernetes/kubernetes/issues/93456>).
    EtpLocalPodsNotShortCircuited,
    /// kube-proxy v1.21-v1.22's `FilterEndpoints`: internalTrafficPolicy Local narrowed the
    /// endpoints for outside traffic too
    /// (<https://github.com/kubernetes/kubernetes/issues/105470>).
    ItpLocalFiltersExternalTraffic,
    /// kube-proxy v1.21-v1.22's `FilterEndpoints`: externalTrafficPolicy Local skipped
    /// internalTrafficPolicy Local and topology hints
    /// (<https://github.com/kubernetes/kubernetes/issues/105470>).
    EtpLocalSkipsInternalFiltering,
    /// Topology hints counted unready endpoints
    /// (<https://github.com/kubernetes/kubernetes/pull/106507>).
    HintsCountUnreadyEndpoints,
    /// ClientIP affinity is missing from the Local-policy chains (`KUBE-SVL-…`, `local-…`),
    /// so outside clients of an `externalTrafficPolicy: Local` Service are not sticky
    /// (<https://github.com/kubernetes/kubernetes/issues/55429>, fixed by
    /// <https://github.com/kubernetes/kubernetes/pull/55519>).
    EtpLocalAffinityIgnored,
    /// The health check servers ignore `--nodeport-addresses` and listen on every address
    /// (<https://github.com/kubernetes/kubernetes/issues/82163>).
    HealthCheckOnAllAddresses,
    /// nftables mode only: hairpin traffic is masqueraded only for endpoints on the node that
    /// translates (kube-proxy v1.36's `hairpin-connections` set holds local endpoints only,
    /// pkg/proxy/nftables/proxier.go, after kubernetes#135800 and #136499), so a pod reaching
    /// itself through another node's node port comes back from its own address and its reply
    /// never returns. Seen in v1.36.3; no upstream report known.
    RemoteHairpinNotMasqueraded,
}

impl Mutant {
    pub(crate) const ALL: [Mutant; 46] = [
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
        Mutant::PartialSyncMissesEndpoints,
        Mutant::EtpLocalFilteredBeforeDnat,
        Mutant::InterfacePrefixMatchedByIndex,
        Mutant::SourceRangesCheckedAfterDnat,
        Mutant::EtpLocalPodsNotShortCircuited,
        Mutant::ItpLocalFiltersExternalTraffic,
        Mutant::EtpLocalSkipsInternalFiltering,
        Mutant::HintsCountUnreadyEndpoints,
        Mutant::EtpLocalAffinityIgnored,
        Mutant::HealthCheckOnAllAddresses,
        Mutant::RemoteHairpinNotMasqueraded,
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
            Mutant::PartialSyncMissesEndpoints => "partial-sync-misses-endpoints",
            Mutant::EtpLocalFilteredBeforeDnat => "etp-local-filtered-before-dnat",
            Mutant::InterfacePrefixMatchedByIndex => "interface-prefix-matched-by-index",
            Mutant::SourceRangesCheckedAfterDnat => "source-ranges-checked-after-dnat",
            Mutant::EtpLocalPodsNotShortCircuited => "etp-local-pods-not-short-circuited",
            Mutant::ItpLocalFiltersExternalTraffic => "itp-local-filters-external-traffic",
            Mutant::EtpLocalSkipsInternalFiltering => "etp-local-skips-internal-filtering",
            Mutant::HintsCountUnreadyEndpoints => "hints-count-unready-endpoints",
            Mutant::EtpLocalAffinityIgnored => "etp-local-affinity-ignored",
            Mutant::HealthCheckOnAllAddresses => "health-check-on-all-addresses",
            Mutant::RemoteHairpinNotMasqueraded => "remote-hairpin-not-masqueraded",
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
                "detectLocalMode and clusterCIDR are ignored: pod traffic is told by the pod CIDR, so a pod of another node is short-circuited at a Local node port (NodeCIDR, BridgeInterface) and pods' cluster-IP traffic keeps its source under an interface prefix that matches none of their interfaces"
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
            Mutant::PartialSyncMissesEndpoints => {
                "(iptables and nftables modes) a partial sync does not count an endpoint change as a change: the Service's chains keep their old rules, so on a node where a Local Service gains its first local endpoint its external chain has no jump to it, and the node port is refused by the node's own stack"
            }
            Mutant::EtpLocalFilteredBeforeDnat => {
                "(nftables mode) the filter chains run before DNAT (v1.31's base chains): the node itself (and host-network pods) reaching an external IP or LB IP of an externalTrafficPolicy Local Service with no endpoint on this node is dropped instead of sent to its endpoints elsewhere"
            }
            Mutant::InterfacePrefixMatchedByIndex => {
                "(nftables mode) detectLocalMode InterfaceNamePrefix is matched with `iif` instead of `iifname`: `iif \"veth*\"` names no interface, so loading the rules fails and the node is never programmed"
            }
            Mutant::SourceRangesCheckedAfterDnat => {
                "(nftables mode) firewall-check is jumped to from the input and forward hooks, after DNAT, instead of prerouting: an LB IP's traffic already carries its endpoint's address there, so loadBalancerSourceRanges drops nothing from outside or from pods"
            }
            Mutant::EtpLocalPodsNotShortCircuited => {
                "pods' traffic to an external IP or LB IP of an externalTrafficPolicy Local Service is not short-circuited to the Cluster endpoints: on a node without local endpoints it is dropped like outside traffic"
            }
            Mutant::ItpLocalFiltersExternalTraffic => {
                "internalTrafficPolicy Local narrows the endpoints before internal and outside traffic are told apart: outside traffic to the node port goes only to this node's endpoints, and a node without any rejects it as a Service without endpoints"
            }
            Mutant::EtpLocalSkipsInternalFiltering => {
                "externalTrafficPolicy Local makes the proxy skip the internal filtering: internalTrafficPolicy Local and topology hints are ignored for the Service's cluster IP"
            }
            Mutant::HintsCountUnreadyEndpoints => {
                "topology hints count unready endpoints: a zone whose only hinted endpoint is unready is narrowed to it instead of using every endpoint, and its clients find no endpoint (rejected)"
            }
            Mutant::EtpLocalAffinityIgnored => {
                "the Local-policy chains (KUBE-SVL, local-) lack the ClientIP affinity checks: outside clients of an externalTrafficPolicy Local Service with sessionAffinity ClientIP are balanced anew on every connection"
            }
            Mutant::RemoteHairpinNotMasqueraded => {
                "(nftables mode) hairpin traffic is masqueraded only for endpoints on the translating node: a pod reaching itself through another node's node port sees its own address as the source, and its reply never returns"
            }
            Mutant::HealthCheckOnAllAddresses => {
                "--nodeport-addresses is ignored by the health check servers: a health check node port answers on every local address, not only on the node addresses the setting selects"
            }
        }
    }

    /// The endpoint-choice bugs, which the generator itself must make.
    pub(crate) fn deviations(self) -> Deviations {
        let mut d = Deviations::default();
        match self {
            Mutant::EtpLocalUsesRemoteEndpoints => d.etp_local_uses_cluster = true,
            Mutant::ItpLocalFallsBackToRemote => d.itp_local_falls_back = true,
            Mutant::TerminatingUsedWhileReady => d.terminating = Terminating::AlwaysUsed,
            Mutant::TerminatingNeverFallback => d.terminating = Terminating::NeverUsed,
            Mutant::HintsIgnored => d.hints = Hints::Ignored,
            Mutant::HintsUsedWhenIncomplete => d.hints = Hints::UsedWhenIncomplete,
            Mutant::AffinityToNotReady => d.affinity_to_not_ready = true,
            Mutant::ItpLocalFiltersExternalTraffic => d.itp_local_filters_all = true,
            Mutant::EtpLocalSkipsInternalFiltering => d.etp_local_skips_filtering = true,
            Mutant::HintsCountUnreadyEndpoints => d.hints = Hints::CountsUnready,
            _ => {}
        }
        d
    }

    /// The cluster as the broken proxy reads it: the same, except for the mutants whose bug
    /// is in reading the Service objects.
    pub(crate) fn misread(self, cluster: &Cluster) -> Option<Cluster> {
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
                // Nor does it know a cluster without a cluster CIDR: it takes the pod CIDRs.
                misread.proxy.cluster_cidrs = None;
                Some(misread)
            }
            _ => None,
        }
    }

    /// Whether nftables mode can have this bug: it sets no route_localnet, so it has no localnet
    /// guard to leave out, and (v1.30) drops no conntrack-invalid packets. Its partial syncs
    /// skip the chains of Services the same change trackers did not mark (`skipServiceUpdate`),
    /// so it can miss an endpoint change as iptables mode did.
    pub(crate) fn exists_in_nftables(self) -> bool {
        !matches!(self, Mutant::LocalnetNotFirewalled | Mutant::InvalidNotDropped) && !self.only_in_ipvs()
    }

    /// A bug of IPVS mode's own machinery (virtual servers, the dummy link), which the
    /// iptables and nftables modes do not have.
    pub(crate) fn only_in_ipvs(self) -> bool {
        self == Mutant::ServiceAddressesNotBound
    }

    /// A bug of nftables mode's own machinery (chain priorities and hooks, `iif`), which the iptables
    /// and IPVS modes do not have.
    pub(crate) fn only_in_nftables(self) -> bool {
        matches!(
            self,
            Mutant::EtpLocalFilteredBeforeDnat
                | Mutant::InterfacePrefixMatchedByIndex
                | Mutant::SourceRangesCheckedAfterDnat
                | Mutant::RemoteHairpinNotMasqueraded
        )
    }

    /// Whether the bug is all in the rules the proxy computes (what it reads of the Services,
    /// the endpoints it picks, the rules it edits), none in how it loads them, in its health
    /// check servers or in its conntrack clean-up: where its rules equal the unbroken proxy's,
    /// it then does what the unbroken proxy does.
    pub(crate) fn only_in_the_rules(self) -> bool {
        !self.breaks_loading() && self.health_bug().is_none() && self.cleanup_lapse().is_none()
    }

    /// Which stale UDP conntrack entries the proxy leaves behind after a change.
    pub(crate) fn cleanup_lapse(self) -> Option<crate::proxy::conntrack_cleanup::Lapse> {
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
    pub(crate) fn breaks_loading(self) -> bool {
        matches!(self, Mutant::AffinityLostOnSync | Mutant::PartialSyncMissesEndpoints)
    }

    /// Whether the node's health check servers are the bug.
    #[cfg(test)]
    pub(crate) fn breaks_health_checks(self) -> bool {
        self.health_bug().is_some()
    }

    /// How the node's health check servers answer wrong, if they do.
    pub(crate) fn health_bug(self) -> Option<crate::proxy::healthcheck::Bug> {
        use crate::proxy::healthcheck::Bug;
        match self {
            Mutant::HealthCheckAlwaysOk => Some(Bug::AlwaysOk),
            Mutant::HealthCheckKeptWhenEndpointsGo => Some(Bug::KeptWhenEndpointsGo),
            Mutant::HealthCheckOnAllAddresses => Some(Bug::OnAllAddresses),
            _ => None,
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
