//! Contract versus implementation. Most outcomes are required by Kubernetes; a few are the
//! choice of one implementation (what happens at a valid cluster IP's wrong port, whether
//! node ports answer on 127.0.0.1 or on a node's secondary addresses). A run names the
//! profile it is held to; under `kubernetes`, outcomes Kubernetes leaves open are not judged.

use std::fmt;

use crate::model::Profile;

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
}

impl Choices {
    /// The contract's path: no departure.
    pub(super) const CONTRACT: Choices = Choices {
        local_falls_back_to_cluster: false,
        external_local_for_every_sender: false,
        external_ips_on_every_node: false,
        affinity_outlives_connections: false,
    };

    /// kube-proxy's IPVS mode.
    const KUBE_PROXY_IPVS: Choices = Choices {
        local_falls_back_to_cluster: true,
        external_local_for_every_sender: true,
        external_ips_on_every_node: true,
        affinity_outlives_connections: true,
    };

    pub(super) fn of(profile: Profile) -> Choices {
        match profile {
            Profile::Kubernetes | Profile::KubeProxyIptables | Profile::KubeProxyNftables => {
                Choices::CONTRACT
            }
            Profile::KubeProxyIpvs => Choices::KUBE_PROXY_IPVS,
        }
    }
}
