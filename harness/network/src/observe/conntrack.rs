//! The conntrack table of a namespace, read and pruned over ctnetlink: what a proxy's NAT
//! actually did to each flow, and the "stale UDP entry" clean-up kube-proxy performs.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use anyhow::{Context, Result};
use netlink_packet_netfilter::NetfilterProtoFamily;
use netlink_packet_netfilter::conntrack::{
    ConntrackAttribute, ConntrackMessage, IPTuple, ProtoInfo, ProtoInfoTCP, ProtoTuple, Status,
    Tuple as CtTuple,
};

use super::nfnetlink::{CtSocket, Reply};
use crate::model::Protocol;
use crate::topology::netns::Netns;

/// One conntrack entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flow {
    /// IP protocol number: 6 TCP, 17 UDP, 132 SCTP, 1 ICMP, …; see [`Flow::protocol`].
    pub ip_protocol: u8,
    /// The direction of the first packet, before NAT.
    pub original: Tuple,
    /// What the answer looks like: after DNAT its source is the backend.
    pub reply: Tuple,
    /// TCP state as `conntrack -L` spells it (`ESTABLISHED`, `SYN_SENT`, …); `None` otherwise.
    pub state: Option<String>,
    /// Whether a reply was seen (`conntrack -L` prints `[UNREPLIED]` when not).
    pub seen_reply: bool,
}

/// Addresses and ports of one direction; ports are 0 for protocols without them (ICMP).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tuple {
    pub src: SocketAddr,
    pub dst: SocketAddr,
}

impl Flow {
    /// TCP, UDP or SCTP; `None` for other protocols.
    pub fn protocol(&self) -> Option<Protocol> {
        match self.ip_protocol {
            6 => Some(Protocol::Tcp),
            17 => Some(Protocol::Udp),
            132 => Some(Protocol::Sctp),
            _ => None,
        }
    }
}

/// Every entry of `ns`'s conntrack table (IPv4 and IPv6).
pub fn dump(ns: &Netns) -> Result<Vec<Flow>> {
    let mut socket = CtSocket::open(ns)?;
    dump_on(&mut socket)
}

/// The entry whose original (or reply) direction is `tuple`, if any. Unlike [`dump`], which
/// walks the whole host-wide hash table (about 10 ms with 262144 buckets), this is one hash
/// lookup.
pub fn lookup(ns: &Netns, ip_protocol: u8, tuple: &Tuple) -> Result<Option<Flow>> {
    let mut socket = CtSocket::open(ns)?;
    let message =
        ConntrackMessage::Get(vec![ConntrackAttribute::CtaTupleOrig(to_netlink(ip_protocol, tuple))]);
    match socket.request(family_of(tuple), message, Reply::Ack) {
        Ok(answer) => Ok(answer.iter().find_map(flow_of)),
        Err(e) if is_enoent(&e) => Ok(None),
        Err(e) => Err(e).with_context(|| {
            format!(
                "looking up {} {tuple} in the conntrack table of namespace {}",
                protocol_name(ip_protocol),
                ns.name()
            )
        }),
    }
}

/// The entries of `ns` whose (protocol, original tuple) `keys` name, as they are now, in that
/// order; an entry gone meanwhile is left out. One socket for all.
pub fn lookup_each(ns: &Netns, keys: &[(u8, Tuple)]) -> Result<Vec<Flow>> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let mut socket = CtSocket::open(ns)?;
    let mut out = Vec::with_capacity(keys.len());
    for (ip_protocol, tuple) in keys {
        let message =
            ConntrackMessage::Get(vec![ConntrackAttribute::CtaTupleOrig(to_netlink(*ip_protocol, tuple))]);
        match socket.request(family_of(tuple), message, Reply::Ack) {
            Ok(answer) => out.extend(answer.iter().find_map(flow_of)),
            Err(e) if is_enoent(&e) => {}
            Err(e) => {
                return Err(e).with_context(|| {
                    format!("looking up {} {tuple} in namespace {}", protocol_name(*ip_protocol), ns.name())
                });
            }
        }
    }
    Ok(out)
}

/// Deletes every entry of `ns`'s table (IPv4 and IPv6).
pub fn flush(ns: &Netns) -> Result<()> {
    let mut socket = CtSocket::open(ns)?;
    // A delete without a tuple flushes; family Unspec covers both address families.
    socket
        .request(NetfilterProtoFamily::Unspec, ConntrackMessage::Delete(vec![]), Reply::Ack)
        .with_context(|| format!("flushing the conntrack table of namespace {}", ns.name()))?;
    Ok(())
}

/// Deletes the TCP, UDP and SCTP entries for which `matches` is true (as kube-proxy clears
/// stale UDP entries), and returns how many went. Entries that expire meanwhile are skipped.
pub fn delete(ns: &Netns, matches: impl Fn(&Flow) -> bool) -> Result<usize> {
    let mut socket = CtSocket::open(ns)?;
    let mut deleted = 0;
    for flow in dump_on(&mut socket)?.iter().filter(|f| f.protocol().is_some() && matches(f)) {
        let message = ConntrackMessage::Delete(vec![ConntrackAttribute::CtaTupleOrig(to_netlink(
            flow.ip_protocol,
            &flow.original,
        ))]);
        match socket.request(family_of(&flow.original), message, Reply::Ack) {
            Ok(_) => deleted += 1,
            Err(e) if is_enoent(&e) => {}
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("deleting conntrack entry {flow} in namespace {}", ns.name()));
            }
        }
    }
    Ok(deleted)
}

fn dump_on(socket: &mut CtSocket) -> Result<Vec<Flow>> {
    let messages = socket
        .request(NetfilterProtoFamily::Unspec, ConntrackMessage::Get(vec![]), Reply::Dump)
        .with_context(|| format!("dumping the conntrack table of namespace {}", socket.netns()))?;
    Ok(messages.iter().filter_map(flow_of).collect())
}

/// Entries come back as NEW messages; GET is accepted for symmetry.
fn flow_of(message: &ConntrackMessage) -> Option<Flow> {
    match message {
        ConntrackMessage::New(attrs) | ConntrackMessage::Get(attrs) => from_netlink(attrs),
        _ => None,
    }
}

/// Requests about one entry name its address family; the kernel parses the tuple by it.
fn family_of(tuple: &Tuple) -> NetfilterProtoFamily {
    match tuple.src.ip() {
        IpAddr::V4(_) => NetfilterProtoFamily::IPv4,
        IpAddr::V6(_) => NetfilterProtoFamily::IPv6,
    }
}

fn is_enoent(e: &anyhow::Error) -> bool {
    e.downcast_ref::<std::io::Error>().and_then(|e| e.raw_os_error()) == Some(libc::ENOENT)
}

/// A flow from the attributes of one entry; `None` if it lacks either tuple.
pub(super) fn from_netlink(attrs: &[ConntrackAttribute]) -> Option<Flow> {
    let (mut original, mut reply, mut state, mut seen_reply) = (None, None, None, false);
    for attr in attrs {
        match attr {
            ConntrackAttribute::CtaTupleOrig(t) => original = Some(tuple(t)),
            ConntrackAttribute::CtaTupleReply(t) => reply = Some(tuple(t)),
            ConntrackAttribute::CtaStatus(s) => seen_reply = s.contains(Status::SeenReply),
            ConntrackAttribute::CtaProtoInfo(info) => state = tcp_state(info),
            _ => {}
        }
    }
    let ((ip_protocol, original), (_, reply)) = (original?, reply?);
    Some(Flow { ip_protocol, original, reply, state, seen_reply })
}

/// Protocol number and addresses of one CTA_TUPLE_* attribute.
fn tuple(parts: &[CtTuple]) -> (u8, Tuple) {
    let unspecified = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
    let (mut src, mut dst, mut sport, mut dport, mut proto) = (unspecified, unspecified, 0, 0, 0);
    for part in parts {
        match part {
            CtTuple::Ip(ips) => {
                for ip in ips {
                    match ip {
                        IPTuple::SourceAddress(a) => src = *a,
                        IPTuple::DestinationAddress(a) => dst = *a,
                        _ => {}
                    }
                }
            }
            CtTuple::Proto(protos) => {
                for p in protos {
                    match p {
                        ProtoTuple::Protocol(p) => proto = u8::from(*p),
                        ProtoTuple::SourcePort(p) => sport = *p,
                        ProtoTuple::DestinationPort(p) => dport = *p,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    (proto, Tuple { src: SocketAddr::new(src, sport), dst: SocketAddr::new(dst, dport) })
}

fn to_netlink(ip_protocol: u8, t: &Tuple) -> Vec<CtTuple> {
    vec![
        CtTuple::Ip(vec![IPTuple::SourceAddress(t.src.ip()), IPTuple::DestinationAddress(t.dst.ip())]),
        CtTuple::Proto(vec![
            ProtoTuple::Protocol(ip_protocol.into()),
            ProtoTuple::SourcePort(t.src.port()),
            ProtoTuple::DestinationPort(t.dst.port()),
        ]),
    ]
}

/// The names of `enum tcp_conntrack` as conntrack-tools prints them.
fn tcp_state(info: &[ProtoInfo]) -> Option<String> {
    const NAMES: [&str; 10] = [
        "NONE",
        "SYN_SENT",
        "SYN_RECV",
        "ESTABLISHED",
        "FIN_WAIT",
        "CLOSE_WAIT",
        "LAST_ACK",
        "TIME_WAIT",
        "CLOSE",
        "SYN_SENT2",
    ];
    info.iter().find_map(|i| match i {
        ProtoInfo::TCP(tcp) => tcp.iter().find_map(|t| match t {
            ProtoInfoTCP::State(s) => {
                Some(NAMES.get(*s as usize).map_or_else(|| format!("STATE_{s}"), |n| n.to_string()))
            }
            _ => None,
        }),
        _ => None,
    })
}

fn protocol_name(number: u8) -> String {
    match number {
        1 => "icmp".into(),
        6 => "tcp".into(),
        17 => "udp".into(),
        58 => "icmpv6".into(),
        132 => "sctp".into(),
        n => format!("proto-{n}"),
    }
}

/// `10.244.1.20:20000 > 10.96.0.10:53`.
impl fmt::Display for Tuple {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} > {}", self.src, self.dst)
    }
}

/// Like `conntrack -L`:
/// `udp src=10.244.1.20 dst=10.96.0.10 sport=20000 dport=53 src=10.244.1.5 dst=10.244.1.20 sport=53 dport=20000`,
/// with the TCP state after the protocol and `[UNREPLIED]` before the reply tuple.
impl fmt::Display for Flow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let has_ports = self.protocol().is_some();
        let tuple = |f: &mut fmt::Formatter<'_>, t: &Tuple| {
            write!(f, "src={} dst={}", t.src.ip(), t.dst.ip())?;
            if has_ports {
                write!(f, " sport={} dport={}", t.src.port(), t.dst.port())?;
            }
            Ok(())
        };
        write!(f, "{} ", protocol_name(self.ip_protocol))?;
        if let Some(state) = &self.state {
            write!(f, "{state} ")?;
        }
        tuple(f, &self.original)?;
        f.write_str(if self.seen_reply { " " } else { " [UNREPLIED] " })?;
        tuple(f, &self.reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn displays_like_conntrack_list() {
        let mut flow = Flow {
            ip_protocol: 17,
            original: Tuple { src: sa("10.244.1.20:20000"), dst: sa("10.96.0.10:53") },
            reply: Tuple { src: sa("10.244.1.5:53"), dst: sa("10.244.1.20:20000") },
            state: None,
            seen_reply: true,
        };
        assert_eq!(
            flow.to_string(),
            "udp src=10.244.1.20 dst=10.96.0.10 sport=20000 dport=53 src=10.244.1.5 dst=10.244.1.20 sport=53 dport=20000"
        );
        flow.ip_protocol = 6;
        flow.state = Some("SYN_SENT".into());
        flow.seen_reply = false;
        assert_eq!(
            flow.to_string(),
            "tcp SYN_SENT src=10.244.1.20 dst=10.96.0.10 sport=20000 dport=53 [UNREPLIED] src=10.244.1.5 dst=10.244.1.20 sport=53 dport=20000"
        );
    }

    #[test]
    fn reads_tuples_status_and_tcp_state_from_netlink_attributes() {
        let original = Tuple { src: sa("[fd00::1]:40000"), dst: sa("[fd00:96::a]:80") };
        let reply = Tuple { src: sa("[fd00::5]:8080"), dst: sa("[fd00::1]:40000") };
        let attrs = vec![
            ConntrackAttribute::CtaTupleOrig(to_netlink(6, &original)),
            ConntrackAttribute::CtaTupleReply(to_netlink(6, &reply)),
            ConntrackAttribute::CtaStatus(Status::SeenReply | Status::DstNat),
            ConntrackAttribute::CtaProtoInfo(vec![ProtoInfo::TCP(vec![ProtoInfoTCP::State(3)])]),
        ];
        let flow = from_netlink(&attrs).unwrap();
        assert_eq!(flow.protocol(), Some(Protocol::Tcp));
        assert_eq!((flow.original, flow.reply), (original, reply));
        assert_eq!(flow.state.as_deref(), Some("ESTABLISHED"));
        assert!(flow.seen_reply);
        assert!(from_netlink(&attrs[..1]).is_none(), "an entry without a reply tuple is skipped");
    }
}
