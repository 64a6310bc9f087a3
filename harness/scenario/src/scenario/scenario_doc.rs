//! Our `kind: Scenario` document: its header, the cluster networks, nodes and external hosts.
//! Probes are only typed here; they are resolved once the Kubernetes objects are known, and
//! flows are generated then (`flows.rs`). The proxy's flags are read in `proxy_config.rs`.

use std::net::IpAddr;

use ipnet::IpNet;
use serde_json::Value;

use crate::model::{ExternalHost, IpFamily, Node, PerFamily, ProxyChoice, ProxyConfig, bridge_address};

use super::addresses::Addresses;
use super::de::typed;
use super::error::{Diagnostics, Site};
use super::flows::{self, Flows};
use super::host_routes;
use super::names::check_name;
use super::net::{cidr_at, ip_at, not_a_host_of, overlaps, parse_cidr};
use super::networks::Networks;
use super::proxy_config;
use super::registry::Registry;
use super::spec::{
    ClusterSpec, Envelope, ExternalHostSpec, Metadata, NodeSpec, ProbeSpec, ProxySpec, Sections,
};
use super::yaml::{Document, FieldPath};

pub(crate) struct ScenarioDoc<'a> {
    pub site: Option<Site<'a>>,
    pub name: Option<String>,
    pub description: Option<String>,
    pub proxy: ProxyChoice,
    pub proxy_config: ProxyConfig,
    pub networks: Networks,
    pub nodes: Registry<Node>,
    pub external_hosts: Registry<ExternalHost>,
    /// Probes that parsed, with their path (`spec.probes[N]`) and index.
    pub probes: Vec<(usize, FieldPath, ProbeSpec)>,
    /// `spec.flows` with `all: true`.
    pub flows: Option<Flows>,
    pub min_kernel: Option<crate::kernel::KernelVersion>,
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
            proxy: ProxyChoice::default_proxy(),
            proxy_config: ProxyConfig::default(),
            networks: Networks::default(),
            nodes,
            external_hosts,
            probes: Vec::new(),
            flows: None,
            min_kernel: None,
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
    // The name names the scenario's evidence folder under --artifacts and its report entries:
    // a name that is not a DNS-1123 subdomain ("/etc", "..", "") could write outside it.
    let name = match metadata.map(|m| m.name) {
        Some(name) => match check_name(&name) {
            Ok(()) => Some(name),
            Err(e) => {
                diag.value(&site, &FieldPath::parse("metadata.name"), e);
                None
            }
        },
        None => None,
    };
    let Some(sections) = typed::<Sections>(&site, &spec, diag) else {
        return ScenarioDoc { name, ..ScenarioDoc::unknown(Some(site)) };
    };

    let networks = read_networks(&site, diag);
    let nodes = read_nodes(&site, &networks, sections.nodes.len(), addresses, diag);
    let external_hosts =
        read_external_hosts(&site, &networks, sections.external_hosts.len(), &nodes, addresses, diag);

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

    let proxy = read_proxy(&site, sections.proxy, diag);
    let min_kernel = super::min_kernel::read(&site, diag);

    ScenarioDoc {
        name,
        description: sections.description,
        proxy,
        proxy_config,
        networks,
        nodes,
        external_hosts,
        probes,
        flows,
        min_kernel,
        site: Some(site),
    }
}

/// `spec.proxy`: the proxy's name and options (the admission stage asks whether it can be
/// built for this file).
fn read_proxy(site: &Site<'_>, spec: Option<ProxySpec>, diag: &mut Diagnostics) -> ProxyChoice {
    let path = FieldPath::parse("spec.proxy");
    match spec {
        None => ProxyChoice::default_proxy(),
        Some(ProxySpec::Name(name)) => ProxyChoice::named(&name),
        Some(ProxySpec::WithOptions(mut options)) => match options.remove("name") {
            Some(serde_json::Value::String(name)) => ProxyChoice { name, options },
            _ => {
                diag.value(site, &path, "a proxy with options needs `name:` (e.g. `name: command`)");
                ProxyChoice::default_proxy()
            }
        },
    }
}

fn read_networks(site: &Site<'_>, diag: &mut Diagnostics) -> Networks {
    let path = FieldPath::parse("spec.cluster");
    let Some(spec) = typed::<ClusterSpec>(site, &path, diag) else { return Networks::default() };
    let fields = [
        ("podCIDR", &spec.pod_cidr),
        ("serviceCIDR", &spec.service_cidr),
        ("nodeNetwork", &spec.node_network),
    ];
    let node_port_range = spec.service_node_port_range.as_deref().and_then(|text| {
        let range = text
            .split_once('-')
            .and_then(|(a, b)| Some(a.trim().parse::<u16>().ok()?..=b.trim().parse::<u16>().ok()?))
            .filter(|r| *r.start() >= 1 && r.start() <= r.end());
        if range.is_none() {
            diag.value(
                site,
                &path.key("serviceNodePortRange"),
                format!("{text:?} is not a port range: write FIRST-LAST, e.g. 30000-32767"),
            );
        }
        range
    });
    // A list of two makes the cluster dual-stack; then every network lists one per family.
    let dual = fields.iter().any(|(_, v)| v.items().len() == 2);
    let mut read = [[None, None], [None, None], [None, None]];
    let mut primary: Option<(IpFamily, &str)> = None;
    for (i, (field, value)) in fields.iter().enumerate() {
        let items = value.items();
        let at = |k: usize| if value.is_list() { path.key(field).index(k) } else { path.key(field) };
        if items.is_empty() || items.len() > 2 {
            diag.value(site, &path.key(field), "one CIDR, or a list of two: one per family, primary first");
            continue;
        }
        if !dual {
            read[i][0] = cidr_at(site, &at(0), items[0], diag);
            continue;
        }
        if items.len() == 1 {
            diag.value(
                site,
                &path.key(field),
                "the cluster is dual-stack (a network lists two CIDRs): list one CIDR of each family here too, \
                 primary first",
            );
            continue;
        }
        for (k, text) in items.iter().enumerate() {
            read[i][k] = parse_cidr(text).map_err(|e| diag.value(site, &at(k), e)).ok();
        }
        if let [Some(a), Some(b)] = read[i] {
            if IpFamily::of_net(&a) == IpFamily::of_net(&b) {
                diag.value(
                    site,
                    &at(1),
                    format!(
                        "{b} is {} like {a}: a dual-stack cluster lists one CIDR of each family",
                        IpFamily::of_net(&b)
                    ),
                );
                read[i] = [None, None];
            } else if let Some((family, first)) = primary
                && family != IpFamily::of_net(&a)
            {
                diag.value(
                    site,
                    &at(0),
                    format!(
                        "{a} is {}, but the primary family (the first CIDR of {first}) is {family}: \
                         list the primary family first",
                        IpFamily::of_net(&a)
                    ),
                );
                read[i] = [None, None];
            } else {
                primary.get_or_insert((IpFamily::of_net(&a), field));
            }
        }
    }
    let families = match (dual, primary) {
        (true, Some((p, _))) => vec![p, if p == IpFamily::V4 { IpFamily::V6 } else { IpFamily::V4 }],
        (false, _) => read.iter().find_map(|r| r[0]).map(|n| IpFamily::of_net(&n)).into_iter().collect(),
        (true, None) => Vec::new(),
    };
    if dual {
        diag.families.set_dual();
    }
    let networks_of = |k: usize| Networks {
        pod_cidr: read[0][k],
        service_cidr: read[1][k],
        node_network: read[2][k],
        second: None,
        families: families.clone(),
        node_port_range: node_port_range.clone(),
    };
    let second = dual.then(|| Box::new(networks_of(1)));
    let networks = Networks { second, ..networks_of(0) };
    // Traffic is routed by which of these it falls in; overlapping ones are ambiguous.
    for k in 0..2 {
        let named: Vec<(&str, Option<IpNet>)> =
            fields.iter().zip(&read).map(|((f, _), r)| (*f, r[k])).collect();
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
    // None is fine here when Node objects follow (`node_objects` checks that some node exists).
    let mut nodes: Registry<Node> = Registry::new("node");
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
        let ips = per_family(site, &path, ("ip", "ips"), spec.ip.as_ref(), spec.ips.as_ref(), networks, diag);
        let cidrs = per_family(
            site,
            &path,
            ("podCIDR", "podCIDRs"),
            spec.pod_cidr.as_ref(),
            spec.pod_cidrs.as_ref(),
            networks,
            diag,
        );
        let mut read_ips = Vec::new();
        for (at, text) in ips.iter().flatten() {
            let family = super::net::parse_ip(text).map(IpFamily::of).ok();
            let net = family.and_then(|f| networks.of(f).node_network);
            let ip = host_ip(site, at, text, net, diag);
            if let Some(ip) = ip {
                addresses.claim(ip, format!("node {}", spec.name), site, at, diag);
            }
            read_ips.push(ip);
        }
        let mut read_cidrs = Vec::new();
        for (at, text) in cidrs.iter().flatten() {
            let cidr = cidr_at(site, at, text, diag);
            if let Some(cidr) = cidr {
                let cluster = networks.of(IpFamily::of_net(&cidr)).pod_cidr;
                check_node_pod_cidr(site, at, &cidr, cluster, &nodes, diag);
                addresses.claim(
                    bridge_address(&cidr),
                    format!("the pod bridge of node {}", spec.name),
                    site,
                    at,
                    diag,
                );
            }
            read_cidrs.push(cidr);
        }
        check_families(site, &path, ("ips", "podCIDRs"), &ips, &read_ips, &read_cidrs, networks, diag);
        let secondary_ips = read_secondary_ips(site, &path, &spec, networks, addresses, diag);
        let node = match (read_ips.as_slice(), read_cidrs.as_slice(), secondary_ips) {
            ([Some(ip)], [Some(pod_cidr)], Some(secondary_ips)) if !networks.is_dual() => Some(Node {
                name: spec.name.clone(),
                ips: PerFamily::single(*ip),
                secondary_ips,
                pod_cidrs: PerFamily::single(*pod_cidr),
                zone: spec.zone.clone(),
            }),
            // Two of one family were reported by check_families.
            ([Some(ip), Some(ip2)], [Some(pod_cidr), Some(cidr2)], Some(secondary_ips))
                if networks.is_dual() =>
            {
                let ips = PerFamily::pair(*ip, Some(*ip2));
                let pod_cidrs = PerFamily::pair(*pod_cidr, Some(*cidr2));
                ips.zip(pod_cidrs).map(|(ips, pod_cidrs)| Node {
                    name: spec.name.clone(),
                    ips,
                    secondary_ips,
                    pod_cidrs,
                    zone: spec.zone.clone(),
                })
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
        let net = super::net::parse_ip(text).ok().and_then(|ip| networks.of(IpFamily::of(ip)).node_network);
        match host_ip(site, &at, text, net, diag) {
            Some(ip) => {
                addresses.claim(ip, format!("node {}", spec.name), site, &at, diag);
                addresses.mark_secondary(ip);
                if let Some(ips) = &mut ips {
                    ips.push(ip);
                }
            }
            None => ips = None,
        }
    }
    ips
}

pub(super) fn check_node_pod_cidr(
    site: &Site<'_>,
    path: &FieldPath,
    cidr: &IpNet,
    cluster: Option<IpNet>,
    nodes: &Registry<Node>,
    diag: &mut Diagnostics,
) {
    if let Some(cluster) = cluster
        && !cluster.contains(cidr)
    {
        diag.value(site, path, format!("{cidr} is not inside the cluster podCIDR {cluster}"));
    }
    if cidr.hosts().nth(1).is_none() {
        diag.value(site, path, format!("{cidr} is too small: the node's pod bridge takes the first address"));
    }
    let theirs = nodes.values().flat_map(|n| n.pod_cidrs.copied().map(move |c| (c, n)));
    if let Some((other, node)) = theirs.into_iter().find(|(c, _)| overlaps(c, cidr)) {
        diag.value(site, path, format!("{cidr} overlaps the podCIDR {other} of node {}", node.name));
    }
}

fn read_external_hosts(
    site: &Site<'_>,
    networks: &Networks,
    count: usize,
    nodes: &Registry<Node>,
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
        let ips = per_family(site, &path, ("ip", "ips"), spec.ip.as_ref(), spec.ips.as_ref(), networks, diag);
        let mut read_ips = Vec::new();
        for (at, text) in ips.iter().flatten() {
            let net =
                super::net::parse_ip(text).ok().and_then(|ip| networks.of(IpFamily::of(ip)).node_network);
            let ip = host_ip(site, at, text, net, diag);
            if let Some(ip) = ip {
                addresses.claim(ip, format!("external host {}", spec.name), site, at, diag);
            }
            read_ips.push(ip);
        }
        if let [Some(a), Some(b)] = read_ips.as_slice()
            && IpFamily::of(*a) == IpFamily::of(*b)
        {
            let message = format!("{b} is {} like {a}: list one address per family", IpFamily::of(*b));
            diag.value(site, &path.key("ips").index(1), message);
        }
        let own: Vec<IpAddr> = read_ips.iter().flatten().copied().collect();
        let routes = host_routes::read(site, &path.key("routes"), &spec.routes, &own, networks, nodes, diag);
        let host = |ips| ExternalHost { name: spec.name.clone(), ips, routes };
        let host = match read_ips.as_slice() {
            [Some(ip)] => Some(host(PerFamily::single(*ip))),
            // Two of one family were reported above.
            [Some(ip), Some(second)] => PerFamily::pair(*ip, Some(*second)).map(host),
            _ => None,
        };
        hosts.define(&spec.name, host, site, &path.key("name"), diag);
    }
    hosts
}

/// The entries of a per-family field: `one` (e.g. `ip`) or `list` (`ips`), each with its
/// path; `None` (reported) when neither or both are given, or the list has no entry or more
/// entries than the cluster has families.
fn per_family<'t>(
    site: &Site<'_>,
    path: &FieldPath,
    (one_name, list_name): (&str, &str),
    one: Option<&'t String>,
    list: Option<&'t Vec<String>>,
    networks: &Networks,
    diag: &mut Diagnostics,
) -> Option<Vec<(FieldPath, &'t str)>> {
    match (one, list) {
        (Some(one), None) => Some(vec![(path.key(one_name), one.as_str())]),
        (None, Some(list)) if list.is_empty() || list.len() > 2.max(networks.families.len()) => {
            let most = if networks.is_dual() {
                "one or two: one per family"
            } else {
                "one (the cluster is single-stack)"
            };
            diag.value(
                site,
                &path.key(list_name),
                format!("{list_name} lists {} entries; expected {most}", list.len()),
            );
            None
        }
        (None, Some(list)) => {
            Some(list.iter().enumerate().map(|(k, t)| (path.key(list_name).index(k), t.as_str())).collect())
        }
        (Some(_), Some(_)) => {
            diag.value(site, &path.key(list_name), format!("give {one_name} or {list_name}, not both"));
            None
        }
        (None, None) => {
            diag.value(site, path, format!("required field `{one_name}` (or `{list_name}`) is missing"));
            None
        }
    }
}

/// A node of a dual-stack cluster has an address and a pod CIDR of each family, primary
/// first; of a single-stack one, one of each.
#[allow(clippy::too_many_arguments)]
fn check_families(
    site: &Site<'_>,
    path: &FieldPath,
    (ips_name, cidrs_name): (&str, &str),
    given: &Option<Vec<(FieldPath, &str)>>,
    ips: &[Option<IpAddr>],
    cidrs: &[Option<IpNet>],
    networks: &Networks,
    diag: &mut Diagnostics,
) {
    let families = &networks.families;
    if networks.is_dual() {
        for (name, n) in [(ips_name, ips.len()), (cidrs_name, cidrs.len())] {
            if n == 1 {
                // No primary family when no network lists a valid pair (reported there).
                let first = families.first().map(|f| format!(" ({f} first)")).unwrap_or_default();
                diag.value(
                    site,
                    &path.key(name),
                    format!(
                        "the cluster is dual-stack: a node needs {name} with one entry per family{first}"
                    ),
                );
            }
        }
        let check = |name: &str, k: usize, family: IpFamily, shown: String, diag: &mut Diagnostics| {
            if families.get(k).is_some_and(|&f| f != family) {
                let which = if k == 0 { "primary" } else { "second" };
                diag.value(
                    site,
                    &path.key(name).index(k),
                    format!(
                        "{shown} is {family}, but entry {k} is for the cluster's {which} family, {}",
                        families[k]
                    ),
                );
            }
        };
        if given.as_ref().is_some_and(|g| g.len() == 2) {
            for (k, ip) in ips.iter().enumerate() {
                if let Some(ip) = ip {
                    check(ips_name, k, IpFamily::of(*ip), ip.to_string(), diag);
                }
            }
        }
        if cidrs.len() == 2 {
            for (k, c) in cidrs.iter().enumerate() {
                if let Some(c) = c {
                    check(cidrs_name, k, IpFamily::of_net(c), c.to_string(), diag);
                }
            }
        }
    }
}

/// Parses an address that must be a usable host address of `network` (when that is known).
/// Returns the address even when it is outside, so later checks can still use it.
pub(super) fn host_ip(
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
