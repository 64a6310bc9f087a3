//! The proxy's node-level settings, as kube-proxy's flags and configuration set them.

use ipnet::IpNet;

/// Node-level proxy settings, as kube-proxy's flags set them. Part of the desired state: the
/// oracle reads them as semantics, proxies implement them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyConfig {
    /// `--masquerade-all`: masquerade all traffic to cluster IPs, even from pods.
    pub masquerade_all: bool,
    /// `--nodeport-addresses`: node ports answer only on node addresses inside these CIDRs;
    /// empty means every address of the node (kube-proxy's default).
    pub node_port_addresses: Vec<IpNet>,
    /// Node ports on 127.0.0.1 from the node itself (iptables mode's `route_localnet` feature,
    /// on by default there; nftables mode has none).
    pub localhost_node_ports: bool,
    /// The feature gate `ServiceTrafficDistribution` (alpha and off in v1.30, on from v1.31):
    /// kube-proxy then uses topology hints whatever the Service's hints annotation says.
    pub service_traffic_distribution: bool,
    /// `detectLocalMode` (with `detectLocal`): which traffic counts as from this node's pods.
    pub detect_local: DetectLocal,
    /// `clusterCIDR`, of which the first CIDR of each family is mode ClusterCIDR's range:
    /// `None` for the scenario's pod CIDRs; an empty list (or one lacking a family) is
    /// kube-proxy run without one, whose detector for that family matches nothing.
    pub cluster_cidrs: Option<Vec<IpNet>>,
}

/// kube-proxy's `detectLocalMode` and its `detectLocal` value: what makes traffic "local"
/// (from a pod), which kube-proxy neither masquerades to cluster IPs nor holds to an
/// externalTrafficPolicy Local (`kubernetes::local_detect` says what each mode matches).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum DetectLocal {
    /// Sources inside the cluster CIDR (`--cluster-cidr`, the scenario's `podCIDR`).
    #[default]
    ClusterCidr,
    /// Sources inside the node's own pod CIDR (its Node's `spec.podCIDRs`).
    NodeCidr,
    /// Packets arriving on this bridge (`detectLocal.bridgeInterface`).
    BridgeInterface(String),
    /// Packets arriving on an interface whose name starts with this
    /// (`detectLocal.interfaceNamePrefix`).
    InterfaceNamePrefix(String),
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            masquerade_all: false,
            node_port_addresses: Vec::new(),
            localhost_node_ports: true,
            service_traffic_distribution: false,
            detect_local: DetectLocal::ClusterCidr,
            cluster_cidrs: None,
        }
    }
}

impl std::fmt::Display for DetectLocal {
    /// As a KubeProxyConfiguration writes it: `NodeCIDR`, `BridgeInterface cni0`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DetectLocal::ClusterCidr => f.write_str("ClusterCIDR"),
            DetectLocal::NodeCidr => f.write_str("NodeCIDR"),
            DetectLocal::BridgeInterface(name) => write!(f, "BridgeInterface {name}"),
            DetectLocal::InterfaceNamePrefix(prefix) => write!(f, "InterfaceNamePrefix {prefix}"),
        }
    }
}
