//! The serde shape of our own `kind: Scenario` document. Unknown fields are errors everywhere.
//!
//! Sections and list items are deserialized one at a time (see `scenario_doc.rs`), so a bad
//! probe doesn't hide errors in the next one; the `IgnoredAny` fields here only check that a
//! section is present and has the right shape.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, IgnoredAny, Visitor};
use serde::{Deserialize, Deserializer};

pub(crate) const API_VERSION: &str = "packetproof.dev/v1alpha1";
pub(crate) const KIND: &str = "Scenario";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct Envelope {
    #[allow(dead_code)]
    pub api_version: IgnoredAny,
    #[allow(dead_code)]
    pub kind: IgnoredAny,
    #[allow(dead_code)]
    pub metadata: IgnoredAny,
    #[allow(dead_code)]
    pub spec: IgnoredAny,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct Metadata {
    pub name: String,
    /// Accepted for tooling; the harness does not read them.
    #[allow(dead_code)]
    pub labels: Option<BTreeMap<String, String>>,
    #[allow(dead_code)]
    pub annotations: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct Sections {
    pub description: Option<String>,
    pub proxy: Option<ProxySpec>,
    #[allow(dead_code)]
    pub cluster: IgnoredAny,
    #[allow(dead_code)]
    pub proxy_config: Option<IgnoredAny>,
    /// May be left out when Node objects follow (`node_objects.rs`).
    #[serde(default)]
    pub nodes: Vec<IgnoredAny>,
    #[serde(default)]
    pub external_hosts: Vec<IgnoredAny>,
    /// May be left out when `flows` generates the probes.
    #[serde(default)]
    pub probes: Vec<IgnoredAny>,
    #[allow(dead_code)]
    pub flows: Option<IgnoredAny>,
    /// Read by `generate.rs`.
    #[allow(dead_code)]
    pub generate: Option<IgnoredAny>,
    /// Read by `min_kernel.rs`.
    #[allow(dead_code)]
    pub min_kernel: Option<IgnoredAny>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ClusterSpec {
    #[serde(rename = "podCIDR")]
    pub pod_cidr: OneOrTwo,
    #[serde(rename = "serviceCIDR")]
    pub service_cidr: OneOrTwo,
    pub node_network: OneOrTwo,
    /// kube-apiserver's `--service-node-port-range`, `FIRST-LAST` (default 30000-32767).
    #[serde(default)]
    pub service_node_port_range: Option<String>,
}

/// A cluster network: one CIDR (`10.244.0.0/16`), or a list of one or two, one per family,
/// primary first (`[10.244.0.0/16, fd00:10:244::/56]`), as kube-proxy's `--cluster-cidr`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub(crate) enum OneOrTwo {
    One(String),
    List(Vec<String>),
}

impl OneOrTwo {
    pub fn items(&self) -> Vec<&str> {
        match self {
            OneOrTwo::One(s) => vec![s.as_str()],
            OneOrTwo::List(l) => l.iter().map(String::as_str).collect(),
        }
    }

    pub(crate) fn is_list(&self) -> bool {
        matches!(self, OneOrTwo::List(_))
    }
}

/// A node: `ip` and `podCIDR`, or (dual-stack, as Kubernetes' `spec.podCIDRs`) `ips` and
/// `podCIDRs` with one entry per family of the cluster, primary first.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct NodeSpec {
    pub name: String,
    pub ip: Option<String>,
    #[serde(default, rename = "ips")]
    pub ips: Option<Vec<String>>,
    #[serde(default, rename = "secondaryIPs")]
    pub secondary_ips: Vec<String>,
    #[serde(rename = "podCIDR")]
    pub pod_cidr: Option<String>,
    #[serde(rename = "podCIDRs")]
    pub pod_cidrs: Option<Vec<String>>,
    /// Its `topology.kubernetes.io/zone` label.
    pub zone: Option<String>,
}

/// `spec.proxy`: a proxy's name (`builtin-iptables`), or its name with the adapter's options
/// (`{name: command, command: [...], mode: oneshot}`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(crate) enum ProxySpec {
    Name(String),
    WithOptions(serde_json::Map<String, serde_json::Value>),
}

/// `spec.proxyConfig`: kube-proxy's flags, every one optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ProxyConfigSpec {
    pub masquerade_all: Option<bool>,
    #[serde(default)]
    pub node_port_addresses: Vec<String>,
    pub localhost_node_ports: Option<bool>,
    /// kube-proxy's `featureGates`; only `ServiceTrafficDistribution` is modelled.
    #[serde(default)]
    pub feature_gates: std::collections::BTreeMap<String, bool>,
    /// `detectLocalMode`: `ClusterCIDR` (default), `NodeCIDR`, `BridgeInterface`,
    /// `InterfaceNamePrefix`.
    pub detect_local_mode: Option<String>,
    pub detect_local: Option<DetectLocalSpec>,
    /// `clusterCIDR`, comma-separated as kube-proxy takes it (default: the pod CIDRs); `""`
    /// is kube-proxy run without one.
    #[serde(rename = "clusterCIDR")]
    pub cluster_cidr: Option<String>,
}

/// `spec.proxyConfig.detectLocal`, as in KubeProxyConfiguration v1alpha1.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct DetectLocalSpec {
    pub bridge_interface: Option<String>,
    pub interface_name_prefix: Option<String>,
}

/// `spec.flows: {all: true, count: N}`: generate a probe for every path.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FlowsSpec {
    pub all: bool,
    pub count: Option<u32>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ExternalHostSpec {
    pub name: String,
    pub ip: Option<String>,
    /// One address per family (dual-stack), instead of `ip`.
    pub ips: Option<Vec<String>>,
    /// Routes through nodes (e.g. the service CIDR via a node).
    #[serde(default)]
    pub routes: Vec<HostRouteSpec>,
}

/// `{to: CIDR, via: NODE}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct HostRouteSpec {
    pub to: String,
    pub via: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ProbeSpec {
    pub name: Option<String>,
    /// Required, except on a `held` check, which takes the opener's.
    pub from: Option<SourceSpec>,
    pub to: Option<TargetSpec>,
    pub protocol: Option<ProtocolSpec>,
    pub count: Option<u32>,
    pub interval: Option<IntervalSpec>,
    /// `IPv4` or `IPv6`: the family to probe over (dual-stack); the primary when left out.
    pub family: Option<String>,
    /// Every attempt from this source port (below the automatic range), e.g. a UDP client
    /// that keeps its socket across a change.
    pub source_port: Option<u16>,
    pub expect: Option<ExpectSpec>,
    /// `hold: true`: one TCP connection, kept open for later steps to check.
    pub hold: Option<bool>,
    /// `held: NAME`: checks the connection an earlier probe `NAME` holds.
    pub held: Option<String>,
    /// With `held`: a hand-made out-of-window segment is sent on the connection's path first.
    pub out_of_window: Option<bool>,
}

/// `interval: 1500ms`: the text, checked in `duration.rs`; a bare number has no unit and is
/// refused here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IntervalSpec(pub String);

impl<'de> Deserialize<'de> for IntervalSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct IntervalVisitor;
        impl Visitor<'_> for IntervalVisitor {
            type Value = IntervalSpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration with a unit, like 1500ms or 2s")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<IntervalSpec, E> {
                Ok(IntervalSpec(v.to_string()))
            }
        }
        d.deserialize_any(IntervalVisitor)
    }
}

/// `{pod: NAME} | {pods: [NAME, ...]} | {node: NAME} | {external: NAME}`; exactly one is
/// checked later.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SourceSpec {
    pub pod: Option<String>,
    /// Several client pods sending at once, each its own part of the probe.
    pub pods: Option<Vec<String>>,
    pub node: Option<String>,
    pub external: Option<String>,
}

/// Every key a target may have; which combination forms a target is checked in `targets.rs`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct TargetSpec {
    pub service: Option<String>,
    pub port: Option<PortRef>,
    pub node_port: Option<String>,
    #[serde(rename = "externalIP")]
    pub external_ip: Option<String>,
    pub load_balancer: Option<String>,
    pub via: Option<String>,
    pub health_check: Option<String>,
    pub node: Option<String>,
    pub address: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub(crate) enum ProtocolSpec {
    #[serde(rename = "TCP")]
    Tcp,
    #[serde(rename = "UDP")]
    Udp,
    #[serde(rename = "SCTP")]
    Sctp,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ExpectSpec {
    pub verdict: VerdictSpec,
    pub backends: Option<Vec<String>>,
    pub source: Option<SourceKindSpec>,
    pub http_status: Option<u16>,
    pub profile: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum VerdictSpec {
    Answered,
    Rejected,
    Dropped,
    Forwarded,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum SourceKindSpec {
    Client,
    Masqueraded,
}

/// A service port by name (`dns`) or number (`53`); YAML keeps the two apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PortRef {
    Number(u16),
    Name(String),
}

impl fmt::Display for PortRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortRef::Number(n) => write!(f, "{n}"),
            PortRef::Name(s) => write!(f, "{s:?}"),
        }
    }
}

impl<'de> Deserialize<'de> for PortRef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct PortVisitor;
        impl Visitor<'_> for PortVisitor {
            type Value = PortRef;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a port name or a port number (1-65535)")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<PortRef, E> {
                match u16::try_from(v) {
                    Ok(n) if n > 0 => Ok(PortRef::Number(n)),
                    _ => Err(E::invalid_value(de::Unexpected::Unsigned(v), &self)),
                }
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<PortRef, E> {
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) => Err(E::invalid_value(de::Unexpected::Signed(v), &self)),
                }
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<PortRef, E> {
                if v.is_empty() {
                    return Err(E::invalid_value(de::Unexpected::Str(v), &self));
                }
                Ok(PortRef::Name(v.to_string()))
            }
        }
        d.deserialize_any(PortVisitor)
    }
}
