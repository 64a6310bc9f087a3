//! The validated cluster a scenario describes: plain data, shared by every stage.
//!
//! `scenario` builds it from files (and guarantees every cross-reference in it resolves),
//! the `oracle` reads Kubernetes semantics out of it, `topology` builds namespaces from it and
//! `proxy` implementations program nodes from it. Nothing here knows about rules or packets.

use std::path::PathBuf;

/// Names of the links a node is made of, fixed so dumps and captures read the same everywhere:
/// the node's uplink to the node network, the bridge its pods hang off, the node network's
/// bridge, and a pod's own interface. Local-traffic detection by interface matches on them.
pub const NODE_UPLINK: &str = "eth0";
pub const POD_BRIDGE: &str = "cni0";
pub const NODE_NETWORK_BRIDGE: &str = "br0";
pub const POD_INTERFACE: &str = "eth0";

// One file per subject, all behind `model::…` as before.
mod cluster;
mod family;
mod nodes;
mod per_family;
mod probe;
mod profile;
mod proxy_config;
mod service;
pub use cluster::bridge_address;
pub use cluster::{Cluster, SecondFamily};
pub use family::IpFamily;
pub use nodes::{ContainerPort, ExternalHost, HostRoute, Node, Pod};
pub use per_family::{OfFamily, PerFamily};
pub use probe::{Clients, Life, Probe, Source, StatedExpectation, StatedSource, StatedVerdict, Target};
pub use profile::{Implementation, Profile, Release};
pub use proxy_config::{DetectLocal, ProxyConfig};
pub use service::{Endpoint, Protocol, Service, ServicePort, ServiceType, SessionAffinity, TrafficPolicy};

/// The folder a file sits in, which relative paths in it start from: `.` for a bare file
/// name (whose `parent()` is the empty path, which cannot be made absolute).
pub fn folder_of(file: &std::path::Path) -> &std::path::Path {
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
    pub fn phases(&self) -> Vec<Phase<'_>> {
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

/// The proxy of a scenario file that names none, and of commands not told one: the built-in
/// proxy of kube-proxy's default mode (`proxy::registry` declares it).
pub const DEFAULT_PROXY: &str = "builtin-iptables";

impl ProxyChoice {
    pub fn named(name: &str) -> ProxyChoice {
        ProxyChoice { name: name.to_string(), options: serde_json::Map::new() }
    }

    /// [`DEFAULT_PROXY`], without options.
    pub fn default_proxy() -> ProxyChoice {
        ProxyChoice::named(DEFAULT_PROXY)
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::fmt;
    use std::net::IpAddr;

    use ipnet::IpNet;

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
