//! kube-proxy's own decisions, shared by every backend (iptables, nftables) and by the oracle:
//! what kube-proxy decides before any rule is written.

pub mod endpoints;
pub mod local_detect;
pub mod topology;

use crate::model::{Service, ServicePort};

/// `namespace/name`, plus `:port` when the port is named (kube-proxy's `ServicePortName.String()`).
pub fn service_port_name(svc: &Service, port: &ServicePort) -> String {
    if port.name.is_empty() {
        svc.namespaced_name()
    } else {
        format!("{}:{}", svc.namespaced_name(), port.name)
    }
}
