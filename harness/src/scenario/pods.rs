//! Pod objects → `model::Pod`: where each pod runs, its address, the ports it serves, and the
//! status the EndpointSlice controller reads (readiness, termination, phase).

use std::collections::HashMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Pod as K8sPod;

use crate::model::{ContainerPort, Node, Pod};

use super::addresses::Addresses;
use super::error::{Diagnostics, Site};
use super::names::check_name;
use super::net::{ip_at, not_a_host_of, parse_ip, port_number, protocol};
use super::objects::{Kind, Parsed, Unparsed};
use super::registry::{Lookup, Registry};
use super::yaml::FieldPath;

/// A valid pod plus what endpoint derivation needs beyond the model.
pub(crate) struct PodEntry {
    pub pod: Pod,
    /// The `Ready` condition (no such condition counts as ready).
    pub ready: bool,
    /// `metadata.deletionTimestamp` is set.
    pub terminating: bool,
    /// Phase `Succeeded` or `Failed`: the EndpointSlice controller leaves such pods out.
    pub finished: bool,
    pub uid: Option<String>,
}

pub(crate) struct Pods {
    pub registry: Registry<PodEntry>,
    /// Every pod address that parsed, broken pods' included, to name the pod behind an
    /// endpoint address without a misleading "no such pod".
    pub by_ip: HashMap<IpAddr, String>,
    /// Some pod's address could not be read, so an unknown endpoint address may be its.
    pub ips_incomplete: bool,
}

pub(crate) fn read(
    parsed: &[Parsed<'_, K8sPod>],
    unparsed: &[Unparsed<'_>],
    nodes: &Registry<Node>,
    addresses: &mut Addresses,
    diag: &mut Diagnostics,
) -> Pods {
    let mut pods = Pods { registry: Registry::new("Pod"), by_ip: HashMap::new(), ips_incomplete: false };
    for u in unparsed.iter().filter(|u| u.kind == Kind::Pod) {
        pods.ips_incomplete = true;
        match &u.name {
            Some(name) => pods.registry.define(name, None, &u.site, &FieldPath::parse("metadata.name"), diag),
            None => pods.registry.mark_incomplete(),
        }
    }
    for p in parsed {
        let before = diag.count();
        let ip = read_one(p, nodes, addresses, diag, &mut pods);
        let entry = ip.filter(|_| diag.count() == before).and_then(|ip| entry(p, ip));
        pods.registry.define(&p.name, entry, &p.site, &FieldPath::parse("metadata.name"), diag);
    }
    pods
}

/// Checks one pod; returns its address if it has a usable one.
fn read_one(
    p: &Parsed<'_, K8sPod>,
    nodes: &Registry<Node>,
    addresses: &mut Addresses,
    diag: &mut Diagnostics,
    pods: &mut Pods,
) -> Option<IpAddr> {
    let site = &p.site;
    if let Err(e) = check_name(&p.name) {
        diag.value(site, &FieldPath::parse("metadata.name"), e);
    }
    let Some(spec) = &p.object.spec else {
        diag.value(site, &FieldPath::parse("spec"), "required field `spec` is missing");
        pods.ips_incomplete = true;
        return None;
    };
    if spec.host_network == Some(true) {
        diag.value(site, &FieldPath::parse("spec.hostNetwork"), "hostNetwork pods are not supported yet");
    }
    let node = match &spec.node_name {
        None => {
            diag.value(
                site,
                &FieldPath::parse("spec.nodeName"),
                "required field `nodeName` is missing: the harness runs each pod on the node named here",
            );
            None
        }
        Some(name) => match nodes.get(name) {
            Lookup::Found(node) => Some(node),
            Lookup::Broken => None,
            Lookup::Missing => {
                diag.value(site, &FieldPath::parse("spec.nodeName"), nodes.missing_message(name));
                None
            }
        },
    };
    check_ports(site, spec, diag);
    let ip = read_ip(p, node, diag);
    match ip {
        Some(ip) => {
            pods.by_ip.insert(ip, p.name.clone());
            addresses.claim(
                ip,
                format!("Pod {}/{}", p.namespace, p.name),
                site,
                &FieldPath::parse("status.podIP"),
                diag,
            );
        }
        None => pods.ips_incomplete = true,
    }
    ip
}

fn read_ip(p: &Parsed<'_, K8sPod>, node: Option<&Node>, diag: &mut Diagnostics) -> Option<IpAddr> {
    let site = &p.site;
    let path = FieldPath::parse("status.podIP");
    let status = p.object.status.as_ref();
    let Some(text) = status.and_then(|s| s.pod_ip.as_deref()) else {
        diag.value(
            site,
            &path,
            "required field `podIP` is missing: the harness gives each pod the address written here",
        );
        return None;
    };
    let ip = ip_at(site, &path, text, diag)?;
    if let Some(node) = node
        && let Some(e) =
            not_a_host_of(ip, &node.pod_cidr, &format!("the podCIDR {} of node {}", node.pod_cidr, node.name))
    {
        diag.value(site, &path, e);
    }
    for (k, pod_ip) in status.and_then(|s| s.pod_ips.as_ref()).into_iter().flatten().enumerate() {
        let path = FieldPath::parse("status.podIPs").index(k).key("ip");
        match parse_ip(&pod_ip.ip) {
            Err(e) => diag.value(site, &path, e),
            Ok(first) if k == 0 && first != ip => {
                diag.value(site, &path, format!("{first} differs from status.podIP {ip}"))
            }
            // A second address (dual-stack pods list one per family) must be of this one.
            Ok(other) => {
                diag.ip_family(site, &path, other);
            }
        }
    }
    Some(ip)
}

fn check_ports(site: &Site<'_>, spec: &k8s_openapi::api::core::v1::PodSpec, diag: &mut Diagnostics) {
    let mut seen: HashMap<(u16, crate::model::Protocol), FieldPath> = HashMap::new();
    let mut names: HashMap<&str, FieldPath> = HashMap::new();
    for (ci, c) in spec.containers.iter().enumerate() {
        for (pi, port) in c.ports.iter().flatten().enumerate() {
            let path = FieldPath::parse("spec.containers").index(ci).key("ports").index(pi);
            let number = port_number(port.container_port)
                .map_err(|e| diag.value(site, &path.key("containerPort"), e))
                .ok();
            let proto = protocol(port.protocol.as_deref())
                .map_err(|e| diag.value(site, &path.key("protocol"), e))
                .ok();
            if let (Some(number), Some(proto)) = (number, proto) {
                // The harness serves each declared port once; a second declaration can't bind.
                if let Some(first) = seen.insert((number, proto), path.clone()) {
                    diag.value(
                        site,
                        &path.key("containerPort"),
                        format!("{number}/{proto} is already declared at {first}"),
                    );
                }
            }
            if let Some(name) = port.name.as_deref()
                && let Some(first) = names.insert(name, path.clone())
            {
                diag.value(site, &path.key("name"), format!("port name {name:?} is already used at {first}"));
            }
        }
    }
}

fn entry(p: &Parsed<'_, K8sPod>, ip: IpAddr) -> Option<PodEntry> {
    let spec = p.object.spec.as_ref()?;
    let ports = spec
        .containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .map(|port| {
            Some(ContainerPort {
                name: port.name.clone(),
                port: port_number(port.container_port).ok()?,
                protocol: protocol(port.protocol.as_deref()).ok()?,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    let status = p.object.status.as_ref();
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .is_none_or(|c| c.status == "True");
    let phase = status.and_then(|s| s.phase.as_deref());
    Some(PodEntry {
        pod: Pod {
            namespace: p.namespace.clone(),
            name: p.name.clone(),
            node: spec.node_name.clone()?,
            ip,
            labels: p.object.metadata.labels.clone().unwrap_or_default(),
            ports,
        },
        ready,
        terminating: p.object.metadata.deletion_timestamp.is_some(),
        finished: matches!(phase, Some("Succeeded" | "Failed")),
        uid: p.object.metadata.uid.clone(),
    })
}
