//! The profile a run is judged by: the Kubernetes contract alone, or one implementation's
//! choices where Kubernetes leaves an outcome open. Plain data, named in scenario files
//! (`expect.profile`) and on the command line; the choices themselves are the oracle's.

use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Profile {
    /// What the Kubernetes Service contract requires, and nothing more.
    Kubernetes,
    /// kube-proxy's iptables mode (v1.30+). Topology-aware routing follows v1.30's rules in
    /// every profile (`kubernetes::topology`): zone hints only, the hints annotation unless the
    /// `ServiceTrafficDistribution` gate is on; v1.33+'s node hints are refused at `check`.
    KubeProxyIptables,
    /// kube-proxy's nftables mode (v1.30+), with the same topology rules.
    KubeProxyNftables,
    /// kube-proxy's IPVS mode (v1.30), with the same topology rules.
    KubeProxyIpvs,
}

impl Profile {
    pub(crate) const ALL: [Profile; 4] =
        [Profile::Kubernetes, Profile::KubeProxyIptables, Profile::KubeProxyNftables, Profile::KubeProxyIpvs];

    pub fn name(self) -> &'static str {
        match self {
            Profile::Kubernetes => "kubernetes",
            Profile::KubeProxyIptables => "kube-proxy-iptables",
            Profile::KubeProxyNftables => "kube-proxy-nftables",
            Profile::KubeProxyIpvs => "kube-proxy-ipvs",
        }
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Profile {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Profile::ALL.into_iter().find(|p| p.name() == s).ok_or_else(|| {
            let known: Vec<&str> = Profile::ALL.iter().map(|p| p.name()).collect();
            format!("unknown profile {s:?} (known: {})", known.join(", "))
        })
    }
}
