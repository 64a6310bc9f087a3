//! The catalogued bugs (`proxy::Mutant`) that kube-proxy's IPVS mode can have, and
//! how each breaks this mode: a wrong plan ([`breaks`]), a removed or altered iptables rule
//! or ipset entry ([`apply`]), or a wrong sync ([`flushes_on_sync`]).

use super::ipset::SetName;
use super::plan::{Breaks, FamilyPlan};
use crate::proxy::Mutant;

/// The mutants that exist in IPVS mode. Left out: those of rules IPVS mode does not have
/// (the localnet guard, the conntrack-INVALID drop, the node-port jump's position, the
/// explicit no-local-endpoints DROP and node-port REJECT), the Local-policy fallback that
/// IPVS mode does on purpose, and those of [`NOT_OBSERVABLE`].
pub(crate) const CATALOG: [Mutant; 18] = [
    Mutant::NoHairpinMasq,
    Mutant::NoNodePortMasq,
    Mutant::NoOffClusterMasq,
    Mutant::LastEndpointNeverChosen,
    Mutant::DropInsteadOfReject,
    Mutant::DnatToServicePort,
    Mutant::EtpLocalMasquerades,
    Mutant::EtpLocalUsesRemoteEndpoints,
    Mutant::SourceRangesNotEnforced,
    Mutant::NoAffinity,
    Mutant::TerminatingUsedWhileReady,
    Mutant::TerminatingNeverFallback,
    Mutant::HealthCheckAlwaysOk,
    Mutant::HintsIgnored,
    Mutant::HintsUsedWhenIncomplete,
    Mutant::IpModeProxyIgnored,
    Mutant::AffinityLostOnSync,
    Mutant::ServiceAddressesNotBound,
];

/// Bugs IPVS mode's code can have but no traffic can show within a scenario, each with why;
/// measured by hunting them in a VM (6.12: each survived the whole suite). `packetproof
/// mutants` names them as not hunted rather than leaving them out silently.
pub(crate) const NOT_OBSERVABLE: [(Mutant, &str); 4] = [
    (
        Mutant::AffinityWithoutTimeout,
        "a persistence template lives while a connection it scheduled does (ip_vs_conn_expire), and a closed TCP \
         connection lingers 120 s in TIME_WAIT: only attempts over 122 s apart tell a day's persistence from \
         timeoutSeconds",
    ),
    (
        Mutant::StaleUdpConntrackKept,
        "IPVS steers a flow by its own connection table, not by conntrack's NAT: with expire_nodest_conn=1 \
         (proxier.go) a flow to a deleted real server is rescheduled whatever conntrack still holds",
    ),
    (
        Mutant::StaleUdpKeptWhenScaledToZero,
        "IPVS steers a flow by its own connection table, not by conntrack's NAT: a virtual server without real \
         servers refuses the next datagram whatever conntrack still holds",
    ),
    (
        Mutant::UdpConntrackClearedWhenNotReady,
        "clearing conntrack entries leaves IPVS's own connection to the real server in place: the flow keeps \
         its endpoint",
    ),
];

/// How `mutant` changes the plan itself.
pub fn breaks(mutant: Option<Mutant>) -> Breaks {
    let Some(m) = mutant else { return Breaks::default() };
    let mut b = Breaks { deviations: m.deviations(), ..Breaks::default() };
    match m {
        Mutant::LastEndpointNeverChosen => b.last_endpoint_missing = true,
        Mutant::DnatToServicePort => b.real_server_on_service_port = true,
        Mutant::AffinityWithoutTimeout => b.persistence_ignores_timeout = true,
        Mutant::NoAffinity => b.no_persistence = true,
        Mutant::ServiceAddressesNotBound => b.no_dummy_addresses = true,
        _ => {}
    }
    b
}

/// The rule and set edits of `mutant` on a finished plan.
pub fn apply(mutant: Mutant, plan: &mut FamilyPlan) {
    let matches_set = |set: SetName| {
        let name = set.in_family(plan.family);
        move |r: &crate::proxy::iptables_rules::Rule| r.args.contains(&name)
    };
    match mutant {
        // The hairpin masquerade matches KUBE-LOOP-BACK; node ports mark through
        // KUBE-NODE-PORT-*; off-cluster sources through KUBE-CLUSTER-IP.
        Mutant::NoHairpinMasq => plan.rules.nat.rules.retain(|r| !matches_set(SetName::LoopBack)(r)),
        Mutant::NoNodePortMasq => plan
            .rules
            .nat
            .rules
            .retain(|r| !(r.chain == "KUBE-NODE-PORT" && r.target() == Some("KUBE-MARK-MASQ"))),
        Mutant::NoOffClusterMasq => plan
            .rules
            .nat
            .rules
            .retain(|r| !(matches_set(SetName::ClusterIp)(r) && r.target() == Some("KUBE-MARK-MASQ"))),
        Mutant::DropInsteadOfReject => {
            for r in plan.rules.filter.rules.iter_mut().filter(|r| r.target() == Some("REJECT")) {
                r.set_value("-j", "DROP");
            }
        }
        // Local policy's RETURN before the mark leaves out: everything is masqueraded.
        Mutant::EtpLocalMasquerades => plan.rules.nat.rules.retain(|r| {
            let local = [
                SetName::LoadBalancerLocal,
                SetName::NodePortLocalTcp,
                SetName::NodePortLocalUdp,
                SetName::NodePortLocalSctp,
            ];
            !local.iter().any(|s| matches_set(*s)(r))
        }),
        Mutant::SourceRangesNotEnforced => {
            plan.rules.filter.rules.retain(|r| r.target() != Some("KUBE-SOURCE-RANGES-FIREWALL"))
        }
        _ => {}
    }
}

/// The bug where every sync deletes and re-creates the virtual servers (as `ipvsadm -C`
/// would), so persistence templates and the connections of every backend go with them.
pub(crate) fn flushes_on_sync(mutant: Option<Mutant>) -> bool {
    mutant == Some(Mutant::AffinityLostOnSync)
}
