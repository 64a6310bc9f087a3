//! A generated case as data: the cluster, its Services and endpoints, the proxy's settings and
//! the steps, every object named (references are names, so removing one while shrinking leaves
//! the others valid or plainly dangling). [`Case::render`] writes it as a scenario file, which
//! the normal reader then checks and builds: what runs is exactly what the file says.

pub mod net;
mod render;

pub use render::q;

/// The address families of the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    V4,
    V6,
    /// IPv4 primary, IPv6 second.
    Dual,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Case {
    pub name: String,
    pub family: Family,
    pub nodes: Vec<NodeSpec>,
    pub proxy: ProxySpec,
    /// Every node also has a second address on the node network, in the primary family (a VIP,
    /// a second NIC), probed as a node port and a health check; with `nodePortAddresses`, that
    /// setting lists the primary addresses alone.
    pub secondary_ips: bool,
    /// The external host also sends a frame for 127.0.0.1 to the first node (CVE-2020-8558:
    /// route_localnet must open no door from outside).
    pub martian: bool,
    /// The external host, if any, and the node its router sends the service CIDR to.
    pub external: Option<ExternalSpec>,
    pub pods: Vec<PodSpec>,
    pub services: Vec<ServiceSpec>,
    /// Attempts per flow.
    pub count: u32,
    /// The probes: `None` is every flow (`spec.flows: {all: true}`); a shrunk case lists the
    /// failing ones.
    pub probes: Option<Vec<ProbeText>>,
    /// Flows that outlive the steps: UDP streams and held TCP connections, each probed in
    /// every phase while its Service port lasts.
    pub streams: Vec<StreamSpec>,
    /// Probes of the first state that wait out a short ClientIP affinity timeout.
    pub expiries: Vec<ExpirySpec>,
    pub steps: Vec<StepSpec>,
}

/// Attempts from several client pods at once, spaced past a Service's short affinity timeout:
/// each client's next attempt finds its affinity expired and chooses afresh.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpirySpec {
    pub name: String,
    pub clients: Vec<String>,
    pub service: String,
    pub port: String,
    pub udp: bool,
    /// Attempts per client: enough that a proxy whose affinity never expires fails the check
    /// over two backends, the fewest a check needs (`oracle::paths`).
    pub count: u32,
}

/// The affinity timeout an expiry probe waits out, and the pause between its attempts (the
/// oracle asks for at least half a second more than the timeout).
pub const SHORT_AFFINITY_SECONDS: u32 = 1;
pub const EXPIRY_INTERVAL_MS: u32 = 1600;

/// Where a kept flow is sent in one phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamTarget {
    /// Its Service port, by name.
    Service,
    /// The address its Service had, deleted by the step before this phase.
    Deleted(std::net::SocketAddr),
}

/// A flow kept across phases, from a client pod to a Service port's cluster IP: a UDP stream
/// (every attempt from one fixed source port, in every phase), or a TCP connection held open in
/// the first phase and checked after each step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSpec {
    pub name: String,
    pub client: String,
    pub service: String,
    pub port: String,
    /// The UDP stream's source port; `None` for a held TCP connection.
    pub source_port: Option<u16>,
    /// A held connection's checks first send an out-of-window segment on its path.
    pub out_of_window: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSpec {
    pub name: String,
    /// Its position among the nodes as generated: it picks its addresses.
    pub slot: u8,
    pub zone: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxySpec {
    pub masquerade_all: bool,
    pub detect_local: DetectMode,
    /// `nodePortAddresses`: only the node network (`true`), or every address.
    pub node_port_addresses: bool,
    pub localhost_node_ports_off: bool,
    pub traffic_distribution_gate: bool,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum DetectMode {
    #[default]
    ClusterCidr,
    NodeCidr,
    BridgeInterface,
    InterfaceNamePrefix,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalSpec {
    /// A route for the service CIDR through this node (a cluster that advertises it).
    pub routed_via: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodSpec {
    pub name: String,
    pub node: String,
    /// Its host part in its node's pod CIDR.
    pub host: u8,
    /// The Service whose selector picks it (`app: <service>`), if any.
    pub app: Option<String>,
    /// `status.conditions[Ready]`.
    pub ready: bool,
    /// `metadata.deletionTimestamp` set.
    pub terminating: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ServiceType {
    ClusterIp,
    NodePort,
    LoadBalancer,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Topology {
    None,
    /// `service.kubernetes.io/topology-mode: Auto` (hints in written slices).
    Annotation,
    /// `trafficDistribution: PreferClose`.
    PreferClose,
}

/// Which families a Service of a dual-stack cluster has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ServiceFamilies {
    Primary,
    Second,
    Both,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceSpec {
    pub name: String,
    /// Its position as generated: it picks its cluster IP, ports and node ports.
    pub slot: u8,
    pub kind: ServiceType,
    pub families: ServiceFamilies,
    pub ports: Vec<PortSpec>,
    pub etp_local: bool,
    pub itp_local: bool,
    /// ClientIP affinity and its timeout in seconds (`None`: the default, 10800).
    pub affinity: Option<Option<u32>>,
    /// Host parts of external IPs.
    pub external_ips: Vec<u8>,
    /// A node whose own address is also one of the Service's external IPs.
    pub external_ip_on_node: Option<String>,
    /// Its first port's number is the node port of the Service in this slot: on a node address
    /// that is also its external IP, the Service IP must win (node ports come last).
    pub port_on_node_port_of: Option<u8>,
    /// Load-balancer ingress IPs: host part, and whether `ipMode: Proxy`.
    pub lb_ingress: Vec<(u8, bool)>,
    /// Every node's second address is also a load-balancer IP, after the ingress IPs above (VIPs
    /// a node holds itself, as kube-vip or keepalived put them): the node then sends to its VIP
    /// from the VIP. Only where the nodes have second addresses of the Service's family.
    pub lb_ips_on_nodes: bool,
    pub source_ranges: Vec<SourceRange>,
    pub allocate_node_ports: bool,
    pub topology: Topology,
    pub publish_not_ready: bool,
    /// Endpoints: `None` derives them from the pods the selector picks; `Some` writes an
    /// EndpointSlice with these.
    pub slice: Option<Vec<EndpointSpec>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SourceRange {
    /// The external host's address alone.
    ExternalHost,
    /// The whole node network.
    NodeNetwork,
    /// A range holding none of the cluster's addresses.
    Elsewhere,
    /// Each node's primary address alone: not its second address, nor the external host.
    NodeAddresses,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortSpec {
    pub name: String,
    pub udp: bool,
    /// `targetPort` by the container port's name rather than its number.
    pub named_target: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointSpec {
    pub target: EndpointTarget,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
    /// `hints.forZones`.
    pub hint: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndpointTarget {
    Pod(String),
    /// A host-network endpoint: the node's address, with or without `nodeName`.
    Node {
        node: String,
        node_name: bool,
    },
}

/// An explicit probe, as a shrunk case lists it: the YAML of its `from` and `to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeText {
    pub name: String,
    /// What the flow was called (`flow: pod a -> web:http clusterIP`), for the comment.
    pub flow: String,
    pub from: String,
    pub to: String,
    pub udp: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepSpec {
    pub name: String,
    pub change: Change,
    /// The proxy also restarts (a change made while it was down).
    pub restart: bool,
    /// The probes after it (filled in once the state before it is known: see `steps`).
    pub probes: Vec<ProbeText>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    RestartProxy,
    /// The Service of the same name replaced by this one.
    ReplaceService(ServiceSpec),
    DeleteService(String),
}

impl Change {
    /// The Service a change is about, if one.
    pub fn service(&self) -> Option<&str> {
        match self {
            Change::RestartProxy => None,
            Change::ReplaceService(s) => Some(&s.name),
            Change::DeleteService(name) => Some(name),
        }
    }
}

/// A Service port's number, target port and node port, from the Service's slot and the port's
/// index: distinct across the case, so that host-network endpoints of two Services never share
/// a port.
pub fn port_numbers(service_slot: u8, index: usize) -> (u16, u16, u16) {
    let s = service_slot as u16;
    let i = index as u16;
    (80 + 1000 * i + s, 8000 + 10 * s + i, 30000 + 10 * s + i)
}

pub fn health_check_port(service_slot: u8) -> u16 {
    32000 + service_slot as u16
}

impl ServiceSpec {
    /// The number of its port `index`: its own, or another Service's node port (a clash).
    pub fn port_number(&self, index: usize) -> u16 {
        match self.port_on_node_port_of {
            Some(slot) if index == 0 => port_numbers(slot, 0).2,
            _ => port_numbers(self.slot, index).0,
        }
    }

    /// Whether it has node ports.
    pub fn has_node_ports(&self) -> bool {
        self.kind == ServiceType::NodePort
            || (self.kind == ServiceType::LoadBalancer && self.allocate_node_ports)
    }
}

impl Case {
    pub fn node(&self, name: &str) -> Option<&NodeSpec> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// The streams probed in phase `k` (0 is the first state) and where each is sent: those
    /// whose client and Service port have lasted through every phase up to `k`, and a UDP
    /// stream whose Service step `k` deleted (the proxy running), sent once more to the
    /// Service's old cluster IP (the proxy must clear its entries: the old backend may no
    /// longer answer it) and then ended.
    pub fn streams_in(&self, k: usize) -> Vec<(&StreamSpec, StreamTarget)> {
        let states: Vec<Case> = (0..=k).map(|i| self.state_after(i)).collect();
        let lasts = |state: &Case, st: &StreamSpec| {
            state.services.iter().any(|s| {
                s.name == st.service
                    && s.ports.iter().any(|p| p.name == st.port && p.udp == st.source_port.is_some())
            })
        };
        self.streams
            .iter()
            .filter(|st| self.pods.iter().any(|p| p.name == st.client))
            .filter_map(|st| {
                if states.iter().all(|state| lasts(state, st)) {
                    return Some((st, StreamTarget::Service));
                }
                // Deleted by this phase's own step, after lasting through every earlier phase.
                // Not while the proxy was down: a restarted proxy never knew the Service, and
                // kube-proxy's reconciler clears entries of the Services it has only
                // (pkg/proxy/conntrack/cleanup.go), so whether the stream stays is left open.
                let step = k.checked_sub(1).map(|i| &self.steps[i]);
                let deleted_now = step.is_some_and(|step| {
                    !step.restart && step.change == Change::DeleteService(st.service.clone())
                }) && st.source_port.is_some()
                    && states[..k].iter().all(|state| lasts(state, st));
                if !deleted_now {
                    return None;
                }
                let gone = states[k - 1].services.iter().find(|s| s.name == st.service)?;
                let index = gone.ports.iter().position(|p| p.name == st.port)?;
                let ip = self.primary_cluster_ip(gone)?;
                Some((st, StreamTarget::Deleted(std::net::SocketAddr::new(ip, gone.port_number(index)))))
            })
            .collect()
    }

    /// The node an endpoint is on: its pod's, or the node of a host-network endpoint.
    pub fn endpoint_node(&self, e: &EndpointSpec) -> Option<String> {
        match &e.target {
            EndpointTarget::Pod(pod) => self.pods.iter().find(|p| &p.name == pod).map(|p| p.node.clone()),
            EndpointTarget::Node { node, .. } => Some(node.clone()),
        }
    }

    /// The cluster IP a probe of `service` by name reaches: its primary family's.
    pub fn primary_cluster_ip(&self, service: &ServiceSpec) -> Option<std::net::IpAddr> {
        let v6 = *self.service_families(service).first()?;
        net::cluster_ip(v6, service.slot).parse().ok()
    }

    /// The case as it stands after its first `k` steps (no steps of its own, every flow probed).
    pub fn state_after(&self, k: usize) -> Case {
        let mut state = Case {
            steps: Vec::new(),
            probes: None,
            streams: Vec::new(),
            expiries: Vec::new(),
            ..self.clone()
        };
        for step in &self.steps[..k] {
            match &step.change {
                Change::RestartProxy => {}
                Change::ReplaceService(s) => {
                    if let Some(old) = state.services.iter_mut().find(|o| o.name == s.name) {
                        *old = s.clone();
                    }
                }
                Change::DeleteService(name) => state.services.retain(|s| &s.name != name),
            }
        }
        state
    }
}
