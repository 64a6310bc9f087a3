//! `externalHosts[].routes`: an outside host's routes through nodes, as a router that learned
//! the cluster's service CIDR over BGP (or a static route to a node) has them. With one,
//! external → cluster IP is a flow kube-proxy serves: the node it enters masquerades it, as
//! traffic from outside the pod CIDR (pkg/proxy/iptables/proxier.go, `localDetector.IfNotLocal`
//! on the cluster-IP rule of KUBE-SVC chains).

use std::net::IpAddr;

use crate::model::{HostRoute, IpFamily, Node};

use super::error::{Diagnostics, Site};
use super::net::parse_cidr;
use super::networks::Networks;
use super::registry::Registry;
use super::spec::HostRouteSpec;
use super::yaml::FieldPath;

/// The routes at `path` (`spec.externalHosts[i].routes`) of a host with addresses `host_ips`;
/// wrong ones are reported and left out.
pub(crate) fn read(
    site: &Site<'_>,
    path: &FieldPath,
    specs: &[HostRouteSpec],
    host_ips: &[IpAddr],
    networks: &Networks,
    nodes: &Registry<Node>,
    diag: &mut Diagnostics,
) -> Vec<HostRoute> {
    let mut routes: Vec<HostRoute> = Vec::new();
    for (k, spec) in specs.iter().enumerate() {
        let at = path.index(k);
        let to = match parse_cidr(&spec.to) {
            Ok(to) => to,
            Err(e) => {
                diag.value(site, &at.key("to"), e);
                continue;
            }
        };
        let family = IpFamily::of_net(&to);
        if !host_ips.iter().any(|ip| IpFamily::of(*ip) == family) {
            diag.value(
                site,
                &at.key("to"),
                format!("{to} is {family}, and this host has no {family} address"),
            );
            continue;
        }
        if let Some(own) = networks.of(family).node_network
            && (own.contains(&to.network()) || to.contains(&own.network()))
        {
            diag.value(
                site,
                &at.key("to"),
                format!("{to} overlaps the node network {own}, which the host reaches directly"),
            );
            continue;
        }
        if let Some(earlier) = routes.iter().position(|r| r.to == to) {
            diag.value(site, &at.key("to"), format!("{to} is already routed (routes[{earlier}])"));
            continue;
        }
        let Some(node) = nodes.resolve(&spec.via, site, &at.key("via"), diag) else { continue };
        if node.ips.get(family).is_none() {
            diag.value(
                site,
                &at.key("via"),
                format!("node {} has no {family} address to route {to} through", node.name),
            );
            continue;
        }
        routes.push(HostRoute { to, via: node.name.clone() });
    }
    routes
}
