//! `spec.probes` → `model::Probe`, every name resolved against the scenario.

use std::collections::HashMap;

use crate::model::{
    ExternalHost, Node, Probe, Protocol, Service, ServicePort, Source, StatedExpectation, StatedSource,
    StatedVerdict, Target,
};

use super::error::{Diagnostics, Site};
use super::net::parse_ip;
use super::pods::PodEntry;
use super::registry::Registry;
use super::services::ServiceEntry;
use super::spec::{
    ExpectSpec, PortRef, ProbeSpec, ProtocolSpec, SourceKindSpec, SourceSpec, TargetSpec, VerdictSpec,
};
use super::yaml::FieldPath;

const DEFAULT_COUNT: u32 = 10;
const MAX_COUNT: u32 = 10_000;

/// Everything a probe may refer to.
pub(crate) struct Names<'r, 'a> {
    pub nodes: &'r Registry<Node>,
    pub external_hosts: &'r Registry<ExternalHost>,
    pub pods: &'r Registry<PodEntry>,
    pub services: &'r Registry<ServiceEntry<'a>>,
}

pub(crate) fn resolve(
    site: &Site<'_>,
    probes: &[(usize, FieldPath, ProbeSpec)],
    names: &Names<'_, '_>,
    diag: &mut Diagnostics,
) -> Vec<Probe> {
    let mut out = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (i, path, spec) in probes {
        let name = spec.name.clone().unwrap_or_else(|| format!("probe[{i}]"));
        let name_path = path.key("name");
        if let Some(first) = seen.insert(name.clone(), *i) {
            diag.value(
                site,
                &name_path,
                format!("duplicate probe name {name:?} (also spec.probes[{first}])"),
            );
        } else if name.is_empty() {
            diag.value(site, &name_path, "a probe name must not be empty");
        }
        let before = diag.count();
        let probe = resolve_one(site, path, spec, name, names, diag);
        if let Some(probe) = probe.filter(|_| diag.count() == before) {
            out.push(probe);
        }
    }
    out
}

fn resolve_one(
    site: &Site<'_>,
    path: &FieldPath,
    spec: &ProbeSpec,
    name: String,
    names: &Names<'_, '_>,
    diag: &mut Diagnostics,
) -> Option<Probe> {
    let from = source(site, &path.key("from"), &spec.from, names, diag);
    let stated = spec.protocol.map(protocol_of);
    let to = target(site, &path.key("to"), &spec.to, stated, names, diag);
    let count = spec.count.unwrap_or(DEFAULT_COUNT);
    if !(1..=MAX_COUNT).contains(&count) {
        diag.value(site, &path.key("count"), format!("count must be between 1 and {MAX_COUNT}, not {count}"));
    }
    let expect = spec.expect.as_ref().map(|e| expectation(site, &path.key("expect"), e, names.pods, diag));
    let (to, protocol) = to?;
    let protocol = protocol.unwrap_or(Protocol::Tcp);
    Some(Probe { name, from: from?, to, protocol, count, interval: None, expect })
}

fn protocol_of(p: ProtocolSpec) -> Protocol {
    match p {
        ProtocolSpec::Tcp => Protocol::Tcp,
        ProtocolSpec::Udp => Protocol::Udp,
        ProtocolSpec::Sctp => Protocol::Sctp,
    }
}

fn source(
    site: &Site<'_>,
    path: &FieldPath,
    spec: &SourceSpec,
    names: &Names<'_, '_>,
    diag: &mut Diagnostics,
) -> Option<Source> {
    let given: Vec<(&str, &String)> =
        [("pod", &spec.pod), ("node", &spec.node), ("external", &spec.external)]
            .into_iter()
            .filter_map(|(k, v)| v.as_ref().map(|v| (k, v)))
            .collect();
    let [(key, name)] = given.as_slice() else {
        let got = if given.is_empty() {
            "none".to_string()
        } else {
            given.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(" and ")
        };
        diag.value(site, path, format!("give exactly one of pod, node, external (got {got})"));
        return None;
    };
    let at = path.key(key);
    match *key {
        "pod" => names.pods.resolve(name, site, &at, diag).map(|p| Source::Pod(p.pod.name.clone())),
        "node" => names.nodes.resolve(name, site, &at, diag).map(|n| Source::Node(n.name.clone())),
        _ => names.external_hosts.resolve(name, site, &at, diag).map(|h| Source::External(h.name.clone())),
    }
}

/// The target and the protocol it implies (`None` for a raw address, meaning TCP unless stated).
fn target(
    site: &Site<'_>,
    path: &FieldPath,
    spec: &TargetSpec,
    stated: Option<Protocol>,
    names: &Names<'_, '_>,
    diag: &mut Diagnostics,
) -> Option<(Target, Option<Protocol>)> {
    match (&spec.service, &spec.address) {
        (Some(service), None) => service_target(site, path, service, spec, stated, names, diag),
        (None, Some(address)) => {
            if spec.node_port.is_some() {
                diag.value(site, &path.key("nodePort"), "nodePort goes with service, not with address");
            }
            let ip = parse_ip(address).map_err(|e| diag.value(site, &path.key("address"), e)).ok();
            let port = match &spec.port {
                Some(PortRef::Number(n)) => Some(*n),
                Some(PortRef::Name(_)) => {
                    diag.value(site, &path.key("port"), "an address target needs a port number, not a name");
                    None
                }
                None => {
                    diag.value(site, &path.key("port"), "required field `port` is missing");
                    None
                }
            };
            Some((Target::Address(std::net::SocketAddr::new(ip?, port?)), stated))
        }
        (Some(_), Some(_)) => {
            diag.value(site, path, "give either service (with port) or address (with port), not both");
            None
        }
        (None, None) => {
            diag.value(site, path, "give either service (with port) or address (with port)");
            None
        }
    }
}

fn service_target(
    site: &Site<'_>,
    path: &FieldPath,
    name: &str,
    spec: &TargetSpec,
    stated: Option<Protocol>,
    names: &Names<'_, '_>,
    diag: &mut Diagnostics,
) -> Option<(Target, Option<Protocol>)> {
    let entry = names.services.resolve(name, site, &path.key("service"), diag);
    let node =
        spec.node_port.as_ref().and_then(|n| names.nodes.resolve(n, site, &path.key("nodePort"), diag));
    let service = &entry?.service;
    let port = service_port(site, path, service, spec.port.as_ref(), stated, diag)?;
    if let Some(p) = stated
        && p != port.protocol
    {
        diag.value(
            site,
            &path.parent().unwrap_or_default().key("protocol"),
            format!(
                "protocol {p} does not match port {} of Service {}, which is {}",
                port_label(port),
                service.name,
                port.protocol
            ),
        );
    }
    // What `model::Cluster::service_port` resolves back to this port.
    let port_ref = if port.name.is_empty() { port.port.to_string() } else { port.name.clone() };
    let target = match (&spec.node_port, node) {
        (None, _) => Target::ClusterIp { service: service.name.clone(), port: port_ref },
        (Some(_), None) => return None,
        (Some(_), Some(node)) => {
            if port.node_port.is_none() {
                diag.value(
                    site,
                    &path.key("nodePort"),
                    format!(
                        "port {} of Service {} has no nodePort (the Service is not of type NodePort or LoadBalancer)",
                        port_label(port),
                        service.name
                    ),
                );
            }
            Target::NodePort { service: service.name.clone(), port: port_ref, node: node.name.clone(), address: None }
        }
    };
    Some((target, Some(port.protocol)))
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
            .map(|p| format!("{} ({}/{})", port_label(p), p.port, p.protocol))
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

fn port_label(p: &ServicePort) -> String {
    if p.name.is_empty() { p.port.to_string() } else { p.name.clone() }
}

fn expectation(
    site: &Site<'_>,
    path: &FieldPath,
    spec: &ExpectSpec,
    pods: &Registry<PodEntry>,
    diag: &mut Diagnostics,
) -> StatedExpectation {
    let verdict = match spec.verdict {
        VerdictSpec::Answered => StatedVerdict::Answered,
        VerdictSpec::Rejected => StatedVerdict::Rejected,
        VerdictSpec::Dropped => StatedVerdict::Dropped,
    };
    let answered = verdict == StatedVerdict::Answered;
    if !answered && spec.backends.is_some() {
        diag.value(site, &path.key("backends"), "backends only go with verdict: answered");
    }
    if !answered && spec.source.is_some() {
        diag.value(site, &path.key("source"), "source only goes with verdict: answered");
    }
    let backends = spec.backends.as_ref().map(|names| {
        for (k, name) in names.iter().enumerate() {
            pods.resolve(name, site, &path.key("backends").index(k), diag);
        }
        names.clone()
    });
    let source = spec.source.map(|s| match s {
        SourceKindSpec::Client => StatedSource::Client,
        SourceKindSpec::Masqueraded => StatedSource::Masqueraded,
    });
    StatedExpectation { verdict, backends, source, http_status: None }
}
