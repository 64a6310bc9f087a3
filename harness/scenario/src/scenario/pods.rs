//! Pod objects → `model::Pod`: where each pod runs, its address, the ports it serves, and the
//! status the EndpointSlice controller reads (readiness, termination, phase).

use std::collections::HashMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Pod as K8sPod;

use crate::model::{ContainerPort, IpFamily, Node, PerFamily, Pod};

use super::addresses::Addresses;
use super::error::{Diagnostics, Site};
use super::host_network::{self, HostNetworkPod};
use super::kind::Kind;
use super::names::check_name;
use super::net::{ip_at, not_a_host_of, parse_ip, port_number, protocol};
use super::objects::{Parsed, Unparsed};
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
    /// Pods on their node's network: no pod of their own is built (`host_network.rs`).
    pub host_network: Vec<HostNetworkPod>,
}

pub(crate) fn read(
    parsed: &[Parsed<'_, K8sPod>],
    unparsed: &[Unparsed<'_>],
    nodes: &Registry<Node>,
    dual: bool,
    addresses: &mut Addresses,
    diag: &mut Diagnostics,
) -> Pods {
    let mut pods = Pods {
        registry: Registry::new("Pod"),
        by_ip: HashMap::new(),
        ips_incomplete: false,
        host_network: Vec::new(),
    };
    for u in unparsed.iter().filter(|u| u.kind == Kind::Pod) {
        pods.ips_incomplete = true;
        match &u.name {
            Some(name) => pods.registry.define(name, None, &u.site, &FieldPath::parse("metadata.name"), diag),
            None => pods.registry.mark_incomplete(),
        }
    }
    for p in parsed {
        if host_network::is_host_network(p) {
            if let Err(e) = check_name(&p.name) {
                diag.value(&p.site, &FieldPath::parse("metadata.name"), e);
            }
            if let Some(pod) = host_network::read(p, nodes, diag) {
                let why = format!(
                    "is a hostNetwork pod, on the network of node {0}: no pod is built for it; probe from \
                     {{node: {0}}}",
                    pod.node
                );
                pods.registry.note(&p.name, why);
                pods.host_network.push(pod);
            }
            continue;
        }
        if let Some(why) = without_address(p) {
            if let Err(e) = check_name(&p.name) {
                diag.value(&p.site, &FieldPath::parse("metadata.name"), e);
            }
            pods.registry.note(&p.name, why);
            continue;
        }
        let before = diag.count();
        let ips = read_one(p, nodes, dual, addresses, diag, &mut pods);
        let entry = ips.filter(|_| diag.count() == before).and_then(|ips| entry(p, ips));
        pods.registry.define(&p.name, entry, &p.site, &FieldPath::parse("metadata.name"), diag);
    }
    pods
}

/// Why a pod a cluster dump holds is not built: it has no address yet (Pending, perhaps not
/// even scheduled) or no longer (Succeeded, Failed), as `kubectl get pods -A -o yaml` shows
/// such pods. The EndpointSlice controller leaves out a pod without an address
/// (pkg/controller/endpointslice `ShouldPodBeInEndpoints`), so it serves nothing and there is
/// nothing to build. Without a phase saying so, a missing address stays an error: a scenario's
/// author most likely forgot it.
fn without_address(p: &Parsed<'_, K8sPod>) -> Option<String> {
    let status = p.object.status.as_ref()?;
    let addressed = status.pod_ip.as_deref().is_some_and(|ip| !ip.is_empty())
        || status.pod_ips.as_ref().is_some_and(|ips| !ips.is_empty());
    let phase = status.phase.as_deref()?;
    (!addressed && matches!(phase, "Pending" | "Succeeded" | "Failed")).then(|| {
        format!(
            "is {phase} without an address (status.podIP): not built, and no Service's endpoint, as \
             the EndpointSlice controller leaves out pods without addresses"
        )
    })
}

/// Checks one pod; returns its address (and, dual-stack, its second) if it has a usable one.
fn read_one(
    p: &Parsed<'_, K8sPod>,
    nodes: &Registry<Node>,
    dual: bool,
    addresses: &mut Addresses,
    diag: &mut Diagnostics,
    pods: &mut Pods,
) -> Option<(IpAddr, Option<IpAddr>)> {
    let site = &p.site;
    if let Err(e) = check_name(&p.name) {
        diag.value(site, &FieldPath::parse("metadata.name"), e);
    }
    let Some(spec) = &p.object.spec else {
        diag.value(site, &FieldPath::parse("spec"), "required field `spec` is missing");
        pods.ips_incomplete = true;
        return None;
    };
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
    let ips = read_ip(p, node, dual, diag);
    match ips {
        Some((ip, second)) => {
            pods.by_ip.insert(ip, p.name.clone());
            addresses.claim(
                ip,
                format!("Pod {}/{}", p.namespace, p.name),
                site,
                &FieldPath::parse("status.podIP"),
                diag,
            );
            if let Some(second) = second {
                pods.by_ip.insert(second, p.name.clone());
                let at = FieldPath::parse("status.podIPs").index(1).key("ip");
                addresses.claim(second, format!("Pod {}/{}", p.namespace, p.name), site, &at, diag);
            }
        }
        None => pods.ips_incomplete = true,
    }
    ips
}

/// Why `ip` can't be an address of a pod on `node`: outside its pod CIDR of that family.
fn outside_node(ip: IpAddr, node: &Node) -> Option<String> {
    let family = IpFamily::of(ip);
    let cidr = *node.pod_cidrs.get(family)?;
    not_a_host_of(ip, &cidr, &format!("the podCIDR {cidr} of node {}", node.name))
}

fn read_ip(
    p: &Parsed<'_, K8sPod>,
    node: Option<&Node>,
    dual: bool,
    diag: &mut Diagnostics,
) -> Option<(IpAddr, Option<IpAddr>)> {
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
        && let Some(e) = outside_node(ip, node)
    {
        diag.value(site, &path, e);
    }
    let listed = status.and_then(|s| s.pod_ips.as_ref()).map(Vec::as_slice).unwrap_or_default();
    let mut second = None;
    for (k, pod_ip) in listed.iter().enumerate() {
        let path = FieldPath::parse("status.podIPs").index(k).key("ip");
        match parse_ip(&pod_ip.ip) {
            Err(e) => diag.value(site, &path, e),
            Ok(first) if k == 0 && first != ip => {
                diag.value(site, &path, format!("{first} differs from status.podIP {ip}"))
            }
            Ok(_) if k == 0 => {}
            // A pod lists one address per family (the API server refuses two of one family,
            // pkg/apis/core/validation validatePodIPs).
            Ok(other) if k == 1 && IpFamily::of(other) == IpFamily::of(ip) => diag.value(
                site,
                &path,
                format!(
                    "{other} is {} like status.podIP {ip}: a pod has one address per family",
                    IpFamily::of(ip)
                ),
            ),
            Ok(other) if k == 1 => {
                if diag.ip_family(site, &path, other) {
                    if let Some(e) = node.and_then(|n| outside_node(other, n)) {
                        diag.value(site, &path, e);
                    }
                    second = Some(other);
                }
            }
            Ok(_) => diag.value(site, &path, "a pod has at most two addresses, one per family"),
        }
    }
    if dual && second.is_none() && listed.len() < 2 {
        diag.value(
            site,
            &FieldPath::parse("status.podIPs"),
            format!(
                "the cluster is dual-stack: a pod needs an address of each family, \
                 status.podIPs: [{{ip: {ip}}}, {{ip: <{}>}}]",
                if ip.is_ipv4() { IpFamily::V6 } else { IpFamily::V4 }
            ),
        );
        return None;
    }
    Some((ip, second))
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

fn entry(p: &Parsed<'_, K8sPod>, (ip, second_ip): (IpAddr, Option<IpAddr>)) -> Option<PodEntry> {
    // Two of one family were reported by read_ip.
    let ips = PerFamily::pair(ip, second_ip)?;
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
            ips,
            labels: p.object.metadata.labels.clone().unwrap_or_default(),
            ports,
        },
        ready,
        terminating: p.object.metadata.deletion_timestamp.is_some(),
        finished: matches!(phase, Some("Succeeded" | "Failed")),
        uid: p.object.metadata.uid.clone(),
    })
}
