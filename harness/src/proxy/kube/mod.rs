//! kube-proxy's own decisions, shared by every backend (iptables, nftables) and by the oracle:
//! what kube-proxy decides before any rule is written.

pub mod local_detect;
pub mod topology;
