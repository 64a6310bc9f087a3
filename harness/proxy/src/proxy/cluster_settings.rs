//! The settings of a cluster's own proxy against the scenario's `spec.proxyConfig`. The
//! harness cannot configure a proxy it did not start, and the verdicts depend on these
//! settings, so a run goes ahead only when the cluster's kube-proxy has the scenario's values.
//! kubeadm and kind keep kube-proxy's configuration in the ConfigMap `kube-system/kube-proxy`
//! (`config.conf`, a KubeProxyConfiguration: cmd/kubeadm/app/phases/addons/proxy/proxy.go);
//! without it, a scenario that changes a setting is refused, since nothing says the proxy has it.

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::Api;
use serde_json::Value;

use super::kube_proxy_config::{Mode, changed_settings, scenario_settings};
use crate::model::Cluster;

const NAMESPACE: &str = "kube-system";
const CONFIG_MAP: &str = "kube-proxy";
const KEY: &str = "config.conf";

/// Refuses a run whose scenario settings the cluster's proxy does not have.
pub(super) async fn require_same(client: &Client, cluster: &Cluster) -> Result<()> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let found = api.get_opt(CONFIG_MAP).await.ok().flatten();
    let text = found.as_ref().and_then(|c| c.data.as_ref()).and_then(|d| d.get(KEY));
    let Some(text) = text else {
        let changed = changed_settings(&cluster.proxy);
        if changed.is_empty() {
            return Ok(());
        }
        bail!(
            "the scenario sets spec.proxyConfig.{}, but the cluster's proxy keeps its own \
             configuration and there is no ConfigMap {NAMESPACE}/{CONFIG_MAP} ({KEY}) to show it \
             has the same: run this scenario with a proxy the harness configures",
            changed.join(", spec.proxyConfig.")
        );
    };
    let theirs = read_yaml(text)
        .with_context(|| format!("reading {KEY} of the ConfigMap {NAMESPACE}/{CONFIG_MAP}"))?;
    let ours = scenario_settings(cluster, "", "");
    let differences = differences(&ours, &theirs);
    if differences.is_empty() {
        return Ok(());
    }
    bail!(
        "the cluster's kube-proxy is not configured as the scenario says (ConfigMap \
         {NAMESPACE}/{CONFIG_MAP}, {KEY}): {}; the verdicts would judge it by settings it does not have",
        differences.join("; ")
    )
}

fn read_yaml(text: &str) -> Result<Value> {
    let documents = crate::yaml::parse(text).map_err(|e| anyhow::anyhow!("{}", e.message))?;
    documents.into_iter().next().map(|d| d.value).context("it holds no YAML document")
}

/// Each setting whose value differs, as `masqueradeAll: the scenario has true, the cluster false`.
/// Fields kube-proxy leaves empty read as their defaults; a feature gate the cluster does not
/// set is its version's default, which only the scenario's own value (v1.30's: off) can match.
fn differences(ours: &Value, theirs: &Value) -> Vec<String> {
    // Blank is iptables (`platformApplyDefaults`); a mode packetproof does not run is the
    // proxy's own to refuse.
    let mode = theirs["mode"].as_str().filter(|m| !m.is_empty()).map_or(Ok(Mode::Iptables), Mode::parse);
    let masquerade_table = if mode == Ok(Mode::Nftables) { "nftables" } else { "iptables" };
    let or = |v: &Value, default: Value| if v.is_null() { default } else { v.clone() };
    let addresses = |v: &Value| {
        let mut list: Vec<String> =
            v.as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_string).collect();
        list.sort();
        Value::from(list)
    };
    let detect = |v: &Value| {
        let mode = v["detectLocalMode"].as_str().filter(|m| !m.is_empty()).unwrap_or("ClusterCIDR");
        let interface = match mode {
            "BridgeInterface" => v["detectLocal"]["bridgeInterface"].clone(),
            "InterfaceNamePrefix" => v["detectLocal"]["interfaceNamePrefix"].clone(),
            _ => Value::Null,
        };
        Value::from(vec![Value::from(mode), interface])
    };
    let gate = "ServiceTrafficDistribution";
    let mut compared = vec![
        (
            "masqueradeAll",
            ours[masquerade_table]["masqueradeAll"].clone(),
            or(&theirs[masquerade_table]["masqueradeAll"], false.into()),
        ),
        ("nodePortAddresses", addresses(&ours["nodePortAddresses"]), addresses(&theirs["nodePortAddresses"])),
        ("detectLocalMode", detect(ours), detect(theirs)),
        (
            "featureGates.ServiceTrafficDistribution",
            ours["featureGates"][gate].clone(),
            theirs["featureGates"][gate].clone(),
        ),
    ];
    // Only iptables mode has localhost node ports (`route_localnet`).
    if mode == Ok(Mode::Iptables) {
        compared.push((
            "localhostNodePorts",
            ours["iptables"]["localhostNodePorts"].clone(),
            or(&theirs["iptables"]["localhostNodePorts"], true.into()),
        ));
    }
    compared
        .into_iter()
        .filter(|(_, ours, theirs)| ours != theirs)
        .map(|(name, ours, theirs)| {
            let show = |v: &Value| if v.is_null() { "unset".to_string() } else { v.to_string() };
            format!("{name}: the scenario has {}, the cluster {}", show(&ours), show(&theirs))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn kind_config() -> Value {
        // What kind v0.23 writes (abridged): mode, empty detectLocalMode, null lists.
        read_yaml(
            "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: iptables\n\
             detectLocalMode: \"\"\nnodePortAddresses: null\niptables:\n  masqueradeAll: false\n  \
             localhostNodePorts: null\nfeatureGates: {}\n",
        )
        .unwrap()
    }

    #[test]
    fn kinds_default_configuration_matches_a_scenario_with_default_settings() {
        let cluster = Cluster::example(vec![]);
        let ours = scenario_settings(&cluster, "", "");
        assert_eq!(differences(&ours, &kind_config()), Vec::<String>::new());
    }

    #[test]
    fn each_changed_setting_is_named_with_both_values() {
        let mut cluster = Cluster::example(vec![]);
        cluster.proxy.masquerade_all = true;
        cluster.proxy.detect_local = crate::model::DetectLocal::InterfaceNamePrefix("veth".into());
        cluster.proxy.service_traffic_distribution = true;
        let ours = scenario_settings(&cluster, "", "");
        let found = differences(&ours, &kind_config());
        assert_eq!(
            found,
            [
                "masqueradeAll: the scenario has true, the cluster false",
                r#"detectLocalMode: the scenario has ["InterfaceNamePrefix","veth"], the cluster ["ClusterCIDR",null]"#,
                "featureGates.ServiceTrafficDistribution: the scenario has true, the cluster unset",
            ]
        );
        let mut theirs = kind_config();
        theirs["iptables"]["masqueradeAll"] = json!(true);
        theirs["detectLocalMode"] = json!("InterfaceNamePrefix");
        theirs["detectLocal"] = json!({"interfaceNamePrefix": "veth"});
        theirs["featureGates"] = json!({"ServiceTrafficDistribution": true});
        assert!(differences(&ours, &theirs).is_empty());
    }

    #[test]
    fn nftables_mode_reads_its_own_masquerade_setting_and_has_no_localhost_node_ports() {
        let mut cluster = Cluster::example(vec![]);
        cluster.proxy.localhost_node_ports = false;
        let ours = scenario_settings(&cluster, "", "");
        let mut theirs = kind_config();
        theirs["mode"] = json!("nftables");
        theirs["iptables"]["masqueradeAll"] = json!(true);
        assert!(differences(&ours, &theirs).is_empty(), "{:?}", differences(&ours, &theirs));
    }
}
