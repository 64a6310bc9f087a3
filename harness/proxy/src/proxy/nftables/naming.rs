//! kube-proxy's nftables names: the per-service-port chains (`service-…`, `local-…`,
//! `external-…`, `firewall-…`), the per-endpoint chains (`endpoint-…`) and affinity sets
//! (`affinity-…`).
//!
//! Unlike iptables mode's opaque hashes, nftables names are readable, prefixed with a short
//! hash of themselves: `HASH-namespace/name/protocol/portName`, and for an endpoint
//! `HASH-namespace/name/protocol/portName__ip/port` (`hashAndTruncate`,
//! `servicePortChainNameBase` and `servicePortEndpointChainNameBase` in
//! pkg/proxy/nftables/proxier.go). The hash is the first 8 characters of
//! base32(sha256(name)); it must match kube-proxy bit for bit so our dumps name the same chains.

use std::net::SocketAddr;

use sha2::{Digest, Sha256};

use crate::model::{Protocol, Service, ServicePort};

/// knftables' `NameLengthMax` less the longest prefix (`chainNamePrefixLengthMax`).
const BASE_LENGTH_MAX: usize = 256 - 16;

/// `HASH-name`, truncated with `...` when longer than kube-proxy allows (never, for valid
/// Kubernetes names and IPv4 endpoints).
fn hash_and_truncate(name: &str) -> String {
    let digest = Sha256::digest(name.as_bytes());
    let encoded = data_encoding::BASE32.encode(&digest[..]);
    let mut out = format!("{}-{name}", &encoded[..8]);
    if out.len() > BASE_LENGTH_MAX {
        out.truncate(BASE_LENGTH_MAX - 3);
        out.push_str("...");
    }
    out
}

/// `namespace/name/protocol/portName` (the port name may be empty), hashed.
pub(crate) fn port_base(svc: &Service, port: &ServicePort) -> String {
    hash_and_truncate(&format!("{}/{}/{}/{}", svc.namespace, svc.name, port.protocol.as_lower(), port.name))
}

/// `…__ip/port` for one endpoint; an IPv6 address has its colons (not allowed in chain names)
/// replaced by dots.
pub(crate) fn endpoint_base(svc: &Service, port: &ServicePort, endpoint: SocketAddr) -> String {
    let ip = endpoint.ip().to_string().replace(':', ".");
    hash_and_truncate(&format!(
        "{}/{}/{}/{}__{ip}/{}",
        svc.namespace,
        svc.name,
        port.protocol.as_lower(),
        port.name,
        endpoint.port()
    ))
}

/// The chain and set names of one service port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortChains {
    /// `service-…`: load-balances over the endpoints used with Cluster traffic policy.
    pub cluster: String,
    /// `local-…`: load-balances over this node's endpoints, for Local traffic policy.
    pub local: String,
    /// `external-…`: where node-port, external-IP and load-balancer traffic goes first.
    pub external: String,
    /// `firewall-…`: `loadBalancerSourceRanges` filtering of load-balancer IPs.
    pub firewall: String,
}

impl PortChains {
    pub fn new(svc: &Service, port: &ServicePort) -> PortChains {
        let base = port_base(svc, port);
        PortChains {
            cluster: format!("service-{base}"),
            local: format!("local-{base}"),
            external: format!("external-{base}"),
            firewall: format!("firewall-{base}"),
        }
    }
}

/// `endpoint-…`: the DNAT to one endpoint.
pub(crate) fn endpoint_chain(svc: &Service, port: &ServicePort, endpoint: SocketAddr) -> String {
    format!("endpoint-{}", endpoint_base(svc, port, endpoint))
}

/// `affinity-…`: the clients recently sent to one endpoint (ClientIP session affinity).
pub(crate) fn affinity_set(svc: &Service, port: &ServicePort, endpoint: SocketAddr) -> String {
    format!("affinity-{}", endpoint_base(svc, port, endpoint))
}

/// The protocol as nft spells it (`tcp`, `udp`, `sctp`).
pub fn proto(protocol: Protocol) -> &'static str {
    protocol.as_lower()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc_port(ns: &str, name: &str, port_name: &str) -> (Service, ServicePort) {
        let svc = Service::new(ns, name, "172.30.0.41".parse().unwrap());
        let port = ServicePort {
            name: port_name.into(),
            protocol: Protocol::Tcp,
            port: 80,
            node_port: None,
            endpoints: vec![],
        };
        (svc, port)
    }

    // Every expected name below appears in kube-proxy's own test fixtures
    // (pkg/proxy/nftables/proxier_test.go, TestOverallNFTablesRules).

    #[test]
    fn service_chains_match_kube_proxy() {
        let (svc, port) = svc_port("ns1", "svc1", "p80");
        assert_eq!(PortChains::new(&svc, &port).cluster, "service-ULMVA6XW-ns1/svc1/tcp/p80");
        let (svc, port) = svc_port("ns2", "svc2", "p80");
        assert_eq!(PortChains::new(&svc, &port).external, "external-42NFTM6N-ns2/svc2/tcp/p80");
        let (svc, port) = svc_port("ns5", "svc5", "p80");
        assert_eq!(PortChains::new(&svc, &port).firewall, "firewall-HVFWP5L3-ns5/svc5/tcp/p80");
    }

    #[test]
    fn endpoint_chains_match_kube_proxy() {
        let (svc, port) = svc_port("ns1", "svc1", "p80");
        assert_eq!(
            endpoint_chain(&svc, &port, "10.180.0.1:80".parse().unwrap()),
            "endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80"
        );
        let (svc, port) = svc_port("ns4", "svc4", "p80");
        assert_eq!(
            endpoint_chain(&svc, &port, "10.180.0.5:80".parse().unwrap()),
            "endpoint-5RFCDDV7-ns4/svc4/tcp/p80__10.180.0.5/80"
        );
        let (svc, port) = svc_port("ns5", "svc5", "p80");
        assert_eq!(
            affinity_set(&svc, &port, "10.180.0.3:80".parse().unwrap()),
            "affinity-GTK6MW7G-ns5/svc5/tcp/p80__10.180.0.3/80"
        );
    }

    #[test]
    fn ipv6_endpoints_have_dots_for_colons() {
        let (svc, port) = svc_port("ns1", "svc1", "p80");
        assert_eq!(
            endpoint_chain(&svc, &port, "[fd00:10:180::2:1]:80".parse().unwrap()),
            "endpoint-2CRNCTTE-ns1/svc1/tcp/p80__fd00.10.180..2.1/80"
        );
        assert_eq!(
            endpoint_chain(&svc, &port, "[fd00:10:180::1]:80".parse().unwrap()),
            "endpoint-ZVRFLKHO-ns1/svc1/tcp/p80__fd00.10.180..1/80"
        );
    }

    #[test]
    fn overlong_names_are_truncated_with_dots() {
        let long = "x".repeat(300);
        let name = hash_and_truncate(&long);
        assert_eq!(name.len(), BASE_LENGTH_MAX);
        assert!(name.ends_with("..."));
    }
}
