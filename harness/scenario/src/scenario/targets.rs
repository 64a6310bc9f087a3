//! `to:` of a probe → `model::Target`: which form its keys select, and every name and address
//! in it resolved against the scenario. The forms:
//!
//! - `{service, port}`: the Service port's cluster IP;
//! - `{service, port, nodePort: NODE, address?}`: its node port on NODE's primary IP, or on
//!   `address` (another IP of NODE, or 127.0.0.1 from NODE itself in an IPv4 cluster: there
//!   are no node ports on ::1);
//! - `{service, port, externalIP: IP, via?}` and `{service, port, loadBalancer: IP, via?}`: one
//!   of the Service's external or load-balancer ingress IPs. `via: NODE` is the node the router
//!   sends an external host's traffic to: required from external hosts, refused from pods and
//!   nodes (their own node intercepts the traffic);
//! - `{healthCheck: SERVICE, node: NODE}`: the Service's healthCheckNodePort on NODE (TCP);
//! - `{address, port}`: a raw address, which the oracle interprets;
//! - `{address: 127.0.0.1, port, via: NODE}` from an external host: NODE's localhost, reached
//!   with a hand-made frame (the martian traffic `route_localnet` would let in).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::model::{Node, Protocol, Service, ServicePort, ServiceType, Source, Target};

use super::error::{Diagnostics, Site};
use super::net::{ip_at, parse_ip};
use super::referents::Names;
use super::spec::{PortRef, TargetSpec};
use super::target_form::{Form, form};
use super::yaml::FieldPath;

/// The target and the protocol it implies (`None` for a raw address, meaning TCP unless
/// stated). `from` is the probe's source, when it resolved: some forms depend on it.
pub(crate) fn resolve(
    site: &Site<'_>,
    path: &FieldPath,
    spec: &TargetSpec,
    stated: Option<Protocol>,
    from: Option<&Source>,
    names: &Names<'_, '_>,
    diag: &mut Diagnostics,
) -> Option<(Target, Option<Protocol>)> {
    let form = form(site, path, spec, diag)?;
    let cx = Cx { site, path, spec, stated, from, names };
    match form {
        Form::Address => address_target(&cx, diag),
        Form::HealthCheck => health_check_target(&cx, diag),
        _ => service_target(&cx, form, diag),
    }
}

/// What every form's resolution reads.
struct Cx<'c, 's, 'n, 'a> {
    site: &'c Site<'s>,
    /// `spec.probes[N].to`.
    path: &'c FieldPath,
    spec: &'c TargetSpec,
    stated: Option<Protocol>,
    from: Option<&'c Source>,
    names: &'c Names<'n, 'a>,
}

impl Cx<'_, '_, '_, '_> {
    fn at(&self, key: &str) -> FieldPath {
        self.path.key(key)
    }

    /// `spec.probes[N].protocol`.
    fn protocol_path(&self) -> FieldPath {
        self.path.parent().unwrap_or_default().key("protocol")
    }
}

fn address_target(cx: &Cx<'_, '_, '_, '_>, diag: &mut Diagnostics) -> Option<(Target, Option<Protocol>)> {
    let text = cx.spec.address.as_deref()?;
    let ip = ip_at(cx.site, &cx.at("address"), text, diag);
    let port = match &cx.spec.port {
        Some(PortRef::Number(n)) => Some(*n),
        Some(PortRef::Name(_)) => {
            diag.value(cx.site, &cx.at("port"), "an address target needs a port number, not a name");
            None
        }
        None => {
            diag.value(cx.site, &cx.at("port"), "required field `port` is missing");
            None
        }
    };
    let (ip, port) = (ip?, port?);
    if let Some(via) = &cx.spec.via {
        return localhost_target(cx, ip, port, via, diag);
    }
    Some((Target::Address(SocketAddr::new(ip, port)), cx.stated))
}

/// `{address: 127.0.0.1, port, via: NODE}`: only 127.0.0.1, and only from an external host
/// (anything else is routed as addressed, and a node's own 127.0.0.1 is its own).
fn localhost_target(
    cx: &Cx<'_, '_, '_, '_>,
    ip: IpAddr,
    port: u16,
    via: &str,
    diag: &mut Diagnostics,
) -> Option<(Target, Option<Protocol>)> {
    let node = cx.names.nodes.resolve(via, cx.site, &cx.at("via"), diag);
    if ip != IpAddr::V4(Ipv4Addr::LOCALHOST) {
        let message = "via goes with an address only for 127.0.0.1 (a hand-made frame to NODE); other \
                       addresses are sent as routed";
        diag.value(cx.site, &cx.at("via"), message);
        return None;
    }
    if cx.from.is_some_and(|from| !matches!(from, Source::External(_))) {
        let message = "only an external host sends to another node's 127.0.0.1 (from a node, \
                       127.0.0.1 is its own: leave via out)";
        diag.value(cx.site, &cx.at("via"), message);
        return None;
    }
    if cx.stated.is_some_and(|p| p != Protocol::Tcp) {
        diag.value(
            cx.site,
            &cx.protocol_path(),
            "a hand-made frame to 127.0.0.1 is a TCP SYN: write TCP or leave it out",
        );
        return None;
    }
    Some((Target::Localhost { node: node?.name.clone(), port }, Some(Protocol::Tcp)))
}

fn health_check_target(
    cx: &Cx<'_, '_, '_, '_>,
    diag: &mut Diagnostics,
) -> Option<(Target, Option<Protocol>)> {
    let name = cx.spec.health_check.as_deref()?;
    let entry = cx.names.services.resolve(name, cx.site, &cx.at("healthCheck"), diag);
    let node = match &cx.spec.node {
        Some(node) => cx.names.nodes.resolve(node, cx.site, &cx.at("node"), diag),
        None => {
            diag.value(
                cx.site,
                &cx.at("node"),
                "required field `node` is missing: a health check asks one node (node: NODE)",
            );
            None
        }
    };
    if let Some(p) = cx.stated
        && p != Protocol::Tcp
    {
        diag.value(
            cx.site,
            &cx.protocol_path(),
            format!("a health check is HTTP over TCP, not {p}: leave protocol out or write TCP"),
        );
    }
    let service = &entry?.service;
    if service.health_check_node_port.is_none() {
        diag.value(
            cx.site,
            &cx.at("healthCheck"),
            format!(
                "Service {} has no healthCheckNodePort (only type LoadBalancer with externalTrafficPolicy \
                 Local has one)",
                service.name
            ),
        );
        return None;
    }
    Some((
        Target::HealthCheck { service: service.name.clone(), node: node?.name.clone() },
        Some(Protocol::Tcp),
    ))
}

fn service_target(
    cx: &Cx<'_, '_, '_, '_>,
    form: Form,
    diag: &mut Diagnostics,
) -> Option<(Target, Option<Protocol>)> {
    let name = cx.spec.service.as_deref()?;
    let entry = cx.names.services.resolve(name, cx.site, &cx.at("service"), diag);
    let node =
        cx.spec.node_port.as_ref().and_then(|n| cx.names.nodes.resolve(n, cx.site, &cx.at("nodePort"), diag));
    let via = match form {
        Form::ExternalIp => via(cx, "external IPs", diag),
        Form::LoadBalancer => via(cx, "load-balancer IPs", diag),
        _ => Ok(None),
    };
    let service = &entry?.service;
    let port = service_port(cx.site, cx.path, service, cx.spec.port.as_ref(), cx.stated, diag)?;
    if let Some(p) = cx.stated
        && p != port.protocol
    {
        diag.value(
            cx.site,
            &cx.protocol_path(),
            format!(
                "protocol {p} does not match port {} of Service {}, which is {}",
                port_ref(port),
                service.name,
                port.protocol
            ),
        );
    }
    let (name, port_name) = (service.name.clone(), port_ref(port));
    let target = match form {
        Form::NodePort => {
            let node = node?;
            if port.node_port.is_none() {
                diag.value(
                    cx.site,
                    &cx.at("nodePort"),
                    format!(
                        "port {} of Service {} has no nodePort (the Service is not of type NodePort or LoadBalancer, \
                         or it sets allocateLoadBalancerNodePorts: false)",
                        port_name,
                        service.name
                    ),
                );
            }
            let address = match &cx.spec.address {
                Some(text) => Some(node_address(cx, text, node, diag)?),
                None => None,
            };
            Target::NodePort { service: name, port: port_name, node: node.name.clone(), address }
        }
        Form::ExternalIp => {
            let ip = external_ip(cx, service, diag)?;
            Target::ExternalIp { service: name, port: port_name, ip, via: via.ok()? }
        }
        Form::LoadBalancer => {
            let ip = load_balancer_ip(cx, service, diag)?;
            Target::LoadBalancer { service: name, port: port_name, ip, via: via.ok()? }
        }
        _ => Target::ClusterIp { service: name, port: port_name },
    };
    Some((target, Some(port.protocol)))
}

/// `address` of a node-port target: an address of the node, or 127.0.0.1 from the node itself
/// (IPv4 only: kube-proxy's IPv6 rules exclude ::1).
fn node_address(cx: &Cx<'_, '_, '_, '_>, text: &str, node: &Node, diag: &mut Diagnostics) -> Option<IpAddr> {
    let path = cx.at("address");
    let ip = parse_ip(text).map_err(|e| diag.value(cx.site, &path, e)).ok()?;
    if ip == IpAddr::V6(Ipv6Addr::LOCALHOST) {
        diag.value(
            cx.site,
            &path,
            "kube-proxy serves no node ports on ::1 (localhost node ports are IPv4 only: 127.0.0.1 in an IPv4 cluster)",
        );
        return None;
    }
    if !diag.ip_family(cx.site, &path, ip) {
        return None;
    }
    if ip == IpAddr::V4(Ipv4Addr::LOCALHOST) {
        return match cx.from {
            Some(Source::Node(n)) if *n == node.name => Some(ip),
            Some(source) => {
                diag.value(
                    cx.site,
                    &path,
                    format!(
                        "127.0.0.1 reaches node {0}'s node ports only from node {0} itself: localhost is only \
                         reachable from the node itself, and this probe is from {source}",
                        node.name
                    ),
                );
                None
            }
            None => Some(ip),
        };
    }
    if node.node_network_ips().any(|a| a == ip) {
        return Some(ip);
    }
    let known: Vec<String> = node.node_network_ips().map(|a| a.to_string()).collect();
    let localhost = if node.ip().is_ipv4() { "; or 127.0.0.1 from the node itself" } else { "" };
    diag.value(
        cx.site,
        &path,
        format!(
            "{ip} is not an address of node {} (its addresses: {}{localhost})",
            node.name,
            known.join(", ")
        ),
    );
    None
}

fn external_ip(cx: &Cx<'_, '_, '_, '_>, service: &Service, diag: &mut Diagnostics) -> Option<IpAddr> {
    let path = cx.at("externalIP");
    let ip = ip_at(cx.site, &path, cx.spec.external_ip.as_deref()?, diag)?;
    if service.external_ips.contains(&ip) {
        return Some(ip);
    }
    let known = match service.external_ips.as_slice() {
        [] => "it has none: spec.externalIPs is empty".to_string(),
        ips => format!("its externalIPs: {}", list(ips)),
    };
    diag.value(cx.site, &path, format!("{ip} is not an external IP of Service {} ({known})", service.name));
    None
}

fn load_balancer_ip(cx: &Cx<'_, '_, '_, '_>, service: &Service, diag: &mut Diagnostics) -> Option<IpAddr> {
    let path = cx.at("loadBalancer");
    let ip = ip_at(cx.site, &path, cx.spec.load_balancer.as_deref()?, diag)?;
    if service.load_balancer_ips.contains(&ip) || service.proxied_load_balancer_ips.contains(&ip) {
        return Some(ip);
    }
    let known = match service.load_balancer_ips.as_slice() {
        _ if service.service_type != ServiceType::LoadBalancer => {
            "it is not of type LoadBalancer".to_string()
        }
        [] => "it has none: status.loadBalancer.ingress is empty".to_string(),
        ips => format!("its ingress IPs: {}", list(ips)),
    };
    diag.value(
        cx.site,
        &path,
        format!("{ip} is not a load-balancer IP of Service {} ({known})", service.name),
    );
    None
}

/// `via:` of an external-IP or load-balancer target; `Err` when wrong (reported).
fn via(cx: &Cx<'_, '_, '_, '_>, what: &str, diag: &mut Diagnostics) -> Result<Option<String>, ()> {
    let path = cx.at("via");
    match (&cx.spec.via, cx.from) {
        (None, Some(Source::External(host))) => {
            diag.value(
                cx.site,
                &path,
                format!(
                    "required field `via` is missing: traffic from external host {host} enters the cluster at a \
                     node; name the node the router sends it to (via: NODE)"
                ),
            );
            Err(())
        }
        (None, _) => Ok(None),
        (Some(_), Some(source @ (Source::Pod(_) | Source::Node(_)))) => {
            diag.value(
                cx.site,
                &path,
                format!(
                    "via only goes with an external host as the source: pods and nodes reach {what} through \
                     their own node (this probe is from {source})"
                ),
            );
            Err(())
        }
        (Some(node), _) => {
            cx.names.nodes.resolve(node, cx.site, &path, diag).map(|n| Some(n.name.clone())).ok_or(())
        }
    }
}

/// The service port `port` names: by name, else by number (with the stated protocol choosing
/// between, e.g., 53/UDP and 53/TCP); may be left out when the Service has one port.
fn service_port<'s>(
    site: &Site<'_>,
    path: &FieldPath,
    service: &'s Service,
    port: Option<&PortRef>,
    stated: Option<Protocol>,
    diag: &mut Diagnostics,
) -> Option<&'s ServicePort> {
    let known = || {
        service
            .ports
            .iter()
            .map(|p| format!("{} ({}/{})", port_ref(p), p.port, p.protocol))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let at = path.key("port");
    let number = match port {
        None if service.ports.len() == 1 => return service.ports.first(),
        None => {
            diag.value(
                site,
                &at,
                format!(
                    "Service {} has {} ports: name one (known: {})",
                    service.name,
                    service.ports.len(),
                    known()
                ),
            );
            return None;
        }
        Some(PortRef::Name(name)) => match service.ports.iter().find(|p| p.name == *name) {
            Some(p) => return Some(p),
            None => name.parse::<u16>().ok(),
        },
        Some(PortRef::Number(n)) => Some(*n),
    };
    let candidates: Vec<&ServicePort> = service
        .ports
        .iter()
        .filter(|p| Some(p.port) == number && stated.is_none_or(|s| s == p.protocol))
        .collect();
    match candidates.as_slice() {
        [one] => Some(one),
        [] => {
            let what = port.map(|p| p.to_string()).unwrap_or_default();
            diag.value(
                site,
                &at,
                format!("Service {} has no port {what} (known: {})", service.name, known()),
            );
            None
        }
        _ => {
            diag.value(
                site,
                &at,
                format!(
                    "port {} of Service {} is ambiguous: name one, or give protocol (known: {})",
                    number.unwrap_or_default(),
                    service.name,
                    known()
                ),
            );
            None
        }
    }
}

/// A port's name, or its number when unnamed: how messages and flow names show it, and what
/// `model::Cluster::service_port` resolves back to it.
pub(crate) fn port_ref(p: &ServicePort) -> String {
    if p.name.is_empty() { p.port.to_string() } else { p.name.clone() }
}

fn list(ips: &[IpAddr]) -> String {
    ips.iter().map(IpAddr::to_string).collect::<Vec<_>>().join(", ")
}
