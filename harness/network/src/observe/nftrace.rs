//! Which rules of a namespace's nftables ruleset each packet met, as the kernel traces them
//! (what `nft monitor trace` prints), for rule coverage.
//!
//! A table of the harness's own ([`TRACE_TABLE`]) marks TCP, UDP and SCTP packets at the
//! earliest priority of the prerouting and output hooks (`meta nftrace set 1`); from then on
//! every table the packet meets, the proxy's included, reports each rule that matched it, with
//! its verdict, on the NFNLGRP_NFTRACE netlink group. Nothing of the proxy's tables changes,
//! and iptables on the nft backend (Debian's `iptables`) is traced the same way.
//!
//! The table's two empty chains at the latest priority of the input and postrouting hooks
//! match nothing: their only job is the trace message the kernel sends when a packet enters
//! them, which carries the packet's headers as the NAT hooks left them, so that a translated
//! packet can be tied to the flow it came from.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use netlink_sys::{Socket, protocols::NETLINK_NETFILTER};

use super::nftables::{NftSocket, family_name};
use crate::topology::netns::Netns;

/// The harness's own table in a node namespace while coverage is measured. Rule dumps the
/// harness reads leave it out, and no proxy reads `inet` tables of other names.
pub const TRACE_TABLE: &str = "packetproof-trace";

/// The chains of [`TRACE_TABLE`] that mark packets: a packet's trace starts in one of them.
const MARKING_CHAINS: [&str; 2] = ["mark-prerouting", "mark-output"];

/// `NFNLGRP_NFTRACE` (linux/netfilter/nfnetlink.h).
const GROUP_NFTRACE: u32 = 9;
/// `NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_TRACE`.
const MSG_TRACE: u16 = (10 << 8) | 17;

/// A busy phase traces some thousands of packets, each a few messages of under 300 bytes; the
/// reader thread drains the socket as they come, so the buffer only has to absorb a burst while
/// the reader waits for a core. 16 MiB overflowed in about 1 case of 100 under `explore --guide
/// coverage` on 2 cores (a probe of 40 TCP attempts alone sends thousands of messages at once),
/// since the kernel charges each message's whole buffer, not its bytes. Memory is taken only as
/// messages wait. Overflowing is an error, never silence.
const BUFFER_BYTES: libc::c_int = 64 << 20;

/// Adds [`TRACE_TABLE`] to the namespace of `socket`, over netlink: one transaction, no `nft`
/// process. One marking rule per protocol (`meta l4proto tcp meta nftrace set 1`, …).
pub fn install(socket: &mut NftSocket) -> Result<()> {
    const PREROUTING: u32 = 0;
    const INPUT: u32 = 1;
    const OUTPUT: u32 = 3;
    const POSTROUTING: u32 = 4;
    socket.add_trace_table(
        TRACE_TABLE,
        &[
            ("mark-prerouting", PREROUTING, -500, true),
            ("mark-output", OUTPUT, -500, true),
            ("seen-input", INPUT, 500, false),
            ("seen-postrouting", POSTROUTING, 500, false),
        ],
    )
}

/// `nft list ruleset` output without [`TRACE_TABLE`]: what the proxy wrote, for evidence and
/// for whatever compares a node's rules before and after a change.
pub fn without_trace_table(listing: &str) -> String {
    let mut out = String::with_capacity(listing.len());
    let mut skipping = false;
    for line in listing.lines() {
        if line.starts_with(&format!("table inet {TRACE_TABLE} ")) {
            skipping = true;
        } else if skipping {
            // The table's block ends with the first closing brace at column 0.
            skipping = line != "}";
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// What one trace message says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceEvent {
    /// The kernel's id of the packet (its buffer), the same for every message about it while
    /// it crosses this namespace.
    pub id: u32,
    /// `ip`, `ip6`, `inet`, …
    pub family: &'static str,
    pub table: String,
    pub chain: String,
    /// The rule that matched; none for a chain's policy or its return.
    pub handle: Option<u64>,
    /// The packet as it was when it entered this chain (the first message of each base chain
    /// carries it).
    pub packet: Option<Headers>,
    /// The rule or policy dropped the packet (a REJECT too): its crossing ends here.
    pub dropped: bool,
}

impl TraceEvent {
    /// The first message about a packet in this namespace: it was just marked.
    pub fn starts_packet(&self) -> bool {
        self.table == TRACE_TABLE && MARKING_CHAINS.contains(&self.chain.as_str())
    }

    /// The packet reached the last priority of its last hook here: its crossing ends.
    pub fn ends_packet(&self) -> bool {
        self.dropped || (self.table == TRACE_TABLE && self.chain.starts_with("seen-"))
    }

    /// A message from the proxy's rules, not from the harness's table.
    pub fn is_proxy_rule(&self) -> bool {
        self.table != TRACE_TABLE && self.handle.is_some()
    }
}

/// A traced packet's protocol and addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Headers {
    /// The IP protocol number (6 TCP, 17 UDP, 132 SCTP).
    pub protocol: u8,
    pub src: SocketAddr,
    pub dst: SocketAddr,
}

/// The trace messages of one namespace, read as they come by a thread of its own.
pub struct Tracer {
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

struct Shared {
    socket: Socket,
    netns: String,
    state: Mutex<Result<Vec<TraceEvent>, String>>,
}

impl Tracer {
    /// Starts listening in `ns` (the socket is created there and stays there).
    pub fn start(ns: &Netns) -> Result<Tracer> {
        let socket = ns
            .run(|| -> std::io::Result<Socket> {
                let mut socket = Socket::new(NETLINK_NETFILTER)?;
                socket.bind_auto()?;
                super::conntrack_events::force_receive_buffer_of(&socket, BUFFER_BYTES)?;
                socket.add_membership(GROUP_NFTRACE)?;
                socket.set_non_blocking(true)?;
                Ok(socket)
            })?
            .with_context(|| format!("listening to nftables traces in namespace {}", ns.name()))?;
        let shared =
            Arc::new(Shared { socket, netns: ns.name().to_string(), state: Mutex::new(Ok(Vec::new())) });
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (shared, stop) = (shared.clone(), stop.clone());
            std::thread::Builder::new()
                .name(format!("nftrace-{}", ns.name()))
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        super::conntrack_events::wait_readable(&shared.socket, 100);
                        if shared.read_queued().is_err() {
                            return;
                        }
                    }
                })
                .context("starting the trace reader thread")?
        };
        Ok(Tracer { shared, stop, thread: Some(thread) })
    }

    /// Every message since the last call, in the order the kernel sent them; an error if
    /// some were lost.
    pub fn take(&mut self) -> Result<Vec<TraceEvent>> {
        self.shared.read_queued().map_err(anyhow::Error::msg)?;
        let mut state = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        match &mut *state {
            Ok(pending) => Ok(std::mem::take(pending)),
            Err(e) => anyhow::bail!("{e}"),
        }
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Shared {
    fn read_queued(&self) -> Result<(), String> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let pending = match &mut *state {
            Ok(pending) => pending,
            Err(e) => return Err(e.clone()),
        };
        loop {
            let failure = match self.socket.recv_from_full() {
                Ok((data, _)) => {
                    decode(&data, pending);
                    continue;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => format!(
                    "nftables traces of namespace {} overflowed their {} MiB buffer: messages were lost, \
                     so the coverage would be incomplete",
                    self.netns,
                    BUFFER_BYTES >> 20
                ),
                Err(e) => format!("reading nftables traces of namespace {}: {e}", self.netns),
            };
            *state = Err(failure.clone());
            return Err(failure);
        }
    }
}

/// The trace messages in one datagram (anything else is skipped).
pub fn decode(mut data: &[u8], out: &mut Vec<TraceEvent>) {
    while data.len() >= 16 {
        let len = u32::from_ne_bytes(data[0..4].try_into().expect("4 bytes")) as usize;
        let kind = u16::from_ne_bytes(data[4..6].try_into().expect("2 bytes"));
        if len < 16 || len > data.len() {
            return;
        }
        // The netlink header, then nfgenmsg: family, version, resource id.
        if kind == MSG_TRACE && len >= 20 {
            out.extend(trace_event(data[16], &data[20..len]));
        }
        data = &data[align(len).min(data.len())..];
    }
}

fn align(n: usize) -> usize {
    (n + 3) & !3
}

/// `(type, payload)` of each netlink attribute in `data`, flags stripped from the type.
fn attributes(mut data: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    while data.len() >= 4 {
        let len = u16::from_ne_bytes([data[0], data[1]]) as usize;
        let kind = u16::from_ne_bytes([data[2], data[3]]) & 0x3fff;
        if len < 4 || len > data.len() {
            break;
        }
        out.push((kind, &data[4..len]));
        data = &data[align(len).min(data.len())..];
    }
    out
}

fn trace_event(family: u8, payload: &[u8]) -> Option<TraceEvent> {
    // enum nft_trace_attributes (linux/netfilter/nf_tables.h).
    const TABLE: u16 = 1;
    const CHAIN: u16 = 2;
    const RULE_HANDLE: u16 = 3;
    const VERDICT: u16 = 5;
    const VERDICT_CODE: u16 = 1;
    const ID: u16 = 6;
    const NETWORK_HEADER: u16 = 8;
    const TRANSPORT_HEADER: u16 = 9;
    const NFPROTO: u16 = 15;
    let text =
        |b: &[u8]| String::from_utf8_lossy(b.split(|&c| c == 0).next().unwrap_or_default()).into_owned();
    let (mut id, mut table, mut chain, mut handle) = (None, None, None, None);
    let (mut network, mut transport, mut nfproto) = (None, None, family);
    let mut dropped = false;
    for (kind, value) in attributes(payload) {
        match kind {
            TABLE => table = Some(text(value)),
            CHAIN => chain = Some(text(value)),
            RULE_HANDLE if value.len() == 8 => {
                handle = Some(u64::from_be_bytes(value.try_into().expect("8 bytes")))
            }
            ID if value.len() == 4 => id = Some(u32::from_be_bytes(value.try_into().expect("4 bytes"))),
            VERDICT => {
                // NF_DROP is 0.
                dropped = attributes(value).iter().any(|(k, v)| {
                    *k == VERDICT_CODE && v.len() == 4 && u32::from_be_bytes([v[0], v[1], v[2], v[3]]) == 0
                })
            }
            NETWORK_HEADER => network = Some(value),
            TRANSPORT_HEADER => transport = Some(value),
            NFPROTO if value.len() == 4 => nfproto = u32::from_be_bytes(value.try_into().expect("4")) as u8,
            _ => {}
        }
    }
    let packet = network.and_then(|n| headers(nfproto, n, transport.unwrap_or_default()));
    Some(TraceEvent {
        id: id?,
        family: family_name(family),
        table: table?,
        chain: chain?,
        handle,
        packet,
        dropped,
    })
}

/// The protocol, addresses and ports of a TCP, UDP or SCTP packet (whose first four transport
/// bytes are its ports); none for anything else.
fn headers(nfproto: u8, network: &[u8], transport: &[u8]) -> Option<Headers> {
    let (protocol, src, dst): (u8, IpAddr, IpAddr) = match nfproto as i32 {
        libc::NFPROTO_IPV4 if network.len() >= 20 => {
            let at = |i: usize| Ipv4Addr::new(network[i], network[i + 1], network[i + 2], network[i + 3]);
            (network[9], at(12).into(), at(16).into())
        }
        libc::NFPROTO_IPV6 if network.len() >= 40 => {
            let at = |i: usize| Ipv6Addr::from(<[u8; 16]>::try_from(&network[i..i + 16]).expect("16 bytes"));
            (network[6], at(8).into(), at(24).into())
        }
        _ => return None,
    };
    if !matches!(protocol, 6 | 17 | 132) || transport.len() < 4 {
        return None;
    }
    let sport = u16::from_be_bytes([transport[0], transport[1]]);
    let dport = u16::from_be_bytes([transport[2], transport[3]]);
    Some(Headers { protocol, src: SocketAddr::new(src, sport), dst: SocketAddr::new(dst, dport) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(kind: u16, value: &[u8]) -> Vec<u8> {
        let mut out = ((4 + value.len()) as u16).to_ne_bytes().to_vec();
        out.extend(kind.to_ne_bytes());
        out.extend(value);
        out.resize(align(out.len()), 0);
        out
    }

    fn message(family: u8, attrs: &[Vec<u8>]) -> Vec<u8> {
        let body: Vec<u8> = attrs.concat();
        let len = 20 + body.len();
        let mut out = (len as u32).to_ne_bytes().to_vec();
        out.extend(MSG_TRACE.to_ne_bytes());
        out.extend([0; 10]);
        out.extend([family, 0, 0, 0]);
        out.extend(body);
        out
    }

    #[test]
    fn decodes_a_rule_trace_with_its_packet() {
        let mut ip = vec![0x45, 0, 0, 60, 0, 0, 0, 0, 64, 6, 0, 0];
        ip.extend([10, 0, 0, 1, 10, 96, 0, 10]);
        let tcp = [0x9c, 0x40, 0, 80, 0, 0, 0, 0];
        let data = message(
            2,
            &[
                attr(1, b"nat\0"),
                attr(2, b"KUBE-SERVICES\0"),
                attr(3, &7u64.to_be_bytes()),
                attr(6, &0xf02c_bb70u32.to_be_bytes()),
                attr(8, &ip),
                attr(9, &tcp),
                attr(15, &2u32.to_be_bytes()),
            ],
        );
        let mut out = Vec::new();
        decode(&[data.clone(), data].concat(), &mut out);
        assert_eq!(out.len(), 2);
        let e = &out[0];
        assert_eq!(
            (e.id, e.family, e.table.as_str(), e.chain.as_str()),
            (0xf02c_bb70, "ip", "nat", "KUBE-SERVICES")
        );
        assert_eq!(e.handle, Some(7));
        let packet = e.packet.unwrap();
        assert_eq!(packet.protocol, 6);
        assert_eq!(packet.src, "10.0.0.1:40000".parse().unwrap());
        assert_eq!(packet.dst, "10.96.0.10:80".parse().unwrap());
        assert!(e.is_proxy_rule() && !e.starts_packet());
    }

    #[test]
    fn listings_leave_the_trace_table_out() {
        let listing = "table ip nat {\n\tchain OUTPUT {\n\t}\n}\ntable inet packetproof-trace {\n\tchain mark-output {\n\t\ttype filter hook output priority -500; policy accept;\n\t}\n}\ntable ip kube-proxy {\n}\n";
        assert_eq!(
            without_trace_table(listing),
            "table ip nat {\n\tchain OUTPUT {\n\t}\n}\ntable ip kube-proxy {\n}\n"
        );
    }

    #[test]
    fn a_truncated_message_decodes_to_nothing() {
        let data = message(2, &[attr(1, b"nat\0")]);
        let mut out = Vec::new();
        decode(&data[..data.len() - 2], &mut out);
        decode(&data, &mut out);
        // No id, no chain: not a trace it can use.
        assert!(out.is_empty());
    }
}
