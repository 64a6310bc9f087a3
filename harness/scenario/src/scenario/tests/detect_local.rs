//! `spec.proxyConfig.detectLocalMode` / `detectLocal`: read with kube-proxy's defaults and
//! checks, and refused where packetproof's nodes cannot say what they would match.

use super::*;
use crate::model::DetectLocal;

/// KUBE_DNS with `proxyConfig` set to the flow mapping `config`.
fn with(config: &str) -> String {
    edit(KUBE_DNS, "  cluster:\n", &format!("  proxyConfig: {config}\n  cluster:\n"))
}

#[test]
fn each_mode_reads_with_its_setting() {
    let mode = |config: &str| parse(&with(config)).cluster.proxy.detect_local;
    assert_eq!(mode("{}"), DetectLocal::ClusterCidr);
    assert_eq!(mode("{detectLocalMode: ClusterCIDR}"), DetectLocal::ClusterCidr);
    assert_eq!(mode("{detectLocalMode: NodeCIDR}"), DetectLocal::NodeCidr);
    assert_eq!(
        mode("{detectLocalMode: BridgeInterface, detectLocal: {bridgeInterface: cni0}}"),
        DetectLocal::BridgeInterface("cni0".into())
    );
    assert_eq!(
        mode("{detectLocalMode: InterfaceNamePrefix, detectLocal: {interfaceNamePrefix: veth}}"),
        DetectLocal::InterfaceNamePrefix("veth".into())
    );
}

#[test]
fn cluster_cidr_reads_as_kube_proxy_validates_it() {
    let cidrs = |config: &str| parse(&with(config)).cluster.proxy.cluster_cidrs;
    assert_eq!(cidrs("{}"), None, "the pod CIDRs");
    assert_eq!(cidrs(r#"{clusterCIDR: ""}"#), Some(Vec::new()));
    assert_eq!(
        cidrs(r#"{clusterCIDR: "10.244.0.0/16, fd00:10:244::/56"}"#),
        Some(vec!["10.244.0.0/16".parse().unwrap(), "fd00:10:244::/56".parse().unwrap()])
    );
    for (value, message) in [
        ("10.244.0.0/16,10.245.0.0/16", "must be a valid DualStack CIDR"),
        ("10.244.0.0/16,fd00::/56,10.1.0.0/16", "only one CIDR, or one of each family"),
        ("10.244.0.0", "10.244.0.0"),
    ] {
        let errors = parse_errors(&with(&format!("{{clusterCIDR: {value:?}}}")));
        assert!(
            errors.iter().any(|e| e.field == "spec.proxyConfig.clusterCIDR" && e.message.contains(message)),
            "{value}: {errors:?}"
        );
    }
}

#[test]
fn an_unknown_mode_is_refused_with_the_supported_ones() {
    let text = with("{detectLocalMode: PodCIDR}");
    assert_only(
        &parse_errors(&text),
        at(&text, "PodCIDR"),
        "spec.proxyConfig.detectLocalMode",
        "unsupported value \"PodCIDR\": supported values are ClusterCIDR, NodeCIDR, BridgeInterface, InterfaceNamePrefix",
    );
}

#[test]
fn an_interface_mode_needs_its_interface() {
    let text = with("{detectLocalMode: BridgeInterface}");
    assert_only(
        &parse_errors(&text),
        at(&text, "BridgeInterface"),
        "spec.proxyConfig.detectLocalMode",
        "this mode needs detectLocal.bridgeInterface, which is not set",
    );
    let text = with("{detectLocalMode: InterfaceNamePrefix, detectLocal: {interfaceNamePrefix: ''}}");
    assert_only(
        &parse_errors(&text),
        at(&text, "''"),
        "spec.proxyConfig.detectLocal.interfaceNamePrefix",
        "must not be empty",
    );
}

#[test]
fn a_setting_of_another_mode_is_refused_not_ignored() {
    let text = with("{detectLocalMode: NodeCIDR, detectLocal: {bridgeInterface: cni0}}");
    assert_only(
        &parse_errors(&text),
        at(&text, "bridgeInterface"),
        "spec.proxyConfig.detectLocal.bridgeInterface",
        "has no effect unless detectLocalMode is BridgeInterface: remove it",
    );
    let text = with("{detectLocal: {interfaceNamePrefix: veth}}");
    assert_only(
        &parse_errors(&text),
        at(&text, "interfaceNamePrefix"),
        "spec.proxyConfig.detectLocal.interfaceNamePrefix",
        "has no effect unless detectLocalMode is InterfaceNamePrefix: remove it",
    );
    let text = with("{detectLocalMode: NodeCIDR, detectLocal: {bridge: cni0}}");
    assert_has(
        &parse_errors(&text),
        at(&text, "bridge:"),
        "spec.proxyConfig.detectLocal.bridge",
        "unknown field `bridge`",
    );
}

#[test]
fn matching_the_nodes_uplink_cannot_be_judged() {
    for (config, value) in [
        ("{detectLocalMode: BridgeInterface, detectLocal: {bridgeInterface: eth0}}", "eth0"),
        ("{detectLocalMode: InterfaceNamePrefix, detectLocal: {interfaceNamePrefix: eth}}", "eth}"),
    ] {
        let text = with(config);
        let errs = parse_errors(&text);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!((errs[0].line, errs[0].column), at(&text, value));
        assert!(errs[0].message.contains("matches eth0, each node's uplink"), "{}", errs[0].message);
        assert!(errs[0].message.contains("not modelled"), "{}", errs[0].message);
    }
}
