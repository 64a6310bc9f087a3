//! kube-proxy's local-traffic detector: which packets count as coming from a pod of this
//! node. Pod traffic is not masqueraded to cluster IPs (everything else is, since it may have
//! come from off the cluster and its endpoint may be elsewhere), and pod traffic to an
//! externalTrafficPolicy Local destination is short-circuited to every endpoint. One detector
//! per node and family, as `getLocalDetector` (cmd/kube-proxy/app/server_linux.go) builds it
//! from `detectLocalMode`; its matches are those of pkg/proxy/util/iptables/traffic.go. The
//! built-in generators render it and the oracle asks it what a packet counts as.

use std::net::IpAddr;

use ipnet::IpNet;

use crate::model::{Cluster, DetectLocal, IpFamily};

/// One proxier's detector (one node, one family).
// "By": each variant is read as "local by CIDR", "by bridge", "by prefix".
#[allow(clippy::enum_variant_names)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocalDetector {
    /// `ClusterCIDR` (the cluster CIDR of the family) or `NodeCIDR` (the node's pod CIDR of
    /// the family): sources inside it.
    ByCidr(IpNet),
    /// `BridgeInterface`: packets that arrived on this interface.
    ByBridge(String),
    /// `InterfaceNamePrefix`: packets that arrived on an interface whose name starts with it.
    ByPrefix(String),
}

/// The detector of the proxier that programs `node` for `cluster`'s family (`cluster` is one
/// family's view), or `None` for kube-proxy's no-op detector (no CIDR of the family, in the
/// cluster CIDRs or the node's pod CIDRs as the mode reads: then it writes neither the
/// off-cluster masquerade nor the pod short-circuit).
pub fn detector(cluster: &Cluster, node: &str) -> Option<LocalDetector> {
    let family = IpFamily::of_net(&cluster.pod_cidr);
    let of_family =
        |net: IpNet| (IpFamily::of_net(&net) == family).then(|| LocalDetector::ByCidr(net.trunc()));
    match &cluster.proxy.detect_local {
        DetectLocal::ClusterCidr => match &cluster.proxy.cluster_cidrs {
            None => of_family(cluster.pod_cidr),
            // The first of the family (cidrsByFamily[ipFamily][0]).
            Some(cidrs) => cidrs.iter().find_map(|&net| of_family(net)),
        },
        // kube-proxy waits for the Node's podCIDRs before it starts in this mode.
        DetectLocal::NodeCidr => cluster.node(node).and_then(|n| of_family(n.pod_cidr())),
        DetectLocal::BridgeInterface(name) => Some(LocalDetector::ByBridge(name.clone())),
        DetectLocal::InterfaceNamePrefix(prefix) => Some(LocalDetector::ByPrefix(prefix.clone())),
    }
}

impl LocalDetector {
    /// `IfLocal()`: iptables arguments matching local traffic.
    pub fn iptables_if_local(&self) -> Vec<String> {
        match self {
            LocalDetector::ByCidr(net) => vec!["-s".into(), net.to_string()],
            LocalDetector::ByBridge(name) => vec!["-i".into(), name.clone()],
            LocalDetector::ByPrefix(prefix) => vec!["-i".into(), format!("{prefix}+")],
        }
    }

    /// `IfNotLocal()`: iptables arguments matching the rest.
    pub fn iptables_if_not_local(&self) -> Vec<String> {
        let mut args = vec!["!".to_string()];
        args.extend(self.iptables_if_local());
        args
    }

    /// `IfLocalNFT()` in a table of nftables family `ip` (`ip` or `ip6`). Interfaces are
    /// matched by name (`iifname`), as kube-proxy does since kubernetes/kubernetes#134024
    /// (release-1.34: #134118): v1.30's `iif` resolves the name when the rule loads, so a prefix
    /// (`iif veth*`) fails the whole sync with "Interface does not exist".
    pub fn nft_if_local(&self, ip: &str) -> String {
        self.nft(ip, "")
    }

    /// `IfNotLocalNFT()`.
    pub fn nft_if_not_local(&self, ip: &str) -> String {
        self.nft(ip, "!= ")
    }

    fn nft(&self, ip: &str, op: &str) -> String {
        match self {
            LocalDetector::ByCidr(net) => format!("{ip} saddr {op}{net}"),
            LocalDetector::ByBridge(name) => format!("iifname {op}\"{name}\""),
            LocalDetector::ByPrefix(prefix) => format!("iifname {op}\"{prefix}*\""),
        }
    }

    /// Whether a packet from `source` that arrived on `interface` (`None`: sent by the node
    /// itself, which has no input interface) counts as local.
    pub fn matches(&self, source: IpAddr, interface: Option<&str>) -> bool {
        match self {
            LocalDetector::ByCidr(net) => net.contains(&source),
            LocalDetector::ByBridge(name) => interface == Some(name.as_str()),
            LocalDetector::ByPrefix(prefix) => interface.is_some_and(|i| i.starts_with(prefix.as_str())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ProxyConfig;

    fn with(mode: DetectLocal) -> Cluster {
        let mut cluster = Cluster::example(vec![]);
        cluster.proxy = ProxyConfig { detect_local: mode, ..ProxyConfig::default() };
        cluster
    }

    #[test]
    fn each_mode_picks_its_cidr_or_interface() {
        let cidr = |c: &str| Some(LocalDetector::ByCidr(c.parse().unwrap()));
        assert_eq!(detector(&with(DetectLocal::ClusterCidr), "node-a"), cidr("10.244.0.0/16"));
        assert_eq!(detector(&with(DetectLocal::NodeCidr), "node-b"), cidr("10.244.1.0/24"));
        assert_eq!(
            detector(&with(DetectLocal::BridgeInterface("cni0".into())), "node-a"),
            Some(LocalDetector::ByBridge("cni0".into()))
        );
        assert_eq!(detector(&with(DetectLocal::NodeCidr), "node-z"), None);
    }

    /// `getLocalDetector`: mode ClusterCIDR takes the first cluster CIDR of the proxier's
    /// family, and without one falls back to the no-op detector.
    #[test]
    fn cluster_cidr_mode_without_a_cidr_of_the_family_detects_nothing() {
        let mut cluster = with(DetectLocal::ClusterCidr);
        cluster.proxy.cluster_cidrs = Some(Vec::new());
        assert_eq!(detector(&cluster, "node-a"), None);
        cluster.proxy.cluster_cidrs = Some(vec!["fd00:10:244::/56".parse().unwrap()]);
        assert_eq!(detector(&cluster, "node-a"), None, "only another family's");
        cluster.proxy.cluster_cidrs =
            Some(vec!["fd00:10:244::/56".parse().unwrap(), "10.240.0.0/12".parse().unwrap()]);
        assert_eq!(
            detector(&cluster, "node-a"),
            Some(LocalDetector::ByCidr("10.240.0.0/12".parse().unwrap()))
        );
        cluster.proxy.detect_local = DetectLocal::NodeCidr;
        assert_eq!(
            detector(&cluster, "node-b"),
            Some(LocalDetector::ByCidr("10.244.1.0/24".parse().unwrap())),
            "NodeCIDR reads the node's pod CIDRs, never clusterCIDR"
        );
    }

    #[test]
    fn renders_as_kube_proxy_writes_it() {
        let bridge = LocalDetector::ByBridge("cni0".into());
        let prefix = LocalDetector::ByPrefix("veth".into());
        let cidr = LocalDetector::ByCidr("10.244.1.0/24".parse().unwrap());
        assert_eq!(cidr.iptables_if_not_local(), ["!", "-s", "10.244.1.0/24"]);
        assert_eq!(bridge.iptables_if_local(), ["-i", "cni0"]);
        assert_eq!(prefix.iptables_if_not_local(), ["!", "-i", "veth+"]);
        assert_eq!(cidr.nft_if_not_local("ip"), "ip saddr != 10.244.1.0/24");
        assert_eq!(bridge.nft_if_local("ip6"), "iifname \"cni0\"");
        assert_eq!(prefix.nft_if_not_local("ip"), "iifname != \"veth*\"");
    }

    #[test]
    fn the_nodes_own_traffic_is_never_local_by_interface() {
        let node_ip: IpAddr = "192.168.50.2".parse().unwrap();
        let pod: IpAddr = "10.244.0.5".parse().unwrap();
        let bridge = LocalDetector::ByBridge("cni0".into());
        assert!(!bridge.matches(node_ip, None));
        assert!(bridge.matches(pod, Some("cni0")) && !bridge.matches(pod, Some("eth0")));
        let prefix = LocalDetector::ByPrefix("cni".into());
        assert!(prefix.matches(pod, Some("cni0")) && !prefix.matches(pod, None));
        assert!(!LocalDetector::ByPrefix("veth".into()).matches(pod, Some("cni0")));
    }
}
