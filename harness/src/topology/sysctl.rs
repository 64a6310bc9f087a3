//! Kernel settings inside a namespace, written from a thread that entered it: `/proc/sys/net`
//! resolves against the writing thread's network namespace.

use anyhow::{Context, Result};

use super::netns::Netns;

/// What a real node has on: forwarding, and bridged pod traffic passing through iptables (so
/// replies between pods on one bridge are un-NATed by conntrack).
const NODE_SETTINGS: &[(&str, &str)] = &[
    ("net/ipv4/ip_forward", "1"),
    ("net/bridge/bridge-nf-call-iptables", "1"),
    ("net/bridge/bridge-nf-call-ip6tables", "1"),
];

pub fn node_defaults(ns: &Netns) -> Result<()> {
    for (key, value) in NODE_SETTINGS {
        write(ns, key, value)?;
    }
    Ok(())
}

pub fn write(ns: &Netns, key: &str, value: &str) -> Result<()> {
    let path = format!("/proc/sys/{key}");
    ns.run(|| std::fs::write(&path, value))?
        .with_context(|| format!("setting {key}={value} in namespace {}", ns.name()))
}
