//! Contract versus implementation. Most outcomes are required by Kubernetes; a few are the
//! choice of one implementation (what happens at a valid cluster IP's wrong port, whether
//! node ports answer on 127.0.0.1 or on a node's secondary addresses). A run names the
//! profile it is held to; under `kubernetes`, outcomes Kubernetes leaves open are not judged.

use std::fmt;

use crate::model::{Implementation, Profile, Release};

/// Why an expectation holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Basis {
    /// Kubernetes requires it of every proxy.
    Contract,
    /// The named implementation's choice, where Kubernetes leaves the outcome open.
    Choice(Profile),
}

impl fmt::Display for Basis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Basis::Contract => f.write_str("the Kubernetes contract"),
            Basis::Choice(p) => write!(f, "{p}'s choice"),
        }
    }
}

/// Where a profile's path departs from the contract's, as data: the oracle has one path
/// (`paths`), which takes a departure where its flag is set. Profiles that differ only where
/// Kubernetes leaves an outcome open (iptables and nftables modes: `frontend::chosen`) follow
/// the contract's path; kube-proxy's IPVS mode (v1.30.3's pkg/proxy/ipvs/proxier.go) departs
/// from it. Under profile `kubernetes` the same flows are judged by the contract, so a run of
/// IPVS mode held to it shows the departures as failures: that is the truth about IPVS mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Choices {
    /// A Local traffic policy with no local endpoint falls back to the Cluster endpoints
    /// (`syncEndpoint`: "Allow access from local PODs even if no local endpoints exist",
    /// kubernetes#97081); when there are none (internalTrafficPolicy Local on a Service
    /// nothing outside reaches), the virtual server has no real servers and the kernel answers
    /// ICMP port unreachable (`ip_vs_leave`, net/netfilter/ipvs/ip_vs_core.c).
    pub local_falls_back_to_cluster: bool,
    /// externalTrafficPolicy Local traffic is never masqueraded (the `*-LOCAL` sets RETURN
    /// before `KUBE-MARK-MASQ` in `writeIptablesRules`) and every external virtual server
    /// holds the node's local endpoints, whoever sends: pods and the node itself are not
    /// short-circuited to every endpoint. An endpoint off the translating node then replies
    /// past it unless the client's address routes back through it ("Traffic from an external
    /// source will be routed but the reply will have the POD address and will be discarded").
    pub external_local_for_every_sender: bool,
    /// An external or load-balancer IP on the node network is bound to every node's
    /// `kube-ipvs0`, so without `--ipvs-strict-arp` every node answers ARP for it: which node
    /// an outside host reaches is a race (not judged).
    pub external_ips_on_every_node: bool,
    /// ClientIP affinity is a persistence template that lives while connections it scheduled
    /// do (`ip_vs_conn_expire` re-arms a template that still controls connections), so it
    /// outlives `timeoutSeconds` while the last connection lingers.
    pub affinity_outlives_connections: bool,
    /// Topology hints count only for a Service with the hints annotation, unless the scenario
    /// turns the gate `ServiceTrafficDistribution` on (kube-proxy v1.30:
    /// [`HINTS_WITHOUT_ANNOTATION`]).
    pub hints_need_annotation: bool,
}

impl Choices {
    /// The contract's path: no departure.
    pub(super) const CONTRACT: Choices = Choices {
        local_falls_back_to_cluster: false,
        external_local_for_every_sender: false,
        external_ips_on_every_node: false,
        affinity_outlives_connections: false,
        hints_need_annotation: false,
    };

    /// kube-proxy's IPVS mode.
    const KUBE_PROXY_IPVS: Choices = Choices {
        local_falls_back_to_cluster: true,
        external_local_for_every_sender: true,
        external_ips_on_every_node: true,
        affinity_outlives_connections: true,
        hints_need_annotation: false,
    };

    /// The departures of `profile`: its implementation's, and the releases' before a
    /// [`ReleaseChange`] that moved toward the contract.
    pub(super) fn of(profile: Profile) -> Choices {
        let implementation = match profile.implementation {
            Implementation::Kubernetes
            | Implementation::KubeProxyIptables
            | Implementation::KubeProxyNftables => Choices::CONTRACT,
            Implementation::KubeProxyIpvs => Choices::KUBE_PROXY_IPVS,
        };
        let kube_proxy = profile.implementation != Implementation::Kubernetes;
        Choices {
            hints_need_annotation: kube_proxy && !HINTS_WITHOUT_ANNOTATION.made_by(profile),
            ..implementation
        }
    }
}

/// A choice one release of an implementation changed, as data: the releases from `since` on
/// (and a profile naming no release: the newest) make it, earlier ones do what `before`
/// says. The oracle's one path takes the choice where [`ReleaseChange::made_by`] the profile
/// it judges by, and says why with the source.
#[derive(Debug)]
pub(super) struct ReleaseChange {
    pub implementations: &'static [Implementation],
    pub since: Release,
    /// What the releases from `since` on do.
    pub made: &'static str,
    /// What the releases before `since` do instead, and why.
    pub before: &'static str,
    /// Where in kube-proxy's source both were read.
    pub source: &'static str,
}

impl ReleaseChange {
    /// Why `profile` expects what it does: the choice it makes or the one before, and where
    /// that is read.
    pub(super) fn why(&self, profile: Profile) -> String {
        let what = if self.made_by(profile) { self.made } else { self.before };
        format!("{what} ({})", self.source)
    }

    /// Whether `profile` states this choice: its implementation, at `since` or later.
    pub(super) fn made_by(&self, profile: Profile) -> bool {
        self.implementations.contains(&profile.implementation)
            && profile.release.is_none_or(|r| r >= self.since)
    }
}

/// Traffic to an address of the service CIDR that no Service holds (`raw-addresses`'s
/// `unallocated-service-address`; a deleted Service's cluster IP, `live-udp-service-deleted`).
/// kube-proxy's nftables mode writes "Drop traffic to unallocated ClusterIPs" only for the
/// ServiceCIDR objects it watches (pkg/proxy/nftables/proxier.go: `OnServiceCIDRsChanged` fills
/// `serviceCIDRs`; the rule is written when it is non-empty), and it watches them only when
/// the gate MultiCIDRServiceAllocator is on (cmd/kube-proxy/app/server.go,
/// `NewServiceCIDRConfig`): alpha in v1.30 (networking/v1alpha1), beta and off by default in
/// v1.31 and v1.32 (v1beta1), GA and on in v1.33 (v1). Read in v1.30.3's source and in the
/// later releases' `server.go`; with the gate on, v1.30 drops them too (docs/src/proxies.md).
pub(super) const UNALLOCATED_SERVICE_IPS_DROPPED: ReleaseChange = ReleaseChange {
    implementations: &[Implementation::KubeProxyNftables],
    since: Release::V1_33,
    made: "nftables mode drops traffic to service-CIDR addresses no Service has",
    before: "nftables mode before v1.33 has no rule for a service-CIDR address no Service has (it drops \
             them only for ServiceCIDR objects, watched only behind the gate MultiCIDRServiceAllocator, off \
             by default before v1.33): the node forwards it un-translated to its routes, and nothing \
             answers there",
    source: "kube-proxy's cmd/kube-proxy/app/server.go and pkg/proxy/nftables/proxier.go",
};

/// Topology hints without the Service's hints annotation (`topology-hints`'s
/// `unannotated-from-zone-a`): v1.30 reads the annotation unless the gate
/// `ServiceTrafficDistribution` (alpha, off by default) is on; the gate is beta and on by
/// default in v1.31 and v1.32, GA and locked on from v1.33, whose `topologyModeFromHints`
/// no longer reads the annotation. Every mode shares pkg/proxy/topology.go. Seen in the
/// v1.34.9 and v1.36.3 binaries (docs/src/proxies.md).
pub(super) const HINTS_WITHOUT_ANNOTATION: ReleaseChange = ReleaseChange {
    implementations: &[
        Implementation::KubeProxyIptables,
        Implementation::KubeProxyNftables,
        Implementation::KubeProxyIpvs,
    ],
    since: Release::V1_31,
    made: "kube-proxy uses topology hints whether or not the Service has the hints annotation",
    before: "kube-proxy v1.30 uses topology hints only for a Service with the hints annotation, unless the \
             gate ServiceTrafficDistribution (off by default in v1.30) is on",
    source: "kube-proxy's pkg/proxy/topology.go and pkg/features/kube_features.go",
};

/// Every choice a release changed.
#[cfg(test)]
const RELEASE_CHANGES: &[&ReleaseChange] = &[&UNALLOCATED_SERVICE_IPS_DROPPED, &HINTS_WITHOUT_ANNOTATION];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_change_flips_only_its_implementations_choice_before_its_release() {
        let change = &UNALLOCATED_SERVICE_IPS_DROPPED;
        let at = |implementation, release| Profile { implementation, release };
        let nftables = Implementation::KubeProxyNftables;
        assert!(change.made_by(Profile::KUBE_PROXY_NFTABLES), "the newest makes it");
        for (release, made) in [
            (Release::V1_30, false),
            (Release::V1_31, false),
            (Release::V1_32, false),
            (Release::V1_33, true),
            (Release::V1_34, true),
            (Release::V1_35, true),
            (Release::V1_36, true),
        ] {
            assert_eq!(change.made_by(at(nftables, Some(release))), made, "{release}");
            assert!(!change.made_by(at(Implementation::KubeProxyIptables, Some(release))));
        }
        assert!(!change.made_by(Profile::KUBERNETES) && !change.made_by(Profile::KUBE_PROXY_IPVS));
    }

    #[test]
    fn every_change_falls_between_known_releases_and_cites_its_source() {
        for change in RELEASE_CHANGES {
            // A change at the first known release would change nothing a profile can name.
            assert!(Release::KNOWN[1..].contains(&change.since), "{change:?}");
            assert!(!change.implementations.contains(&Implementation::Kubernetes), "{change:?}");
            assert!(change.source.contains(".go"), "{change:?}");
            let before =
                Profile { implementation: change.implementations[0], release: Some(Release::KNOWN[0]) };
            assert!(
                change.why(before).starts_with(change.before) && change.why(before).contains(change.source)
            );
        }
    }
}
