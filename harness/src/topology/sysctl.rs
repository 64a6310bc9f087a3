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

/// Every harness namespace: the kernel rate-limits ICMP errors per peer (a burst of ~6, then
/// one a second), which would turn a proxy's REJECT into silence after a few attempts. A
/// harness that must tell reject from drop every time cannot have that.
const EVERY_NAMESPACE: &[(&str, &str)] = &[("net/ipv4/icmp_ratelimit", "0"), ("net/ipv6/icmp/ratelimit", "0")];

pub fn node_defaults(ns: &Netns) -> Result<()> {
    for (key, value) in NODE_SETTINGS.iter().chain(EVERY_NAMESPACE) {
        write(ns, key, value)?;
    }
    Ok(())
}

pub fn host_defaults(ns: &Netns) -> Result<()> {
    for (key, value) in EVERY_NAMESPACE {
        write(ns, key, value)?;
    }
    Ok(())
}

pub fn write(ns: &Netns, key: &str, value: &str) -> Result<()> {
    let path = format!("/proc/sys/{key}");
    ns.run(|| std::fs::write(&path, value))?
        .with_context(|| format!("setting {key}={value} in namespace {}", ns.name()))
}
