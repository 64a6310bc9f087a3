//! kube-proxy's names: service-port names as printed in comments, and the hashed chain names
//! (`KUBE-SVC-…`, `KUBE-SVL-…`, `KUBE-EXT-…`, `KUBE-FW-…`, `KUBE-SEP-…`).
//!
//! The hash must match kube-proxy bit for bit, so that our dumps and a real node's dumps name
//! the same chains: `base32(sha256(name + protocol))[..16]` (pkg/proxy/iptables/proxier.go).

use std::net::SocketAddr;

use sha2::{Digest, Sha256};

pub use crate::kubernetes::service_port_name;
use crate::model::Protocol;

/// The first 16 characters of base32(sha256(`input`)).
fn hash16(input: &str) -> String {
    let digest = Sha256::digest(input.as_bytes());
    let mut encoded = data_encoding::BASE32.encode(&digest[..]);
    encoded.truncate(16);
    encoded
}

/// kube-proxy's `portProtoHash`: the part shared by the SVC, SVL, EXT and FW chains of a port.
pub(crate) fn port_proto_hash(svc_port_name: &str, protocol: Protocol) -> String {
    hash16(&format!("{svc_port_name}{}", protocol.as_lower()))
}

/// `KUBE-SVC-…`: load-balances over the endpoints used with Cluster traffic policy.
pub(crate) fn svc_chain(svc_port_name: &str, protocol: Protocol) -> String {
    format!("KUBE-SVC-{}", port_proto_hash(svc_port_name, protocol))
}

/// `KUBE-SVL-…`: load-balances over this node's endpoints, for Local traffic policy.
pub(crate) fn svl_chain(svc_port_name: &str, protocol: Protocol) -> String {
    format!("KUBE-SVL-{}", port_proto_hash(svc_port_name, protocol))
}

/// `KUBE-EXT-…`: where traffic to external destinations (node ports, external IPs, LB IPs)
/// goes first.
pub(crate) fn ext_chain(svc_port_name: &str, protocol: Protocol) -> String {
    format!("KUBE-EXT-{}", port_proto_hash(svc_port_name, protocol))
}

/// `KUBE-FW-…`: `loadBalancerSourceRanges` filtering in front of `KUBE-EXT-…` for LB IPs.
pub(crate) fn fw_chain(svc_port_name: &str, protocol: Protocol) -> String {
    format!("KUBE-FW-{}", port_proto_hash(svc_port_name, protocol))
}

/// `KUBE-SEP-…`: the DNAT to one endpoint. The endpoint is hashed as `ip:port`
/// (`[ip]:port` for IPv6, as Go's `net.JoinHostPort` writes it).
pub(crate) fn sep_chain(svc_port_name: &str, protocol: Protocol, endpoint: SocketAddr) -> String {
    format!("KUBE-SEP-{}", hash16(&format!("{svc_port_name}{}{endpoint}", protocol.as_lower())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Service, ServicePort};

    // Every expected name below appears in a real `iptables-save` dump in ../shared/seeds.

    #[test]
    fn svc_chains_match_seed_dumps() {
        assert_eq!(svc_chain("kube-system/kube-dns:dns", Protocol::Udp), "KUBE-SVC-TCOU7JCQXEZGVUNU");
        assert_eq!(svc_chain("default/nginx", Protocol::Tcp), "KUBE-SVC-2CMXP7HKUVJN7L6M");
        assert_eq!(svc_chain("kube-system/kube-dns:dns-tcp", Protocol::Tcp), "KUBE-SVC-ERIFXISQEP7F7OF4");
        assert_eq!(svc_chain("kube-system/kube-dns:metrics", Protocol::Tcp), "KUBE-SVC-JD5MR3NA4I4DYORP");
        assert_eq!(svc_chain("default/kubernetes:https", Protocol::Tcp), "KUBE-SVC-NPX46M4PTMTKRN6Y");
    }

    #[test]
    fn other_prefixes_share_the_port_hash() {
        // Seed 004: the nginx NodePort service has KUBE-EXT- and KUBE-SVL- with the SVC hash.
        assert_eq!(ext_chain("default/nginx", Protocol::Tcp), "KUBE-EXT-2CMXP7HKUVJN7L6M");
        assert_eq!(svl_chain("default/nginx", Protocol::Tcp), "KUBE-SVL-2CMXP7HKUVJN7L6M");
        assert_eq!(fw_chain("default/nginx", Protocol::Tcp), "KUBE-FW-2CMXP7HKUVJN7L6M");
    }

    #[test]
    fn sep_chains_match_seed_dumps() {
        let sep = |name: &str, proto, ep: &str| sep_chain(name, proto, ep.parse().unwrap());
        assert_eq!(sep("default/nginx", Protocol::Tcp, "10.64.2.4:80"), "KUBE-SEP-YVT6EXXEKT4LDXBC");
        // Seed 000: kube-dns over UDP, two endpoints.
        assert_eq!(
            sep("kube-system/kube-dns:dns", Protocol::Udp, "10.244.0.5:53"),
            "KUBE-SEP-LPGSDLJ3FDW46N4W"
        );
        assert_eq!(
            sep("kube-system/kube-dns:dns", Protocol::Udp, "10.244.0.7:53"),
            "KUBE-SEP-232DQYSHL5HNRYWJ"
        );
    }

    #[test]
    fn unnamed_ports_have_no_colon() {
        let svc =
            Service { ports: vec![], ..Service::new("default", "nginx", "10.32.0.61".parse().unwrap()) };
        let mut port = ServicePort {
            name: String::new(),
            protocol: Protocol::Tcp,
            port: 80,
            node_port: None,
            endpoints: vec![],
        };
        assert_eq!(service_port_name(&svc, &port), "default/nginx");
        port.name = "http".into();
        assert_eq!(service_port_name(&svc, &port), "default/nginx:http");
    }
}
