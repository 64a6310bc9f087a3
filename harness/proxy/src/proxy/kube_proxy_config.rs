//! What a real kube-proxy is configured with, for every adapter that runs one (`apiserver`,
//! `command`, `cluster`): the `{config}` placeholder, a KubeProxyConfiguration (`kubeproxy.config.k8s.io/v1alpha1`)
//! written per node from the scenario's proxy settings. It is kube-proxy's own recommended
//! interface: with `--config`, v1.30 takes every setting from the file and ignores the other
//! flags except `--hostname-override` and logging (cmd/kube-proxy/app/server.go
//! `Options.Complete`), and some settings exist only there (nftables mode reads
//! `nftables.masqueradeAll`, which no flag sets in v1.30).

use std::net::SocketAddr;

use serde_json::{Map, Value, json};

use crate::model::{Cluster, DetectLocal};

/// kube-proxy's modes that packetproof can judge (they act in the node's netfilter hooks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Iptables,
    Nftables,
    /// Only where the kernel has IPVS (the kernel matrix's VMs).
    Ipvs,
}

impl Mode {
    pub fn parse(text: &str) -> Result<Mode, String> {
        match text {
            "iptables" => Ok(Mode::Iptables),
            "nftables" => Ok(Mode::Nftables),
            "ipvs" => Ok(Mode::Ipvs),
            other => Err(format!("mode {other:?} is not one packetproof runs (iptables, nftables, ipvs)")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::Iptables => "iptables",
            Mode::Nftables => "nftables",
            Mode::Ipvs => "ipvs",
        }
    }
}

/// What the configuration of one node's proxy holds beyond the cluster's settings.
pub struct NodeSettings<'a> {
    pub kubeconfig: &'a str,
    pub node: &'a str,
    pub cluster_cidr: &'a str,
    pub healthz: Option<SocketAddr>,
    pub metrics: Option<SocketAddr>,
}

/// The adapter's gates, plus `ServiceTrafficDistribution` when the scenario's proxyConfig
/// turns it on (its v1.30 default is off).
fn with_scenario_gates(
    feature_gates: &Map<String, Value>,
    proxy: &crate::model::ProxyConfig,
) -> Map<String, Value> {
    let mut gates = feature_gates.clone();
    if proxy.service_traffic_distribution {
        gates.insert("ServiceTrafficDistribution".into(), Value::Bool(true));
    }
    gates
}

/// `detectLocalMode` as KubeProxyConfiguration spells it.
fn detect_local_mode(mode: &DetectLocal) -> &'static str {
    match mode {
        DetectLocal::ClusterCidr => "ClusterCIDR",
        DetectLocal::NodeCidr => "NodeCIDR",
        DetectLocal::BridgeInterface(_) => "BridgeInterface",
        DetectLocal::InterfaceNamePrefix(_) => "InterfaceNamePrefix",
    }
}

/// `detectLocal`: the interface setting of the interface modes, nothing for the others.
fn detect_local(mode: &DetectLocal) -> Value {
    match mode {
        DetectLocal::BridgeInterface(name) => json!({"bridgeInterface": name}),
        DetectLocal::InterfaceNamePrefix(prefix) => json!({"interfaceNamePrefix": prefix}),
        DetectLocal::ClusterCidr | DetectLocal::NodeCidr => json!({}),
    }
}

/// The scenario's proxy settings as a KubeProxyConfiguration: the fields of `spec.proxyConfig`
/// (and the cluster CIDR and node name they depend on), nothing of how the proxy is run. The
/// `command` adapter hands exactly this to a user's proxy (`{proxyConfig}`); the `apiserver`
/// adapter adds kube-proxy's own settings to it.
pub(crate) fn scenario_settings(cluster: &Cluster, node: &str, cluster_cidr: &str) -> Value {
    let proxy = &cluster.proxy;
    let mut ranges: Vec<String> = proxy.node_port_addresses.iter().map(|r| r.to_string()).collect();
    ranges.sort();
    json!({
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "hostnameOverride": node,
        "featureGates": with_scenario_gates(&Map::new(), proxy),
        "clusterCIDR": cluster_cidr,
        "detectLocalMode": detect_local_mode(&proxy.detect_local),
        "detectLocal": detect_local(&proxy.detect_local),
        "nodePortAddresses": ranges,
        "iptables": {"masqueradeAll": proxy.masquerade_all, "localhostNodePorts": proxy.localhost_node_ports},
        "nftables": {"masqueradeAll": proxy.masquerade_all},
    })
}

/// The fields of `spec.proxyConfig` a scenario sets to other than kube-proxy's defaults, as
/// the scenario spells them: what a proxy that is not told the scenario's settings would get
/// wrong.
pub(crate) fn changed_settings(proxy: &crate::model::ProxyConfig) -> Vec<&'static str> {
    let default = crate::model::ProxyConfig::default();
    let mut changed = Vec::new();
    if proxy.masquerade_all != default.masquerade_all {
        changed.push("masqueradeAll");
    }
    if proxy.node_port_addresses != default.node_port_addresses {
        changed.push("nodePortAddresses");
    }
    if proxy.localhost_node_ports != default.localhost_node_ports {
        changed.push("localhostNodePorts");
    }
    if proxy.service_traffic_distribution != default.service_traffic_distribution {
        changed.push("featureGates.ServiceTrafficDistribution");
    }
    if proxy.detect_local != default.detect_local {
        changed.push("detectLocalMode");
    }
    changed
}

/// The configuration file's content (JSON, which kube-proxy's YAML loader reads): the
/// scenario's settings plus how this kube-proxy runs.
///
/// `featureGates` are passed as given (e.g. `NFTablesProxyMode: true` for nftables mode in
/// v1.30, where it is alpha). `conntrack.maxPerCore: 0` leaves `nf_conntrack_max` alone: it is
/// read-only inside a network namespace, and kube-proxy would fail to start setting it.
pub fn kube_proxy_configuration(
    cluster: &Cluster,
    mode: Mode,
    feature_gates: &Map<String, Value>,
    node: &NodeSettings<'_>,
) -> Value {
    let mut config = scenario_settings(cluster, node.node, node.cluster_cidr);
    let address = |a: Option<SocketAddr>| a.map(|a| a.to_string()).unwrap_or_default();
    config["clientConnection"] = json!({"kubeconfig": node.kubeconfig});
    config["mode"] = json!(mode.name());
    config["featureGates"] = Value::Object(with_scenario_gates(feature_gates, &cluster.proxy));
    config["healthzBindAddress"] = json!(address(node.healthz));
    config["metricsBindAddress"] = json!(address(node.metrics));
    for table in ["iptables", "nftables"] {
        config[table]["syncPeriod"] = json!("30s");
        config[table]["minSyncPeriod"] = json!("1s");
    }
    // Only in IPVS mode: the reference proxy, which has no IPVS mode, refuses the section.
    if mode == Mode::Ipvs {
        config["ipvs"] = json!({"syncPeriod": "30s", "minSyncPeriod": "1s"});
    }
    config["conntrack"] = json!({"maxPerCore": 0});
    config
}

/// `--cluster-cidr`/`--service-cluster-ip-range` values: the primary family's CIDR, then the
/// second family's in a dual-stack cluster, comma-separated as kube-proxy takes them.
/// A scenario's own `clusterCIDR` is passed as given (possibly empty).
pub(crate) fn cidrs(cluster: &Cluster) -> (String, String) {
    let (pods, services) = match &cluster.second_family {
        Some(s) => (
            format!("{},{}", cluster.pod_cidr, s.pod_cidr),
            format!("{},{}", cluster.service_cidr, s.service_cidr),
        ),
        None => (cluster.pod_cidr.to_string(), cluster.service_cidr.to_string()),
    };
    let given = cluster
        .proxy
        .cluster_cidrs
        .as_ref()
        .map(|c| c.iter().map(ToString::to_string).collect::<Vec<_>>().join(","));
    (given.unwrap_or(pods), services)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ProxyConfig;

    #[test]
    fn the_scenarios_settings_reach_both_modes_fields() {
        let mut cluster = Cluster::example(vec![]);
        cluster.proxy = ProxyConfig {
            masquerade_all: true,
            node_port_addresses: vec!["192.168.50.0/24".parse().unwrap()],
            localhost_node_ports: false,
            service_traffic_distribution: false,
            detect_local: DetectLocal::InterfaceNamePrefix("cni".into()),
            cluster_cidrs: None,
        };
        assert_eq!(cidrs(&cluster).0, "10.244.0.0/16", "the pod CIDR");
        let mut without = cluster.clone();
        without.proxy.cluster_cidrs = Some(Vec::new());
        assert_eq!(cidrs(&without).0, "", "kube-proxy run without a cluster CIDR");
        let gates = Map::from_iter([("NFTablesProxyMode".to_string(), Value::Bool(true))]);
        let node = NodeSettings {
            kubeconfig: "/tmp/k",
            node: "node-a",
            cluster_cidr: "10.244.0.0/16",
            healthz: Some("0.0.0.0:10256".parse().unwrap()),
            metrics: Some("127.0.0.1:10249".parse().unwrap()),
        };
        let c = kube_proxy_configuration(&cluster, Mode::Nftables, &gates, &node);
        assert!(c.get("ipvs").is_none(), "the reference proxy refuses an ipvs section");
        assert_eq!(c["mode"], "nftables");
        assert_eq!(c["nftables"]["masqueradeAll"], true);
        assert_eq!(c["iptables"]["masqueradeAll"], true);
        assert_eq!(c["iptables"]["localhostNodePorts"], false);
        assert_eq!(c["nodePortAddresses"], json!(["192.168.50.0/24"]));
        assert_eq!(c["featureGates"]["NFTablesProxyMode"], true);
        assert_eq!(c["metricsBindAddress"], "127.0.0.1:10249");
        assert_eq!(c["clientConnection"]["kubeconfig"], "/tmp/k");
        assert_eq!(c["detectLocalMode"], "InterfaceNamePrefix");
        assert_eq!(c["detectLocal"], json!({"interfaceNamePrefix": "cni"}));
        assert!(Mode::parse("userspace").is_err());
        assert_eq!(c["iptables"]["syncPeriod"], "30s");
        assert_eq!(
            changed_settings(&cluster.proxy),
            ["masqueradeAll", "nodePortAddresses", "localhostNodePorts", "detectLocalMode"]
        );
    }

    #[test]
    fn the_scenario_settings_alone_say_nothing_of_how_kube_proxy_runs() {
        let cluster = Cluster::example(vec![]);
        let c = scenario_settings(&cluster, "node-a", "10.244.0.0/16");
        assert_eq!(c["kind"], "KubeProxyConfiguration");
        assert_eq!(c["detectLocalMode"], "ClusterCIDR");
        assert_eq!(c["iptables"], json!({"masqueradeAll": false, "localhostNodePorts": true}));
        for absent in ["mode", "clientConnection", "metricsBindAddress", "conntrack"] {
            assert!(c.get(absent).is_none(), "{absent}: {c}");
        }
        assert!(changed_settings(&cluster.proxy).is_empty());
    }
}
