//! Kernel settings inside a namespace, written from a thread that entered it: `/proc/sys/net`
//! resolves against the writing thread's network namespace.

use anyhow::{Context, Result};

use super::netns::Netns;

/// What a real node has on: forwarding (both families), and bridged pod traffic passing
/// through iptables and ip6tables (so replies between pods on one bridge are un-NATed by
/// conntrack).
pub const NODE_SETTINGS: &[(&str, &str)] = &[
    ("net/ipv4/ip_forward", "1"),
    ("net/ipv6/conf/all/forwarding", "1"),
    ("net/bridge/bridge-nf-call-iptables", "1"),
    ("net/bridge/bridge-nf-call-ip6tables", "1"),
];

/// Every harness namespace: the kernel rate-limits ICMP errors per peer (a burst of ~6, then
/// one a second), which would turn a proxy's REJECT into silence after a few attempts. A
/// harness that must tell reject from drop every time cannot have that.
///
/// And no duplicate address detection: an IPv6 address stays tentative (unusable as a source,
/// not answered for) for a second or more after its link comes up, so the first probes would
/// fail. Every address here is assigned by the scenario, which validation keeps unique. A link
/// takes `default` when it is made (or moved into the namespace) and DAD runs unless both
/// `all` and the link's own value are 0: written before any link exists in the namespace.
pub const EVERY_NAMESPACE: &[(&str, &str)] = &[
    ("net/ipv4/icmp_ratelimit", "0"),
    ("net/ipv6/icmp/ratelimit", "0"),
    ("net/ipv6/conf/all/accept_dad", "0"),
    ("net/ipv6/conf/default/accept_dad", "0"),
];

/// Pods and external hosts follow no redirect. A node that forwards a flow back out of the
/// interface it came in on tells the sender (an ICMPv6 redirect, sent in `ip6_forward` before
/// the FORWARD hook, so even for a flow the proxy then drops) that the destination is on the
/// link: a host that believes it sends the attempts after it to the destination's own link
/// address, asks for it, gets no answer and drops them, and its next connections fail with "No
/// route to host". Found by `packetproof explore --seed 12` (case 20): an external host's
/// attempts to a load-balancer IP its node must drop never left it. The external host stands
/// for the outside network routing a destination through a node, as a router does, and a
/// router ignores redirects (RFC 4861, 8.1). IPv6 reads only the link's own value, which a new
/// link takes from `default` (`rt6_do_redirect`); IPv4 honours a redirect if `all` or the link
/// says so: all are off, before any link exists. tests/redirects.rs makes a node's redirect on
/// purpose and shows a host of the harness ignore it.
pub const HOST_SETTINGS: &[(&str, &str)] = &[
    ("net/ipv4/conf/all/accept_redirects", "0"),
    ("net/ipv4/conf/default/accept_redirects", "0"),
    ("net/ipv6/conf/all/accept_redirects", "0"),
    ("net/ipv6/conf/default/accept_redirects", "0"),
];

/// Nor the limit on all ICMP errors a namespace sends (`icmp_msgs_per_sec` 1000 with a burst of
/// 50, IPv6's errors counted too): a node rejecting every flow of a generated cluster
/// (`explore`, `flows: all`) sent more than 50 at once, and one reject in a few went silent.
/// Older kernels keep that limit for the whole machine only (no such file in a namespace):
/// there it is left alone.
const WHERE_NAMESPACED: &[(&str, &str)] =
    &[("net/ipv4/icmp_msgs_per_sec", "1000000"), ("net/ipv4/icmp_msgs_burst", "1000000")];

/// Before any link but loopback exists in the node's namespace.
pub fn node_defaults(ns: &Netns) -> Result<()> {
    for (key, value) in NODE_SETTINGS.iter().chain(EVERY_NAMESPACE) {
        write(ns, key, value)?;
    }
    namespaced_limits(ns)
}

/// Pods, external hosts and the node network: the settings of every namespace, and no
/// redirects followed.
pub fn host_defaults(ns: &Netns) -> Result<()> {
    for (key, value) in EVERY_NAMESPACE.iter().chain(HOST_SETTINGS) {
        write(ns, key, value)?;
    }
    namespaced_limits(ns)
}

fn namespaced_limits(ns: &Netns) -> Result<()> {
    for (key, value) in WHERE_NAMESPACED {
        let path = format!("/proc/sys/{key}");
        match ns.run(|| std::fs::write(&path, value))? {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            other => other.with_context(|| format!("setting {key}={value} in namespace {}", ns.name()))?,
        }
    }
    Ok(())
}

pub fn write(ns: &Netns, key: &str, value: &str) -> Result<()> {
    let path = format!("/proc/sys/{key}");
    ns.run(|| std::fs::write(&path, value))?
        .with_context(|| format!("setting {key}={value} in namespace {}", ns.name()))
}

/// A setting's value inside `ns`, without the trailing newline.
pub fn read(ns: &Netns, key: &str) -> Result<String> {
    let path = format!("/proc/sys/{key}");
    let value = ns
        .run(|| std::fs::read_to_string(&path))?
        .with_context(|| format!("reading {key} in namespace {}", ns.name()))?;
    Ok(value.trim().to_string())
}
