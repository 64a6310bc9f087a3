//! What the reference proxy watches (its Node, Services, EndpointSlices) → the model the
//! built-in generators program from, read as kube-proxy reads them: Services without a
//! cluster IP are skipped, endpoints join service ports by port name and protocol, conditions
//! take Kubernetes' defaults. Objects the proxy cannot act on are skipped, not fatal: a
//! proxy must keep serving the rest.

use std::collections::BTreeMap;
use std::net::IpAddr;

use anyhow::{Context, Result, bail};
use ipnet::IpNet;
use k8s_openapi::api::core::v1::{Node as K8sNode, Service as K8sService};
use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::model::{
    Cluster, Endpoint, IpFamily, Node, PerFamily, Protocol, ProxyConfig, SecondFamily, Service, ServicePort,
    ServiceType, SessionAffinity, TrafficPolicy,
};

/// The EndpointSlice label naming its Service.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// `sessionAffinityConfig.clientIP.timeoutSeconds` when absent.
const DEFAULT_AFFINITY_SECONDS: u32 = 10_800;

/// What the proxy is configured with.
#[derive(Debug, Clone)]
pub struct Flags {
    /// `clusterCIDR`: one CIDR, or one per family (primary first).
    pub cluster_cidrs: Vec<IpNet>,
    /// `--service-cidr`, same form; may be empty.
    pub service_cidrs: Vec<IpNet>,
    pub proxy: ProxyConfig,
}

/// The primary IP family: that of the first cluster CIDR, or without one, of the Node's first
/// InternalIP (as kube-proxy takes its node IPs: cmd/kube-proxy/app/server.go `detectNodeIPs`).
pub fn primary_family(object: &K8sNode, cluster_cidr: Option<&IpNet>) -> Result<IpFamily> {
    if let Some(net) = cluster_cidr {
        return Ok(IpFamily::of_net(net));
    }
    object
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .into_iter()
        .flatten()
        .filter(|a| a.type_ == "InternalIP")
        .find_map(|a| a.address.parse::<IpAddr>().ok())
        .map(IpFamily::of)
        .context("a Node without an InternalIP (and no cluster CIDR to take the primary IP family from)")
}

/// The node as the model has it, from its Node object: the first InternalIP (and pod CIDR)
/// of the primary family (that of the first cluster CIDR), and of the other family if any.
pub fn node(object: &K8sNode, primary: IpFamily) -> Result<Node> {
    let name = object.metadata.name.clone().context("a Node without a name")?;
    let internal: Vec<IpAddr> = object
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .into_iter()
        .flatten()
        .filter(|a| a.type_ == "InternalIP")
        .filter_map(|a| a.address.parse().ok())
        .collect();
    let spec = object.spec.as_ref();
    let mut cidrs: Vec<IpNet> = spec
        .and_then(|s| s.pod_cidrs.clone())
        .unwrap_or_default()
        .iter()
        .filter_map(|c| c.parse().ok())
        .collect();
    if cidrs.is_empty()
        && let Some(c) = spec.and_then(|s| s.pod_cidr.as_deref()).and_then(|c| c.parse().ok())
    {
        cidrs.push(c);
    }
    let ip_of = |f: IpFamily| internal.iter().copied().find(|ip| IpFamily::of(*ip) == f);
    let cidr_of = |f: IpFamily| cidrs.iter().copied().find(|c| IpFamily::of_net(c) == f);
    let other = match primary {
        IpFamily::V4 => IpFamily::V6,
        IpFamily::V6 => IpFamily::V4,
    };
    let (Some(ip), Some(pod_cidr)) = (ip_of(primary), cidr_of(primary)) else {
        bail!("Node {name} has no {primary} InternalIP and podCIDR");
    };
    let (ips, pod_cidrs) = match (ip_of(other), cidr_of(other)) {
        (Some(ip2), Some(cidr2)) => (PerFamily::dual(ip, Some(ip2)), PerFamily::dual(pod_cidr, Some(cidr2))),
        _ => (PerFamily::single(ip), PerFamily::single(pod_cidr)),
    };
    // v1.LabelTopologyZone, which canUseTopology reads from the node's labels.
    let zone = object.metadata.labels.as_ref().and_then(|l| l.get(ZONE_LABEL)).cloned();
    Ok(Node { name, ips, secondary_ips: Vec::new(), pod_cidrs, zone })
}

/// The cluster as one node's proxy sees it: itself, and every Service with its endpoints,
/// in the order given.
pub fn cluster(
    node: Node,
    services: &[K8sService],
    slices: &[EndpointSlice],
    flags: &Flags,
) -> Result<Cluster> {
    // Without a cluster CIDR, the node's pod CIDRs stand for the families the proxy serves
    // (the detector reads `flags.proxy.cluster_cidrs`, never these).
    let pod_cidr = flags.cluster_cidrs.first().copied().unwrap_or(node.pod_cidr());
    let family = IpFamily::of_net(&pod_cidr);
    let whole = |f: IpFamily| IpNet::new(f.unspecified(), 0).expect("a /0 is valid");
    let service_cidr = flags.service_cidrs.first().copied().unwrap_or_else(|| whole(family));
    let host = |ip: IpAddr| IpNet::new(ip, IpFamily::of(ip).host_prefix()).expect("a host prefix is valid");
    let second_pod_cidr = if flags.cluster_cidrs.is_empty() {
        node.pod_cidrs.second().copied()
    } else {
        flags.cluster_cidrs.get(1).copied()
    };
    let second_family = match (second_pod_cidr.as_ref(), node.ips.second()) {
        (Some(&pod_cidr), Some(second)) => Some(SecondFamily {
            pod_cidr,
            service_cidr: flags
                .service_cidrs
                .get(1)
                .copied()
                .unwrap_or_else(|| whole(IpFamily::of_net(&pod_cidr))),
            node_network: host(*second),
        }),
        _ => None,
    };
    let mut model = Vec::new();
    for object in services {
        if let Some(mut service) = service(object) {
            attach_endpoints(&mut service, slices);
            model.push(service);
        }
    }
    Ok(Cluster {
        pod_cidr,
        service_cidr,
        // Only the node's own address matters to a proxy.
        node_network: host(node.ip()),
        nodes: vec![node],
        external_hosts: Vec::new(),
        pods: Vec::new(),
        services: model,
        proxy: flags.proxy.clone(),
        second_family,
    })
}

/// What the proxier of `family` programs: the cluster's view of that family, or `None` if the
/// cluster has no such family.
pub(crate) fn family_view(cluster: &Cluster, family: IpFamily) -> Option<Cluster> {
    cluster.families().contains(&family).then(|| cluster.family_view(family))
}

/// A Service the proxy implements; `None` for one it leaves alone (no cluster IP, headless,
/// ExternalName, or fields it cannot read).
pub fn service(object: &K8sService) -> Option<Service> {
    let spec = object.spec.as_ref()?;
    let service_type = match spec.type_.as_deref() {
        None | Some("ClusterIP") => ServiceType::ClusterIp,
        Some("NodePort") => ServiceType::NodePort,
        Some("LoadBalancer") => ServiceType::LoadBalancer,
        _ => return None,
    };
    let cluster_ip: IpAddr = spec.cluster_ip.as_deref()?.parse().ok()?;
    let second_cluster_ip: Option<IpAddr> =
        spec.cluster_ips.as_ref().and_then(|ips| ips.get(1)).and_then(|ip| ip.parse().ok());
    // Two of one family are refused by the API server's validation; kube-proxy would use the first.
    let second_cluster_ip = second_cluster_ip.filter(|ip| IpFamily::of(*ip) != IpFamily::of(cluster_ip));
    let policy = |p: Option<&str>| match p {
        Some("Local") => TrafficPolicy::Local,
        _ => TrafficPolicy::Cluster,
    };
    let external_traffic_policy = policy(spec.external_traffic_policy.as_deref());
    let mut ports = Vec::new();
    for p in spec.ports.iter().flatten() {
        ports.push(ServicePort {
            name: p.name.clone().unwrap_or_default(),
            protocol: Protocol::parse_k8s(p.protocol.as_deref().unwrap_or("TCP"))?,
            port: u16::try_from(p.port).ok()?,
            node_port: p.node_port.and_then(|n| u16::try_from(n).ok()).filter(|&n| n != 0),
            endpoints: Vec::new(),
        });
    }
    let load_balancer = service_type == ServiceType::LoadBalancer;
    let ingress: Vec<(IpAddr, bool)> = if load_balancer {
        object
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|lb| lb.ingress.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|i| {
                // A proxy-mode balancer is left alone (pkg/proxy/serviceport.go, util.IsVIPMode).
                let vip = matches!(i.ip_mode.as_deref(), None | Some("VIP"));
                Some((i.ip.as_deref()?.parse().ok()?, vip))
            })
            .collect()
    } else {
        Vec::new()
    };
    let of_mode = |vip: bool| ingress.iter().filter(|i| i.1 == vip).map(|i| i.0).collect::<Vec<_>>();
    let load_balancer_source_ranges = if load_balancer {
        spec.load_balancer_source_ranges.iter().flatten().filter_map(|r| r.trim().parse().ok()).collect()
    } else {
        Vec::new()
    };
    let health_check_node_port = (load_balancer && external_traffic_policy == TrafficPolicy::Local)
        .then(|| spec.health_check_node_port.and_then(|p| u16::try_from(p).ok()))
        .flatten();
    let session_affinity = match spec.session_affinity.as_deref() {
        Some("ClientIP") => SessionAffinity::ClientIp {
            timeout_seconds: spec
                .session_affinity_config
                .as_ref()
                .and_then(|c| c.client_ip.as_ref())
                .and_then(|c| c.timeout_seconds)
                .and_then(|s| u32::try_from(s).ok())
                .unwrap_or(DEFAULT_AFFINITY_SECONDS),
        },
        _ => SessionAffinity::None,
    };
    Some(Service {
        namespace: object.metadata.namespace.clone().unwrap_or_else(|| "default".into()),
        name: object.metadata.name.clone()?,
        service_type,
        cluster_ips: PerFamily::dual(cluster_ip, second_cluster_ip),
        external_traffic_policy,
        internal_traffic_policy: policy(spec.internal_traffic_policy.as_deref()),
        ports,
        external_ips: spec.external_ips.iter().flatten().filter_map(|ip| ip.parse().ok()).collect(),
        load_balancer_ips: of_mode(true),
        proxied_load_balancer_ips: of_mode(false),
        load_balancer_source_ranges,
        health_check_node_port,
        session_affinity,
        hints_annotation: hints_annotation(object),
    })
}

/// The topology-aware-hints annotation, or when absent topology-mode (serviceport.go).
fn hints_annotation(object: &K8sService) -> Option<String> {
    let annotations = object.metadata.annotations.as_ref()?;
    annotations
        .get("service.kubernetes.io/topology-aware-hints")
        .or_else(|| annotations.get("service.kubernetes.io/topology-mode"))
        .cloned()
}

/// Fills each port's endpoints from the Service's slices (same namespace, service-name
/// label): the slice port of the same name and protocol gives the port; the first address
/// of each endpoint, once per address and port.
fn attach_endpoints(service: &mut Service, slices: &[EndpointSlice]) {
    let mine: Vec<&EndpointSlice> = slices
        .iter()
        .filter(|s| s.metadata.namespace.as_deref().unwrap_or("default") == service.namespace)
        .filter(|s| {
            let labels: Option<&BTreeMap<String, String>> = s.metadata.labels.as_ref();
            labels.and_then(|l| l.get(SERVICE_NAME_LABEL)) == Some(&service.name)
        })
        .collect();
    for sp in &mut service.ports {
        for slice in &mine {
            let Some(port) = slice.ports.iter().flatten().find(|p| {
                p.name.as_deref().unwrap_or("") == sp.name
                    && Protocol::parse_k8s(p.protocol.as_deref().unwrap_or("TCP")) == Some(sp.protocol)
            }) else {
                continue;
            };
            let Some(number) = port.port.and_then(|n| u16::try_from(n).ok()) else { continue };
            for ep in &slice.endpoints {
                let Some(ip) = ep.addresses.first().and_then(|a| a.parse::<IpAddr>().ok()) else { continue };
                if sp.endpoints.iter().any(|e| e.ip == ip && e.port == number) {
                    continue;
                }
                let c = ep.conditions.as_ref();
                let ready = c.and_then(|c| c.ready).unwrap_or(true);
                sp.endpoints.push(Endpoint {
                    ip,
                    port: number,
                    ready,
                    serving: c.and_then(|c| c.serving).unwrap_or(ready),
                    terminating: c.and_then(|c| c.terminating).unwrap_or(false),
                    node: ep.node_name.clone(),
                    pod: ep.target_ref.as_ref().and_then(|r| r.name.clone()).unwrap_or_default(),
                    // endpointslicecache.go: the forZones names (TopologyAwareHints, on in v1.30).
                    zone_hints: ep
                        .hints
                        .iter()
                        .flat_map(|h| h.for_zones.iter().flatten())
                        .map(|z| z.name.clone())
                        .collect(),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::apiserver::objects::node_object;

    /// Every scenario, read back through the API objects a proxy receives, gives the
    /// Services the scenario parser made: the API carries everything a proxy needs.
    #[test]
    fn every_scenario_converts_to_the_parsers_services() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios");
        let files = packetproof::scenario::discover(&[dir.into()]).unwrap();
        assert!(files.len() > 10, "scenarios found: {files:?}");
        for file in files {
            let scenario =
                packetproof::admission::load(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            let c = &scenario.cluster;
            let flags = Flags {
                cluster_cidrs: c.families().iter().map(|&f| c.family_view(f).pod_cidr).collect(),
                service_cidrs: c.families().iter().map(|&f| c.family_view(f).service_cidr).collect(),
                proxy: c.proxy.clone(),
            };
            for model_node in &c.nodes {
                let object: K8sNode = serde_json::from_value(node_object(model_node)).unwrap();
                let node = node(&object, c.ip_family()).unwrap();
                assert_eq!(node.ips, model_node.ips, "{}", file.display());
                assert_eq!(node.pod_cidrs, model_node.pod_cidrs, "{}", file.display());
                assert_eq!(node.zone, model_node.zone, "{}", file.display());
                let mut got =
                    cluster(node, &scenario.objects.services, &scenario.objects.endpoint_slices, &flags)
                        .unwrap();
                // The API does not say which scenario pod (or external host) an address is: the
                // parser infers it. Fill it the same way to compare.
                for ep in got.services.iter_mut().flat_map(|s| &mut s.ports).flat_map(|p| &mut p.endpoints) {
                    let pod = c.pods.iter().find(|p| p.ips.contains(&ep.ip)).map(|p| &p.name);
                    let host = c.external_hosts.iter().find(|h| h.ips.contains(&ep.ip));
                    let node =
                        c.nodes.iter().find(|n| n.node_network_ips().any(|a| a == ep.ip)).map(|n| &n.name);
                    if ep.pod.is_empty() {
                        ep.pod = pod.or(host.map(|h| &h.name)).or(node).unwrap().clone();
                    }
                }
                assert_eq!(got.services, c.services, "{}", file.display());
                assert_eq!(got.pod_cidr, c.pod_cidr);
                assert_eq!(got.second_family.is_some(), c.second_family.is_some(), "{}", file.display());
            }
        }
    }
}
