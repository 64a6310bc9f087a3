//! Services, their ports and the endpoints behind them, as the EndpointSlices say.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;

use super::{IpFamily, PerFamily};

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
    pub fn family_view(&self, family: IpFamily) -> Option<Service> {
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
    /// `hints.forZones[].name`: the zones whose nodes may route to it when topology-aware
    /// routing is in use (empty: no hint).
    pub zone_hints: Vec<String>,
}

#[cfg(any(test, feature = "test-support"))]
impl ServicePort {
    /// The unit tests' port: unnamed TCP 80, node port 30080, with `endpoints`.
    pub fn example(endpoints: Vec<Endpoint>) -> ServicePort {
        ServicePort {
            name: String::new(),
            protocol: Protocol::Tcp,
            port: 80,
            node_port: Some(30080),
            endpoints,
        }
    }
}

#[cfg(any(test, feature = "test-support"))]
impl Endpoint {
    /// The unit tests' endpoint: ready, of pod `pod-<ip>` on `node` (`None`: no `nodeName`,
    /// never local).
    pub fn example(ip: &str, port: u16, node: Option<&str>) -> Endpoint {
        Endpoint {
            ip: ip.parse().unwrap(),
            port,
            ready: true,
            serving: true,
            terminating: false,
            node: node.map(String::from),
            pod: format!("pod-{ip}"),
            zone_hints: Vec::new(),
        }
    }
}

impl Endpoint {
    /// `ip:port`, as kube-proxy writes it in chain hashes and DNAT targets.
    pub fn address(&self) -> SocketAddr {
        SocketAddr::new(self.ip, self.port)
    }
}
