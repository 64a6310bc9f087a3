//! How a Service is reached besides its cluster IP and node ports: `spec.externalIPs`, the
//! load-balancer ingress IPs of `status.loadBalancer.ingress`, `spec.loadBalancerSourceRanges`
//! and `spec.healthCheckNodePort`, with the rules the API server enforces and the ones the
//! harness needs (an external address must be routable to the nodes and belong to nobody).

use std::collections::HashMap;
use std::net::IpAddr;

use ipnet::IpNet;
use k8s_openapi::api::core::v1::{Service as K8sService, ServiceSpec};

use crate::model::{ServicePort, ServiceType, TrafficPolicy};

use super::addresses::Addresses;
use super::claims::Claims;
use super::error::{Diagnostics, Site};
use super::net::{ip_at, parse_cidr, port_number};
use super::networks::Networks;
use super::objects::Parsed;
use super::yaml::FieldPath;

/// The external frontends of one Service.
#[derive(Debug, Default)]
pub(crate) struct External {
    pub external_ips: Vec<IpAddr>,
    pub load_balancer_ips: Vec<IpAddr>,
    /// Ingress IPs with `ipMode: Proxy`.
    pub proxied_load_balancer_ips: Vec<IpAddr>,
    pub source_ranges: Vec<IpNet>,
    pub health_check_node_port: Option<u16>,
}

/// What external addresses are checked against.
pub(crate) struct Env<'x> {
    pub networks: &'x Networks,
    /// Every node, external-host and pod address (read before Services).
    pub addresses: &'x Addresses,
    pub claims: &'x mut Claims,
}

/// The Service's type and externalTrafficPolicy, `None` where invalid (already reported).
#[derive(Clone, Copy)]
pub(crate) struct Shape {
    pub service_type: Option<ServiceType>,
    pub external_policy: Option<TrafficPolicy>,
}

pub(crate) fn read(
    p: &Parsed<'_, K8sService>,
    spec: &ServiceSpec,
    shape: Shape,
    ports: &[ServicePort],
    env: &mut Env<'_>,
    diag: &mut Diagnostics,
) -> External {
    let site = &p.site;
    // Named only in a claim: most Services have no external frontend.
    let service = || format!("Service {}/{}", p.namespace, p.name);
    let mut seen = HashMap::new();
    let external_ips = external_ips(site, spec, env, &mut seen, diag);
    let ingress = ingress_ips(site, &p.object, shape.service_type, env, &mut seen, diag);
    let (proxied, load_balancer_ips): (Vec<_>, Vec<_>) = ingress.into_iter().partition(|i| i.proxied);
    let load_balancer_ips: Vec<_> = load_balancer_ips.into_iter().map(|i| (i.ip, i.path)).collect();
    for (ips, what) in [(&external_ips, "an external IP"), (&load_balancer_ips, "a load-balancer IP")] {
        if !ips.is_empty() {
            claim(site, ips, &format!("{what} of {}", service()), ports, env.claims, diag);
        }
    }
    External {
        external_ips: external_ips.into_iter().map(|(ip, _)| ip).collect(),
        load_balancer_ips: load_balancer_ips.into_iter().map(|(ip, _)| ip).collect(),
        proxied_load_balancer_ips: proxied.into_iter().map(|i| i.ip).collect(),
        source_ranges: source_ranges(site, spec, shape.service_type, diag),
        health_check_node_port: health_check_node_port(site, spec, shape, service, env.claims, diag),
    }
}

/// Addresses listed so far for this Service, with where.
type Seen = HashMap<IpAddr, FieldPath>;

fn external_ips(
    site: &Site<'_>,
    spec: &ServiceSpec,
    env: &Env<'_>,
    seen: &mut Seen,
    diag: &mut Diagnostics,
) -> Vec<(IpAddr, FieldPath)> {
    let texts = spec.external_ips.as_deref().unwrap_or_default();
    if texts.is_empty() {
        return Vec::new();
    }
    let list = FieldPath::parse("spec.externalIPs");
    let mut out = Vec::new();
    for (k, text) in texts.iter().enumerate() {
        let path = list.index(k);
        if let Some(ip) = frontend_ip(site, &path, text, "an external IP", env, seen, diag) {
            out.push((ip, path));
        }
    }
    out
}

/// One load-balancer ingress IP, and whether the balancer proxies (`ipMode: Proxy`).
struct Ingress {
    ip: IpAddr,
    path: FieldPath,
    proxied: bool,
}

fn ingress_ips(
    site: &Site<'_>,
    object: &K8sService,
    service_type: Option<ServiceType>,
    env: &Env<'_>,
    seen: &mut Seen,
    diag: &mut Diagnostics,
) -> Vec<Ingress> {
    let ingress = object
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_deref())
        .unwrap_or_default();
    if ingress.is_empty() {
        return Vec::new();
    }
    let list = FieldPath::parse("status.loadBalancer.ingress");
    if !load_balancer_only(site, &list, "load-balancer ingress only applies", service_type, diag) {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (k, entry) in ingress.iter().enumerate() {
        let path = list.index(k);
        // The API server accepts only these two (validation.go ValidateLoadBalancerStatus).
        let proxied = match entry.ip_mode.as_deref() {
            None | Some("VIP") => false,
            Some("Proxy") => true,
            Some(other) => {
                diag.value(
                    site,
                    &path.key("ipMode"),
                    format!("unknown ipMode {other:?} (expected VIP or Proxy)"),
                );
                false
            }
        };
        match (&entry.ip, &entry.hostname) {
            (Some(text), _) => {
                let ip_path = path.key("ip");
                if let Some(ip) = frontend_ip(site, &ip_path, text, "a load-balancer IP", env, seen, diag) {
                    out.push(Ingress { ip, path: ip_path, proxied });
                }
            }
            (None, Some(_)) => {
                diag.value(site, &path.key("hostname"), "hostname ingress is not supported: give an ip")
            }
            (None, None) => diag.value(site, &path, "an ingress entry needs an ip"),
        }
    }
    out
}

/// An external or load-balancer IP (`what`): of the scenario's family, routable, outside the cluster's service and
/// pod networks, nobody's address, listed once.
fn frontend_ip(
    site: &Site<'_>,
    path: &FieldPath,
    text: &str,
    what: &str,
    env: &Env<'_>,
    seen: &mut Seen,
    diag: &mut Diagnostics,
) -> Option<IpAddr> {
    let ip = ip_at(site, path, text, diag)?;
    let networks = [("serviceCIDR", env.networks.service_cidr), ("podCIDR", env.networks.pod_cidr)];
    let problem = special(ip)
        .map(|kind| format!("{ip} is {kind}, which cannot be {what}"))
        .or_else(|| {
            networks.iter().find_map(|(name, net)| {
                net.filter(|net| net.contains(&ip)).map(|net| {
                    format!(
                        "{ip} is inside {name} {net}: {what} must be outside the cluster's service and pod \
                         networks (e.g. 203.0.113.10)"
                    )
                })
            })
        })
        .or_else(|| {
            // A node's own address is a common external IP on bare metal (traffic already lands
            // on that node); a pod's, another host's or a load balancer's is not. A VIP-style
            // balancer puts its load-balancer IP on a node as a further address (kube-proxy's
            // "the VIP is often added as a local address"): a node's secondary address may be
            // one.
            let local_vip = what == "a load-balancer IP" && env.addresses.is_secondary(ip);
            let owner = env
                .addresses
                .owner(ip)
                .filter(|o| (what != "an external IP" || !o.starts_with("node ")) && !local_vip)?;
            Some(format!(
                "{ip} is already the address of {owner}: {what} must not be a {}pod or external-host address",
                if what == "an external IP" { "" } else { "node, " }
            ))
        })
        .or_else(|| seen.get(&ip).map(|first| format!("{ip} is already listed at {first}")));
    if let Some(problem) = problem {
        diag.value(site, path, problem);
        return None;
    }
    seen.insert(ip, path.clone());
    Some(ip)
}

/// Why `ip` can never be a Service's external address, as the API server sees it.
fn special(ip: IpAddr) -> Option<&'static str> {
    let v4 = match ip {
        IpAddr::V4(v4) => v4,
        IpAddr::V6(v6) => {
            return if v6.is_unspecified() {
                Some("the unspecified address")
            } else if v6.is_loopback() {
                Some("a loopback address")
            } else if v6.is_unicast_link_local() {
                Some("a link-local address")
            } else if v6.is_multicast() {
                Some("a multicast address")
            } else {
                None
            };
        }
    };
    if v4.is_unspecified() {
        Some("the unspecified address")
    } else if v4.is_loopback() {
        Some("a loopback address")
    } else if v4.is_link_local() {
        Some("a link-local address")
    } else if v4.is_multicast() {
        Some("a multicast address")
    } else if v4.is_broadcast() {
        Some("the broadcast address")
    } else {
        None
    }
}

/// Each address with each port of the Service, once across all Services.
fn claim(
    site: &Site<'_>,
    ips: &[(IpAddr, FieldPath)],
    owner: &str,
    ports: &[ServicePort],
    claims: &mut Claims,
    diag: &mut Diagnostics,
) {
    for (ip, path) in ips {
        // One error per address is enough, whatever the number of ports.
        if let Some(e) = ports.iter().find_map(|p| claims.frontend(*ip, p.port, p.protocol, owner).err()) {
            diag.value(site, path, e);
        }
    }
}

/// `spec.loadBalancerSourceRanges`, trimmed as Kubernetes trims them; LoadBalancer only.
fn source_ranges(
    site: &Site<'_>,
    spec: &ServiceSpec,
    service_type: Option<ServiceType>,
    diag: &mut Diagnostics,
) -> Vec<IpNet> {
    let ranges = spec.load_balancer_source_ranges.as_deref().unwrap_or_default();
    if ranges.is_empty() {
        return Vec::new();
    }
    let list = FieldPath::parse("spec.loadBalancerSourceRanges");
    if !load_balancer_only(site, &list, "loadBalancerSourceRanges only apply", service_type, diag) {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (k, text) in ranges.iter().enumerate() {
        match parse_cidr(text) {
            Ok(net) => {
                if diag.net_family(site, &list.index(k), &net) {
                    out.push(net);
                }
            }
            Err(e) => diag.value(site, &list.index(k), e),
        }
    }
    out
}

/// `spec.healthCheckNodePort`: with type LoadBalancer and externalTrafficPolicy Local only,
/// and then required, because the harness allocates no ports (the API server would).
fn health_check_node_port(
    site: &Site<'_>,
    spec: &ServiceSpec,
    shape: Shape,
    service: impl FnOnce() -> String,
    claims: &mut Claims,
    diag: &mut Diagnostics,
) -> Option<u16> {
    let (Some(service_type), Some(policy)) = (shape.service_type, shape.external_policy) else {
        return None;
    };
    let needs_one = service_type == ServiceType::LoadBalancer && policy == TrafficPolicy::Local;
    if spec.health_check_node_port.is_none() && !needs_one {
        return None;
    }
    let path = FieldPath::parse("spec.healthCheckNodePort");
    let port = match (spec.health_check_node_port, needs_one) {
        (None, false) => return None,
        (None, true) => {
            diag.value(
                site,
                &path,
                "required for type LoadBalancer with externalTrafficPolicy Local: the API server would \
                 allocate one, and the harness does not allocate ports",
            );
            return None;
        }
        (Some(_), false) if service_type != ServiceType::LoadBalancer => {
            diag.value(
                site,
                &path,
                format!(
                    "healthCheckNodePort only applies to type LoadBalancer with externalTrafficPolicy Local \
                     (this Service is {})",
                    type_name(service_type)
                ),
            );
            return None;
        }
        (Some(_), false) => {
            diag.value(
                site,
                &path,
                "healthCheckNodePort only applies with externalTrafficPolicy Local (this Service's is Cluster)",
            );
            return None;
        }
        (Some(n), true) => port_number(n).map_err(|e| diag.value(site, &path, e)).ok()?,
    };
    if let Err(e) = claims.health_check(port, &service()) {
        diag.value(site, &path, e);
    }
    Some(port)
}

fn type_name(t: ServiceType) -> &'static str {
    match t {
        ServiceType::ClusterIp => "ClusterIP",
        ServiceType::NodePort => "NodePort",
        ServiceType::LoadBalancer => "LoadBalancer",
    }
}

/// Whether the Service is a LoadBalancer; reports `what` at `list` for any other known type
/// (an unreadable type was reported where it was read).
fn load_balancer_only(
    site: &Site<'_>,
    list: &FieldPath,
    what: &str,
    service_type: Option<ServiceType>,
    diag: &mut Diagnostics,
) -> bool {
    match service_type {
        Some(ServiceType::LoadBalancer) => true,
        Some(other) => {
            diag.value(
                site,
                list,
                format!("{what} to type LoadBalancer (this Service is {})", type_name(other)),
            );
            false
        }
        None => false,
    }
}
