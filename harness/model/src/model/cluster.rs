//! The cluster: its networks, nodes, external hosts, pods and Services, and what every
//! stage asks of it (lookups by name and address, one family's view of a dual-stack cluster).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use ipnet::IpNet;

use super::{ExternalHost, IpFamily, Node, Pod, Probe, ProxyConfig, Service, ServicePort, Source, Target};

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

#[cfg(any(test, feature = "test-support"))]
impl Cluster {
    /// The unit tests' cluster: two IPv4 nodes (node-a 192.168.50.2, node-b 192.168.50.3)
    /// with kind's default networks, no pods, and `services`.
    pub fn example(services: Vec<Service>) -> Cluster {
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
    pub fn with_nodes(mut self, nodes: &[(&str, &str, &str)]) -> Cluster {
        self.nodes = nodes.iter().map(|&(name, ip, pod_cidr)| Node::example(name, ip, pod_cidr)).collect();
        self
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

impl Cluster {
    /// The cluster's (primary) address family: every address of a single-stack cluster, and of
    /// a [`Cluster::family_view`], is of it.
    pub fn ip_family(&self) -> IpFamily {
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
    pub fn family_view(&self, family: IpFamily) -> Cluster {
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
    pub fn probe_family(&self, probe: &Probe) -> IpFamily {
        let named = match &probe.to {
            Target::Address(addr) => Some(addr.ip()),
            Target::ExternalIp { ip, .. } | Target::LoadBalancer { ip, .. } => Some(*ip),
            Target::NodePort { address, .. } => *address,
            _ => None,
        };
        probe.family.or(named.map(IpFamily::of)).unwrap_or_else(|| self.ip_family())
    }

    /// The single-family view a probe is judged and sent in (see [`Cluster::family_view`]).
    pub fn probe_view(&self, probe: &Probe) -> Cluster {
        self.family_view(self.probe_family(probe))
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
        self.pods.iter().find(|p| p.ip() == ip)
    }

    /// The address a probe source sends from to `dst`: as [`Cluster::source_ip`], except that a
    /// node sending to one of its own addresses (a VIP bound on it, as kube-vip or keepalived
    /// do) sends from that address, as the kernel's source selection does for a local route.
    pub fn source_ip_to(&self, source: &Source, dst: IpAddr) -> Option<IpAddr> {
        match source {
            Source::Node(n) if self.node(n)?.all_ips().any(|ip| ip == dst) => Some(dst),
            other => self.source_ip(other),
        }
    }

    /// The address a probe source sends from.
    pub fn source_ip(&self, source: &Source) -> Option<IpAddr> {
        match source {
            Source::Pod(n) => self.pod(n).map(Pod::ip),
            Source::Node(n) => self.node(n).map(Node::ip),
            Source::External(n) => self.external_host(n).map(ExternalHost::ip),
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

    /// The node an external host's traffic to `ip` enters the cluster through, when one of
    /// its routes sends it there.
    pub fn routed_through(&self, source: &Source, ip: IpAddr) -> Option<&Node> {
        match source {
            Source::External(h) => self.node(&self.external_host(h)?.route_to(ip)?.via),
            _ => None,
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
            Target::ExternalIp { via: Some(n), .. } | Target::LoadBalancer { via: Some(n), .. } => {
                self.node(n)
            }
            _ => None,
        }
    }

    /// The concrete address:port a target sends to.
    pub fn target_address(&self, target: &Target) -> Option<SocketAddr> {
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
pub fn bridge_address(pod_cidr: &IpNet) -> IpAddr {
    match pod_cidr {
        IpNet::V4(net) => IpAddr::V4(net.hosts().next().unwrap_or(net.addr())),
        IpNet::V6(net) if net.prefix_len() < 127 => IpAddr::V6(Ipv6Addr::from(u128::from(net.network()) + 1)),
        IpNet::V6(net) => IpAddr::V6(net.addr()),
    }
}
