//! `spec.proxyConfig` → `model::ProxyConfig`: kube-proxy's flags that change what traffic
//! means, with kube-proxy's defaults.

use ipnet::IpNet;

use crate::model::{IpFamily, ProxyConfig};

use super::de::typed;
use super::detect_local;
use super::error::{Diagnostics, Site};
use super::net::parse_cidr;
use super::spec::ProxyConfigSpec;
use super::yaml::FieldPath;

/// Off in v1.30 (alpha), on from v1.31: kube-proxy then uses topology hints without the
/// Service's hints annotation (pkg/proxy/topology.go canUseTopology).
const TRAFFIC_DISTRIBUTION_GATE: &str = "ServiceTrafficDistribution";

pub(crate) fn read(site: &Site<'_>, diag: &mut Diagnostics) -> ProxyConfig {
    let path = FieldPath::parse("spec.proxyConfig");
    let defaults = ProxyConfig::default();
    let Some(spec) = typed::<Option<ProxyConfigSpec>>(site, &path, diag).flatten() else { return defaults };
    let list = path.key("nodePortAddresses");
    let mut node_port_addresses = Vec::new();
    for (k, text) in spec.node_port_addresses.iter().enumerate() {
        match parse_cidr(text) {
            // kube-proxy takes both families here and uses its own; a single-stack scenario
            // has one.
            Ok(net) => {
                if diag.net_family(site, &list.index(k), &net) {
                    node_port_addresses.push(net);
                }
            }
            // kube-proxy 1.31+ also takes `primary` (the node's primary IPs); here, CIDRs only.
            Err(_) if text.trim() == "primary" => diag.value(
                site,
                &list.index(k),
                "\"primary\" is not supported here: list CIDRs (e.g. 192.168.50.0/24 for the node network)",
            ),
            Err(e) => diag.value(site, &list.index(k), e),
        }
    }
    let gates = path.key("featureGates");
    for name in spec.feature_gates.keys().filter(|g| *g != TRAFFIC_DISTRIBUTION_GATE) {
        diag.key(
            site,
            &gates.key(name),
            format!("the feature gate {name} is not modelled (only {TRAFFIC_DISTRIBUTION_GATE} is)"),
        );
    }
    ProxyConfig {
        service_traffic_distribution: spec
            .feature_gates
            .get(TRAFFIC_DISTRIBUTION_GATE)
            .copied()
            .unwrap_or(defaults.service_traffic_distribution),
        masquerade_all: spec.masquerade_all.unwrap_or(defaults.masquerade_all),
        node_port_addresses,
        localhost_node_ports: spec.localhost_node_ports.unwrap_or(defaults.localhost_node_ports),
        detect_local: detect_local::read(site, &path, &spec, diag),
        cluster_cidrs: spec.cluster_cidr.as_deref().and_then(|text| match cluster_cidrs(text) {
            Ok(cidrs) => Some(cidrs),
            Err(e) => {
                diag.value(site, &path.key("clusterCIDR"), e);
                None
            }
        }),
    }
}

/// `clusterCIDR` as kube-proxy validates it (pkg/proxy/apis/config/validation/validation.go):
/// empty, one CIDR, or two of different families.
fn cluster_cidrs(text: &str) -> Result<Vec<IpNet>, String> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    let cidrs = text.split(',').map(|c| parse_cidr(c.trim())).collect::<Result<Vec<IpNet>, _>>()?;
    match cidrs.as_slice() {
        [_] => Ok(cidrs),
        [a, b] if IpFamily::of_net(a) != IpFamily::of_net(b) => Ok(cidrs),
        [_, _] => {
            Err("must be a valid DualStack CIDR (one of each family, e.g. 10.244.0.0/16,fd00:10:244::/56)"
                .into())
        }
        _ => Err("only one CIDR, or one of each family, is allowed".into()),
    }
}
