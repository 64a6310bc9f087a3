//! The profile a run is judged by: the Kubernetes contract alone, or one implementation's
//! choices where Kubernetes leaves an outcome open, as one release of it makes them
//! (`kube-proxy-nftables@v1.30`; without `@`, the newest). Plain data, named in scenario files
//! (`expect.profile`) and on the command line; the choices themselves, and what each release
//! changed of them, are the oracle's (`oracle::profile`).

use std::fmt;
use std::str::FromStr;

/// Whose behaviour a profile states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Implementation {
    /// None: what the Kubernetes Service contract requires, and nothing more.
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

impl Implementation {
    pub const ALL: [Implementation; 4] = [
        Implementation::Kubernetes,
        Implementation::KubeProxyIptables,
        Implementation::KubeProxyNftables,
        Implementation::KubeProxyIpvs,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Implementation::Kubernetes => "kubernetes",
            Implementation::KubeProxyIptables => "kube-proxy-iptables",
            Implementation::KubeProxyNftables => "kube-proxy-nftables",
            Implementation::KubeProxyIpvs => "kube-proxy-ipvs",
        }
    }
}

/// A minor release of kube-proxy, `v1.MINOR`: one whose choices a profile can state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Release {
    minor: u16,
}

impl Release {
    pub const V1_30: Release = Release { minor: 30 };
    pub const V1_31: Release = Release { minor: 31 };
    pub const V1_32: Release = Release { minor: 32 };
    pub const V1_33: Release = Release { minor: 33 };
    pub const V1_34: Release = Release { minor: 34 };
    pub const V1_35: Release = Release { minor: 35 };
    pub const V1_36: Release = Release { minor: 36 };

    /// The releases a profile can name: those whose kube-proxy source the oracle's choices were
    /// read from (`oracle::profile`) and whose binaries the suite was run against
    /// (docs/src/proxies.md), oldest first.
    pub const KNOWN: [Release; 7] = [
        Release::V1_30,
        Release::V1_31,
        Release::V1_32,
        Release::V1_33,
        Release::V1_34,
        Release::V1_35,
        Release::V1_36,
    ];

    fn known_names() -> String {
        Release::KNOWN.iter().map(Release::to_string).collect::<Vec<_>>().join(", ")
    }
}

impl fmt::Display for Release {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v1.{}", self.minor)
    }
}

/// A profile: an implementation, and the release whose choices it states (`None`: the
/// newest).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Profile {
    pub implementation: Implementation,
    pub release: Option<Release>,
}

impl Profile {
    pub const KUBERNETES: Profile = Profile::newest(Implementation::Kubernetes);
    pub const KUBE_PROXY_IPTABLES: Profile = Profile::newest(Implementation::KubeProxyIptables);
    pub const KUBE_PROXY_NFTABLES: Profile = Profile::newest(Implementation::KubeProxyNftables);
    pub const KUBE_PROXY_IPVS: Profile = Profile::newest(Implementation::KubeProxyIpvs);

    /// `implementation` as its newest release makes its choices.
    pub const fn newest(implementation: Implementation) -> Profile {
        Profile { implementation, release: None }
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.implementation.name())?;
        match self.release {
            Some(release) => write!(f, "@{release}"),
            None => Ok(()),
        }
    }
}

impl FromStr for Profile {
    type Err = String;

    /// `NAME` or `NAME@v1.MINOR`; a name or release not known is refused with the known ones.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (name, release) = match s.split_once('@') {
            Some((name, release)) => (name, Some(release)),
            None => (s, None),
        };
        let implementation = Implementation::ALL.into_iter().find(|i| i.name() == name).ok_or_else(|| {
            let known: Vec<&str> = Implementation::ALL.iter().map(|i| i.name()).collect();
            format!(
                "unknown profile {s:?} (known: {}; a kube-proxy one may name a release, e.g. \
                 kube-proxy-nftables@v1.30)",
                known.join(", ")
            )
        })?;
        let Some(release) = release else { return Ok(Profile::newest(implementation)) };
        if implementation == Implementation::Kubernetes {
            return Err(format!(
                "profile {s:?}: `kubernetes` states the Service contract, which names no release; \
                 name a kube-proxy profile's release (known: {})",
                Release::known_names()
            ));
        }
        let release = Release::KNOWN.into_iter().find(|r| r.to_string() == release).ok_or_else(|| {
            format!(
                "unknown release {release:?} in profile {s:?} (known: {}; without `@`, the newest)",
                Release::known_names()
            )
        })?;
        Ok(Profile { implementation, release: Some(release) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back_with_and_without_a_release() {
        for implementation in Implementation::ALL {
            let newest = Profile::newest(implementation);
            assert_eq!(newest.to_string().parse::<Profile>(), Ok(newest));
            if implementation == Implementation::Kubernetes {
                continue;
            }
            for release in Release::KNOWN {
                let profile = Profile { implementation, release: Some(release) };
                assert_eq!(profile.to_string().parse::<Profile>(), Ok(profile));
            }
        }
        assert_eq!(
            "kube-proxy-nftables@v1.30".parse::<Profile>(),
            Ok(Profile { implementation: Implementation::KubeProxyNftables, release: Some(Release::V1_30) })
        );
        assert_eq!(Profile::KUBE_PROXY_IPTABLES.to_string(), "kube-proxy-iptables");
    }

    #[test]
    fn unknown_names_and_releases_are_refused_with_the_known_ones() {
        let refusal = |s: &str| s.parse::<Profile>().unwrap_err();
        let known_releases = "known: v1.30, v1.31, v1.32, v1.33, v1.34, v1.35, v1.36";
        for hostile in [
            "kube-proxy-nftables@v1.29",
            "kube-proxy-nftables@1.30",
            "kube-proxy-iptables@v1.30.3",
            "kube-proxy-iptables@v1.37",
        ] {
            let e = refusal(hostile);
            assert!(e.contains("unknown release") && e.contains(known_releases), "{e}");
        }
        for hostile in
            ["kube-proxy-nftables@", "kube-proxy-nftables@v1.30@v1.31", "kube-proxy-ipvs@\u{0}../x"]
        {
            assert!(refusal(hostile).contains(known_releases), "{hostile:?}");
        }
        // Escaped, never echoed raw.
        assert!(refusal("kube-proxy-ipvs@\u{1b}[2J").contains("\\u{1b}"));
        let e = refusal("kube-proxy@v1.30");
        assert!(e.contains("unknown profile") && e.contains("kube-proxy-nftables, kube-proxy-ipvs"), "{e}");
        let e = refusal("kubernetes@v1.30");
        assert!(e.contains("names no release"), "{e}");
        assert!(refusal("").contains("unknown profile"));
    }
}
