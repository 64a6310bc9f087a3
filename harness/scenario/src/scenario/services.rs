//! Service objects → `model::Service` (endpoints are attached later, see `endpoints.rs`;
//! external IPs, load balancers and health checks in `external.rs`; affinity in `affinity.rs`).
//! Anything a proxy would act on that the model can't express is an error, not ignored, and so
//! is anything kube-apiserver would refuse; what it would store instead of the object as
//! written (its defaults and derived fields) is `defaults.rs`.

use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Service as K8sService, ServicePort as K8sServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::model::{IpFamily, PerFamily, Service, ServicePort, ServiceType, TrafficPolicy};

use super::addresses::Addresses;
use super::affinity;
use super::claims::Claims;
use super::error::{Diagnostics, Site};
use super::external::{self, Env, Shape};
use super::families::DUAL_STACK;
use super::kind::Kind;
use super::names::check_name;
use super::net::{ip_at, not_a_host_of, parse_ip, port_number, protocol};
use super::networks::Networks;
use super::objects::{Parsed, Unparsed};
use super::registry::Registry;
use super::selectors::Selector;
use super::yaml::FieldPath;

/// `targetPort`, resolved against each pod when endpoints are derived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TargetPort {
    Number(u16),
    Name(String),
}

/// A valid Service plus what endpoint derivation needs beyond the model.
pub(crate) struct ServiceEntry<'a> {
    pub service: Service,
    /// One per `service.ports` entry.
    pub target_ports: Vec<TargetPort>,
    /// `None` when the Service selects no pods (its endpoints are managed by hand).
    pub selector: Option<Selector>,
    pub publish_not_ready: bool,
    /// `spec.trafficDistribution` (read by the EndpointSlice controller, not by kube-proxy).
    pub traffic_distribution: Option<String>,
    pub site: Site<'a>,
}

pub(crate) fn read<'a>(
    parsed: &[Parsed<'a, K8sService>],
    unparsed: &[Unparsed<'a>],
    networks: &Networks,
    addresses: &mut Addresses,
    diag: &mut Diagnostics,
) -> Registry<ServiceEntry<'a>> {
    let mut services = Registry::new("Service");
    services.reserve(parsed.len() + unparsed.len());
    for u in unparsed.iter().filter(|u| u.kind == Kind::Service) {
        match &u.name {
            Some(name) => services.define(name, None, &u.site, &FieldPath::parse("metadata.name"), diag),
            None => services.mark_incomplete(),
        }
    }
    let name_path = FieldPath::parse("metadata.name");
    // Node ports and external addresses are shared by every Service.
    let mut claims = networks.node_port_range.clone().map_or_else(Claims::default, Claims::new);
    for p in parsed {
        if p.object.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("ExternalName") {
            // kube-proxy skips ExternalName Services (pkg/proxy/util ShouldSkipService): a pasted
            // cluster keeps them; there is nothing to proxy, and a probe naming one is told so.
            let why = "is an ExternalName Service, which kube-proxy does not proxy (ShouldSkipService)";
            services.note(&p.name, why.to_string());
            continue;
        }
        let before = diag.count();
        let entry = read_one(p, networks, addresses, &mut claims, diag).filter(|_| diag.count() == before);
        services.define(&p.name, entry, &p.site, &name_path, diag);
    }
    services
}

fn read_one<'a>(
    p: &Parsed<'a, K8sService>,
    networks: &Networks,
    addresses: &mut Addresses,
    claims: &mut Claims,
    diag: &mut Diagnostics,
) -> Option<ServiceEntry<'a>> {
    let site = &p.site;
    let at = |path: &str| FieldPath::parse(path);
    if let Err(e) = check_name(&p.name) {
        diag.value(site, &at("metadata.name"), e);
    }
    let Some(spec) = &p.object.spec else {
        diag.value(site, &at("spec"), "required field `spec` is missing");
        return None;
    };
    let service_type = read_type(site, spec, diag);
    let families = read_ip_families(site, spec, diag);
    let cluster_ips = read_cluster_ip(p, spec, networks, families.len(), addresses, diag);
    if let Some(ips) = cluster_ips {
        check_families_match(site, &families, ips, diag);
    }
    let external_traffic_policy =
        policy(site, "spec.externalTrafficPolicy", spec.external_traffic_policy.as_deref(), diag);
    let internal_traffic_policy =
        policy(site, "spec.internalTrafficPolicy", spec.internal_traffic_policy.as_deref(), diag);
    check_external_policy(site, spec, service_type, diag);
    if spec.allocate_load_balancer_node_ports.is_some()
        && service_type.is_some_and(|t| t != ServiceType::LoadBalancer)
    {
        // pkg/apis/core/validation/validation.go ValidateService.
        diag.value(
            site,
            &at("spec.allocateLoadBalancerNodePorts"),
            "allocateLoadBalancerNodePorts may only be used when type is LoadBalancer (the API server refuses it)",
        );
    }
    let session_affinity = affinity::read(site, spec, diag);
    // Defaulted to true for LoadBalancer (SetDefaults_Service); false: the API server
    // allocates no node port, though it keeps those a client gives.
    let allocates = spec.allocate_load_balancer_node_ports != Some(false);

    let ports = spec.ports.as_deref().unwrap_or_default();
    if ports.is_empty() {
        diag.value(site, &at("spec.ports"), "a Service needs at least one port");
    }
    // Named only when a node port is claimed: most Services have none.
    let owner = || format!("Service {}/{}", p.namespace, p.name);
    // Kept for the file's whole life, by the hundred thousand: no room for ports that never come.
    let mut model_ports = Vec::with_capacity(ports.len());
    let mut target_ports = Vec::with_capacity(ports.len());
    for (i, port) in ports.iter().enumerate() {
        let path = at("spec.ports").index(i);
        if let Some((sp, tp)) = read_port(site, &path, port, ports, service_type, allocates, diag) {
            if let Some(np) = sp.node_port
                && let Err(e) = claims.node_port(np, sp.protocol, &owner())
            {
                diag.value(site, &path.key("nodePort"), e);
            }
            model_ports.push(sp);
            target_ports.push(tp);
        }
    }
    let shape = Shape { service_type, external_policy: external_traffic_policy };
    let mut env = Env { networks, addresses, claims };
    let external = external::read(p, spec, shape, &model_ports, &mut env, diag);

    let service = Service {
        namespace: p.namespace.clone(),
        name: p.name.clone(),
        service_type: service_type?,
        // Two of one family were reported by cluster_ips.
        cluster_ips: PerFamily::pair(cluster_ips?.0, cluster_ips?.1)?,
        external_traffic_policy: external_traffic_policy?,
        internal_traffic_policy: internal_traffic_policy?,
        ports: model_ports,
        external_ips: external.external_ips,
        load_balancer_ips: external.load_balancer_ips,
        proxied_load_balancer_ips: external.proxied_load_balancer_ips,
        load_balancer_source_ranges: external.source_ranges,
        health_check_node_port: external.health_check_node_port,
        session_affinity: session_affinity?,
        hints_annotation: hints_annotation(&p.object.metadata),
    };
    Some(ServiceEntry {
        service,
        target_ports,
        selector: spec.selector.as_ref().filter(|s| !s.is_empty()).map(Selector::of),
        publish_not_ready: spec.publish_not_ready_addresses == Some(true),
        traffic_distribution: spec.traffic_distribution.clone(),
        site: site.clone(),
    })
}

const TOPOLOGY_MODE: &str = "service.kubernetes.io/topology-mode";
const TOPOLOGY_AWARE_HINTS: &str = "service.kubernetes.io/topology-aware-hints";

/// The topology hints annotation kube-proxy reads: `topology-aware-hints`, or when it is
/// absent `topology-mode` (pkg/proxy/serviceport.go: the deprecated annotation takes
/// precedence).
fn hints_annotation(meta: &ObjectMeta) -> Option<String> {
    let annotations = meta.annotations.as_ref()?;
    annotations.get(TOPOLOGY_AWARE_HINTS).or_else(|| annotations.get(TOPOLOGY_MODE)).cloned()
}

fn read_type(site: &Site<'_>, spec: &ServiceSpec, diag: &mut Diagnostics) -> Option<ServiceType> {
    match spec.type_.as_deref() {
        None | Some("ClusterIP") => Some(ServiceType::ClusterIp),
        Some("NodePort") => Some(ServiceType::NodePort),
        Some("LoadBalancer") => Some(ServiceType::LoadBalancer),
        Some(other) => {
            diag.value(
                site,
                &FieldPath::parse("spec.type"),
                format!("unknown Service type {other:?} (expected ClusterIP, NodePort or LoadBalancer)"),
            );
            None
        }
    }
}

/// `spec.clusterIP`, and a dual-stack Service's second-family cluster IP (`clusterIPs[1]`).
fn read_cluster_ip(
    p: &Parsed<'_, K8sService>,
    spec: &ServiceSpec,
    networks: &Networks,
    families: usize,
    addresses: &mut Addresses,
    diag: &mut Diagnostics,
) -> Option<(IpAddr, Option<IpAddr>)> {
    let site = &p.site;
    let path = FieldPath::parse("spec.clusterIP");
    let owner = format!("Service {}/{}", p.namespace, p.name);
    let ip = match spec.cluster_ip.as_deref() {
        None | Some("") => {
            let hint = networks.service_cidr.map(|c| format!(" inside serviceCIDR {c}")).unwrap_or_default();
            diag.value(
                site,
                &path,
                format!(
                    "required field `clusterIP` is missing: the harness does not allocate cluster IPs; give one{hint}"
                ),
            );
            None
        }
        Some("None") => {
            diag.value(
                site,
                &path,
                "headless Services (clusterIP: None) are not supported: there is no cluster IP to proxy",
            );
            None
        }
        Some(text) => ip_at(site, &path, text, diag),
    };
    let in_service_cidr = |ip: IpAddr, path: &FieldPath, diag: &mut Diagnostics| {
        if let Some(cidr) = networks.of(IpFamily::of(ip)).service_cidr
            && let Some(e) = not_a_host_of(ip, &cidr, &format!("serviceCIDR {cidr}"))
        {
            diag.value(site, path, e);
        }
    };
    let mut second = None;
    for (k, text) in spec.cluster_ips.iter().flatten().enumerate() {
        let path = FieldPath::parse("spec.clusterIPs").index(k);
        match parse_ip(text) {
            Err(e) if text != "None" => diag.value(site, &path, e),
            Ok(first) if k == 0 && Some(first) != ip && ip.is_some() => {
                diag.value(site, &path, format!("{first} differs from spec.clusterIP"))
            }
            Ok(other) if k == 1 && ip.is_some_and(|ip| IpFamily::of(ip) == IpFamily::of(other)) => diag
                .value(
                    site,
                    &path,
                    format!(
                        "{other} is {} like spec.clusterIP: a Service has at most one cluster IP per family",
                        IpFamily::of(other)
                    ),
                ),
            // The cluster IP of a second family.
            Ok(other) if k == 1 && networks.is_dual() => {
                in_service_cidr(other, &path, diag);
                addresses.claim(other, owner.clone(), site, &path, diag);
                second = Some(other);
            }
            Ok(_) if k > 1 => {
                diag.value(site, &path, "a Service has at most two cluster IPs, one per family")
            }
            Ok(other) if k == 1 => {
                diag.ip_family(site, &path, other);
            }
            _ => {}
        }
    }
    check_family_policy(site, spec, networks.is_dual(), (second.is_some(), families > 1), diag);
    let ip = ip?;
    in_service_cidr(ip, &path, diag);
    addresses.claim(ip, owner, site, &path, diag);
    Some((ip, second))
}

/// `ipFamilyPolicy`: a single-stack cluster gives every Service one family (RequireDualStack
/// cannot be met); in a dual-stack one, a dual-stack policy gets a cluster IP of each family,
/// which the file must list (the harness allocates none), and SingleStack (the default) gets
/// one, and one family (pkg/registry/core/service/storage/alloc.go initIPFamilyFields).
/// `(two, two_families)`: whether the Service lists two cluster IPs, and two families.
fn check_family_policy(
    site: &Site<'_>,
    spec: &ServiceSpec,
    dual: bool,
    (two, two_families): (bool, bool),
    diag: &mut Diagnostics,
) {
    let at = || FieldPath::parse("spec.ipFamilyPolicy");
    let policy = spec.ip_family_policy.as_deref();
    match policy {
        Some("RequireDualStack") if !dual => {
            diag.value(site, &at(), format!("{DUAL_STACK} (RequireDualStack asks for two)"));
        }
        Some(p @ ("RequireDualStack" | "PreferDualStack")) if dual && !two => diag.value(
            site,
            &FieldPath::parse("spec.clusterIPs"),
            format!(
                "{p} in a dual-stack cluster gives the Service a cluster IP of each family: list both in \
                 spec.clusterIPs (the harness does not allocate cluster IPs)"
            ),
        ),
        None | Some("SingleStack") if two => diag.value(
            site,
            &at(),
            "a Service with a cluster IP of each family needs ipFamilyPolicy PreferDualStack or RequireDualStack",
        ),
        None | Some("SingleStack") if two_families => diag.value(
            site,
            &at(),
            "a Service with two ipFamilies needs ipFamilyPolicy PreferDualStack or RequireDualStack \
             (SingleStack is the default)",
        ),
        None | Some("SingleStack" | "PreferDualStack" | "RequireDualStack") => {}
        Some(other) => diag.value(
            site,
            &at(),
            format!("unknown ipFamilyPolicy {other:?} (expected SingleStack, PreferDualStack or RequireDualStack)"),
        ),
    }
}

/// The traffic policy at `path` (parsed only to report it: a file's Services are many).
fn policy(site: &Site<'_>, path: &str, value: Option<&str>, diag: &mut Diagnostics) -> Option<TrafficPolicy> {
    match value {
        None | Some("Cluster") => Some(TrafficPolicy::Cluster),
        Some("Local") => Some(TrafficPolicy::Local),
        Some(other) => {
            let path = FieldPath::parse(path);
            diag.value(site, &path, format!("unknown traffic policy {other:?} (expected Cluster or Local)"));
            None
        }
    }
}

/// `spec.ipFamilies` that are known, of the scenario's families, and listed once, with their index.
fn read_ip_families(site: &Site<'_>, spec: &ServiceSpec, diag: &mut Diagnostics) -> Vec<(usize, IpFamily)> {
    let mut families: Vec<(usize, IpFamily)> = Vec::new();
    for (k, name) in spec.ip_families.iter().flatten().enumerate() {
        let path = FieldPath::parse("spec.ipFamilies").index(k);
        match IpFamily::parse_k8s(name) {
            Some(family) if families.iter().any(|(_, f)| *f == family) => diag.value(
                site,
                &path,
                format!("{family} is listed twice: a Service has one family per cluster IP"),
            ),
            Some(family) => {
                if diag.one_family(site, &path, family, name) {
                    families.push((k, family));
                }
            }
            None => diag.value(site, &path, format!("unknown IP family {name:?} (expected IPv4 or IPv6)")),
        }
    }
    families
}

/// `ipFamilies[i]` is the family of the i-th cluster IP (`clusterIP` first), as the API server
/// checks (pkg/apis/core/validation ValidateServiceClusterIPsRelatedFields).
fn check_families_match(
    site: &Site<'_>,
    families: &[(usize, IpFamily)],
    (first, second): (IpAddr, Option<IpAddr>),
    diag: &mut Diagnostics,
) {
    for &(k, family) in families {
        let (field, ip) = match k {
            0 => ("spec.clusterIP", Some(first)),
            _ => ("spec.clusterIPs[1]", second),
        };
        if let Some(ip) = ip.filter(|ip| IpFamily::of(*ip) != family) {
            diag.value(
                site,
                &FieldPath::parse("spec.ipFamilies").index(k),
                format!(
                    "{family} does not match {field} {ip}, which is {}: ipFamilies lists the family of each \
                     cluster IP, in order",
                    IpFamily::of(ip)
                ),
            );
        }
    }
}

/// `externalTrafficPolicy` is for Services reachable from outside: the API server refuses it
/// on any other (pkg/apis/core/validation ValidateService, validateServiceExternalTrafficPolicy;
/// pkg/api/v1/service ExternallyAccessible); Local on a ClusterIP Service with external IPs is
/// valid there but not in the model.
fn check_external_policy(
    site: &Site<'_>,
    spec: &ServiceSpec,
    service_type: Option<ServiceType>,
    diag: &mut Diagnostics,
) {
    if service_type != Some(ServiceType::ClusterIp) || spec.external_traffic_policy.is_none() {
        return;
    }
    let at = FieldPath::parse("spec.externalTrafficPolicy");
    if spec.external_ips.as_ref().is_none_or(Vec::is_empty) {
        diag.value(
            site,
            &at,
            "externalTrafficPolicy may only be set for a Service reachable from outside (type NodePort or \
             LoadBalancer, or with externalIPs): the API server refuses it here",
        );
    } else if spec.external_traffic_policy.as_deref() == Some("Local") {
        diag.value(
            site,
            &at,
            "externalTrafficPolicy Local is supported on NodePort and LoadBalancer Services only (the \
             harness does not model it on a ClusterIP Service with externalIPs)",
        );
    }
}

fn read_port(
    site: &Site<'_>,
    path: &FieldPath,
    port: &K8sServicePort,
    all: &[K8sServicePort],
    service_type: Option<ServiceType>,
    allocates: bool,
    diag: &mut Diagnostics,
) -> Option<(ServicePort, TargetPort)> {
    let number = port_number(port.port).map_err(|e| diag.value(site, &path.key("port"), e)).ok();
    let proto =
        protocol(port.protocol.as_deref()).map_err(|e| diag.value(site, &path.key("protocol"), e)).ok();
    let name = port.name.clone().unwrap_or_default();
    check_port_name(site, path, &name, port, all, diag);
    if let (Some(n), Some(pr)) = (number, proto)
        && let Some(first) =
            all.iter().position(|q| q.port == port.port && protocol(q.protocol.as_deref()) == Ok(pr))
        && !std::ptr::eq(&all[first], port)
    {
        diag.value(
            site,
            &path.key("port"),
            format!("{n}/{pr} is already a port of this Service (spec.ports[{first}])"),
        );
    }
    let node_port = read_node_port(site, path, port, service_type, allocates, diag);
    let target = match &port.target_port {
        // Unset: the port itself (pkg/apis/core/v1/defaults.go SetDefaults_Service).
        None | Some(IntOrString::Int(0)) => number.map(TargetPort::Number),
        Some(IntOrString::String(s)) if s.is_empty() => number.map(TargetPort::Number),
        Some(IntOrString::Int(n)) => port_number(*n)
            .map_err(|e| diag.value(site, &path.key("targetPort"), e))
            .ok()
            .map(TargetPort::Number),
        Some(IntOrString::String(s)) => match check_target_port_name(s) {
            Ok(()) => Some(TargetPort::Name(s.clone())),
            Err(e) => {
                diag.value(site, &path.key("targetPort"), e);
                None
            }
        },
    };
    let sp =
        ServicePort { name, protocol: proto?, port: number?, node_port: node_port?, endpoints: Vec::new() };
    Some((sp, target?))
}

fn check_port_name(
    site: &Site<'_>,
    path: &FieldPath,
    name: &str,
    port: &K8sServicePort,
    all: &[K8sServicePort],
    diag: &mut Diagnostics,
) {
    let path = path.key("name");
    if name.is_empty() {
        if all.len() > 1 {
            diag.value(site, &path, "a Service with several ports must name each of them");
        }
        return;
    }
    if name.bytes().all(|b| b.is_ascii_digit()) {
        // Probes refer to ports by name or number: an all-digit name would be ambiguous.
        diag.value(
            site,
            &path,
            format!("port name {name:?} is all digits, which is ambiguous with port numbers"),
        );
    } else if !is_dns_label(name) {
        diag.value(
            site,
            &path,
            format!("{name:?} is not a valid port name (up to 63 lowercase letters, digits and '-')"),
        );
    }
    let first = all.iter().position(|q| q.name.as_deref() == Some(name));
    if first.is_some_and(|f| !std::ptr::eq(&all[f], port)) {
        diag.value(
            site,
            &path,
            format!("port name {name:?} is already used by spec.ports[{}]", first.unwrap_or_default()),
        );
    }
}

fn read_node_port(
    site: &Site<'_>,
    path: &FieldPath,
    port: &K8sServicePort,
    service_type: Option<ServiceType>,
    allocates: bool,
    diag: &mut Diagnostics,
) -> Option<Option<u16>> {
    let path = path.key("nodePort");
    match (service_type, port.node_port) {
        (_, Some(n)) if port_number(n).is_err() => {
            diag.value(site, &path, format!("{n} is not a port number (1-65535)"));
            None
        }
        (Some(ServiceType::ClusterIp), Some(_)) => {
            diag.value(site, &path, "nodePort is only allowed when type is NodePort or LoadBalancer");
            None
        }
        // A load balancer that sends straight to pods needs no node port
        // (pkg/registry/core/service/storage/alloc.go: nothing allocated when
        // allocateLoadBalancerNodePorts is false).
        (Some(ServiceType::LoadBalancer), None) if !allocates => Some(None),
        (Some(ServiceType::NodePort), None) => {
            diag.value(site, &path, "required for type NodePort: the harness does not allocate node ports");
            None
        }
        (Some(ServiceType::LoadBalancer), None) => {
            diag.value(
                site,
                &path,
                "required for type LoadBalancer: the harness does not allocate node ports \
                 (or set allocateLoadBalancerNodePorts: false for a load balancer without them)",
            );
            None
        }
        (_, n) => Some(n.and_then(|n| port_number(n).ok())),
    }
}

fn is_dns_label(name: &str) -> bool {
    name.len() <= 63
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// A named `targetPort` must be an IANA service name, as container port names are; a quoted
/// number is a common slip for a port number.
fn check_target_port_name(name: &str) -> Result<(), String> {
    if name.parse::<u16>().is_ok() {
        return Err(format!(
            "targetPort {name:?} is a string; write {name} without quotes for a port number"
        ));
    }
    let ok = !name.is_empty()
        && name.len() <= 15
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && name.bytes().any(|b| b.is_ascii_lowercase())
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--");
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a valid port name (at most 15 lowercase letters, digits and '-', with a letter)"
        ))
    }
}
