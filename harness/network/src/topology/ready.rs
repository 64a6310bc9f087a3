//! Waiting until the links the topology made carry traffic, before any probe is sent.
//!
//! Setting a veth up turns its carrier on at once, but the kernel acts on the carrier later,
//! from its link-watch work queue: only then does the link's operational state become up
//! (`rfc2863_policy`) and its bridge enable the port (`br_port_carrier_check` on
//! NETDEV_CHANGE), both in net/core/link_watch.c's `linkwatch_do_dev`. Until then a bridge
//! drops every frame the port receives. Measured here under load
//! (`live-stale-udp-conntrack`, 2026-11-23): a pod's first ARP request for its gateway left
//! its eth0 78 ms before that work ran, was dropped by the still disabled bridge port, and
//! ARP asked again only after its one-second retransmit time; the probe's first datagram
//! waited in the neighbour queue past the probe's timeout and was counted silent, although
//! its answer came back a moment later. So the topology is ready when the kernel says so:
//! every link (but loopback and bridges) operationally up, every bridge port forwarding, and
//! no address tentative. Duplicate address detection is off in every namespace, but an IPv6
//! address added before its link had carrier stays tentative until addrconf's work for the
//! link runs, after the link-watch work: a server binding it before then fails with "Cannot
//! assign requested address" (found by `packetproof explore`: a dual-stack node's health-check
//! server).

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use futures::TryStreamExt;
use netlink_packet_route::address::{AddressAttribute, AddressFlags, AddressHeaderFlags, AddressMessage};
use netlink_packet_route::link::{
    BridgePortState, InfoBridgePort, InfoPortData, LinkAttribute, LinkFlags, LinkInfo, LinkMessage, State,
};

use super::links::Links;
use super::stalled;

/// How long the kernel may take to act on carrier changes before the topology is declared
/// broken, at the least. Generous: this bounds a wait for a kernel state, it decides no verdict.
const LEAST_LIMIT: Duration = Duration::from_secs(20);

/// Where the kernel says how long an RCU grace period may take before it reports a stall.
const RCU_STALL_TIMEOUT: &str = "/sys/module/rcupdate/parameters/rcu_cpu_stall_timeout";

/// How long to wait: past the kernel's own RCU stall timeout. On a machine loaded past its
/// cores, RCU grace periods slow to tens of seconds; the link-watch and addrconf work wait
/// behind them (found with `explore` beside `soak --stress 2`: namespace teardown in
/// `synchronize_rcu_expedited` and `rcu_barrier`, nftables in `synchronize_rcu`, and every
/// scenario building at once still down after 20 s). The kernel does not call that a stall
/// before its timeout, so neither does the harness.
fn limit() -> Duration {
    let stall = std::fs::read_to_string(RCU_STALL_TIMEOUT).ok().and_then(|s| s.trim().parse::<u64>().ok());
    stall.map_or(LEAST_LIMIT, |seconds| LEAST_LIMIT.max(Duration::from_secs(seconds + 5)))
}

/// How often the links are read again while some are not ready.
const POLL: Duration = Duration::from_millis(5);

/// Returns once every link in `links`' namespace carries traffic (see the module's note), or
/// fails naming those that still do not after [`limit`].
pub(super) async fn wait_until_ready(links: &Links) -> Result<()> {
    wait_until_ready_named(links, |_| true).await
}

/// As [`wait_until_ready`], for the links whose name `ours` accepts: on a node that already
/// exists, only the links the harness added (a link of the node's own may be down for good).
pub(super) async fn wait_until_ready_named(links: &Links, ours: impl Fn(&str) -> bool) -> Result<()> {
    let limit = limit();
    let give_up = Instant::now() + limit;
    loop {
        let messages: Vec<LinkMessage> =
            links.handle().link().get().execute().try_collect().await.map_err(|e| {
                anyhow::anyhow!("{}: {e}", links.context("listing links to see whether they are up"))
            })?;
        let ours: Vec<&LinkMessage> = messages.iter().filter(|m| name(m).is_some_and(&ours)).collect();
        let mut waiting: Vec<String> = ours.iter().filter_map(|m| not_ready(m)).collect();
        if waiting.is_empty() {
            let addresses: Vec<AddressMessage> =
                links.handle().address().get().execute().try_collect().await.map_err(|e| {
                    anyhow::anyhow!(
                        "{}: {e}",
                        links.context("listing addresses to see whether they are usable")
                    )
                })?;
            let on_ours = |a: &&AddressMessage| ours.iter().any(|l| l.header.index == a.header.index);
            waiting = addresses.iter().filter(on_ours).filter_map(tentative).collect();
        }
        if waiting.is_empty() {
            return Ok(());
        }
        if Instant::now() >= give_up {
            let blocked = stalled::blocked_tasks().map_or_else(
                || "no task of the machine is blocked in the kernel".to_string(),
                |tasks| format!("tasks blocked in the kernel: {tasks}"),
            );
            bail!(
                "{}: still not ready after {limit:?}: {} ({blocked})",
                links.context("links"),
                waiting.join("; ")
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The address of `message`, if it is still tentative (unusable: not bound, not answered for).
fn tentative(message: &AddressMessage) -> Option<String> {
    let flagged = message.header.flags.contains(AddressHeaderFlags::Tentative)
        || message
            .attributes
            .iter()
            .any(|a| matches!(a, AddressAttribute::Flags(f) if f.contains(AddressFlags::Tentative)));
    let address = message.attributes.iter().find_map(|a| match a {
        AddressAttribute::Address(ip) => Some(ip.to_string()),
        _ => None,
    })?;
    flagged.then(|| format!("address {address} is tentative"))
}

fn name(link: &LinkMessage) -> Option<&str> {
    link.attributes.iter().find_map(|a| match a {
        LinkAttribute::IfName(n) => Some(n.as_str()),
        _ => None,
    })
}

/// Why `link` cannot carry traffic yet, or `None` if it can.
fn not_ready(link: &LinkMessage) -> Option<String> {
    let name = name(link)?;
    let infos = || {
        link.attributes.iter().filter_map(|a| match a {
            LinkAttribute::LinkInfo(infos) => Some(infos),
            _ => None,
        })
    };
    // A bridge is up only while one of its ports is: a node's pod bridge has none without pods.
    let is_bridge = infos()
        .flatten()
        .any(|i| matches!(i, LinkInfo::Kind(k) if *k == netlink_packet_route::link::InfoKind::Bridge));
    if name == "lo" || is_bridge {
        return None;
    }
    let operstate = link.attributes.iter().find_map(|a| match a {
        LinkAttribute::OperState(s) => Some(*s),
        _ => None,
    });
    if operstate != Some(State::Up) {
        let shown = operstate.map_or("unknown".to_string(), |s| s.to_string());
        // Set up with its carrier on, yet not up: the kernel's link-watch work has not run.
        let admin = if link.header.flags.contains(LinkFlags::Up) { "set up" } else { "not set up" };
        let carrier =
            if link.header.flags.contains(LinkFlags::LowerUp) { "carrier on" } else { "no carrier" };
        return Some(format!("{name} is {shown}, not up ({admin}, {carrier})"));
    }
    let port_state = infos().flatten().find_map(|i| match i {
        LinkInfo::PortData(InfoPortData::BridgePort(port)) => port.iter().find_map(|p| match p {
            InfoBridgePort::State(s) => Some(*s),
            _ => None,
        }),
        _ => None,
    });
    match port_state {
        Some(s) if s != BridgePortState::Forwarding => {
            Some(format!("bridge port {name} is {s}, not forwarding"))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_route::link::{InfoKind, InfoPortKind};

    fn link(name: &str, extra: Vec<LinkAttribute>) -> LinkMessage {
        let mut m = LinkMessage::default();
        m.attributes.push(LinkAttribute::IfName(name.into()));
        m.attributes.extend(extra);
        m
    }

    fn port(state: BridgePortState) -> LinkAttribute {
        LinkAttribute::LinkInfo(vec![
            LinkInfo::Kind(InfoKind::Veth),
            LinkInfo::PortKind(InfoPortKind::Bridge),
            LinkInfo::PortData(InfoPortData::BridgePort(vec![InfoBridgePort::State(state)])),
        ])
    }

    #[test]
    fn a_link_is_ready_when_up_and_a_port_when_forwarding() {
        assert_eq!(not_ready(&link("eth0", vec![LinkAttribute::OperState(State::Up)])), None);
        assert_eq!(
            not_ready(&link("eth0", vec![LinkAttribute::OperState(State::Down)])).as_deref(),
            Some("eth0 is DOWN, not up (not set up, no carrier)")
        );
        let mut set_up = link("veth1", vec![LinkAttribute::OperState(State::Down)]);
        set_up.header.flags = LinkFlags::Up | LinkFlags::LowerUp;
        assert_eq!(not_ready(&set_up).as_deref(), Some("veth1 is DOWN, not up (set up, carrier on)"));
        let up = LinkAttribute::OperState(State::Up);
        assert_eq!(not_ready(&link("veth0", vec![up.clone(), port(BridgePortState::Forwarding)])), None);
        assert_eq!(
            not_ready(&link("veth0", vec![up, port(BridgePortState::Disabled)])).as_deref(),
            Some("bridge port veth0 is disabled, not forwarding")
        );
    }

    #[test]
    fn loopback_and_bridges_are_not_waited_for() {
        assert_eq!(not_ready(&link("lo", vec![LinkAttribute::OperState(State::Unknown)])), None);
        let bridge = LinkAttribute::LinkInfo(vec![LinkInfo::Kind(InfoKind::Bridge)]);
        assert_eq!(not_ready(&link("cni0", vec![LinkAttribute::OperState(State::Down), bridge])), None);
    }

    #[test]
    fn a_tentative_address_is_not_ready() {
        let mut m = AddressMessage::default();
        m.attributes.push(AddressAttribute::Address("fd00::12".parse().unwrap()));
        assert_eq!(tentative(&m), None);
        m.attributes.push(AddressAttribute::Flags(AddressFlags::Tentative | AddressFlags::Permanent));
        assert_eq!(tentative(&m).as_deref(), Some("address fd00::12 is tentative"));
    }
}
