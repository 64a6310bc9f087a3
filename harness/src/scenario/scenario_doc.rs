//! Our `kind: Scenario` document: its header, the cluster networks, nodes and external hosts.
//! Probes are only typed here; they are resolved once the Kubernetes objects are known, and
//! flows are generated then (`flows.rs`). The proxy's flags are read in `proxy_config.rs`.

use std::net::IpAddr;

use ipnet::IpNet;
use serde_json::Value;

use crate::model::{ExternalHost, Node, ProxyConfig, bridge_address};

use super::addresses::Addresses;
use super::de::typed;
use super::error::{Diagnostics, Site};
use super::flows::{self, Flows};
use super::names::check_name;
use super::net::{cidr_at, ip_at, not_a_host_of, overlaps};
use super::proxy_config;
use super::registry::Registry;
use super::spec::{ClusterSpec, Envelope, ExternalHostSpec, Metadata, NodeSpec, ProbeSpec, Sections};
use super::yaml::{Document, FieldPath};

pub(crate) const DEFAULT_PROXY: &str = "builtin-iptables";

/// The cluster networks; each is `None` when it was invalid (and reported).
#[derive(Default)]
pub(crate) struct Networks {
    pub pod_cidr: Option<IpNet>,
    pub service_cidr: Option<IpNet>,
    pub node_network: Option<IpNet>,
}

pub(crate) struct ScenarioDoc<'a> {
    pub site: Option<Site<'a>>,
    pub name: Option<String>,
    pub description: Option<String>,
    pub proxy: String,
    pub proxy_config: ProxyConfig,
    pub networks: Networks,
    pub nodes: Registry<Node>,
    pub external_hosts: Registry<ExternalHost>,
    /// Probes that parsed, with their path (`spec.probes[N]`) and index.
    pub probes: Vec<(usize, FieldPath, ProbeSpec)>,
    /// `spec.flows` with `all: true`.
    pub flows: Option<Flows>,
}

impl ScenarioDoc<'_> {
    /// Nothing is known: the document is missing or unreadable, so nothing it would define may
    /// be reported as unknown elsewhere.
    fn unknown(site: Option<Site<'_>>) -> ScenarioDoc<'_> {
        let mut nodes = Registry::new("node");
        let mut external_hosts = Registry::new("external host");
        nodes.mark_incomplete();
        external_hosts.mark_incomplete();
        ScenarioDoc {
            site,
            name: None,
            description: None,
            proxy: DEFAULT_PROXY.to_string(),
            proxy_config: ProxyConfig::default(),
            networks: Networks::default(),
            nodes,
            external_hosts,
            probes: Vec::new(),
            flows: None,
        }
    }
}

pub(crate) fn read<'a>(
    doc: Option<&'a Document>,
    addresses: &mut Addresses,
    diag: &mut Diagnostics,
) -> ScenarioDoc<'a> {
    let Some(doc) = doc else { return ScenarioDoc::unknown(None) };
    let site = Site::new(doc, "");
    let spec = FieldPath::parse("spec");
    if typed::<Envelope>(&site, &FieldPath::root(), diag).is_none() {
        return ScenarioDoc::unknown(Some(site));
    }
    let metadata: Option<Metadata> = typed(&site, &FieldPath::parse("metadata"), diag);
    let name = metadata.map(|m| m.name);
    let Some(sections) = typed::<Sections>(&site, &spec, diag) else {
        return ScenarioDoc { name, ..ScenarioDoc::unknown(Some(site)) };
    };

    let networks = read_networks(&site, diag);
    let nodes = read_nodes(&site, &networks, sections.nodes.len(), addresses, diag);
    let external_hosts =
        read_external_hosts(&site, &networks, sections.external_hosts.len(), addresses, diag);

    let proxy_config = proxy_config::read(&site, diag);
    let before = diag.count();
    let flows = flows::read(&site, diag);
    // Flows that could not be read may have been meant to replace the probes.
    let flows_broken = diag.count() > before;
    let mut probes = Vec::new();
    if sections.probes.is_empty() && flows.is_none() && !flows_broken {
        diag.value(
            &site,
            &spec.key("probes"),
            "at least one probe is required (or generate them with flows: {all: true})",
        );
    }
    for i in 0..sections.probes.len() {
        let path = spec.key("probes").index(i);
        if let Some(probe) = typed::<ProbeSpec>(&site, &path, diag) {
            probes.push((i, path, probe));
        }
    }

    if let Some(proxy) = &sections.proxy
        && !crate::proxy::KNOWN_PROXIES.contains(&proxy.as_str())
    {
        let known = crate::proxy::KNOWN_PROXIES.join(", ");
        diag.value(
            &site,
            &FieldPath::parse("spec.proxy"),
            format!("unknown proxy {proxy:?} (known: {known})"),
        );
    }

    ScenarioDoc {
        name,
        description: sections.description,
        proxy: sections.proxy.unwrap_or_else(|| DEFAULT_PROXY.to_string()),
        proxy_config,
        networks,
        nodes,
        external_hosts,
        probes,
        flows,
        site: Some(site),
    }
}

fn read_networks(site: &Site<'_>, diag: &mut Diagnostics) -> Networks {
    let path = FieldPath::parse("spec.cluster");
    let Some(spec) = typed::<ClusterSpec>(site, &path, diag) else { return Networks::default() };
    let mut cidr = |field: &str, text: &str| cidr_at(site, &path.key(field), text, diag);
    let networks = Networks {
        pod_cidr: cidr("podCIDR", &spec.pod_cidr),
        service_cidr: cidr("serviceCIDR", &spec.service_cidr),
        node_network: cidr("nodeNetwork", &spec.node_network),
    };
    // Traffic is routed by which of these it falls in; overlapping ones are ambiguous.
    let named = [
        ("podCIDR", networks.pod_cidr),
        ("serviceCIDR", networks.service_cidr),
        ("nodeNetwork", networks.node_network),
    ];
    for (i, (field, net)) in named.iter().enumerate() {
        for (other, other_net) in &named[..i] {
            if let (Some(a), Some(b)) = (net, other_net)
                && overlaps(a, b)
            {
                diag.value(
                    site,
                    &path.key(field),
                    format!("{a} overlaps {other} {b}; the cluster networks must be disjoint"),
                );
            }
        }
    }
    networks
}

/// The `name` of a list item that failed to parse, so it still counts as defined.
fn raw_name(site: &Site<'_>, path: &FieldPath) -> Option<String> {
    path.key("name").lookup(&site.doc.value).and_then(Value::as_str).map(str::to_string)
}

fn read_nodes(
    site: &Site<'_>,
    networks: &Networks,
    count: usize,
    addresses: &mut Addresses,
    diag: &mut Diagnostics,
) -> Registry<Node> {
    let list = FieldPath::parse("spec.nodes");
    let mut nodes: Registry<Node> = Registry::new("node");
    if count == 0 {
        diag.value(site, &list, "at least one node is required");
    }
    for i in 0..count {
        let path = list.index(i);
        let Some(spec) = typed::<NodeSpec>(site, &path, diag) else {
            match raw_name(site, &path) {
                Some(name) => nodes.define(&name, None, site, &path.key("name"), diag),
                None => nodes.mark_incomplete(),
            }
            continue;
        };
        if let Err(e) = check_name(&spec.name) {
            diag.value(site, &path.key("name"), e);
        }
        let ip = host_ip(site, &path.key("ip"), &spec.ip, networks.node_network, diag);
        let pod_cidr = cidr_at(site, &path.key("podCIDR"), &spec.pod_cidr, diag);
        if let Some(cidr) = pod_cidr {
            check_node_pod_cidr(site, &path.key("podCIDR"), &cidr, networks, &nodes, diag);
            addresses.claim(
                bridge_address(&cidr),
                format!("the pod bridge of node {}", spec.name),
                site,
                &path.key("podCIDR"),
                diag,
            );
        }
        if let Some(ip) = ip {
            addresses.claim(ip, format!("node {}", spec.name), site, &path.key("ip"), diag);
        }
        let secondary_ips = read_secondary_ips(site, &path, &spec, networks, addresses, diag);
        let node = match (ip, pod_cidr, secondary_ips) {
            (Some(ip), Some(pod_cidr), Some(secondary_ips)) => {
                Some(Node { name: spec.name.clone(), ip, secondary_ips, pod_cidr })
            }
            _ => None,
        };
        nodes.define(&spec.name, node, site, &path.key("name"), diag);
    }
    nodes
}

/// `secondaryIPs` of a node: on the node network, nobody else's. `None` when one can't be
/// read, so the node counts as broken rather than as lacking that address.
fn read_secondary_ips(
    site: &Site<'_>,
    path: &FieldPath,
    spec: &NodeSpec,
    networks: &Networks,
    addresses: &mut Addresses,
    diag: &mut Diagnostics,
) -> Option<Vec<IpAddr>> {
    let mut ips = Some(Vec::new());
    for (k, text) in spec.secondary_ips.iter().enumerate() {
        let at = path.key("secondaryIPs").index(k);
        match host_ip(site, &at, text, networks.node_network, diag) {
            Some(ip) => {
                addresses.claim(ip, format!("node {}", spec.name), site, &at, diag);
                if let Some(ips) = &mut ips {
                    ips.push(ip);
                }
            }
            None => ips = None,
        }
    }
    ips
}

fn check_node_pod_cidr(
    site: &Site<'_>,
    path: &FieldPath,
    cidr: &IpNet,
    networks: &Networks,
    nodes: &Registry<Node>,
    diag: &mut Diagnostics,
) {
    if let Some(cluster) = networks.pod_cidr
        && !cluster.contains(cidr)
    {
        diag.value(site, path, format!("{cidr} is not inside the cluster podCIDR {cluster}"));
    }
    if cidr.hosts().nth(1).is_none() {
        diag.value(site, path, format!("{cidr} is too small: the node's pod bridge takes the first address"));
    }
    if let Some(other) = nodes.values().find(|n| overlaps(&n.pod_cidr, cidr)) {
        diag.value(
            site,
            path,
            format!("{cidr} overlaps the podCIDR {} of node {}", other.pod_cidr, other.name),
        );
    }
}

fn read_external_hosts(
    site: &Site<'_>,
    networks: &Networks,
    count: usize,
    addresses: &mut Addresses,
    diag: &mut Diagnostics,
) -> Registry<ExternalHost> {
    let list = FieldPath::parse("spec.externalHosts");
    let mut hosts: Registry<ExternalHost> = Registry::new("external host");
    for i in 0..count {
        let path = list.index(i);
        let Some(spec) = typed::<ExternalHostSpec>(site, &path, diag) else {
            match raw_name(site, &path) {
                Some(name) => hosts.define(&name, None, site, &path.key("name"), diag),
                None => hosts.mark_incomplete(),
            }
            continue;
        };
        if let Err(e) = check_name(&spec.name) {
            diag.value(site, &path.key("name"), e);
        }
        let ip = host_ip(site, &path.key("ip"), &spec.ip, networks.node_network, diag);
        if let Some(ip) = ip {
            addresses.claim(ip, format!("external host {}", spec.name), site, &path.key("ip"), diag);
        }
        let host = ip.map(|ip| ExternalHost { name: spec.name.clone(), ip });
        hosts.define(&spec.name, host, site, &path.key("name"), diag);
    }
    hosts
}

/// Parses an address that must be a usable host address of `network` (when that is known).
/// Returns the address even when it is outside, so later checks can still use it.
fn host_ip(
    site: &Site<'_>,
    path: &FieldPath,
    text: &str,
    network: Option<IpNet>,
    diag: &mut Diagnostics,
) -> Option<IpAddr> {
    let ip = ip_at(site, path, text, diag)?;
    if let Some(net) = network
        && let Some(e) = not_a_host_of(ip, &net, &format!("nodeNetwork {net}"))
    {
        diag.value(site, path, e);
    }
    Some(ip)
}
