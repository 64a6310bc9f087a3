//! `--config FILE`: kube-proxy's configuration file, a `KubeProxyConfiguration` of
//! `kubeproxy.config.k8s.io/v1alpha1` (k8s.io/kube-proxy/config/v1alpha1/types.go), JSON or
//! YAML. Absent fields take kube-proxy's defaults (pkg/proxy/apis/config/v1alpha1/defaults.go
//! `SetDefaults_KubeProxyConfiguration`), values are checked as kube-proxy checks them
//! (pkg/proxy/apis/config/validation/validation.go), and any field or value the reference
//! proxy does not model is refused: a setting it silently ignored would make it a different
//! proxy than the one the file describes.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use ipnet::IpNet;
use serde::Deserialize;

use crate::model::{DetectLocal, IpFamily};
use crate::proxy::kube_proxy_config::Mode;
use crate::yaml::{self, Document, FieldPath};

pub(crate) const API_VERSION: &str = "kubeproxy.config.k8s.io/v1alpha1";
pub(crate) const KIND: &str = "KubeProxyConfiguration";

/// kube-proxy's ports (pkg/cluster/ports: `ProxyHealthzPort`, `ProxyStatusPort`).
const HEALTHZ_PORT: u16 = 10256;
const METRICS_PORT: u16 = 10249;

/// The feature gates the reference proxy knows, with their v1.30 defaults
/// (pkg/features/kube_features.go). `NFTablesProxyMode` only unlocks nftables mode (its other
/// effect, cleaning up nftables leftovers in iptables mode, has nothing to clean in a fresh
/// namespace); `KubeProxyDrainingTerminatingNodes` makes `/healthz` follow the Node;
/// `ServiceTrafficDistribution` makes topology hints count without the hints annotation.
const GATES: &[(&str, bool)] = &[
    ("NFTablesProxyMode", false),
    ("KubeProxyDrainingTerminatingNodes", true),
    ("ServiceTrafficDistribution", false),
];

/// The configuration, defaulted and checked: what the reference proxy runs with.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `clientConnection.kubeconfig`.
    pub kubeconfig: PathBuf,
    /// `hostnameOverride`, trimmed and lower-cased (`nodeutil.GetHostname`).
    pub hostname: String,
    pub mode: Mode,
    /// `clusterCIDR`: one, or one per family.
    pub cluster_cidrs: Vec<IpNet>,
    pub healthz_bind_address: SocketAddr,
    pub metrics_bind_address: SocketAddr,
    pub node_port_addresses: Vec<IpNet>,
    /// The mode's own `masqueradeAll` (`createProxier` in cmd/kube-proxy/app/server_linux.go
    /// reads `iptables.masqueradeAll` in iptables mode, `nftables.masqueradeAll` in nftables).
    pub masquerade_all: bool,
    /// `iptables.localhostNodePorts` (iptables mode only).
    pub localhost_node_ports: bool,
    /// The mode's `syncPeriod` and `minSyncPeriod`.
    pub sync_period: Duration,
    pub min_sync_period: Duration,
    /// How long a queued change may wait before `/healthz` fails: twice
    /// `iptables.syncPeriod` whatever the mode (`newProxyServer` in cmd/kube-proxy/app/server.go).
    pub health_timeout: Duration,
    /// Feature gate `KubeProxyDrainingTerminatingNodes`.
    pub draining_terminating_nodes: bool,
    /// Feature gate `ServiceTrafficDistribution`.
    pub service_traffic_distribution: bool,
    /// `detectLocalMode` with its `detectLocal` setting.
    pub detect_local: DetectLocal,
}

// The file's shape: exactly the fields modelled, every other one an error.

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct File {
    api_version: Option<String>,
    kind: Option<String>,
    feature_gates: Option<BTreeMap<String, bool>>,
    client_connection: Option<ClientConnection>,
    hostname_override: Option<String>,
    mode: Option<String>,
    #[serde(rename = "clusterCIDR")]
    cluster_cidr: Option<String>,
    healthz_bind_address: Option<String>,
    metrics_bind_address: Option<String>,
    detect_local_mode: Option<String>,
    detect_local: Option<DetectLocalSettings>,
    node_port_addresses: Option<Vec<String>>,
    iptables: Option<Iptables>,
    nftables: Option<Nftables>,
    conntrack: Option<Conntrack>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct DetectLocalSettings {
    bridge_interface: Option<String>,
    interface_name_prefix: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClientConnection {
    kubeconfig: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Iptables {
    masquerade_all: Option<bool>,
    localhost_node_ports: Option<bool>,
    sync_period: Option<String>,
    min_sync_period: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Nftables {
    masquerade_all: Option<bool>,
    sync_period: Option<String>,
    min_sync_period: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Conntrack {
    max_per_core: Option<i32>,
}

/// Reads and checks `path`. `hostname_override` is kube-proxy's `--hostname-override`, the
/// one flag that still counts next to `--config` (`Options.Complete` in
/// cmd/kube-proxy/app/server.go).
pub fn load(path: &Path, hostname_override: Option<&str>) -> Result<Config> {
    let text = std::fs::read_to_string(path).map_err(|e| anyhow!("reading {}: {e}", path.display()))?;
    parse(&text, hostname_override).map_err(|e| anyhow!("{}:{e}", path.display()))
}

/// A problem at a place in the file: `line:column: field: message`.
fn at(doc: &Document, path: &FieldPath, key: bool, message: impl std::fmt::Display) -> anyhow::Error {
    let pos = if key { doc.key_pos(path) } else { doc.value_pos(path) };
    anyhow!("{}:{}: {path}: {message}", pos.line, pos.column)
}

/// [`load`] of the file's text (JSON is YAML too).
pub fn parse(text: &str, hostname_override: Option<&str>) -> Result<Config> {
    let docs = yaml::parse(text).map_err(|e| anyhow!("{}:{}: {}", e.pos.line, e.pos.column, e.message))?;
    let [doc] = docs.as_slice() else {
        bail!("1:1: a configuration file holds one document, this one {}", docs.len());
    };
    let file: File = serde_path_to_error::deserialize(&doc.value).map_err(|e| {
        let path = FieldPath::root().join_serde(e.path());
        let message = e.inner().to_string();
        match unknown_field(&message) {
            Some(field) => {
                // The path ends at the unknown key, except at the top.
                let field_path = if path.is_root() { FieldPath::root().key(field) } else { path };
                at(
                    doc,
                    &field_path,
                    true,
                    "a kube-proxy setting the reference proxy does not model; remove it \
                     (an ignored setting would make it a different proxy than the file describes)",
                )
            }
            None => at(doc, &path, false, message),
        }
    })?;
    let here = |p: &str| FieldPath::parse(p);
    let fail = |p: &str, message: String| at(doc, &here(p), false, message);

    if file.api_version.as_deref() != Some(API_VERSION) {
        return Err(fail("apiVersion", format!("must be {API_VERSION}")));
    }
    if file.kind.as_deref() != Some(KIND) {
        return Err(fail("kind", format!("must be {KIND}")));
    }

    let mut gates: BTreeMap<&str, bool> = GATES.iter().copied().collect();
    for (name, on) in file.feature_gates.iter().flatten() {
        let Some(value) = gates.get_mut(name.as_str()) else {
            return Err(at(
                doc,
                &here("featureGates").key(name),
                true,
                format!(
                    "a feature gate the reference proxy does not model (it knows {})",
                    GATES.iter().map(|(g, _)| *g).collect::<Vec<_>>().join(", ")
                ),
            ));
        };
        *value = *on;
    }

    // `platformApplyDefaults` (server_linux.go): blank means iptables; nftables needs its
    // gate in v1.30 (`validateProxyModeLinux`).
    let mode = match file.mode.as_deref().unwrap_or("") {
        "" | "iptables" => Mode::Iptables,
        "nftables" if gates["NFTablesProxyMode"] => Mode::Nftables,
        "nftables" => {
            return Err(fail(
                "mode",
                "nftables mode needs the feature gate NFTablesProxyMode (featureGates: \
                 {NFTablesProxyMode: true}) in kube-proxy v1.30"
                    .into(),
            ));
        }
        "ipvs" => Mode::Ipvs,
        other => {
            return Err(fail(
                "mode",
                format!("{other:?} is not a proxy mode (iptables, nftables, or blank)"),
            ));
        }
    };

    let kubeconfig = file.client_connection.unwrap_or_default().kubeconfig.unwrap_or_default();
    if kubeconfig.is_empty() {
        return Err(fail(
            "clientConnection.kubeconfig",
            "required: the reference proxy runs outside any pod, with no in-cluster configuration".into(),
        ));
    }

    let hostname = match hostname_override {
        Some(flag) => {
            let flag = flag.trim();
            if flag.is_empty() {
                bail!("--hostname-override: empty hostname-override is invalid");
            }
            flag.to_lowercase()
        }
        None => file.hostname_override.unwrap_or_default().trim().to_lowercase(),
    };
    if hostname.is_empty() {
        return Err(fail(
            "hostnameOverride",
            "required: node namespaces share the host's hostname, so it cannot name the node".into(),
        ));
    }

    let cluster_cidrs =
        cluster_cidrs(file.cluster_cidr.as_deref().unwrap_or("")).map_err(|m| fail("clusterCIDR", m))?;

    let healthz_bind_address = bind_address(file.healthz_bind_address.as_deref(), "0.0.0.0", HEALTHZ_PORT)
        .map_err(|m| fail("healthzBindAddress", m))?;
    let metrics_bind_address = bind_address(file.metrics_bind_address.as_deref(), "127.0.0.1", METRICS_PORT)
        .map_err(|m| fail("metricsBindAddress", m))?;

    let settings = file.detect_local.unwrap_or_default();
    let detect_local = detect_local(file.detect_local_mode.as_deref().unwrap_or(""), settings)
        .map_err(|(f, m)| fail(f, m))?;

    let mut node_port_addresses = Vec::new();
    for (i, cidr) in file.node_port_addresses.iter().flatten().enumerate() {
        let net: IpNet = cidr
            .trim()
            .parse()
            .map_err(|_| at(doc, &here("nodePortAddresses").index(i), false, "must be a valid CIDR"))?;
        node_port_addresses.push(net);
    }

    let iptables = file.iptables.unwrap_or_default();
    let nftables = file.nftables.unwrap_or_default();
    // Both sections are defaulted and the iptables one is always validated; the nftables
    // one in nftables mode (`Validate`).
    let ipt_periods = periods(iptables.sync_period.as_deref(), iptables.min_sync_period.as_deref())
        .map_err(|(f, m)| fail(&format!("iptables.{f}"), m))?;
    let nft_periods = periods(nftables.sync_period.as_deref(), nftables.min_sync_period.as_deref())
        .map_err(|(f, m)| fail(&format!("nftables.{f}"), m));
    let (masquerade_all, (sync_period, min_sync_period)) = match mode {
        Mode::Iptables => (iptables.masquerade_all.unwrap_or(false), ipt_periods),
        Mode::Nftables => (nftables.masquerade_all.unwrap_or(false), nft_periods?),
        Mode::Ipvs => return Err(fail("mode", "ipvs mode is not modelled by the reference proxy".into())),
    };

    // `setupConntrack` (server_linux.go) sets the table size from maxPerCore (default
    // 32768 per core) unless it is 0: a namespace cannot, and the reference proxy does not.
    match file.conntrack.unwrap_or_default().max_per_core {
        Some(0) => {}
        Some(n) if n < 0 => {
            return Err(fail("conntrack.maxPerCore", "must be greater than or equal to 0".into()));
        }
        _ => {
            return Err(fail(
                "conntrack.maxPerCore",
                "must be 0: the reference proxy sets no conntrack table size (kube-proxy's default \
                 32768 would set the host's)"
                    .into(),
            ));
        }
    }

    Ok(Config {
        kubeconfig: PathBuf::from(kubeconfig),
        hostname,
        mode,
        cluster_cidrs,
        healthz_bind_address,
        metrics_bind_address,
        node_port_addresses,
        masquerade_all,
        localhost_node_ports: iptables.localhost_node_ports.unwrap_or(true),
        sync_period,
        min_sync_period,
        health_timeout: 2 * ipt_periods.0,
        draining_terminating_nodes: gates["KubeProxyDrainingTerminatingNodes"],
        service_traffic_distribution: gates["ServiceTrafficDistribution"],
        detect_local,
    })
}

/// `detectLocalMode` (blank: ClusterCIDR, `platformApplyDefaults`) and the interface its
/// interface modes need, which must not be empty (`validateDetectLocalMode`,
/// `validateInterface`); the other mode's setting is ignored, as kube-proxy ignores it.
fn detect_local(mode: &str, settings: DetectLocalSettings) -> Result<DetectLocal, FieldError> {
    let interface = |value: Option<String>, field: &'static str| match value {
        Some(v) if !v.is_empty() => Ok(v),
        _ => Err((field, "must not be empty".to_string())),
    };
    match mode {
        "" | "ClusterCIDR" => Ok(DetectLocal::ClusterCidr),
        "NodeCIDR" => Ok(DetectLocal::NodeCidr),
        "BridgeInterface" => Ok(DetectLocal::BridgeInterface(interface(
            settings.bridge_interface,
            "detectLocal.bridgeInterface",
        )?)),
        "InterfaceNamePrefix" => Ok(DetectLocal::InterfaceNamePrefix(interface(
            settings.interface_name_prefix,
            "detectLocal.interfaceNamePrefix",
        )?)),
        other => Err((
            "detectLocalMode",
            format!(
                "Unsupported value: {other:?}: supported values: \"ClusterCIDR\", \"NodeCIDR\", \"BridgeInterface\", \"InterfaceNamePrefix\", \"\""
            ),
        )),
    }
}

/// `serde`'s "unknown field `x`, expected …" → `x`.
fn unknown_field(message: &str) -> Option<&str> {
    message.strip_prefix("unknown field `")?.split('`').next()
}

/// `clusterCIDR`: none (mode ClusterCIDR then detects nothing), one CIDR, or two of different
/// families (`Validate`).
fn cluster_cidrs(text: &str) -> Result<Vec<IpNet>, String> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    let cidrs: Vec<IpNet> = text
        .split(',')
        .map(|c| c.trim().parse::<IpNet>().map_err(|_| format!("{c:?} is not a valid CIDR block")))
        .collect::<Result<_, _>>()?;
    match cidrs.as_slice() {
        [_] => Ok(cidrs),
        [a, b] if IpFamily::of_net(a) != IpFamily::of_net(b) => Ok(cidrs),
        [_, _] => Err("must be a valid DualStack CIDR (one of each family)".into()),
        _ => Err("only one CIDR allowed or a valid DualStack CIDR".into()),
    }
}

/// A bind address as kube-proxy defaults it (`AppendPortIfNeeded`) and checks it
/// (`validateHostPort`: an IP and a port).
fn bind_address(text: Option<&str>, default_host: &str, port: u16) -> Result<SocketAddr, String> {
    let text = text.unwrap_or("").trim();
    let text = if text.is_empty() { default_host } else { text };
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    match text.trim_start_matches('[').trim_end_matches(']').parse::<std::net::IpAddr>() {
        Ok(ip) => Ok(SocketAddr::new(ip, port)),
        Err(_) => Err(format!("{text:?} must be IP:port")),
    }
}

/// A section's `syncPeriod` and `minSyncPeriod`: zero or absent take the defaults 30s and 1s;
/// the period must be positive and at least the minimum. The error names the field.
fn periods(sync: Option<&str>, min: Option<&str>) -> Result<(Duration, Duration), FieldError> {
    let sync = period("syncPeriod", sync, Duration::from_secs(30))?;
    let min = period("minSyncPeriod", min, Duration::from_secs(1))?;
    if min > sync {
        return Err(("syncPeriod", "must be greater than or equal to minSyncPeriod".into()));
    }
    Ok((sync, min))
}

/// A field of a section, and what is wrong with it.
type FieldError = (&'static str, String);

/// One of [`periods`].
fn period(field: &'static str, text: Option<&str>, default: Duration) -> Result<Duration, FieldError> {
    let nanos = match text {
        None => 0,
        Some(t) => go_duration(t).map_err(|m| (field, m))?,
    };
    match u64::try_from(nanos) {
        Ok(0) => Ok(default),
        Ok(n) => Ok(Duration::from_nanos(n)),
        Err(_) if field == "syncPeriod" => Err((field, "must be greater than 0".into())),
        Err(_) => Err((field, "must be greater than or equal to 0".into())),
    }
}

/// Go's `time.ParseDuration` (what `metav1.Duration` reads): `[-+]` then numbers with an
/// optional fraction, each with a unit (`ns us µs ms s m h`), e.g. `1m30s`, `1.5s`; `0`
/// alone needs none. Nanoseconds.
fn go_duration(text: &str) -> Result<i128, String> {
    let bad = || format!("{text:?} is not a duration (e.g. 30s, 1m30s, 500ms)");
    let (negative, mut rest) = match text.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total: i128 = 0;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit() && c != '.').ok_or_else(bad)?;
        let (number, tail) = rest.split_at(digits);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty() && fraction.is_empty() {
            return Err(bad());
        }
        let unit_len = tail.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let scale: i128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return Err(bad()),
        };
        let whole: i128 = if whole.is_empty() { 0 } else { whole.parse().map_err(|_| bad())? };
        let mut part = whole.checked_mul(scale).ok_or_else(bad)?;
        let mut place = scale;
        for d in fraction.chars() {
            place /= 10;
            part += i128::from(d.to_digit(10).ok_or_else(bad)?) * place;
        }
        total = total.checked_add(part).ok_or_else(bad)?;
        rest = tail;
    }
    Ok(if negative { -total } else { total })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The file the `apiserver` adapter writes.
    const ADAPTERS: &str = r#"{"apiVersion":"kubeproxy.config.k8s.io/v1alpha1","kind":"KubeProxyConfiguration",
 "clientConnection":{"kubeconfig":"/tmp/x/kubeconfig-node-a"},
 "hostnameOverride":"node-a","mode":"iptables","featureGates":{},
 "clusterCIDR":"10.244.0.0/16,fd00:10:244::/56",
 "healthzBindAddress":"0.0.0.0:10256","metricsBindAddress":"127.0.0.1:10249",
 "detectLocalMode":"ClusterCIDR","nodePortAddresses":["192.168.50.0/24"],
 "iptables":{"masqueradeAll":false,"localhostNodePorts":true,"syncPeriod":"30s","minSyncPeriod":"1s"},
 "nftables":{"masqueradeAll":false,"syncPeriod":"30s","minSyncPeriod":"1s"},
 "conntrack":{"maxPerCore":0}}"#;

    fn err(text: &str) -> String {
        format!("{:#}", parse(text, None).unwrap_err())
    }

    /// The adapter's file with `from` replaced by `to`.
    fn with(from: &str, to: &str) -> String {
        assert!(ADAPTERS.contains(from), "{from}");
        ADAPTERS.replacen(from, to, 1)
    }

    #[test]
    fn the_adapters_file_reads_as_written() {
        let c = parse(ADAPTERS, None).unwrap();
        assert_eq!(
            c,
            Config {
                kubeconfig: "/tmp/x/kubeconfig-node-a".into(),
                hostname: "node-a".into(),
                mode: Mode::Iptables,
                cluster_cidrs: vec!["10.244.0.0/16".parse().unwrap(), "fd00:10:244::/56".parse().unwrap()],
                healthz_bind_address: "0.0.0.0:10256".parse().unwrap(),
                metrics_bind_address: "127.0.0.1:10249".parse().unwrap(),
                node_port_addresses: vec!["192.168.50.0/24".parse().unwrap()],
                masquerade_all: false,
                localhost_node_ports: true,
                sync_period: Duration::from_secs(30),
                min_sync_period: Duration::from_secs(1),
                health_timeout: Duration::from_secs(60),
                draining_terminating_nodes: true,
                service_traffic_distribution: false,
                detect_local: DetectLocal::ClusterCidr,
            }
        );
    }

    #[test]
    fn yaml_reads_the_same_and_absent_fields_take_kube_proxys_defaults() {
        let yaml = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n\
                    clientConnection:\n  kubeconfig: /k\nhostnameOverride: ' Node-A '\n\
                    clusterCIDR: 10.244.0.0/16\nconntrack:\n  maxPerCore: 0\n";
        let c = parse(yaml, None).unwrap();
        assert_eq!(c.hostname, "node-a");
        assert_eq!(c.mode, Mode::Iptables);
        assert_eq!(c.healthz_bind_address, "0.0.0.0:10256".parse().unwrap());
        assert_eq!(c.metrics_bind_address, "127.0.0.1:10249".parse().unwrap());
        assert!(c.node_port_addresses.is_empty() && c.localhost_node_ports && !c.masquerade_all);
        assert_eq!((c.sync_period, c.min_sync_period), (Duration::from_secs(30), Duration::from_secs(1)));
        // `--hostname-override` wins over the file.
        assert_eq!(parse(yaml, Some("NODE-B")).unwrap().hostname, "node-b");
        assert!(parse(yaml, Some(" ")).is_err());
        // A port-less bind address gets kube-proxy's port.
        let c = parse(&with("0.0.0.0:10256", "::"), None).unwrap();
        assert_eq!(c.healthz_bind_address, "[::]:10256".parse().unwrap());
    }

    #[test]
    fn each_mode_reads_its_own_section() {
        let ipt = with(r#""iptables":{"masqueradeAll":false"#, r#""iptables":{"masqueradeAll":true"#);
        assert!(parse(&ipt, None).unwrap().masquerade_all);
        let nft_only = with(r#""nftables":{"masqueradeAll":false"#, r#""nftables":{"masqueradeAll":true"#);
        assert!(!parse(&nft_only, None).unwrap().masquerade_all);
        let nft = with(
            r#""mode":"iptables","featureGates":{}"#,
            r#""mode":"nftables","featureGates":{"NFTablesProxyMode":true}"#,
        )
        .replace(
            r#""nftables":{"masqueradeAll":false,"syncPeriod":"30s","minSyncPeriod":"1s"}"#,
            r#""nftables":{"masqueradeAll":true,"syncPeriod":"1m","minSyncPeriod":"250ms"}"#,
        );
        let c = parse(&nft, None).unwrap();
        assert_eq!(c.mode, Mode::Nftables);
        assert!(c.masquerade_all);
        assert_eq!((c.sync_period, c.min_sync_period), (Duration::from_secs(60), Duration::from_millis(250)));
        // The healthz timeout follows iptables' period in every mode.
        assert_eq!(c.health_timeout, Duration::from_secs(60));
    }

    #[test]
    fn settings_it_does_not_model_are_refused_by_name_and_place() {
        let e = err(&with(r#""mode":"iptables","#, r#""mode":"iptables","bindAddress":"0.0.0.0","#));
        assert!(e.starts_with("3:"), "{e}");
        assert!(e.contains("bindAddress: a kube-proxy setting the reference proxy does not model"), "{e}");
        let e = err(&with(
            r#""masqueradeAll":false,"localhostNodePorts""#,
            r#""masqueradeBit":14,"localhostNodePorts""#,
        ));
        assert!(e.contains("iptables.masqueradeBit: a kube-proxy setting"), "{e}");
        let e = err(&with(r#""maxPerCore":0"#, r#""maxPerCore":0,"tcpBeLiberal":true"#));
        assert!(e.contains("conntrack.tcpBeLiberal: a kube-proxy setting"), "{e}");
        let e = err(&with(r#""featureGates":{}"#, r#""featureGates":{"TopologyAwareHints":true}"#));
        assert!(
            e.contains("featureGates.TopologyAwareHints: a feature gate the reference proxy does not model"),
            "{e}"
        );
        assert!(
            err(&with(r#""maxPerCore":0"#, r#""maxPerCore":32768"#))
                .contains("conntrack.maxPerCore: must be 0")
        );
        assert!(
            err(&with(",\n \"conntrack\":{\"maxPerCore\":0}", ""))
                .contains("conntrack.maxPerCore: must be 0")
        );
        assert!(err(&with(r#""mode":"iptables""#, r#""mode":"ipvs""#)).contains("ipvs mode is not modelled"));
        assert!(
            err(&with(
                r#""clusterCIDR":"10.244.0.0/16,fd00:10:244::/56""#,
                r#""clusterCIDR":"10.1.0.0/16,10.2.0.0/16""#
            ))
            .contains("clusterCIDR: must be a valid DualStack CIDR")
        );
        assert!(err(&with(r#""hostnameOverride":"node-a","#, "")).contains("hostnameOverride: required"));
        assert!(err(&with("/tmp/x/kubeconfig-node-a", "")).contains("clientConnection.kubeconfig: required"));
    }

    #[test]
    fn every_detect_local_mode_reads_with_its_setting() {
        let mode = |m: &str, settings: &str| {
            with(
                r#""detectLocalMode":"ClusterCIDR""#,
                &format!(r#""detectLocalMode":"{m}","detectLocal":{settings}"#),
            )
        };
        let read = |m: &str, settings: &str| parse(&mode(m, settings), None).map(|c| c.detect_local);
        assert_eq!(read("NodeCIDR", "{}").unwrap(), DetectLocal::NodeCidr);
        assert_eq!(
            read("BridgeInterface", r#"{"bridgeInterface":"cni0"}"#).unwrap(),
            DetectLocal::BridgeInterface("cni0".into())
        );
        assert_eq!(
            read("InterfaceNamePrefix", r#"{"interfaceNamePrefix":"veth","bridgeInterface":"x"}"#).unwrap(),
            DetectLocal::InterfaceNamePrefix("veth".into())
        );
        let e = err(&mode("BridgeInterface", r#"{"interfaceNamePrefix":"veth"}"#));
        assert!(e.contains("detectLocal.bridgeInterface: must not be empty"), "{e}");
        let e = err(&mode("InterfaceNamePrefix", r#"{"interfaceNamePrefix":""}"#));
        assert!(e.contains("detectLocal.interfaceNamePrefix: must not be empty"), "{e}");
        let e = err(&mode("PodCIDR", "{}"));
        assert!(e.contains("detectLocalMode: Unsupported value: \"PodCIDR\""), "{e}");
        assert!(err(&mode("NodeCIDR", r#"{"bridge":"cni0"}"#)).contains("detectLocal.bridge"));
    }

    #[test]
    fn values_are_checked_as_kube_proxy_checks_them() {
        assert!(err(&with(r#""mode":"iptables""#, r#""mode":"nftables""#)).contains("NFTablesProxyMode"));
        assert!(err(&with(r#""mode":"iptables""#, r#""mode":"userspace""#)).contains("not a proxy mode"));
        assert!(err(&with("KubeProxyConfiguration", "KubeletConfiguration")).contains("kind: must be"));
        assert!(err(&with("kubeproxy.config.k8s.io/v1alpha1", "v1")).contains("apiVersion: must be"));
        assert!(
            err(&with("10.244.0.0/16,fd00:10:244::/56", "10.244.0.0/16,10.245.0.0/16")).contains("DualStack")
        );
        assert!(
            err(&with("192.168.50.0/24", "192.168.50.1"))
                .contains("nodePortAddresses[0]: must be a valid CIDR")
        );
        assert!(
            err(&with(
                r#""syncPeriod":"30s","minSyncPeriod":"1s"},"#,
                r#""syncPeriod":"1s","minSyncPeriod":"2s"},"#
            ))
            .contains("iptables.syncPeriod: must be greater than or equal to minSyncPeriod")
        );
        assert!(
            err(&with(r#""minSyncPeriod":"1s"}"#, r#""minSyncPeriod":"-1s"}"#))
                .contains("iptables.minSyncPeriod: must be greater than or equal to 0")
        );
        assert!(err(&with(r#""syncPeriod":"30s""#, r#""syncPeriod":"30""#)).contains("is not a duration"));
        assert!(err(&with("0.0.0.0:10256", "localhost:10256")).contains("healthzBindAddress"));
        assert!(err(&with(r#""mode":"iptables""#, r#""mode":3"#)).contains("mode: invalid type"));
    }

    #[test]
    fn go_durations() {
        let s = 1_000_000_000i128;
        assert_eq!(go_duration("30s"), Ok(30 * s));
        assert_eq!(go_duration("1m30s"), Ok(90 * s));
        assert_eq!(go_duration("1.5s"), Ok(s + s / 2));
        assert_eq!(go_duration("250ms"), Ok(s / 4));
        assert_eq!(go_duration("2h"), Ok(7200 * s));
        assert_eq!(go_duration("1µs"), Ok(1000));
        assert_eq!(go_duration("-1s"), Ok(-s));
        assert_eq!(go_duration("0"), Ok(0));
        for bad in ["", "30", "s", "1x", ".s", "1.5"] {
            assert!(go_duration(bad).is_err(), "{bad}");
        }
    }
}
