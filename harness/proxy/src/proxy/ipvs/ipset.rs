//! The ipsets kube-proxy's IPVS mode keeps (pkg/proxy/ipvs/ipset.go, v1.30.3): their names,
//! types and entries, rendered as `ipset restore` input that creates each set (if missing),
//! empties it and fills it again.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::IpAddr;

use crate::model::IpFamily;

/// One set by its IPv4 name; the IPv6 proxier's is `KUBE-6-…` (`NewIPSet`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SetName {
    LoopBack,
    ClusterIp,
    ExternalIp,
    ExternalIpLocal,
    LoadBalancer,
    LoadBalancerFw,
    LoadBalancerLocal,
    LoadBalancerSourceIp,
    LoadBalancerSourceCidr,
    NodePortTcp,
    NodePortLocalTcp,
    NodePortUdp,
    NodePortLocalUdp,
    NodePortSctp,
    NodePortLocalSctp,
    HealthCheckNodePort,
    IpvsIps,
}

/// `ipset` types kube-proxy uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SetType {
    HashIpPort,
    HashIpPortIp,
    HashIpPortNet,
    HashIp,
    BitmapPort,
}

impl SetName {
    /// Every set, in `ipsetInfo`'s order (all are created, used or not).
    pub(crate) const ALL: [SetName; 17] = [
        SetName::LoopBack,
        SetName::ClusterIp,
        SetName::ExternalIp,
        SetName::ExternalIpLocal,
        SetName::LoadBalancer,
        SetName::LoadBalancerFw,
        SetName::LoadBalancerLocal,
        SetName::LoadBalancerSourceIp,
        SetName::LoadBalancerSourceCidr,
        SetName::NodePortTcp,
        SetName::NodePortLocalTcp,
        SetName::NodePortUdp,
        SetName::NodePortLocalUdp,
        SetName::NodePortSctp,
        SetName::NodePortLocalSctp,
        SetName::HealthCheckNodePort,
        SetName::IpvsIps,
    ];

    fn v4_name(self) -> &'static str {
        match self {
            SetName::LoopBack => "KUBE-LOOP-BACK",
            SetName::ClusterIp => "KUBE-CLUSTER-IP",
            SetName::ExternalIp => "KUBE-EXTERNAL-IP",
            SetName::ExternalIpLocal => "KUBE-EXTERNAL-IP-LOCAL",
            SetName::LoadBalancer => "KUBE-LOAD-BALANCER",
            SetName::LoadBalancerFw => "KUBE-LOAD-BALANCER-FW",
            SetName::LoadBalancerLocal => "KUBE-LOAD-BALANCER-LOCAL",
            SetName::LoadBalancerSourceIp => "KUBE-LOAD-BALANCER-SOURCE-IP",
            SetName::LoadBalancerSourceCidr => "KUBE-LOAD-BALANCER-SOURCE-CIDR",
            SetName::NodePortTcp => "KUBE-NODE-PORT-TCP",
            SetName::NodePortLocalTcp => "KUBE-NODE-PORT-LOCAL-TCP",
            SetName::NodePortUdp => "KUBE-NODE-PORT-UDP",
            SetName::NodePortLocalUdp => "KUBE-NODE-PORT-LOCAL-UDP",
            SetName::NodePortSctp => "KUBE-NODE-PORT-SCTP-HASH",
            SetName::NodePortLocalSctp => "KUBE-NODE-PORT-LOCAL-SCTP-HASH",
            SetName::HealthCheckNodePort => "KUBE-HEALTH-CHECK-NODE-PORT",
            SetName::IpvsIps => "KUBE-IPVS-IPS",
        }
    }

    /// The set's name in `family`'s proxier (31 characters at most, as `NewIPSet` cuts it).
    pub(crate) fn in_family(self, family: IpFamily) -> String {
        let name = self.v4_name();
        match family {
            IpFamily::V4 => name.to_string(),
            IpFamily::V6 => name.replacen("KUBE-", "KUBE-6-", 1).chars().take(31).collect(),
        }
    }

    /// The comment kube-proxy's rules matching the set carry.
    pub fn comment(self) -> &'static str {
        match self {
            SetName::LoopBack => "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose",
            SetName::ClusterIp => "Kubernetes service cluster ip + port for masquerade purpose",
            SetName::ExternalIp => "Kubernetes service external ip + port for masquerade and filter purpose",
            SetName::ExternalIpLocal => {
                "Kubernetes service external ip + port with externalTrafficPolicy=local"
            }
            SetName::LoadBalancer => "Kubernetes service lb portal",
            SetName::LoadBalancerFw => {
                "Kubernetes service load balancer ip + port for load balancer with sourceRange"
            }
            SetName::LoadBalancerLocal => {
                "Kubernetes service load balancer ip + port with externalTrafficPolicy=local"
            }
            SetName::LoadBalancerSourceIp => {
                "Kubernetes service load balancer ip + port + source IP for packet filter purpose"
            }
            SetName::LoadBalancerSourceCidr => {
                "Kubernetes service load balancer ip + port + source cidr for packet filter purpose"
            }
            SetName::NodePortTcp => "Kubernetes nodeport TCP port for masquerade purpose",
            SetName::NodePortLocalTcp => "Kubernetes nodeport TCP port with externalTrafficPolicy=local",
            SetName::NodePortUdp => "Kubernetes nodeport UDP port for masquerade purpose",
            SetName::NodePortLocalUdp => "Kubernetes nodeport UDP port with externalTrafficPolicy=local",
            SetName::NodePortSctp => {
                "Kubernetes nodeport SCTP port for masquerade purpose with type 'hash ip:port'"
            }
            SetName::NodePortLocalSctp => {
                "Kubernetes nodeport SCTP port with externalTrafficPolicy=local with type 'hash ip:port'"
            }
            SetName::HealthCheckNodePort => "Kubernetes health check node port",
            SetName::IpvsIps => "Addresses on the ipvs interface",
        }
    }

    fn set_type(self) -> SetType {
        match self {
            SetName::LoopBack | SetName::LoadBalancerSourceIp => SetType::HashIpPortIp,
            SetName::LoadBalancerSourceCidr => SetType::HashIpPortNet,
            SetName::NodePortTcp
            | SetName::NodePortLocalTcp
            | SetName::NodePortUdp
            | SetName::NodePortLocalUdp
            | SetName::HealthCheckNodePort => SetType::BitmapPort,
            SetName::IpvsIps => SetType::HashIp,
            _ => SetType::HashIpPort,
        }
    }

    /// `ipset create` arguments after the name (`createSet` in pkg/proxy/ipvs/ipset/ipset.go:
    /// hash sets get the family, hashsize 1024 and maxelem 65536; bitmaps the whole port range).
    fn create_args(self, family: IpFamily) -> String {
        let (kind, hash) = match self.set_type() {
            SetType::HashIpPort => ("hash:ip,port", true),
            SetType::HashIpPortIp => ("hash:ip,port,ip", true),
            SetType::HashIpPortNet => ("hash:ip,port,net", true),
            SetType::HashIp => ("hash:ip", true),
            SetType::BitmapPort => ("bitmap:port", false),
        };
        if hash {
            let inet = match family {
                IpFamily::V4 => "inet",
                IpFamily::V6 => "inet6",
            };
            format!("{kind} family {inet} hashsize 1024 maxelem 65536")
        } else {
            format!("{kind} range 0-65535")
        }
    }
}

/// Entry strings as `utilipset.Entry.String()` writes them: `IP,proto:port`,
/// `IP,proto:port,IP2`, `IP,proto:port,NET`, `port`, `IP`.
pub(crate) fn ip_port(ip: IpAddr, proto: &str, port: u16) -> String {
    format!("{ip},{proto}:{port}")
}

/// The sets of one family's proxier, each with its entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sets {
    pub family: IpFamily,
    entries: Vec<(SetName, BTreeSet<String>)>,
}

impl Sets {
    pub fn new(family: IpFamily) -> Sets {
        Sets { family, entries: SetName::ALL.iter().map(|&s| (s, BTreeSet::new())).collect() }
    }

    pub fn insert(&mut self, set: SetName, entry: String) {
        if let Some((_, entries)) = self.entries.iter_mut().find(|(s, _)| *s == set) {
            entries.insert(entry);
        }
    }

    pub fn remove(&mut self, set: SetName, entry: &str) {
        if let Some((_, entries)) = self.entries.iter_mut().find(|(s, _)| *s == set) {
            entries.remove(entry);
        }
    }

    pub fn entries(&self, set: SetName) -> impl Iterator<Item = &String> {
        self.entries.iter().filter(move |(s, _)| *s == set).flat_map(|(_, e)| e.iter())
    }

    pub fn is_empty(&self, set: SetName) -> bool {
        self.entries(set).next().is_none()
    }

    /// `ipset restore -exist` input: every set created if missing, emptied, and filled.
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        for (set, entries) in &self.entries {
            let name = set.in_family(self.family);
            let _ = writeln!(out, "create {name} {}", set.create_args(self.family));
            let _ = writeln!(out, "flush {name}");
            for entry in entries {
                let _ = writeln!(out, "add {name} {entry}");
            }
        }
        out
    }
}
