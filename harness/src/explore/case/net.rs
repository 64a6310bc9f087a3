//! Where a generated cluster's addresses come from, per family.

use super::Family;

pub fn pod_cidr(v6: bool) -> &'static str {
    if v6 { "fd00:10:244::/56" } else { "10.244.0.0/16" }
}
pub fn service_cidr(v6: bool) -> &'static str {
    if v6 { "fd00:10:96::/112" } else { "10.96.0.0/12" }
}
pub fn node_network(v6: bool) -> &'static str {
    if v6 { "fd00:192:168:50::/64" } else { "192.168.50.0/24" }
}
pub fn node_ip(v6: bool, slot: u8) -> String {
    if v6 { format!("fd00:192:168:50::{}", 11 + slot) } else { format!("192.168.50.{}", 11 + slot) }
}
pub fn node_secondary_ip(v6: bool, slot: u8) -> String {
    if v6 { format!("fd00:192:168:50::{}", 21 + slot) } else { format!("192.168.50.{}", 21 + slot) }
}
pub fn node_pod_cidr(v6: bool, slot: u8) -> String {
    if v6 { format!("fd00:10:244:{}::/64", slot + 1) } else { format!("10.244.{}.0/24", slot + 1) }
}
pub fn pod_ip(v6: bool, node_slot: u8, host: u8) -> String {
    if v6 {
        format!("fd00:10:244:{}::{host}", node_slot + 1)
    } else {
        format!("10.244.{}.{host}", node_slot + 1)
    }
}
pub fn cluster_ip(v6: bool, slot: u8) -> String {
    if v6 { format!("fd00:10:96::{:x}", 0x100 + slot as u32) } else { format!("10.96.1.{}", 10 + slot) }
}
pub fn external_ip(v6: bool, host: u8) -> String {
    if v6 { format!("2001:db8:e::{host}") } else { format!("203.0.113.{host}") }
}
pub fn lb_ip(v6: bool, host: u8) -> String {
    if v6 { format!("2001:db8:1b::{host}") } else { format!("198.51.100.{host}") }
}
pub fn external_host(v6: bool) -> String {
    if v6 { "fd00:192:168:50::100".into() } else { "192.168.50.100".into() }
}
pub fn elsewhere(v6: bool) -> &'static str {
    if v6 { "2001:db8:ffff::/48" } else { "172.16.0.0/12" }
}
/// The families written for a cluster: the primary first.
pub fn families(family: Family) -> &'static [bool] {
    match family {
        Family::V4 => &[false],
        Family::V6 => &[true],
        Family::Dual => &[false, true],
    }
}
