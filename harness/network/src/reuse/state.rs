//! What a topology's namespaces hold that a run could change, read back as lines of text: the
//! links, addresses, routes and policy rules; the neighbour entries;
//! the netfilter state (nftables tables, legacy iptables tables, IPVS, ipsets); the conntrack
//! entries; the sockets; and the kernel settings. Two reads compare line by line, so a reused
//! topology is checked against what it was built as (`reset`), and a difference reads as what
//! was left behind.
//!
//! Nothing here depends on the namespaces' names, link indexes or MAC addresses (random per
//! build): a fresh topology of the same cluster reads the same, which is what the
//! reset-completeness test compares.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use anyhow::{Context, Result};
use netlink_packet_route::address::AddressAttribute;
use netlink_packet_route::link::{InfoKind, LinkAttribute, LinkFlags, LinkInfo, LinkMessage};
use netlink_packet_route::neighbour::{NeighbourAddress, NeighbourAttribute};
use netlink_packet_route::route::{RouteAddress, RouteAttribute};
use rtnetlink::{IpVersion, RouteMessageBuilder};

use crate::topology::Topology;
use crate::topology::links::Links;
use crate::topology::netns::Netns;

/// How much to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Depth {
    /// What a reuse is checked on: everything but the kernel settings of pods, external hosts
    /// and the node network (no proxy writes there) and of each link of its own (proxies write
    /// `all` and `default`); neighbours and bridge entries are flushed, not compared.
    Reuse,
    /// Everything, for the reset-completeness test.
    Full,
}

/// Each namespace's lines, by its role (`node/NAME`, `pod/NAME`, `external/NAME`, `net`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct State(pub BTreeMap<String, BTreeSet<String>>);

impl State {
    /// What differs from `before`, a line each: `ROLE: + LINE` (now there, not before) or
    /// `ROLE: - LINE` (gone). Empty when the two are the same.
    pub fn differences(&self, before: &State) -> Vec<String> {
        let empty = BTreeSet::new();
        let roles: BTreeSet<&String> = self.0.keys().chain(before.0.keys()).collect();
        let mut out = Vec::new();
        for role in roles {
            let now = self.0.get(role).unwrap_or(&empty);
            let then = before.0.get(role).unwrap_or(&empty);
            out.extend(now.difference(then).map(|line| format!("{role}: + {line}")));
            out.extend(then.difference(now).map(|line| format!("{role}: - {line}")));
        }
        out
    }
}

impl Topology {
    /// Every namespace's role (`node/NAME`, `pod/NAME`, `external/NAME`, `net`) with the
    /// namespace, nodes first.
    pub fn roles(&self) -> Vec<(String, &Netns)> {
        let nodes = self.nodes.iter().map(|n| (format!("node/{}", n.name), &n.netns));
        let pods = self.pods.iter().map(|(name, ns)| (format!("pod/{name}"), ns));
        let hosts = self.external_hosts.iter().map(|(name, ns)| (format!("external/{name}"), ns));
        let net = std::iter::once(("net".to_string(), &self.node_network));
        nodes.chain(pods).chain(hosts).chain(net).collect()
    }

    /// Reads what every namespace holds (see the module's note).
    pub async fn state(&self, depth: Depth) -> Result<State> {
        read(self, depth, true).await
    }
}

/// As [`Topology::state`]; without the kernel settings (`sysctls` false) where the caller has
/// just read and compared them itself (`reset`).
pub(super) async fn read(topology: &Topology, depth: Depth, sysctls: bool) -> Result<State> {
    let mut out = BTreeMap::new();
    for (role, ns) in topology.roles() {
        let node = role.starts_with("node/");
        let lines =
            read_namespace(ns, depth, node, sysctls).await.with_context(|| format!("reading {role}"))?;
        out.insert(role, lines);
    }
    Ok(State(out))
}

/// A namespace's lines that are kernel settings.
pub(super) fn is_sysctl(line: &str) -> bool {
    line.starts_with("sysctl ")
}

/// One namespace's lines.
async fn read_namespace(ns: &Netns, depth: Depth, node: bool, sysctls: bool) -> Result<BTreeSet<String>> {
    let links = Links::connect(ns).await?;
    let mut lines = BTreeSet::new();
    let names = read_links(&links, &mut lines).await?;
    let name = |index: u32| names.get(&index).cloned().unwrap_or_else(|| format!("#{index}"));
    read_addresses(&links, &name, &mut lines).await?;
    read_routes(&links, &name, &mut lines).await?;
    read_rules(&links, &mut lines).await?;
    if depth == Depth::Full {
        read_neighbours(&links, &name, &mut lines).await?;
    }
    lines.extend(ns.run(|| read_proc(depth, node && sysctls))??);
    if node || depth == Depth::Full {
        lines.extend(netfilter_tables(ns)?);
        lines.extend(ipsets(ns)?);
    }
    Ok(lines)
}

/// `link NAME KIND up|down mtu=N [master=NAME]`; returns the names by index.
async fn read_links(links: &Links, lines: &mut BTreeSet<String>) -> Result<BTreeMap<u32, String>> {
    let messages: Vec<LinkMessage> =
        links.collect("listing links", links.handle().link().get().execute()).await?;
    let names: BTreeMap<u32, String> =
        messages.iter().filter_map(|m| Some((m.header.index, link_name(m)?))).collect();
    for m in &messages {
        let name = names.get(&m.header.index).cloned().unwrap_or_default();
        let kind = m
            .attributes
            .iter()
            .find_map(|a| match a {
                LinkAttribute::LinkInfo(info) => info.iter().find_map(|i| match i {
                    LinkInfo::Kind(kind) => Some(kind_name(kind)),
                    _ => None,
                }),
                _ => None,
            })
            .unwrap_or_else(|| "device".into());
        let up = if m.header.flags.contains(LinkFlags::Up) { "up" } else { "down" };
        let mut line = format!("link {name} {kind} {up}");
        for a in &m.attributes {
            match a {
                LinkAttribute::Mtu(mtu) => line.push_str(&format!(" mtu={mtu}")),
                LinkAttribute::Controller(index) => {
                    line.push_str(&format!(" master={}", names.get(index).cloned().unwrap_or_default()))
                }
                _ => {}
            }
        }
        lines.insert(line);
    }
    Ok(names)
}

fn link_name(m: &LinkMessage) -> Option<String> {
    m.attributes.iter().find_map(|a| match a {
        LinkAttribute::IfName(name) => Some(name.clone()),
        _ => None,
    })
}

fn kind_name(kind: &InfoKind) -> String {
    format!("{kind:?}").to_lowercase()
}

/// `address LINK IP/PREFIX`; an IPv6 link-local address (made from the random MAC) as
/// `fe80::(link-local)`.
async fn read_addresses(
    links: &Links,
    name: &impl Fn(u32) -> String,
    lines: &mut BTreeSet<String>,
) -> Result<()> {
    let messages: Vec<_> =
        links.collect("listing addresses", links.handle().address().get().execute()).await?;
    for m in messages {
        for a in &m.attributes {
            if let AddressAttribute::Address(ip) = a {
                lines.insert(format!(
                    "address {} {}/{}",
                    name(m.header.index),
                    shown(*ip),
                    m.header.prefix_len
                ));
            }
        }
    }
    Ok(())
}

/// An address as the state shows it: link-local IPv6 addresses stand for "one made from the
/// link's MAC", which differs per build.
fn shown(ip: IpAddr) -> String {
    match ip {
        IpAddr::V6(v6) if v6.segments()[0] == 0xfe80 => "fe80::(link-local)".into(),
        ip => ip.to_string(),
    }
}

fn route_address(address: &RouteAddress) -> String {
    match address {
        RouteAddress::Inet(v4) => v4.to_string(),
        RouteAddress::Inet6(v6) => shown(IpAddr::V6(*v6)),
        other => format!("{other:?}"),
    }
}

/// `route FAMILY table=T type=K scope=S proto=P DEST/LEN [via GW] [dev LINK] [metric M]`, both
/// families, every table.
async fn read_routes(
    links: &Links,
    name: &impl Fn(u32) -> String,
    lines: &mut BTreeSet<String>,
) -> Result<()> {
    let requests =
        [RouteMessageBuilder::<Ipv4Addr>::new().build(), RouteMessageBuilder::<Ipv6Addr>::new().build()];
    for request in requests {
        let messages: Vec<_> =
            links.collect("listing routes", links.handle().route().get(request).execute()).await?;
        for m in messages {
            let h = &m.header;
            let mut table = u32::from(h.table);
            let mut destination = "default".to_string();
            let mut rest = String::new();
            for a in &m.attributes {
                match a {
                    RouteAttribute::Table(t) => table = *t,
                    RouteAttribute::Destination(d) => destination = route_address(d),
                    RouteAttribute::Gateway(g) => rest.push_str(&format!(" via {}", route_address(g))),
                    RouteAttribute::Oif(i) => rest.push_str(&format!(" dev {}", name(*i))),
                    RouteAttribute::Priority(p) => rest.push_str(&format!(" metric {p}")),
                    RouteAttribute::PrefSource(s) => rest.push_str(&format!(" src {}", route_address(s))),
                    RouteAttribute::MultiPath(hops) => rest.push_str(&format!(" multipath {hops:?}")),
                    _ => {}
                }
            }
            lines.insert(format!(
                "route {:?} table={table} type={:?} scope={:?} proto={:?} {destination}/{}{rest}",
                h.address_family, h.kind, h.scope, h.protocol, h.destination_prefix_length
            ));
        }
    }
    Ok(())
}

/// `rule …`, both families.
async fn read_rules(links: &Links, lines: &mut BTreeSet<String>) -> Result<()> {
    for version in [IpVersion::V4, IpVersion::V6] {
        let messages: Vec<_> =
            links.collect("listing policy rules", links.handle().rule().get(version).execute()).await?;
        lines.extend(messages.iter().map(|m| format!("rule {:?} {:?}", m.header, m.attributes)));
    }
    Ok(())
}

/// `neighbour FAMILY LINK IP STATE` (no MAC: random per build). Not the addresses bridges
/// learned: the kernel's own chatter on a link (IGMP and MLD reports, sent on its timers after
/// a link comes up) teaches them too, in a fresh topology whenever it happens to, so their
/// count tells nothing (`reset` deletes them all the same).
async fn read_neighbours(
    links: &Links,
    name: &impl Fn(u32) -> String,
    lines: &mut BTreeSet<String>,
) -> Result<()> {
    let messages: Vec<_> =
        links.collect("listing neighbours", links.handle().neighbours().get().execute()).await?;
    for m in messages {
        let h = &m.header;
        let link = name(h.ifindex);
        let destination = m.attributes.iter().find_map(|a| match a {
            NeighbourAttribute::Destination(NeighbourAddress::Inet(v4)) => Some(IpAddr::V4(*v4)),
            NeighbourAttribute::Destination(NeighbourAddress::Inet6(v6)) => Some(IpAddr::V6(*v6)),
            _ => None,
        });
        // The kernel's own chatter on a link (IGMP and MLD reports, IPv6 neighbour discovery
        // between link-local addresses) comes and goes on its timers, in a fresh topology as in
        // a kept one, and no probe is sent to such an address.
        if let Some(ip) = destination.filter(|ip| !ip.is_multicast() && !shown(*ip).starts_with("fe80")) {
            lines.insert(format!("neighbour {:?} {link} {ip} {:?}", h.family, h.state));
        }
    }
    Ok(())
}

/// Files under `/proc/sys/net` that are no settings: a key chosen at random per namespace
/// (differs between two builds of one cluster whatever runs), and the conntrack table's count
/// (read as `conntrack entries N`).
const NOT_SETTINGS: &[&str] = &["net/ipv4/tcp_fastopen_key", CONNTRACK_COUNT];

/// How many entries the namespace's conntrack table holds.
const CONNTRACK_COUNT: &str = "net/netfilter/nf_conntrack_count";

/// What `/proc` tells of the namespace the calling thread is in: its sockets, legacy iptables
/// tables, IPVS, conntrack's count, and kernel settings (`sysctl KEY=VALUE`; at
/// [`Depth::Reuse`] on nodes only).
fn read_proc(depth: Depth, node: bool) -> Result<BTreeSet<String>> {
    let mut lines = BTreeSet::new();
    lines.extend(sockets_in_use());
    if let Some(n) = sysctls_one(&format!("/proc/sys/{CONNTRACK_COUNT}")) {
        lines.insert(format!("conntrack entries {n}"));
    }
    for (kind, file) in LEGACY_TABLES {
        let names = std::fs::read_to_string(format!("/proc/thread-self/net/{file}")).unwrap_or_default();
        lines.extend(names.lines().map(|table| format!("{kind} table {table}")));
    }
    for file in ["ip_vs", "ip_vs_conn"] {
        let text = std::fs::read_to_string(format!("/proc/thread-self/net/{file}")).unwrap_or_default();
        // Past the header lines, each line is a virtual server (or one of its real servers) or
        // a connection.
        let header = if file == "ip_vs" { 3 } else { 1 };
        lines.extend(text.lines().skip(header).map(|l| format!("{file} {}", l.trim())));
    }
    if node || depth == Depth::Full {
        for (key, value) in sysctls(depth)? {
            lines.insert(format!("sysctl {key}={value}"));
        }
    }
    Ok(lines)
}

/// `sockets KIND inuse N` for each kind of socket of the namespace (`/proc/net/sockstat`,
/// `sockstat6`: per-namespace counters). Connections in TIME_WAIT are not among them: they
/// are the kernel's, hold only their own source port, and a kept topology's next run takes
/// source ports after its last run's (`stage::Keeper`). Listing the sockets themselves
/// (`/proc/net/tcp`, a sock_diag dump) would walk the machine's whole TCP hash table, some
/// milliseconds a namespace.
pub(super) fn sockets_in_use() -> Vec<String> {
    let mut out = Vec::new();
    for file in ["sockstat", "sockstat6"] {
        let text = std::fs::read_to_string(format!("/proc/thread-self/net/{file}")).unwrap_or_default();
        for line in text.lines() {
            let Some((kind, fields)) = line.split_once(": ") else { continue };
            let fields: Vec<&str> = fields.split_whitespace().collect();
            if kind != "sockets"
                && let Some(n) = fields.windows(2).find(|w| w[0] == "inuse").map(|w| w[1])
            {
                out.push(format!("sockets {kind} inuse {n}"));
            }
        }
    }
    out
}

/// Where the kernel lists the legacy x_tables tables a namespace registered.
const LEGACY_TABLES: &[(&str, &str)] =
    &[("iptables-legacy", "ip_tables_names"), ("ip6tables-legacy", "ip6_tables_names")];

/// The readable kernel settings under `/proc/sys/net` of the calling thread's namespace, by key
/// (`net/ipv4/ip_forward`). At [`Depth::Reuse`], a link's own directories (`conf/eth0`,
/// `neigh/eth0`) are left out.
pub(super) fn sysctls(depth: Depth) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    walk(Path::new("/proc/sys/net"), depth, &mut out)?;
    Ok(out)
}

/// One setting's value as [`sysctls`] shows it (`path`: under `/proc/sys`), if it reads.
pub(super) fn sysctls_one(path: &str) -> Option<String> {
    read_setting(std::fs::File::open(path).ok()?)
}

/// Each setting is opened relative to its directory, not by its path: every namespace has its
/// own `/proc/sys/net` entries under the same names, so the kernel compares each component of a
/// path against every namespace's entry of that name (`proc_sys_compare`, 6 % of a mutant
/// hunt's CPU when settings were opened by path).
fn walk(dir: &Path, depth: Depth, out: &mut BTreeMap<String, String>) -> Result<()> {
    use nix::fcntl::{OFlag, openat};
    use nix::sys::stat::Mode;

    let handle = std::fs::File::open(dir).with_context(|| format!("opening {}", dir.display()))?;
    let entries = std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))?;
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let path = dir.join(&name);
        let key = path.strip_prefix("/proc/sys").unwrap_or(&path).to_string_lossy().into_owned();
        if entry.file_type()?.is_dir() {
            let parent = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            let per_link =
                matches!(parent, "conf" | "neigh") && !matches!(name.to_str(), Some("all" | "default"));
            if depth == Depth::Full || !per_link {
                walk(&path, depth, out)?;
            }
            continue;
        }
        if NOT_SETTINGS.contains(&key.as_str()) {
            continue;
        }
        // Write-only and secret settings (`route/flush`, `stable_secret`) do not read.
        let Ok(fd) = openat(&handle, name.as_os_str(), OFlag::O_RDONLY | OFlag::O_CLOEXEC, Mode::empty())
        else {
            continue;
        };
        if let Some(value) = read_setting(std::fs::File::from(fd)) {
            out.insert(key, value);
        }
    }
    Ok(())
}

/// A setting's value, whitespace-separated fields joined by one space. Read into a small
/// buffer (the kernel allocates and zeroes one of the size asked for each read), and no read
/// past a short one: a setting's handler writes its whole value into the buffer when it fits
/// (`proc_sys_call_handler`), so a short read is the end.
fn read_setting(mut file: std::fs::File) -> Option<String> {
    use std::io::Read;
    let (mut text, mut buffer) = (Vec::new(), [0u8; 512]);
    loop {
        let n = file.read(&mut buffer).ok()?;
        text.extend_from_slice(&buffer[..n]);
        if n < buffer.len() {
            break;
        }
    }
    let text = String::from_utf8(text).ok()?;
    Some(text.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// `nftables table FAMILY NAME` for each nf_tables table (iptables-nft's tables among them).
fn netfilter_tables(ns: &Netns) -> Result<Vec<String>> {
    let tables = crate::observe::nftables::NftSocket::open(ns)?.tables()?;
    let family = crate::observe::nftables::family_name;
    Ok(tables.into_iter().map(|(f, name)| format!("nftables table {} {name}", family(f))).collect())
}

/// `ipset NAME` for each set.
fn ipsets(ns: &Netns) -> Result<Vec<String>> {
    Ok(crate::observe::ipset::names(ns)?.into_iter().map(|set| format!("ipset {set}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Read-only: the settings of the test's own namespace, read as `walk` reads them, equal
    /// those read by path.
    #[test]
    fn settings_read_by_directory_equal_those_read_by_path() {
        fn by_path(dir: &Path, out: &mut BTreeMap<String, String>) {
            for entry in std::fs::read_dir(dir).unwrap().flatten() {
                let path = entry.path();
                if entry.file_type().unwrap().is_dir() {
                    by_path(&path, out);
                    continue;
                }
                let key = path.strip_prefix("/proc/sys").unwrap().to_string_lossy().into_owned();
                // Read as std reads a file, to the end: the reader under test stops at a short read.
                if let Ok(value) = std::fs::read_to_string(&path)
                    && !NOT_SETTINGS.contains(&key.as_str())
                {
                    out.insert(key, value.split_whitespace().collect::<Vec<_>>().join(" "));
                }
            }
        }
        let mut expected = BTreeMap::new();
        by_path(Path::new("/proc/sys/net/ipv4"), &mut expected);
        let mut read = BTreeMap::new();
        walk(Path::new("/proc/sys/net/ipv4"), Depth::Full, &mut read).unwrap();
        assert_eq!(read, expected);
        assert!(read.len() > 50, "{read:?}");
    }
}
