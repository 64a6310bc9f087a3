//! Putting a topology back as it was built, once a run's proxy, servers and captures have
//! stopped: what a run may change is undone, then the topology is read again and must read as
//! it did when built (see `state`). Whatever the reset cannot undo (a process still inside, a
//! legacy iptables table, an IPVS connection) stays a difference, and the topology is not used
//! again.
//!
//! What a run changes, and how each is undone:
//! - the proxy's rules: every nftables table deleted (iptables-nft's are nftables tables too);
//!   IPVS virtual servers cleared and ipsets destroyed where there are any;
//! - links a run added (`kube-ipvs0`; the node network's end of a stand-in control plane's
//!   veth, whose namespace the kernel destroys later): deleted;
//! - conntrack entries: flushed in every namespace that holds any, last;
//! - sockets the clients and servers left (a connection the other end never closed):
//!   destroyed (`ss -K`, the kernel's `SOCK_DESTROY`); connections in TIME_WAIT hold only
//!   their own source ports, which the next run does not take (`stage::Keeper`);
//! - neighbour and bridge-forwarding entries the traffic taught: deleted, so the next run's
//!   first packets resolve and flood as in a fresh topology;
//! - routes a probe steered through a node: removed;
//! - kernel settings the proxy wrote (`route_localnet`, IPVS's): written back.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context, Result, anyhow, bail};
use netlink_packet_route::AddressFamily;
use netlink_packet_route::link::LinkAttribute;
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourFlags, NeighbourMessage, NeighbourState,
};

use super::state::{self, Depth, State};
use crate::observe::{conntrack, ipset, nftables::NftSocket};
use crate::topology::Topology;
use crate::topology::links::Links;
use crate::topology::netns::Netns;

/// Undoes what a run changed (see the module's note) and checks that the topology reads as
/// `built` again; an error says what stayed.
pub async fn reset(topology: &Topology, built: &State) -> Result<()> {
    let paths: Vec<_> = topology.namespaces().map(Netns::path).collect();
    let holders = crate::containment::namespace_holders(&paths);
    if !holders.is_empty() {
        bail!("still running in its namespaces: {}", holders.join(", "));
    }
    topology.unsteer_all().await?;
    let mut left = Vec::new();
    for (role, ns) in topology.roles() {
        let node = role.starts_with("node/");
        let undo = async {
            let links = Links::connect(ns).await?;
            if node {
                undo_proxy(ns)?;
                let not_back = restore_sysctls(ns, built.0.get(&role))?;
                left.extend(not_back.into_iter().map(|l| format!("{role}: {l}")));
            }
            destroy_sockets(ns)?;
            flush_neighbours(&links).await?;
            // Not straight after the tables' deletion: a link request then waits on the kernel
            // (some 15 ms, measured).
            delete_added_links(&links, &link_names(built.0.get(&role))).await?;
            // Last, once nothing here sends a packet the proxy's conntrack hooks, which go with
            // its tables a moment later, could still record.
            flush_conntrack(ns)?;
            anyhow::Ok(())
        };
        undo.await.with_context(|| format!("resetting {role}"))?;
    }
    // The nodes' kernel settings were read and compared as they were written back.
    let now = state::read(topology, Depth::Reuse, false).await?;
    let without_sysctls = |s: &State| {
        State(
            s.0.iter()
                .map(|(role, lines)| {
                    (role.clone(), lines.iter().filter(|l| !state::is_sysctl(l)).cloned().collect())
                })
                .collect(),
        )
    };
    left.extend(now.differences(&without_sysctls(built)));
    if !left.is_empty() {
        bail!("the reset left {}", left.join("; "));
    }
    Ok(())
}

/// The names of the links a namespace's lines list.
fn link_names(lines: Option<&BTreeSet<String>>) -> BTreeSet<String> {
    let lines = lines.into_iter().flatten();
    lines.filter_map(|l| Some(l.strip_prefix("link ")?.split(' ').next()?.to_string())).collect()
}

/// A node's proxy state: nftables tables, IPVS virtual servers and ipsets.
fn undo_proxy(ns: &Netns) -> Result<()> {
    // Listed before the tables go: an ipset request right after a table's deletion waits some
    // 15 ms in the kernel (measured), and without sets there is nothing to destroy.
    let sets = ipset::names(ns)?;
    let mut nft = NftSocket::open(ns)?;
    let tables = nft.tables()?;
    nft.delete_tables(&tables)?;
    let virtual_servers =
        ns.run(|| std::fs::read_to_string("/proc/thread-self/net/ip_vs").unwrap_or_default())?;
    if virtual_servers.lines().count() > 3 {
        ns.exec("ipvsadm", &["-C"], None)?;
    }
    // After the rules that may refer to them.
    if !sets.is_empty() {
        ipset::destroy_all(ns)?;
    }
    Ok(())
}

/// Deletes the links a run added (any link not in `built_links`): a proxy's (`kube-ipvs0`),
/// or the node network's end of a stand-in control plane's veth, which the kernel removes only
/// when it gets to destroying the control plane's namespace (measured: sometimes after the
/// run).
async fn delete_added_links(links: &Links, built_links: &BTreeSet<String>) -> Result<()> {
    let messages: Vec<_> = links.collect("listing links", links.handle().link().get().execute()).await?;
    for m in messages {
        let name = m.attributes.iter().find_map(|a| match a {
            LinkAttribute::IfName(n) => Some(n.clone()),
            _ => None,
        });
        if let Some(name) = name.filter(|n| !built_links.contains(n)) {
            // Gone meanwhile: its peer's namespace was being destroyed, which takes it along.
            let deleted = links.handle().link().del(m.header.index).execute().await;
            unless_gone(deleted, libc::ENODEV, links, &format!("deleting link {name}"))?;
        }
    }
    Ok(())
}

/// Writes back each kernel setting whose value differs from the `built` lines' (`sysctl
/// KEY=VALUE`); returns the settings it cannot put back as built: a setting the namespace
/// gained (a module loaded meanwhile) or lost, or one that does not write.
fn restore_sysctls(ns: &Netns, built: Option<&BTreeSet<String>>) -> Result<Vec<String>> {
    let wanted: BTreeMap<&str, &str> =
        built.into_iter().flatten().filter_map(|l| l.strip_prefix("sysctl ")?.split_once('=')).collect();
    ns.run(|| -> Result<Vec<String>> {
        let now = state::sysctls(Depth::Reuse)?;
        let mut left: Vec<String> =
            wanted.keys().filter(|k| !now.contains_key(**k)).map(|k| format!("- sysctl {k}")).collect();
        for (key, value) in &now {
            let Some(&want) = wanted.get(key.as_str()) else {
                left.push(format!("+ sysctl {key}={value}"));
                continue;
            };
            if want == value {
                continue;
            }
            // Multi-valued settings read with tabs and are written with spaces.
            let path = format!("/proc/sys/{key}");
            if std::fs::write(&path, want).is_err() || state::sysctls_one(&path).as_deref() != Some(want) {
                left.push(format!("sysctl {key}={value} (built {want})"));
            }
        }
        Ok(left)
    })?
}

/// Flushes the namespace's conntrack table if it holds any entry: a flush walks the kernel's
/// whole (shared) table, a count does not.
fn flush_conntrack(ns: &Netns) -> Result<()> {
    let count = ns.run(|| std::fs::read_to_string("/proc/sys/net/netfilter/nf_conntrack_count"))?;
    if count.is_ok_and(|c| c.trim() != "0") {
        conntrack::flush(ns)?;
    }
    Ok(())
}

/// Destroys every TCP and UDP socket left in the namespace, where its counters say there are
/// any (no process is inside any more: these are connections still closing, the kernel's
/// alone). Connections in TIME_WAIT stay (see `state::sockets_in_use`).
fn destroy_sockets(ns: &Netns) -> Result<()> {
    let any = ns.run(|| {
        let counts = state::sockets_in_use();
        counts
            .iter()
            .any(|c| (c.starts_with("sockets TCP") || c.starts_with("sockets UDP")) && !c.ends_with(" 0"))
    })?;
    if any {
        ns.exec("ss", &["-K", "-a", "-t", "-u"], None)?;
    }
    Ok(())
}

/// Deletes every neighbour entry the traffic made (IPv4 and IPv6, NOARP ones such as
/// loopback's too) and every address a bridge learned: entry by entry, since flushing a
/// bridge's table as a link change (`IFLA_BR_FDB_FLUSH`) makes the kernel send IGMP reports,
/// which conntrack, until the proxy's tables are fully gone, records (measured).
async fn flush_neighbours(links: &Links) -> Result<()> {
    let neighbours: Vec<_> =
        links.collect("listing neighbours", links.handle().neighbours().get().execute()).await?;
    for m in neighbours {
        let h = &m.header;
        let made = match h.family {
            // Permanent entries and proxy entries are configuration; multicast groups' are the
            // kernel's own (`state` leaves them out).
            AddressFamily::Inet | AddressFamily::Inet6 => {
                h.state != NeighbourState::Permanent
                    && !h.flags.contains(NeighbourFlags::Proxy)
                    && !multicast(&m)
            }
            // A bridge's own ports' addresses are permanent, static entries NOARP; the rest it
            // learned.
            AddressFamily::Bridge => !matches!(h.state, NeighbourState::Permanent | NeighbourState::Noarp),
            _ => false,
        };
        if made {
            // Gone between the listing and the deletion: as good as deleted.
            let deleted = links.handle().neighbours().del(m).execute().await;
            unless_gone(deleted, libc::ENOENT, links, "deleting a neighbour entry")?;
        }
    }
    Ok(())
}

/// A deletion's result, where the kernel's `gone` error (the object went meanwhile) counts as
/// deleted; any other error says `what` failed, and where.
fn unless_gone(result: Result<(), rtnetlink::Error>, gone: i32, links: &Links, what: &str) -> Result<()> {
    match result {
        Err(rtnetlink::Error::NetlinkError(e)) if e.raw_code() == -gone => Ok(()),
        result => result.map_err(|e| anyhow!("{}: {e}", links.context(what))),
    }
}

/// Whether the entry is a multicast group's.
fn multicast(m: &NeighbourMessage) -> bool {
    m.attributes.iter().any(|a| match a {
        NeighbourAttribute::Destination(NeighbourAddress::Inet(v4)) => v4.is_multicast(),
        NeighbourAttribute::Destination(NeighbourAddress::Inet6(v6)) => v6.is_multicast(),
        _ => false,
    })
}
