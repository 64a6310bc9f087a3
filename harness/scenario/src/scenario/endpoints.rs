//! EndpointSlices → the endpoints of each service port.
//!
//! Given slices are checked against the scenario (every address must be a pod's, every port
//! one the pod declares, since the harness serves declared container ports only; or an
//! external host's, which serves whatever the slice names); derived
//! slices (`derive.rs`) are built valid. Both become `SliceData`, which `endpoints_for` joins
//! to service ports as kube-proxy does: by port name and protocol, deduplicated by address.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::Value;

use crate::model::{Endpoint, ExternalHost, IpFamily, Node, Protocol, Service};

use super::error::{Diagnostics, Site};
use super::kind::Kind;
use super::net::{ip_at, port_number, protocol};
use super::objects::{Parsed, Unparsed};
use super::pods::{PodEntry, Pods};
use super::registry::{Lookup, Registry, known};
use super::services::ServiceEntry;
use super::yaml::FieldPath;

pub(crate) const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// An EndpointSlice reduced to what the model needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SliceData {
    /// The Service it belongs to (bare name: names are unique in a scenario).
    pub service: String,
    pub ports: Vec<SlicePort>,
    pub endpoints: Vec<SliceEndpoint>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct SlicePort {
    /// Empty when unnamed.
    pub name: String,
    pub port: u16,
    pub protocol: Protocol,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SliceEndpoint {
    pub ip: IpAddr,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
    /// `nodeName`: what kube-proxy decides locality by (none: local to no node).
    pub node: Option<String>,
    /// The pod, or external host, that answers at this address.
    pub pod: String,
    /// `hints.forZones[].name`.
    pub zone_hints: Vec<String>,
}

impl SliceEndpoint {
    /// Conditions with Kubernetes' defaulting: ready absent → true; serving absent → ready;
    /// terminating absent → false.
    pub fn conditions(
        ready: Option<bool>,
        serving: Option<bool>,
        terminating: Option<bool>,
    ) -> (bool, bool, bool) {
        let ready = ready.unwrap_or(true);
        (ready, serving.unwrap_or(ready), terminating.unwrap_or(false))
    }
}

/// The given slices that are valid, and which Services have any slice at all (those get no
/// derived slice, even if their slices are broken).
pub(crate) struct Given {
    pub slices: Vec<SliceData>,
    pub services_with_slices: HashSet<String>,
}

pub(crate) struct Context<'r, 'a> {
    pub services: &'r Registry<ServiceEntry<'a>>,
    pub pods: &'r Pods,
    pub nodes: &'r Registry<Node>,
    pub external_hosts: &'r Registry<ExternalHost>,
}

pub(crate) fn read_given(
    parsed: &[Parsed<'_, EndpointSlice>],
    unparsed: &[Unparsed<'_>],
    cx: &Context<'_, '_>,
    diag: &mut Diagnostics,
) -> Given {
    let mut given = Given { slices: Vec::new(), services_with_slices: HashSet::new() };
    for u in unparsed.iter().filter(|u| u.kind == Kind::EndpointSlice) {
        let label = u
            .site
            .doc
            .value
            .pointer("/metadata/labels")
            .and_then(|l| l.get(SERVICE_NAME_LABEL))
            .and_then(Value::as_str);
        if let Some(service) = label {
            given.services_with_slices.insert(service.to_string());
        }
    }
    let mut names: HashMap<(String, String), usize> = HashMap::new();
    let owners = NotPods::of(cx);
    for s in parsed {
        let name_path = FieldPath::parse("metadata.name");
        if let Some(first) =
            names.insert((s.namespace.clone(), s.name.clone()), s.site.doc.value_pos(&name_path).line)
        {
            diag.value(
                &s.site,
                &name_path,
                format!("duplicate EndpointSlice name (first defined at line {first})"),
            );
        }
        if let Some(service) = s.object.metadata.labels.as_ref().and_then(|l| l.get(SERVICE_NAME_LABEL)) {
            given.services_with_slices.insert(service.clone());
        }
        let before = diag.count();
        let data = read_slice(s, cx, &owners, diag);
        if let Some(data) = data.filter(|_| diag.count() == before) {
            given.slices.push(data);
        }
    }
    given
}

/// The external hosts' and nodes' addresses, each with its owner: endpoint addresses that are
/// no pod's. Indexed once: slices list endpoints by the hundred thousand, clusters nodes by
/// the thousand.
struct NotPods<'r>(HashMap<IpAddr, &'r str>);

impl<'r> NotPods<'r> {
    fn of(cx: &Context<'r, '_>) -> Self {
        let mut owners = HashMap::new();
        // An external host wins over a node at the same address; the first of each, in file order.
        for h in cx.external_hosts.values() {
            for ip in h.ips.copied() {
                owners.entry(ip).or_insert(h.name.as_str());
            }
        }
        for n in cx.nodes.values() {
            for ip in n.all_ips() {
                owners.entry(ip).or_insert(n.name.as_str());
            }
        }
        NotPods(owners)
    }
}

fn read_slice(
    s: &Parsed<'_, EndpointSlice>,
    cx: &Context<'_, '_>,
    owners: &NotPods<'_>,
    diag: &mut Diagnostics,
) -> Option<SliceData> {
    let site = &s.site;
    let service = read_service(s, cx.services, diag);
    match s.object.address_type.as_str() {
        // Its addresses are of that family; so must the scenario be.
        family @ ("IPv4" | "IPv6") => {
            let family = IpFamily::parse_k8s(family).expect("IPv4 or IPv6");
            diag.one_family(site, &FieldPath::parse("addressType"), family, family.as_k8s());
        }
        "FQDN" => diag.value(
            site,
            &FieldPath::parse("addressType"),
            "addressType FQDN is not supported (proxies ignore FQDN slices)",
        ),
        other => diag.value(
            site,
            &FieldPath::parse("addressType"),
            format!("unknown addressType {other:?} (expected IPv4 or IPv6)"),
        ),
    }
    let ports: Vec<Option<SlicePort>> = s
        .object
        .ports
        .iter()
        .flatten()
        .enumerate()
        .map(|(k, port)| {
            read_port(site, &FieldPath::parse("ports").index(k), port, service.map(|e| &e.service), diag)
        })
        .collect();
    let mut endpoints = Vec::new();
    for (i, ep) in s.object.endpoints.iter().enumerate() {
        if let Some(ep) =
            read_endpoint(site, &FieldPath::parse("endpoints").index(i), ep, &ports, cx, owners, diag)
        {
            endpoints.push(ep);
        }
    }
    Some(SliceData {
        service: service?.service.name.clone(),
        ports: ports.into_iter().collect::<Option<_>>()?,
        endpoints,
    })
}

/// The Service the slice's `kubernetes.io/service-name` label names, in the slice's namespace.
fn read_service<'r, 'a>(
    s: &Parsed<'_, EndpointSlice>,
    services: &'r Registry<ServiceEntry<'a>>,
    diag: &mut Diagnostics,
) -> Option<&'r ServiceEntry<'a>> {
    let path = FieldPath::parse("metadata.labels").key(SERVICE_NAME_LABEL);
    let Some(name) = s.object.metadata.labels.as_ref().and_then(|l| l.get(SERVICE_NAME_LABEL)) else {
        diag.value(
            &s.site,
            &path,
            format!("missing label {SERVICE_NAME_LABEL}: it names the Service this slice belongs to"),
        );
        return None;
    };
    let entry = services.resolve(name, &s.site, &path, diag)?;
    if entry.service.namespace != s.namespace {
        diag.value(
            &s.site,
            &path,
            format!(
                "Service {name} is in namespace {}, but this slice is in {}: a slice belongs to the Service of its own namespace",
                entry.service.namespace, s.namespace
            ),
        );
        return None;
    }
    Some(entry)
}

fn read_port(
    site: &Site<'_>,
    path: &FieldPath,
    port: &k8s_openapi::api::discovery::v1::EndpointPort,
    service: Option<&Service>,
    diag: &mut Diagnostics,
) -> Option<SlicePort> {
    let number = match port.port {
        None => {
            diag.value(
                site,
                &path.key("port"),
                "required field `port` is missing (an unset port means \"all ports\", which is not supported)",
            );
            None
        }
        Some(n) => port_number(n).map_err(|e| diag.value(site, &path.key("port"), e)).ok(),
    };
    let proto =
        protocol(port.protocol.as_deref()).map_err(|e| diag.value(site, &path.key("protocol"), e)).ok()?;
    let sp = SlicePort { name: port.name.clone().unwrap_or_default(), port: number?, protocol: proto };
    if let Some(service) = service
        && !service.ports.iter().any(|p| p.name == sp.name && p.protocol == sp.protocol)
    {
        let ports =
            service.ports.iter().map(|p| format!("{} ({}/{})", display_name(&p.name), p.port, p.protocol));
        diag.value(
            site,
            path,
            format!(
                "port {} ({}) matches no port of Service {} (ports: {}); slice ports match service ports by name and protocol",
                display_name(&sp.name),
                sp.protocol,
                service.name,
                ports.collect::<Vec<_>>().join(", ")
            ),
        );
    }
    Some(sp)
}

fn display_name(name: &str) -> String {
    if name.is_empty() { "<unnamed>".to_string() } else { format!("{name:?}") }
}

fn read_endpoint(
    site: &Site<'_>,
    path: &FieldPath,
    ep: &k8s_openapi::api::discovery::v1::Endpoint,
    ports: &[Option<SlicePort>],
    cx: &Context<'_, '_>,
    owners: &NotPods<'_>,
    diag: &mut Diagnostics,
) -> Option<SliceEndpoint> {
    let addr_path = path.key("addresses").index(0);
    let text = match ep.addresses.as_slice() {
        [] => {
            diag.value(site, &path.key("addresses"), "an endpoint needs an address");
            return None;
        }
        [one] => one,
        [_, ..] => {
            diag.value(
                site,
                &path.key("addresses").index(1),
                "several addresses in one endpoint are ambiguous (kube-proxy uses only the first): give each its own endpoint",
            );
            return None;
        }
    };
    let ip = ip_at(site, &addr_path, text, diag)?;
    let node_path = path.key("nodeName");
    let node_name = ep.node_name.as_ref().filter(|n| cx.nodes.resolve(n, site, &node_path, diag).is_some());
    // endpointslicecache.go reads the zone names of forZones (TopologyAwareHints, on in v1.30).
    let zone_hints: Vec<String> =
        ep.hints.iter().flat_map(|h| h.for_zones.iter().flatten()).map(|z| z.name.clone()).collect();
    // An endpoint that is no pod: a machine outside the cluster (a selectorless Service in
    // front of an external database). The harness serves every port the slice names there.
    // Or a node's own address: a host-network endpoint, such as the API servers behind
    // `kubernetes.default`. The harness serves the slice's ports in the node's namespace.
    if let Some(&owner) = owners.0.get(&ip) {
        let c = ep.conditions.as_ref();
        let (ready, serving, terminating) = SliceEndpoint::conditions(
            c.and_then(|c| c.ready),
            c.and_then(|c| c.serving),
            c.and_then(|c| c.terminating),
        );
        let node = node_name.cloned();
        return Some(SliceEndpoint {
            ip,
            ready,
            serving,
            terminating,
            node,
            pod: owner.to_string(),
            zone_hints,
        });
    }
    let pod = pod_at(site, &addr_path, ip, cx.pods, diag)?;
    // Locality is nodeName alone, as kube-proxy reads it (pkg/proxy/endpointslicecache.go:
    // `isLocal` compares it with the proxy's hostname): a slice without it is local nowhere.
    if let Some(name) = node_name
        && *name != pod.node
    {
        diag.value(
            site,
            &node_path,
            format!("Pod {} at {ip} runs on node {}, not {name}", pod.name, pod.node),
        );
    }
    let node = node_name.cloned();
    for port in ports.iter().flatten() {
        if !pod.ports.iter().any(|p| p.port == port.port && p.protocol == port.protocol) {
            diag.value(site, &addr_path, undeclared_port(&pod.name, port.port, port.protocol));
        }
    }
    let c = ep.conditions.as_ref();
    let (ready, serving, terminating) = SliceEndpoint::conditions(
        c.and_then(|c| c.ready),
        c.and_then(|c| c.serving),
        c.and_then(|c| c.terminating),
    );
    Some(SliceEndpoint { ip, ready, serving, terminating, node, pod: pod.name.clone(), zone_hints })
}

pub(crate) fn undeclared_port(pod: &str, port: u16, protocol: Protocol) -> String {
    format!(
        "Pod {pod} declares no containerPort {port}/{protocol}; declare it in the Pod's spec.containers[].ports \
         (the harness serves declared container ports only)"
    )
}

/// The valid pod at `ip`; reports an address that is no pod's.
fn pod_at<'p>(
    site: &Site<'_>,
    path: &FieldPath,
    ip: IpAddr,
    pods: &'p Pods,
    diag: &mut Diagnostics,
) -> Option<&'p crate::model::Pod> {
    match pods.by_ip.get(&ip) {
        Some(name) => match pods.registry.get(name) {
            Lookup::Found(PodEntry { pod, .. }) => Some(pod),
            _ => None,
        },
        None if pods.ips_incomplete => None,
        None => {
            let addresses = pods.by_ip.iter().map(|(ip, name)| format!("{ip} {name}")).collect::<Vec<_>>();
            diag.value(
                site,
                path,
                format!(
                    "{ip} is not the address of any Pod or external host in the scenario (the harness needs one to \
                     answer; pods: {})",
                    known(addresses.iter().map(String::as_str))
                ),
            );
            None
        }
    }
}

/// The endpoints of each port of `service` (in port order), from every slice that belongs to it.
pub(crate) fn endpoints_for(service: &Service, slices: &[&SliceData]) -> Vec<Vec<Endpoint>> {
    service
        .ports
        .iter()
        .map(|sp| {
            // Kept in the model, by the hundred thousand: sized to the slices', not by doubling.
            let most = slices.iter().filter(|s| s.service == service.name).map(|s| s.endpoints.len()).sum();
            let mut out: Vec<Endpoint> = Vec::with_capacity(most);
            // A Service may have thousands of endpoints.
            let mut seen: HashSet<(IpAddr, u16)> = HashSet::new();
            for slice in slices.iter().filter(|s| s.service == service.name) {
                let Some(port) = slice.ports.iter().find(|p| p.name == sp.name && p.protocol == sp.protocol)
                else {
                    continue;
                };
                for ep in &slice.endpoints {
                    if !seen.insert((ep.ip, port.port)) {
                        continue;
                    }
                    out.push(Endpoint {
                        ip: ep.ip,
                        port: port.port,
                        ready: ep.ready,
                        serving: ep.serving,
                        terminating: ep.terminating,
                        node: ep.node.clone(),
                        pod: ep.pod.clone(),
                        zone_hints: ep.zone_hints.clone(),
                    });
                }
            }
            out.shrink_to_fit();
            out
        })
        .collect()
}
