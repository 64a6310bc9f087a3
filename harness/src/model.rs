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

/// Names of the links a node is made of, fixed so dumps and captures read the same everywhere:
/// the node's uplink to the node network, the bridge its pods hang off, the node network's
/// bridge, and a pod's own interface. Local-traffic detection by interface matches on them.
pub(crate) const NODE_UPLINK: &str = "eth0";
pub(crate) const POD_BRIDGE: &str = "cni0";
pub(crate) const NODE_NETWORK_BRIDGE: &str = "br0";
pub(crate) const POD_INTERFACE: &str = "eth0";

mod per_family;
mod profile;
pub use per_family::{OfFamily, PerFamily};
pub use profile::{Implementation, Profile, Release};

/// The folder a file sits in, which relative paths in it start from: `.` for a bare file
/// name (whose `parent()` is the empty path, which cannot be made absolute).
pub(crate) fn folder_of(file: &std::path::Path) -> &std::path::Path {
    match file.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => std::path::Path::new("."),
    }
}

/// One scenario file, validated.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// `metadata.name` of the Scenario document.
    pub name: String,
    /// The file it came from, as given on the command line.
    pub source: PathBuf,
    pub description: Option<String>,
    /// The oldest kernel its outcome holds on (`spec.minKernel`); skipped on older ones.
    pub min_kernel: Option<crate::kernel::KernelVersion>,
    /// Proxy implementation to program the nodes with, e.g. `builtin-iptables`.
    pub proxy: ProxyChoice,
    pub cluster: Cluster,
    pub probes: Vec<Probe>,
    /// Flows `flows: all` would have generated but whose outcome Kubernetes leaves undefined,
    /// with the reason; they are reported as not judged, never as passed.
    pub unjudged_flows: Vec<(String, String)>,
    /// What the file says that is valid but likely not meant (a selector that matches no pod),
    /// for `check` to print; a run does not depend on them.
    pub warnings: Vec<String>,
    /// The Kubernetes objects as parsed, for adapters that hand real objects to a proxy.
    pub objects: Objects,
    /// Live changes, in order, each with the probes that follow it.
    pub steps: Vec<Step>,
}

impl Scenario {
    /// The first state and each step's, in order, with the probes of each.
    pub(crate) fn phases(&self) -> Vec<Phase<'_>> {
        let first = Phase {
            name: "",
            cluster: &self.cluster,
            objects: &self.objects,
            probes: &self.probes,
            restart_proxy: false,
        };
        let steps = self.steps.iter().map(|s| Phase {
            name: &s.name,
            cluster: &s.cluster,
            objects: &s.objects,
            probes: &s.probes,
            restart_proxy: s.restart_proxy,
        });
        std::iter::once(first).chain(steps).collect()
    }
}

/// One state of a scenario and the probes sent in it.
#[derive(Debug, Clone, Copy)]
pub struct Phase<'s> {
    /// The step's name; empty for the first state.
    pub name: &'s str,
    pub cluster: &'s Cluster,
    pub objects: &'s Objects,
    pub probes: &'s [Probe],
    /// Whether the proxy is stopped and started again (same nodes, this state) before the
    /// probes: a restart as a step.
    pub restart_proxy: bool,
}

/// A live change: the whole state after it (only Services and endpoints differ from the
/// state before) and the probes that then run.
#[derive(Debug, Clone)]
pub struct Step {
    pub name: String,
    pub description: Option<String>,
    pub cluster: Cluster,
    pub objects: Objects,
    /// Named `<step>: <probe>`.
    pub probes: Vec<Probe>,
    /// The proxy is stopped and started again with this state, rather than updated.
    pub restart_proxy: bool,
}

/// A proxy by name, with its adapter's options (a JSON object; empty for most).
#[derive(Debug, Clone, PartialEq)]
pub struct ProxyChoice {
    pub name: String,
    pub options: serde_json::Map<String, serde_json::Value>,
}

impl ProxyChoice {
    pub fn named(name: &str) -> ProxyChoice {
        ProxyChoice { name: name.to_string(), options: serde_json::Map::new() }
    }

    /// The choice as reports name it: its name and options, a command by its program's file
    /// name (never the whole command line), e.g. `apiserver (kube-proxy, mode=nftables)`.
    pub fn label(&self) -> String {
        let program = |program: Option<&str>| {
            let program = program.unwrap_or_default();
            std::path::Path::new(program)
                .file_name()
                .map_or(program.to_string(), |f| f.to_string_lossy().into_owned())
        };
        let options: Vec<String> = self
            .options
            .iter()
            .map(|(k, v)| match (k.as_str(), v) {
                ("command", serde_json::Value::String(cmd)) => program(cmd.split_whitespace().next()),
                ("command", serde_json::Value::Array(words)) => {
                    program(words.first().and_then(|w| w.as_str()))
                }
                (_, serde_json::Value::String(s)) => format!("{k}={s}"),
                _ => format!("{k}={v}"),
            })
            .collect();
        if options.is_empty() { self.name.clone() } else { format!("{} ({})", self.name, options.join(", ")) }
    }
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
    /// The networks of the cluster's other family, in a dual-stack cluster; the fields above
    /// are the primary family's. Consumers work on one family at a time: see
    /// [`Cluster::family_view`].
    pub second_family: Option<SecondFamily>,
}

#[cfg(test)]
impl Cluster {
    /// The unit tests' cluster: two IPv4 nodes (node-a 192.168.50.2, node-b 192.168.50.3)
    /// with kind's default networks, no pods, and `services`.
    pub(crate) fn example(services: Vec<Service>) -> Cluster {
        Cluster {
            second_family: None,
            pod_cidr: "10.244.0.0/16".parse().unwrap(),
            service_cidr: "10.96.0.0/12".parse().unwrap(),
            node_network: "192.168.50.0/24".parse().unwrap(),
            nodes: vec![],
            external_hosts: vec![],
            pods: vec![],
            services,
            proxy: Default::default(),
        }
        .with_nodes(&[
            ("node-a", "192.168.50.2", "10.244.0.0/24"),
            ("node-b", "192.168.50.3", "10.244.1.0/24"),
        ])
    }

    /// The cluster with `nodes` (name, IP, pod CIDR; no secondary IPs, one family) in place of
    /// its own.
    pub(crate) fn with_nodes(mut self, nodes: &[(&str, &str, &str)]) -> Cluster {
        self.nodes = nodes.iter().map(|&(name, ip, pod_cidr)| Node::example(name, ip, pod_cidr)).collect();
        self
    }
}

#[cfg(test)]
impl Node {
    /// A node of the unit tests: one address, no secondary IPs, one family.
    pub(crate) fn example(name: &str, ip: &str, pod_cidr: &str) -> Node {
        Node {
            zone: None,
            name: name.to_string(),
            ips: PerFamily::single(ip.parse().unwrap()),
            secondary_ips: vec![],
            pod_cidrs: PerFamily::single(pod_cidr.parse().unwrap()),
        }
    }
}

#[cfg(test)]
impl Probe {
    /// The unit tests' probe: one TCP attempt named `p`, no pacing, no stated expectation.
    pub(crate) fn example(from: Source, to: Target) -> Probe {
        Probe {
            name: "p".into(),
            from,
            to,
            protocol: Protocol::Tcp,
            count: 1,
            interval: None,
            family: None,
            source_port: None,
            expect: None,
            life: Life::OneShot,
            clients: None,
        }
    }
}

/// The other family's networks of a dual-stack cluster (the second entry of Kubernetes'
/// `--cluster-cidr`, `--service-cluster-ip-range` lists).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecondFamily {
    pub pod_cidr: IpNet,
    pub service_cidr: IpNet,
    pub node_network: IpNet,
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

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub name: String,
    /// The node's InternalIP of each family on the node network.
    pub ips: PerFamily<IpAddr>,
    /// Further addresses of the node on the node network (same prefix as the `ips` of their
    /// family), of either family.
    pub secondary_ips: Vec<IpAddr>,
    /// This node's share of the pod CIDR of each family (`spec.podCIDRs`); the first address
    /// is the node's bridge (gateway) address. Of the same families as `ips`.
    pub pod_cidrs: PerFamily<IpNet>,
    /// Its `topology.kubernetes.io/zone` label: the zone topology hints are matched against.
    pub zone: Option<String>,
}

impl Node {
    /// The node's InternalIP of the (primary) family: in a [`Cluster::family_view`], the
    /// view's.
    pub fn ip(&self) -> IpAddr {
        *self.ips.primary()
    }

    /// The node's pod CIDR of the (primary) family: in a [`Cluster::family_view`], the view's.
    pub fn pod_cidr(&self) -> IpNet {
        *self.pod_cidrs.primary()
    }

    /// Every address on the node's node-network interface: the primary family's InternalIP,
    /// then the secondary addresses (of either family).
    pub(crate) fn node_network_ips(&self) -> impl Iterator<Item = IpAddr> + '_ {
        std::iter::once(self.ip()).chain(self.secondary_ips.iter().copied())
    }

    /// Every address of the node of every family: its InternalIPs, primary first, then the
    /// secondary addresses.
    pub(crate) fn all_ips(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.ips.copied().chain(self.secondary_ips.iter().copied())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalHost {
    pub name: String,
    /// Its address of each family it has.
    pub ips: PerFamily<IpAddr>,
    /// Its routes through nodes, e.g. the service CIDR via a node, as a router that learned
    /// the cluster IPs over BGP has them.
    pub routes: Vec<HostRoute>,
}

/// A route of an external host: `to` through node `via`'s address of that family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRoute {
    pub to: IpNet,
    pub via: String,
}

impl ExternalHost {
    /// Its address of the (primary) family: in a [`Cluster::family_view`], the view's.
    pub fn ip(&self) -> IpAddr {
        *self.ips.primary()
    }

    /// The node this host's traffic to `ip` goes through, by the longest matching route.
    pub(crate) fn route_to(&self, ip: IpAddr) -> Option<&HostRoute> {
        self.routes.iter().filter(|r| r.to.contains(&ip)).max_by_key(|r| r.to.prefix_len())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    pub node: String,
    /// `status.podIPs`: its address of each family it has.
    pub ips: PerFamily<IpAddr>,
    pub labels: BTreeMap<String, String>,
    /// Ports the pod's containers declare; the harness serves each of them.
    pub ports: Vec<ContainerPort>,
}

impl Pod {
    /// Its address of the (primary) family: in a [`Cluster::family_view`], the view's.
    pub fn ip(&self) -> IpAddr {
        *self.ips.primary()
    }
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
    pub(crate) fn as_k8s(self) -> &'static str {
        match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => "SCTP",
        }
    }

    /// iptables / kube-proxy chain-hash spelling: `tcp`, `udp`, `sctp`.
    pub(crate) fn as_lower(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }

    pub(crate) fn parse_k8s(s: &str) -> Option<Protocol> {
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
    /// `spec.clusterIPs`: its cluster IP of each of its families (a single-stack Service's
    /// may be of either family of a dual-stack cluster).
    pub cluster_ips: PerFamily<IpAddr>,
    pub external_traffic_policy: TrafficPolicy,
    pub internal_traffic_policy: TrafficPolicy,
    pub ports: Vec<ServicePort>,
    /// `spec.externalIPs`.
    pub external_ips: Vec<IpAddr>,
    /// `status.loadBalancer.ingress[].ip` (type LoadBalancer only) whose `ipMode` is VIP: the
    /// nodes intercept traffic to them.
    pub load_balancer_ips: Vec<IpAddr>,
    /// Ingress IPs with `ipMode: Proxy`: the load balancer proxies, so kube-proxy leaves them
    /// alone and traffic to them goes out to the balancer (pkg/proxy/serviceport.go).
    pub proxied_load_balancer_ips: Vec<IpAddr>,
    /// `spec.loadBalancerSourceRanges`, whitespace trimmed; empty allows every source.
    pub load_balancer_source_ranges: Vec<IpNet>,
    /// `spec.healthCheckNodePort` (type LoadBalancer with externalTrafficPolicy Local).
    pub health_check_node_port: Option<u16>,
    pub session_affinity: SessionAffinity,
    /// kube-proxy's hints annotation: `service.kubernetes.io/topology-aware-hints`, or when
    /// that is absent `service.kubernetes.io/topology-mode` (pkg/proxy/serviceport.go).
    pub hints_annotation: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionAffinity {
    None,
    /// `sessionAffinity: ClientIP` with `sessionAffinityConfig.clientIP.timeoutSeconds`
    /// (Kubernetes' default 10800).
    ClientIp {
        timeout_seconds: u32,
    },
}

impl Service {
    /// The Service as the proxier of `family` sees it: its cluster IP of that family, and only
    /// that family's endpoints, external and load-balancer IPs and source ranges; `None` when
    /// it has no cluster IP of `family` (kube-proxy skips it, pkg/proxy/servicechangetracker.go
    /// `serviceToServiceMap`).
    pub(crate) fn family_view(&self, family: IpFamily) -> Option<Service> {
        let of = |ip: &IpAddr| IpFamily::of(*ip) == family;
        let cluster_ips = self.cluster_ips.only(family)?;
        let ports = self
            .ports
            .iter()
            .map(|p| ServicePort {
                endpoints: p.endpoints.iter().filter(|e| of(&e.ip)).cloned().collect(),
                ..p.clone()
            })
            .collect();
        Some(Service {
            cluster_ips,
            ports,
            external_ips: self.external_ips.iter().copied().filter(of).collect(),
            load_balancer_ips: self.load_balancer_ips.iter().copied().filter(of).collect(),
            proxied_load_balancer_ips: self.proxied_load_balancer_ips.iter().copied().filter(of).collect(),
            load_balancer_source_ranges: self
                .load_balancer_source_ranges
                .iter()
                .copied()
                .filter(|r| IpFamily::of_net(r) == family)
                .collect(),
            ..self.clone()
        })
    }

    /// A ClusterIP Service with no ports and Kubernetes' defaults for everything else
    /// (policies Cluster, no external or load-balancer IPs, no affinity, single-stack).
    pub fn new(namespace: &str, name: &str, cluster_ip: IpAddr) -> Service {
        Service {
            namespace: namespace.into(),
            name: name.into(),
            service_type: ServiceType::ClusterIp,
            cluster_ips: PerFamily::single(cluster_ip),
            external_traffic_policy: TrafficPolicy::Cluster,
            internal_traffic_policy: TrafficPolicy::Cluster,
            ports: Vec::new(),
            external_ips: Vec::new(),
            load_balancer_ips: Vec::new(),
            proxied_load_balancer_ips: Vec::new(),
            load_balancer_source_ranges: Vec::new(),
            health_check_node_port: None,
            session_affinity: SessionAffinity::None,
            hints_annotation: None,
        }
    }

    /// `spec.clusterIP`: its cluster IP of the (primary) family; in a [`Cluster::family_view`],
    /// the view's.
    pub fn cluster_ip(&self) -> IpAddr {
        *self.cluster_ips.primary()
    }

    /// `namespace/name`, as kube-proxy prints it in rule comments.
    pub(crate) fn namespaced_name(&self) -> String {
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
    /// `hints.forZones[].name`: the zones whose nodes may route to it when topology-aware
    /// routing is in use (empty: no hint).
    pub zone_hints: Vec<String>,
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
    /// The address family to probe over; `None` is the cluster's primary family (or the
    /// family of an address the target names).
    pub family: Option<IpFamily>,
    /// Every attempt from this one source port; `None` is a new port per attempt.
    pub source_port: Option<u16>,
    pub expect: Option<StatedExpectation>,
    /// Whether the probe's connection ends with its answer, or lives on into later phases.
    pub life: Life,
    /// The probe sent from several clients at once (`from: {pods: [...]}`) this one is the
    /// part of from one client; `None` for a probe of one client.
    pub clients: Option<Clients>,
}

/// A probe sent from several pods at once: one [`Probe`] per pod, all sent together, each
/// judged on its own flows, and judged together on whether ClientIP affinity expired: affinity
/// is per client address, so clients in parallel wait out one timeout where one client would
/// wait out one per attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Clients {
    /// The probe's name in the file; each part is named `NAME[POD]`.
    pub probe: String,
    /// How many clients (parts) the probe has.
    pub count: u32,
}

/// How long a probe's connection lives (`hold:` and `held:` in a scenario).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Life {
    /// Each attempt connects, reads the answer and closes.
    OneShot,
    /// One TCP connection, opened and judged like a one-shot attempt, then kept open for the
    /// later phases that check it.
    Hold,
    /// A check of the connection probe `opener` (an earlier phase's `Hold`) keeps: a line
    /// sent on it must still be answered by the same backend. With `out_of_window`, a
    /// hand-made segment far outside the TCP window, from the backend toward the client, is
    /// sent on the connection's path first (kubernetes/kubernetes#74839).
    Held { opener: String, out_of_window: bool },
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    Pod(String),
    /// A process in the node's own (host) network namespace.
    Node(String),
    External(String),
}

impl Source {
    /// The pod's, node's or external host's name.
    pub fn name(&self) -> &str {
        match self {
            Source::Pod(n) | Source::Node(n) | Source::External(n) => n,
        }
    }
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
    /// 127.0.0.1:`port` of `node`, sent by an external host on the node network as a
    /// hand-made frame to the node's MAC address (its own kernel never sends 127.0.0.1 out of
    /// an interface): the martian traffic that `route_localnet` would let in.
    Localhost { node: String, port: u16 },
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
    /// The profile whose choice this is, where Kubernetes leaves the outcome open; `None`
    /// states what Kubernetes requires of every proxy.
    pub profile: Option<Profile>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatedVerdict {
    Answered,
    /// Rejected by a rule, or refused by the addressed host's own stack.
    Rejected,
    Dropped,
    /// Forwarded un-translated, unanswered.
    Forwarded,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatedSource {
    /// The backend sees the client's own address.
    Client,
    /// The backend sees an address of a node (SNAT/masquerade).
    Masqueraded,
}

impl Cluster {
    /// The cluster's (primary) address family: every address of a single-stack cluster, and of
    /// a [`Cluster::family_view`], is of it.
    pub(crate) fn ip_family(&self) -> IpFamily {
        IpFamily::of_net(&self.service_cidr)
    }

    /// The cluster's families, primary first.
    pub fn families(&self) -> Vec<IpFamily> {
        let second = self.second_family.as_ref().map(|s| IpFamily::of_net(&s.service_cidr));
        std::iter::once(self.ip_family()).chain(second).collect()
    }

    /// The single-family cluster of `family`: what a proxier of that family sees (kube-proxy
    /// runs one per family). Everything of the other family is left out: each element's
    /// [`PerFamily`] values keep only that family's ([`PerFamily::only`]), and nodes, pods,
    /// hosts and Services without an address of it are dropped. A family the cluster lacks
    /// gives the cluster unchanged.
    pub(crate) fn family_view(&self, family: IpFamily) -> Cluster {
        let of = |ip: &IpAddr| IpFamily::of(*ip) == family;
        let (pod_cidr, service_cidr, node_network) = match &self.second_family {
            Some(s) if family != self.ip_family() => (s.pod_cidr, s.service_cidr, s.node_network),
            _ if family != self.ip_family() => return self.clone(),
            _ => (self.pod_cidr, self.service_cidr, self.node_network),
        };
        let nodes = self
            .nodes
            .iter()
            .filter_map(|n| {
                Some(Node {
                    name: n.name.clone(),
                    ips: n.ips.only(family)?,
                    secondary_ips: n.secondary_ips.iter().copied().filter(of).collect(),
                    pod_cidrs: n.pod_cidrs.only(family)?,
                    zone: n.zone.clone(),
                })
            })
            .collect();
        let external_hosts = self
            .external_hosts
            .iter()
            .filter_map(|h| {
                let routes = h.routes.iter().filter(|r| IpFamily::of_net(&r.to) == family).cloned().collect();
                Some(ExternalHost { name: h.name.clone(), ips: h.ips.only(family)?, routes })
            })
            .collect();
        let pods =
            self.pods.iter().filter_map(|p| Some(Pod { ips: p.ips.only(family)?, ..p.clone() })).collect();
        let services = self.services.iter().filter_map(|s| s.family_view(family)).collect();
        let proxy = ProxyConfig {
            node_port_addresses: self
                .proxy
                .node_port_addresses
                .iter()
                .copied()
                .filter(|r| IpFamily::of_net(r) == family)
                .collect(),
            ..self.proxy.clone()
        };
        Cluster {
            pod_cidr,
            service_cidr,
            node_network,
            nodes,
            external_hosts,
            pods,
            services,
            proxy,
            second_family: None,
        }
    }

    /// The family a probe travels over: as it says, else the family of an address its target
    /// names, else the primary.
    pub(crate) fn probe_family(&self, probe: &Probe) -> IpFamily {
        let named = match &probe.to {
            Target::Address(addr) => Some(addr.ip()),
            Target::ExternalIp { ip, .. } | Target::LoadBalancer { ip, .. } => Some(*ip),
            Target::NodePort { address, .. } => *address,
            _ => None,
        };
        probe.family.or(named.map(IpFamily::of)).unwrap_or_else(|| self.ip_family())
    }

    /// The single-family view a probe is judged and sent in (see [`Cluster::family_view`]).
    pub(crate) fn probe_view(&self, probe: &Probe) -> Cluster {
        self.family_view(self.probe_family(probe))
    }

    pub fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.name == name)
    }

    pub fn pod(&self, name: &str) -> Option<&Pod> {
        self.pods.iter().find(|p| p.name == name)
    }

    pub(crate) fn external_host(&self, name: &str) -> Option<&ExternalHost> {
        self.external_hosts.iter().find(|h| h.name == name)
    }

    pub fn service(&self, name: &str) -> Option<&Service> {
        self.services.iter().find(|s| s.name == name)
    }

    pub(crate) fn pod_by_ip(&self, ip: IpAddr) -> Option<&Pod> {
        self.pods.iter().find(|p| p.ip() == ip)
    }

    /// The address a probe source sends from to `dst`: as [`Cluster::source_ip`], except that a
    /// node sending to one of its own addresses (a VIP bound on it, as kube-vip or keepalived
    /// do) sends from that address, as the kernel's source selection does for a local route.
    pub(crate) fn source_ip_to(&self, source: &Source, dst: IpAddr) -> Option<IpAddr> {
        match source {
            Source::Node(n) if self.node(n)?.all_ips().any(|ip| ip == dst) => Some(dst),
            other => self.source_ip(other),
        }
    }

    /// The address a probe source sends from.
    pub(crate) fn source_ip(&self, source: &Source) -> Option<IpAddr> {
        match source {
            Source::Pod(n) => self.pod(n).map(Pod::ip),
            Source::Node(n) => self.node(n).map(Node::ip),
            Source::External(n) => self.external_host(n).map(ExternalHost::ip),
        }
    }

    /// The node a source lives on (external hosts live on none).
    pub(crate) fn source_node(&self, source: &Source) -> Option<&Node> {
        match source {
            Source::Pod(n) => self.pod(n).and_then(|p| self.node(&p.node)),
            Source::Node(n) => self.node(n),
            Source::External(_) => None,
        }
    }

    /// The node an external host's traffic to `ip` enters the cluster through, when one of
    /// its routes sends it there.
    pub(crate) fn routed_through(&self, source: &Source, ip: IpAddr) -> Option<&Node> {
        match source {
            Source::External(h) => self.node(&self.external_host(h)?.route_to(ip)?.via),
            _ => None,
        }
    }

    /// The service port a `ClusterIp`/`NodePort` target names: by port name, or by number
    /// when the name is numeric, or the only port when `port` is empty.
    pub(crate) fn service_port<'a>(
        &'a self,
        service: &str,
        port: &str,
    ) -> Option<(&'a Service, &'a ServicePort)> {
        let svc = self.service(service)?;
        let found = if port.is_empty() && svc.ports.len() == 1 {
            svc.ports.first()
        } else {
            svc.ports.iter().find(|p| p.name == port || port.parse::<u16>().ok() == Some(p.port))
        };
        found.map(|p| (svc, p))
    }

    /// The node an external host's traffic to `target` is routed through, if it names one.
    pub(crate) fn entry_node(&self, target: &Target) -> Option<&Node> {
        match target {
            Target::ExternalIp { via: Some(n), .. } | Target::LoadBalancer { via: Some(n), .. } => {
                self.node(n)
            }
            _ => None,
        }
    }

    /// The concrete address:port a target sends to.
    pub(crate) fn target_address(&self, target: &Target) -> Option<SocketAddr> {
        match target {
            Target::ClusterIp { service, port } => {
                let (svc, sp) = self.service_port(service, port)?;
                Some(SocketAddr::new(svc.cluster_ip(), sp.port))
            }
            Target::NodePort { service, port, node, address } => {
                let (_, sp) = self.service_port(service, port)?;
                Some(SocketAddr::new(address.unwrap_or(self.node(node)?.ip()), sp.node_port?))
            }
            Target::ExternalIp { service, port, ip, .. } | Target::LoadBalancer { service, port, ip, .. } => {
                let (_, sp) = self.service_port(service, port)?;
                Some(SocketAddr::new(*ip, sp.port))
            }
            Target::HealthCheck { service, node } => {
                let svc = self.service(service)?;
                Some(SocketAddr::new(self.node(node)?.ip(), svc.health_check_node_port?))
            }
            Target::Address(addr) => Some(*addr),
            Target::Localhost { port, .. } => Some(SocketAddr::new(Ipv4Addr::LOCALHOST.into(), *port)),
        }
    }
}

/// The gateway address of a node's pod bridge: the first host address of its pod CIDR
/// (`.1`, or `::1` of an IPv6 prefix, whose network address is the subnet-router anycast
/// address and no host's).
pub(crate) fn bridge_address(pod_cidr: &IpNet) -> IpAddr {
    match pod_cidr {
        IpNet::V4(net) => IpAddr::V4(net.hosts().next().unwrap_or(net.addr())),
        IpNet::V6(net) if net.prefix_len() < 127 => IpAddr::V6(Ipv6Addr::from(u128::from(net.network()) + 1)),
        IpNet::V6(net) => IpAddr::V6(net.addr()),
    }
}

/// An address family. A cluster has one (single-stack) or two (dual-stack).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IpFamily {
    V4,
    V6,
}

impl IpFamily {
    pub fn of(ip: IpAddr) -> IpFamily {
        if ip.is_ipv4() { IpFamily::V4 } else { IpFamily::V6 }
    }

    pub(crate) fn of_net(net: &IpNet) -> IpFamily {
        IpFamily::of(net.addr())
    }

    /// Kubernetes spelling (`ipFamilies`, EndpointSlice `addressType`): `IPv4`, `IPv6`.
    pub(crate) fn as_k8s(self) -> &'static str {
        match self {
            IpFamily::V4 => "IPv4",
            IpFamily::V6 => "IPv6",
        }
    }

    pub(crate) fn parse_k8s(s: &str) -> Option<IpFamily> {
        match s {
            "IPv4" => Some(IpFamily::V4),
            "IPv6" => Some(IpFamily::V6),
            _ => None,
        }
    }

    /// `0.0.0.0` or `::`.
    pub(crate) fn unspecified(self) -> IpAddr {
        match self {
            IpFamily::V4 => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            IpFamily::V6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        }
    }

    /// The prefix length of one host: 32 or 128.
    pub(crate) fn host_prefix(self) -> u8 {
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

    fn dual() -> Cluster {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let net = |s: &str| s.parse::<IpNet>().unwrap();
        let endpoint = |a: &str| Endpoint {
            ip: ip(a),
            port: 8080,
            ready: true,
            serving: true,
            terminating: false,
            node: Some("node-a".into()),
            pod: "web".into(),
            zone_hints: vec![],
        };
        let service = |name: &str, first: &str, second: Option<&str>| Service {
            cluster_ips: PerFamily::dual(ip(first), second.map(ip)),
            ports: vec![ServicePort {
                name: "http".into(),
                protocol: Protocol::Tcp,
                port: 80,
                node_port: None,
                endpoints: vec![endpoint("10.244.1.10"), endpoint("fd00:10:244:1::10")],
            }],
            external_ips: vec![ip("203.0.113.1"), ip("fd00:203::1")],
            load_balancer_source_ranges: vec![net("198.51.100.0/24"), net("fd00:198::/64")],
            ..Service::new("default", name, ip(first))
        };
        let pod = |name: &str, first: &str, second: Option<&str>| Pod {
            namespace: "default".into(),
            name: name.into(),
            node: "node-a".into(),
            ips: PerFamily::dual(ip(first), second.map(ip)),
            labels: BTreeMap::new(),
            ports: vec![],
        };
        Cluster {
            pod_cidr: net("10.244.0.0/16"),
            service_cidr: net("10.96.0.0/12"),
            node_network: net("192.168.50.0/24"),
            nodes: vec![Node {
                name: "node-a".into(),
                ips: PerFamily::dual(ip("192.168.50.11"), Some(ip("fd00:192:168:50::11"))),
                secondary_ips: vec![ip("192.168.50.21"), ip("fd00:192:168:50::21")],
                pod_cidrs: PerFamily::dual(net("10.244.1.0/24"), Some(net("fd00:10:244:1::/64"))),
                zone: None,
            }],
            external_hosts: vec![ExternalHost {
                name: "outside".into(),
                ips: PerFamily::dual(ip("192.168.50.100"), Some(ip("fd00:192:168:50::100"))),
                routes: vec![],
            }],
            pods: vec![
                pod("web", "10.244.1.10", Some("fd00:10:244:1::10")),
                pod("v4-only", "10.244.1.11", None),
            ],
            services: vec![
                service("web", "10.96.0.80", Some("fd00:10:96::80")),
                service("web6", "fd00:10:96::81", None),
            ],
            proxy: ProxyConfig {
                node_port_addresses: vec![net("192.168.50.0/24"), net("fd00:192:168:50::/64")],
                ..ProxyConfig::default()
            },
            second_family: Some(SecondFamily {
                pod_cidr: net("fd00:10:244::/56"),
                service_cidr: net("fd00:10:96::/112"),
                node_network: net("fd00:192:168:50::/64"),
            }),
        }
    }

    fn shown<T: fmt::Display>(items: impl IntoIterator<Item = T>) -> Vec<String> {
        items.into_iter().map(|i| i.to_string()).collect()
    }

    #[test]
    fn the_primary_view_leaves_the_other_family_out() {
        let c = dual();
        assert_eq!(c.families(), [IpFamily::V4, IpFamily::V6]);
        let v4 = c.family_view(IpFamily::V4);
        assert!(v4.second_family.is_none());
        assert_eq!(v4.service_cidr.to_string(), "10.96.0.0/12");
        assert_eq!(shown(&v4.nodes[0].secondary_ips), ["192.168.50.21"]);
        assert!(v4.nodes[0].ips.second().is_none() && v4.nodes[0].pod_cidrs.second().is_none());
        assert_eq!(shown(v4.pods.iter().map(Pod::ip)), ["10.244.1.10", "10.244.1.11"]);
        // The IPv6-only Service has no place in the IPv4 proxier.
        assert_eq!(shown(v4.services.iter().map(|s| &s.name)), ["web"]);
        let web = &v4.services[0];
        assert_eq!(web.cluster_ips, PerFamily::single("10.96.0.80".parse().unwrap()));
        assert_eq!(shown(web.ports[0].endpoints.iter().map(|e| e.ip)), ["10.244.1.10"]);
        assert_eq!(shown(&web.external_ips), ["203.0.113.1"]);
        assert_eq!(shown(&web.load_balancer_source_ranges), ["198.51.100.0/24"]);
        assert_eq!(shown(&v4.proxy.node_port_addresses), ["192.168.50.0/24"]);
    }

    #[test]
    fn the_second_view_swaps_the_second_family_in() {
        let c = dual();
        let v6 = c.family_view(IpFamily::V6);
        assert_eq!(v6.ip_family(), IpFamily::V6);
        assert_eq!(
            (v6.pod_cidr.to_string(), v6.node_network.to_string()),
            ("fd00:10:244::/56".into(), "fd00:192:168:50::/64".into())
        );
        let node = &v6.nodes[0];
        assert_eq!(
            (node.ip().to_string(), node.pod_cidr().to_string()),
            ("fd00:192:168:50::11".into(), "fd00:10:244:1::/64".into())
        );
        assert_eq!(shown(&node.secondary_ips), ["fd00:192:168:50::21"]);
        assert_eq!(v6.external_hosts[0].ip().to_string(), "fd00:192:168:50::100");
        // A pod without an IPv6 address is not in the IPv6 view.
        assert_eq!(shown(v6.pods.iter().map(Pod::ip)), ["fd00:10:244:1::10"]);
        let ips = shown(v6.services.iter().map(Service::cluster_ip));
        assert_eq!(ips, ["fd00:10:96::80", "fd00:10:96::81"]);
        assert_eq!(shown(v6.services[0].ports[0].endpoints.iter().map(|e| e.ip)), ["fd00:10:244:1::10"]);
        assert_eq!(shown(&v6.services[0].external_ips), ["fd00:203::1"]);
    }

    #[test]
    fn a_probe_travels_over_its_family_or_its_addresses_or_the_primary() {
        let c = dual();
        let mut probe = Probe::example(
            Source::Pod("web".into()),
            Target::ClusterIp { service: "web".into(), port: "http".into() },
        );
        assert_eq!(c.probe_family(&probe), IpFamily::V4);
        assert_eq!(c.probe_view(&probe).target_address(&probe.to).unwrap().to_string(), "10.96.0.80:80");
        probe.family = Some(IpFamily::V6);
        assert_eq!(
            c.probe_view(&probe).target_address(&probe.to).unwrap().to_string(),
            "[fd00:10:96::80]:80"
        );
        probe.family = None;
        probe.to = Target::Address("[fd00:10:96::81]:80".parse().unwrap());
        assert_eq!(c.probe_family(&probe), IpFamily::V6);
        // A single-stack cluster is its own only view.
        let single = Cluster { second_family: None, ..c.family_view(IpFamily::V4) };
        assert_eq!(single.families(), [IpFamily::V4]);
        assert_eq!(single.family_view(IpFamily::V6).services.len(), 1);
    }
}
