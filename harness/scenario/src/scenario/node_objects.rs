//! Node objects pasted from a cluster (`kubectl get nodes -o yaml`), read into the same nodes
//! as the Scenario document's `spec.nodes`: the node IP of each family as kube-proxy takes it,
//! further InternalIPs as secondary addresses, the pod CIDRs and the zone label.
//!
//! The cluster networks are not in any Node (`--cluster-cidr` is kube-proxy's flag, the service
//! range the API server's, the node subnet the machines'), so `spec.cluster` stays required.

use std::net::IpAddr;

use k8s_openapi::api::core::v1::Node as K8sNode;
use serde_json::Value;

use crate::model::{IpFamily, Node, PerFamily, bridge_address};

use super::addresses::Addresses;
use super::error::{Diagnostics, Site};
use super::kind::Kind;
use super::names::check_name;
use super::net::{cidr_at, parse_cidr, parse_ip};
use super::networks::Networks;
use super::objects::{Parsed, Unparsed};
use super::registry::{Lookup, Registry};
use super::scenario_doc::{check_node_pod_cidr, host_ip};
use super::yaml::FieldPath;

/// The label kube-proxy's topology code reads (pkg/proxy/topology.go, v1.LabelTopologyZone).
const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// Adds every Node object to `nodes` (after the Scenario document's) and reports a cluster
/// with no node at all, at `spec.nodes` of the Scenario document (`scenario`).
pub(crate) fn read(
    objects: &[Parsed<'_, K8sNode>],
    unparsed: &[Unparsed<'_>],
    scenario: Option<&Site<'_>>,
    networks: &Networks,
    nodes: &mut Registry<Node>,
    addresses: &mut Addresses,
    diag: &mut Diagnostics,
) {
    for u in unparsed.iter().filter(|u| u.kind == Kind::Node) {
        match &u.name {
            Some(name) => nodes.define(name, None, &u.site, &FieldPath::parse("metadata.name"), diag),
            None => nodes.mark_incomplete(),
        }
    }
    for object in objects {
        // A second definition is reported as such, not as a node whose addresses are taken.
        let duplicate = !matches!(nodes.get(&object.name), Lookup::Missing);
        let node = if duplicate { None } else { read_one(object, networks, nodes, addresses, diag) };
        nodes.define(&object.name, node, &object.site, &FieldPath::parse("metadata.name"), diag);
    }
    if let Some(site) = scenario
        && nodes.names().next().is_none()
        && !nodes.is_incomplete()
    {
        diag.value(
            site,
            &FieldPath::parse("spec.nodes"),
            "at least one node is required: list them in spec.nodes, or paste Node objects \
             (kubectl get nodes -o yaml) after the Scenario document",
        );
    }
}

/// One Node; `None` (reported) when it lacks what the harness needs to build it.
fn read_one(
    object: &Parsed<'_, K8sNode>,
    networks: &Networks,
    nodes: &Registry<Node>,
    addresses: &mut Addresses,
    diag: &mut Diagnostics,
) -> Option<Node> {
    let site = &object.site;
    let name = &object.name;
    if let Err(e) = check_name(name) {
        diag.value(site, &FieldPath::parse("metadata.name"), e);
    }
    // Families unknown (the networks were broken, and reported): nothing can be checked.
    let families = networks.families.clone();
    families.first()?;
    let mut ips = Vec::new();
    let mut secondary_ips = Some(Vec::new());
    for family in &families {
        let (chosen, extra) = addresses_of(&site.doc.value, *family);
        let Some((at, text)) = chosen else {
            diag.value(
                site,
                &FieldPath::parse("status.addresses"),
                format!(
                    "Node {name} has no {family} InternalIP (nor ExternalIP): kube-proxy takes the node's \
                     {family} address from status.addresses, and the harness gives it to the node"
                ),
            );
            ips.push(None);
            continue;
        };
        let ip = node_ip(site, &at, &text, networks, name, addresses, diag);
        ips.push(ip);
        for (at, text) in extra {
            match node_ip(site, &at, &text, networks, name, addresses, diag) {
                Some(ip) => secondary_ips.iter_mut().for_each(|s| s.push(ip)),
                None => secondary_ips = None,
            }
        }
    }
    let mut cidrs = Vec::new();
    let given = pod_cidrs(site, diag)?;
    for family in &families {
        let Some((at, text)) =
            given.iter().find(|(_, t)| parse_cidr(t).is_ok_and(|c| IpFamily::of_net(&c) == *family))
        else {
            diag.value(
                site,
                &FieldPath::parse("spec"),
                format!(
                    "Node {name} has no {family} pod CIDR (spec.podCIDRs): the harness puts the node's pods \
                     there (a cluster whose CNI ignores node pod CIDRs is not modelled)"
                ),
            );
            cidrs.push(None);
            continue;
        };
        let cidr = cidr_at(site, at, text, diag);
        if let Some(cidr) = cidr {
            check_node_pod_cidr(site, at, &cidr, networks.of(*family).pod_cidr, nodes, diag);
            addresses.claim(bridge_address(&cidr), format!("the pod bridge of node {name}"), site, at, diag);
        }
        cidrs.push(cidr);
    }
    let zone = FieldPath::parse("metadata.labels").key(ZONE_LABEL).lookup(&site.doc.value);
    let zone = zone.and_then(Value::as_str).map(str::to_string);
    let secondary_ips = secondary_ips?;
    // One address and one pod CIDR of each family, chosen family by family above.
    let (ips, pod_cidrs) = match (ips.as_slice(), cidrs.as_slice()) {
        ([Some(ip)], [Some(cidr)]) => (PerFamily::single(*ip), PerFamily::single(*cidr)),
        ([Some(ip), Some(ip2)], [Some(cidr), Some(cidr2)]) => {
            (PerFamily::pair(*ip, Some(*ip2))?, PerFamily::pair(*cidr, Some(*cidr2))?)
        }
        _ => return None,
    };
    Some(Node { name: name.clone(), ips, secondary_ips, pod_cidrs, zone })
}

/// A node address on the node network of its family, claimed for the node.
fn node_ip(
    site: &Site<'_>,
    at: &FieldPath,
    text: &str,
    networks: &Networks,
    name: &str,
    addresses: &mut Addresses,
    diag: &mut Diagnostics,
) -> Option<IpAddr> {
    let net = parse_ip(text).ok().and_then(|ip| networks.of(IpFamily::of(ip)).node_network);
    let ip = host_ip(site, at, text, net, diag)?;
    addresses.claim(ip, format!("node {name}"), site, at, diag);
    Some(ip)
}

/// The node's address of `family` as kube-proxy picks it (pkg/util/node GetNodeHostIPs: the
/// first InternalIP, else the first ExternalIP), and the node's further InternalIPs of that
/// family, each with the path of its `address`. Other addresses (Hostname, InternalDNS,
/// another family) are not the proxy's concern.
#[allow(clippy::type_complexity)]
fn addresses_of(node: &Value, family: IpFamily) -> (Option<(FieldPath, String)>, Vec<(FieldPath, String)>) {
    let list = FieldPath::parse("status.addresses");
    let entries = list.lookup(node).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let of_type = |wanted: &str| -> Vec<(FieldPath, String)> {
        entries
            .iter()
            .enumerate()
            .filter(|(_, a)| a.get("type").and_then(Value::as_str) == Some(wanted))
            .filter_map(|(k, a)| {
                let text = a.get("address").and_then(Value::as_str)?;
                // An unreadable address counts as of every family, so it is reported, not skipped.
                let fits = parse_ip(text).map_or(true, |ip| IpFamily::of(ip) == family);
                fits.then(|| (list.index(k).key("address"), text.to_string()))
            })
            .collect()
    };
    let mut internal = of_type("InternalIP").into_iter();
    match internal.next() {
        Some(first) => (Some(first), internal.collect()),
        None => (of_type("ExternalIP").into_iter().next(), Vec::new()),
    }
}

/// `spec.podCIDRs`, or `spec.podCIDR` alone (older objects), each with its path; `None`
/// (reported) when they disagree, as the API server's validation forbids.
fn pod_cidrs(site: &Site<'_>, diag: &mut Diagnostics) -> Option<Vec<(FieldPath, String)>> {
    let value = &site.doc.value;
    let one_path = FieldPath::parse("spec.podCIDR");
    let list_path = FieldPath::parse("spec.podCIDRs");
    let one = one_path.lookup(value).and_then(Value::as_str).filter(|s| !s.is_empty());
    let list: Vec<(FieldPath, String)> = list_path
        .lookup(value)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
        .filter_map(|(k, c)| Some((list_path.index(k), c.as_str()?.to_string())))
        .collect();
    match (one, list.first()) {
        (Some(one), Some((_, first))) if one != first => {
            diag.value(
                site,
                &one_path,
                format!("podCIDR {one} is not podCIDRs[0] {first}: podCIDR must be the first of podCIDRs"),
            );
            None
        }
        (Some(one), None) => Some(vec![(one_path, one.to_string())]),
        _ => Some(list),
    }
}
