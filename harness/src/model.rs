//! The validated cluster a scenario describes: plain data, shared by every stage.
//!
//! `scenario` builds it from files (and guarantees every cross-reference in it resolves),
//! the `oracle` reads Kubernetes semantics out of it, `topology` builds namespaces from it and
//! `proxy` implementations program nodes from it. Nothing here knows about rules or packets.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use ipnet::IpNet;

/// One scenario file, validated.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// `metadata.name` of the Scenario document.
    pub name: String,
    /// The file it came from, as given on the command line.
    pub source: PathBuf,
    pub description: Option<String>,
    /// Proxy implementation to program the nodes with, e.g. `builtin-iptables`.
    pub proxy: String,
    pub cluster: Cluster,
    pub probes: Vec<Probe>,
    /// Flows `flows: all` would have generated but whose outcome Kubernetes leaves undefined,
    /// with the reason; they are reported as not judged, never as passed.
    pub unjudged_flows: Vec<(String, String)>,
    /// The Kubernetes objects as parsed, for adapters that hand real objects to a proxy.
    pub objects: Objects,
}

/// The Kubernetes objects of a scenario, as k8s-openapi types (derived EndpointSlices included).
#[derive(Debug, Clone, Default)]
pub struct Objects {
    pub services: Vec<k8s_openapi::api::core::v1::Service>,
    pub endpoint_slices: Vec<k8s_openapi::api::discovery::v1::EndpointSlice>,
    pub pods: Vec<k8s_openapi::api::core::v1::Pod>,
}

/// The cluster shape plus the Service state a proxy must implement.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// The cluster-wide pod CIDR (kube-proxy's `--cluster-cidr`), used for local-traffic detection.
    pub pod_cidr: IpNet,
    pub service_cidr: IpNet,
    /// The subnet nodes and external hosts share.
    pub node_network: IpNet,
    pub nodes: Vec<Node>,
    pub external_hosts: Vec<ExternalHost>,
    pub pods: Vec<Pod>,
    pub services: Vec<Service>,
    /// How the proxy on every node is configured (kube-proxy's flags).
    pub proxy: ProxyConfig,
}

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
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig { masquerade_all: false, node_port_addresses: Vec::new(), localhost_node_ports: true }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub name: String,
    /// The node's InternalIP on the node network.
    pub ip: IpAddr,
    /// Further addresses of the node on the node network (same prefix as `ip`).
    pub secondary_ips: Vec<IpAddr>,
    /// This node's share of the pod CIDR; the first address is the node's bridge (gateway) address.
    pub pod_cidr: IpNet,
}

impl Node {
    /// Every address on the node's node-network interface, primary first.
    pub fn node_network_ips(&self) -> impl Iterator<Item = IpAddr> + '_ {
        std::iter::once(self.ip).chain(self.secondary_ips.iter().copied())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalHost {
    pub name: String,
    pub ip: IpAddr,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    pub node: String,
    pub ip: IpAddr,
    pub labels: BTreeMap<String, String>,
    /// Ports the pod's containers declare; the harness serves each of them.
    pub ports: Vec<ContainerPort>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerPort {
    pub name: Option<String>,
    pub port: u16,
    pub protocol: Protocol,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    /// Kubernetes spelling: `TCP`, `UDP`, `SCTP`.
    pub fn as_k8s(self) -> &'static str {
        match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => "SCTP",
        }
    }

    /// iptables / kube-proxy chain-hash spelling: `tcp`, `udp`, `sctp`.
    pub fn as_lower(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }

    pub fn parse_k8s(s: &str) -> Option<Protocol> {
        match s {
            "TCP" => Some(Protocol::Tcp),
            "UDP" => Some(Protocol::Udp),
            "SCTP" => Some(Protocol::Sctp),
            _ => None,
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_k8s())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServiceType {
    ClusterIp,
    NodePort,
    LoadBalancer,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrafficPolicy {
    Cluster,
    Local,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    pub namespace: String,
    pub name: String,
    pub service_type: ServiceType,
    pub cluster_ip: IpAddr,
    pub external_traffic_policy: TrafficPolicy,
    pub internal_traffic_policy: TrafficPolicy,
    pub ports: Vec<ServicePort>,
    /// `spec.externalIPs`.
    pub external_ips: Vec<IpAddr>,
    /// `status.loadBalancer.ingress[].ip` (type LoadBalancer only).
    pub load_balancer_ips: Vec<IpAddr>,
    /// `spec.loadBalancerSourceRanges`, whitespace trimmed; empty allows every source.
    pub load_balancer_source_ranges: Vec<IpNet>,
    /// `spec.healthCheckNodePort` (type LoadBalancer with externalTrafficPolicy Local).
    pub health_check_node_port: Option<u16>,
    pub session_affinity: SessionAffinity,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionAffinity {
    None,
    /// `sessionAffinity: ClientIP` with `sessionAffinityConfig.clientIP.timeoutSeconds`
    /// (Kubernetes' default 10800).
    ClientIp { timeout_seconds: u32 },
}

impl Service {
    /// `namespace/name`, as kube-proxy prints it in rule comments.
    pub fn namespaced_name(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// One port of a Service with the endpoints that back it, resolved from EndpointSlices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServicePort {
    /// `spec.ports[].name`; empty when the Service has a single unnamed port.
    pub name: String,
    pub protocol: Protocol,
    pub port: u16,
    pub node_port: Option<u16>,
    /// Endpoints from every EndpointSlice of the Service whose port matches this one by name
    /// and protocol, in slice order, deduplicated by address.
    pub endpoints: Vec<Endpoint>,
}

/// One backend of a service port, as an EndpointSlice describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub ip: IpAddr,
    /// The port on the endpoint (the resolved target port).
    pub port: u16,
    /// `conditions.ready`, with Kubernetes' defaulting (absent means ready).
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
    /// `nodeName` of the endpoint, if given.
    pub node: Option<String>,
    /// The scenario Pod this address belongs to (validation guarantees one exists).
    pub pod: String,
}

impl Endpoint {
    /// `ip:port`, as kube-proxy writes it in chain hashes and DNAT targets.
    pub fn address(&self) -> SocketAddr {
        SocketAddr::new(self.ip, self.port)
    }
}

/// One line of the scenario's flow table: traffic to send and (optionally) what the author
/// expects of it; the oracle's expectation is authoritative and must agree with the author's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// Given name, or `probe[N]` when the file gives none.
    pub name: String,
    pub from: Source,
    pub to: Target,
    pub protocol: Protocol,
    /// Number of separate attempts (each a new connection from a new source port).
    pub count: u32,
    /// Pause between attempts (`interval: 1500ms`), e.g. to outlast a session-affinity timeout.
    pub interval: Option<Duration>,
    pub expect: Option<StatedExpectation>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    Pod(String),
    /// A process in the node's own (host) network namespace.
    Node(String),
    External(String),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Pod(n) => write!(f, "pod {n}"),
            Source::Node(n) => write!(f, "node {n}"),
            Source::External(n) => write!(f, "external {n}"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A Service port through its cluster IP.
    ClusterIp { service: String, port: String },
    /// A Service port through its node port on the named node: on the node's primary IP, or
    /// on `address` (a secondary node IP, or 127.0.0.1 from the node itself).
    NodePort { service: String, port: String, node: String, address: Option<IpAddr> },
    /// A Service port through one of its `spec.externalIPs`. An external host's traffic enters
    /// the cluster at node `via` (as a router would send it); pods and nodes need no `via`.
    ExternalIp { service: String, port: String, ip: IpAddr, via: Option<String> },
    /// A Service port through one of its load-balancer ingress IPs, entering at node `via` for
    /// external hosts (as the cloud load balancer would send it).
    LoadBalancer { service: String, port: String, ip: IpAddr, via: Option<String> },
    /// The Service's `healthCheckNodePort` on a node: HTTP `GET /`.
    HealthCheck { service: String, node: String },
    /// A raw address, interpreted by the oracle (cluster IP, node port, pod or nothing).
    Address(SocketAddr),
}

/// What a scenario author wrote under `expect:`; checked against the oracle before running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatedExpectation {
    pub verdict: StatedVerdict,
    /// Pod names that may answer; `None` means the author did not say.
    pub backends: Option<Vec<String>>,
    /// Whether the backend must see the client's own address; `None` means not said.
    pub source: Option<StatedSource>,
    /// For health-check targets: the HTTP status (200 with local endpoints, 503 without).
    pub http_status: Option<u16>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatedVerdict {
    Answered,
    Rejected,
    Dropped,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatedSource {
    /// The backend sees the client's own address.
    Client,
    /// The backend sees an address of a node (SNAT/masquerade).
    Masqueraded,
}

impl Cluster {
    /// The cluster's address family (validation makes every address of it the same family).
    pub fn ip_family(&self) -> IpFamily {
        IpFamily::of_net(&self.service_cidr)
    }

    pub fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.name == name)
    }

    pub fn pod(&self, name: &str) -> Option<&Pod> {
        self.pods.iter().find(|p| p.name == name)
    }

    pub fn external_host(&self, name: &str) -> Option<&ExternalHost> {
        self.external_hosts.iter().find(|h| h.name == name)
    }

    pub fn service(&self, name: &str) -> Option<&Service> {
        self.services.iter().find(|s| s.name == name)
    }

    pub fn pod_by_ip(&self, ip: IpAddr) -> Option<&Pod> {
        self.pods.iter().find(|p| p.ip == ip)
    }

    /// The address a probe source sends from.
    pub fn source_ip(&self, source: &Source) -> Option<IpAddr> {
        match source {
            Source::Pod(n) => self.pod(n).map(|p| p.ip),
            Source::Node(n) => self.node(n).map(|n| n.ip),
            Source::External(n) => self.external_host(n).map(|h| h.ip),
        }
    }

    /// The node a source lives on (external hosts live on none).
    pub fn source_node(&self, source: &Source) -> Option<&Node> {
        match source {
            Source::Pod(n) => self.pod(n).and_then(|p| self.node(&p.node)),
            Source::Node(n) => self.node(n),
            Source::External(_) => None,
        }
    }

    /// The service port a `ClusterIp`/`NodePort` target names: by port name, or by number
    /// when the name is numeric, or the only port when `port` is empty.
    pub fn service_port<'a>(&'a self, service: &str, port: &str) -> Option<(&'a Service, &'a ServicePort)> {
        let svc = self.service(service)?;
        let found = if port.is_empty() && svc.ports.len() == 1 {
            svc.ports.first()
        } else {
            svc.ports.iter().find(|p| p.name == port || port.parse::<u16>().ok() == Some(p.port))
        };
        found.map(|p| (svc, p))
    }

    /// The node an external host's traffic to `target` is routed through, if it names one.
    pub fn entry_node(&self, target: &Target) -> Option<&Node> {
        match target {
            Target::ExternalIp { via: Some(n), .. } | Target::LoadBalancer { via: Some(n), .. } => self.node(n),
            _ => None,
        }
    }

    /// The concrete address:port a target sends to.
    pub fn target_address(&self, target: &Target) -> Option<SocketAddr> {
        match target {
            Target::ClusterIp { service, port } => {
                let (svc, sp) = self.service_port(service, port)?;
                Some(SocketAddr::new(svc.cluster_ip, sp.port))
            }
            Target::NodePort { service, port, node, address } => {
                let (_, sp) = self.service_port(service, port)?;
                Some(SocketAddr::new(address.unwrap_or(self.node(node)?.ip), sp.node_port?))
            }
            Target::ExternalIp { service, port, ip, .. } | Target::LoadBalancer { service, port, ip, .. } => {
                let (_, sp) = self.service_port(service, port)?;
                Some(SocketAddr::new(*ip, sp.port))
            }
            Target::HealthCheck { service, node } => {
                let svc = self.service(service)?;
                Some(SocketAddr::new(self.node(node)?.ip, svc.health_check_node_port?))
            }
            Target::Address(addr) => Some(*addr),
        }
    }
}

/// The gateway address of a node's pod bridge: the first host address of its pod CIDR
/// (`.1`, or `::1` of an IPv6 prefix, whose network address is the subnet-router anycast
/// address and no host's).
pub fn bridge_address(pod_cidr: &IpNet) -> IpAddr {
    match pod_cidr {
        IpNet::V4(net) => IpAddr::V4(net.hosts().next().unwrap_or(net.addr())),
        IpNet::V6(net) if net.prefix_len() < 127 => IpAddr::V6(Ipv6Addr::from(u128::from(net.network()) + 1)),
        IpNet::V6(net) => IpAddr::V6(net.addr()),
    }
}

/// An address family. A scenario is single-stack: every address in it is of one family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IpFamily {
    V4,
    V6,
}

impl IpFamily {
    pub fn of(ip: IpAddr) -> IpFamily {
        if ip.is_ipv4() { IpFamily::V4 } else { IpFamily::V6 }
    }

    pub fn of_net(net: &IpNet) -> IpFamily {
        IpFamily::of(net.addr())
    }

    /// Kubernetes spelling (`ipFamilies`, EndpointSlice `addressType`): `IPv4`, `IPv6`.
    pub fn as_k8s(self) -> &'static str {
        match self {
            IpFamily::V4 => "IPv4",
            IpFamily::V6 => "IPv6",
        }
    }

    pub fn parse_k8s(s: &str) -> Option<IpFamily> {
        match s {
            "IPv4" => Some(IpFamily::V4),
            "IPv6" => Some(IpFamily::V6),
            _ => None,
        }
    }

    /// `0.0.0.0` or `::`.
    pub fn unspecified(self) -> IpAddr {
        match self {
            IpFamily::V4 => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            IpFamily::V6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        }
    }

    /// The prefix length of one host: 32 or 128.
    pub fn host_prefix(self) -> u8 {
        match self {
            IpFamily::V4 => 32,
            IpFamily::V6 => 128,
        }
    }
}

impl fmt::Display for IpFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_k8s())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bridge_address_is_the_first_host_of_either_family() {
        let at = |cidr: &str| bridge_address(&cidr.parse().unwrap()).to_string();
        assert_eq!(at("10.244.1.0/24"), "10.244.1.1");
        assert_eq!(at("fd00:10:244:1::/64"), "fd00:10:244:1::1");
        assert_eq!(at("fd00::/127"), "fd00::");
    }
}
