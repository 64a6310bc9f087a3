//! kube-proxy's own decisions, shared by every backend (iptables, nftables) and by the oracle:
//! what kube-proxy decides before any rule is written.

pub mod endpoints;
pub mod local_detect;
pub mod topology;

use std::net::IpAddr;

use crate::model::{Service, ServicePort};

/// `namespace/name`, plus `:port` when the port is named (kube-proxy's `ServicePortName.String()`).
pub fn service_port_name(svc: &Service, port: &ServicePort) -> String {
    if port.name.is_empty() {
        svc.namespaced_name()
    } else {
        format!("{}:{}", svc.namespaced_name(), port.name)
    }
}

/// Whether `loadBalancerSourceRanges` admit `source` to a load-balancer IP of `svc` on the node
/// whose address is `node_ip`. Besides the ranges, kube-proxy admits the load-balancer IPs
/// themselves as sources when a range holds the node's address (`allowFromNode`, in
/// pkg/proxy/iptables, nftables and ipvs proxier.go): a VIP bound on the node (kube-vip,
/// keepalived) makes the node's own requests to it leave from the VIP.
pub fn source_ranges_admit(svc: &Service, source: IpAddr, node_ip: IpAddr) -> bool {
    let ranges = &svc.load_balancer_source_ranges;
    let allow_from_node = ranges.iter().any(|r| r.contains(&node_ip));
    ranges.is_empty()
        || ranges.iter().any(|r| r.contains(&source))
        || allow_from_node && svc.load_balancer_ips.contains(&source)
}
