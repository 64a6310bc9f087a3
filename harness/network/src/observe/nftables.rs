//! A few nf_tables netlink verbs on one namespace's socket (an nfnetlink socket, which `ipset`
//! speaks through too), so that coverage spawns no `nft`
//! for what the kernel answers directly: the ruleset's generation (bumped by every commit,
//! whoever makes it), the handle of every rule, and adding the harness's trace table.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_NETFILTER};

use crate::topology::netns::Netns;

const NFNL_SUBSYS_NFTABLES: u16 = 10;
const fn nft_msg(kind: u16) -> u16 {
    (NFNL_SUBSYS_NFTABLES << 8) | kind
}
// enum nf_tables_msg_types (linux/netfilter/nf_tables.h).
const MSG_NEWTABLE: u16 = nft_msg(0);
const MSG_GETTABLE: u16 = nft_msg(1);
const MSG_DELTABLE: u16 = nft_msg(2);
const MSG_NEWCHAIN: u16 = nft_msg(3);
const MSG_NEWRULE: u16 = nft_msg(6);
const MSG_GETRULE: u16 = nft_msg(7);
const MSG_NEWGEN: u16 = nft_msg(15);
const MSG_GETGEN: u16 = nft_msg(16);
const NFNL_MSG_BATCH_BEGIN: u16 = 16;
const NFNL_MSG_BATCH_END: u16 = 17;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
pub(super) const NLM_F_REQUEST: u16 = 0x1;
pub(super) const NLM_F_ACK: u16 = 0x4;
const NLM_F_DUMP_INTR: u16 = 0x10;
pub(super) const NLM_F_DUMP: u16 = 0x300;
const NLM_F_CREATE: u16 = 0x400;
const NLM_F_APPEND: u16 = 0x800;
const NLA_F_NESTED: u16 = 0x8000;

/// One rule as the kernel names it (what a trace message names too).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleHandle {
    pub family: &'static str,
    pub table: String,
    pub chain: String,
    pub handle: u64,
}

/// An nf_tables netlink socket created inside one namespace.
pub struct NftSocket {
    socket: Socket,
    sequence: u32,
    netns: String,
}

impl NftSocket {
    pub fn open(ns: &Netns) -> Result<NftSocket> {
        let socket = ns
            .run(|| -> std::io::Result<Socket> {
                let mut socket = Socket::new(NETLINK_NETFILTER)?;
                socket.bind_auto()?;
                socket.connect(&SocketAddr::new(0, 0))?;
                // A kernel that never answers must not hang the run.
                set_receive_timeout(&socket, Duration::from_secs(10))?;
                Ok(socket)
            })?
            .with_context(|| format!("opening an nf_tables netlink socket in namespace {}", ns.name()))?;
        Ok(NftSocket { socket, sequence: 0, netns: ns.name().to_string() })
    }

    /// The ruleset's generation: the same number means the same rules.
    pub fn generation(&mut self) -> Result<u32> {
        let sequence = self.send_one(MSG_GETGEN, NLM_F_REQUEST, 0, &[])?;
        let mut generation = None;
        self.receive(sequence, |kind, _, _, payload| {
            if kind == MSG_NEWGEN {
                generation = attributes(payload)
                    .find(|(k, v)| *k == 1 && v.len() == 4)
                    .map(|(_, v)| u32::from_be_bytes(v.try_into().expect("4 bytes")));
            }
            Ok(true)
        })?;
        generation.with_context(|| format!("no ruleset generation from namespace {}", self.netns))
    }

    /// Every rule of every table, chain by chain in rule order, with the generation they were
    /// read at (read again if a commit came in between).
    pub fn rules(&mut self) -> Result<(u32, Vec<RuleHandle>)> {
        for _ in 0..10 {
            let before = self.generation()?;
            let sequence = self.send_one(MSG_GETRULE, NLM_F_REQUEST | NLM_F_DUMP, 0, &[])?;
            let mut out = Vec::new();
            let mut interrupted = false;
            self.receive(sequence, |kind, flags, family, payload| {
                interrupted |= flags & NLM_F_DUMP_INTR != 0;
                if kind == MSG_NEWRULE {
                    out.extend(rule_handle(family, payload));
                    return Ok(false);
                }
                Ok(true)
            })?;
            if !interrupted && self.generation()? == before {
                return Ok((before, out));
            }
        }
        bail!("the ruleset of namespace {} kept changing while it was read", self.netns)
    }

    /// Every table, as (nfgenmsg family, name).
    pub fn tables(&mut self) -> Result<Vec<(u8, String)>> {
        let sequence = self.send_one(MSG_GETTABLE, NLM_F_REQUEST | NLM_F_DUMP, 0, &[])?;
        let mut out = Vec::new();
        self.receive(sequence, |kind, _, family, payload| {
            if kind == MSG_NEWTABLE {
                out.extend(attributes(payload).find(|(k, _)| *k == 1).map(|(_, v)| (family, name_of(v))));
                return Ok(false);
            }
            Ok(true)
        })?;
        Ok(out)
    }

    /// Deletes `tables` (as [`NftSocket::tables`] lists them) in one transaction, with their
    /// chains, rules, sets and maps: `nft flush ruleset`, without a program run.
    pub fn delete_tables(&mut self, tables: &[(u8, String)]) -> Result<()> {
        if tables.is_empty() {
            return Ok(());
        }
        let mut batch = Vec::new();
        let mut next = |this: &mut Self, kind: u16, flags: u16, family: u8, body: &[u8], res: u16| {
            this.sequence += 1;
            batch.extend(message(kind, flags, this.sequence, family, res, body));
        };
        next(self, NFNL_MSG_BATCH_BEGIN, NLM_F_REQUEST, 0, &[], NFNL_SUBSYS_NFTABLES);
        for (family, name) in tables {
            next(self, MSG_DELTABLE, NLM_F_REQUEST | NLM_F_ACK, *family, &attr(1, &text(name)), 0);
        }
        next(self, NFNL_MSG_BATCH_END, NLM_F_REQUEST, 0, &[], NFNL_SUBSYS_NFTABLES);
        self.socket
            .send(&batch, 0)
            .with_context(|| format!("deleting tables in namespace {}", self.netns))?;
        let sequence = self.send_one(MSG_GETGEN, NLM_F_REQUEST, 0, &[])?;
        self.receive(sequence, |_, _, _, _| Ok(true)).context("deleting the nftables tables")
    }

    /// Adds, in one transaction, the table `name` of family inet with `chains`, each
    /// `(name, hook, priority, marks)`: a chain that marks sets `nftrace` on TCP, UDP and SCTP
    /// packets, one rule per protocol.
    pub fn add_trace_table(&mut self, name: &str, chains: &[(&str, u32, i32, bool)]) -> Result<()> {
        const INET: u8 = libc::NFPROTO_INET as u8;
        let mut batch = Vec::new();
        let mut next = |this: &mut Self, kind: u16, flags: u16, family: u8, body: &[u8], res: u16| {
            this.sequence += 1;
            batch.extend(message(kind, flags, this.sequence, family, res, body));
        };
        next(self, NFNL_MSG_BATCH_BEGIN, NLM_F_REQUEST, 0, &[], NFNL_SUBSYS_NFTABLES);
        let ack = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE;
        next(self, MSG_NEWTABLE, ack, INET, &attr(1, &text(name)), 0);
        for &(chain, hook, priority, marks) in chains {
            let hook_attr =
                nested(4, &[attr(1, &hook.to_be_bytes()), attr(2, &priority.to_be_bytes())].concat());
            let body =
                [attr(1, &text(name)), attr(3, &text(chain)), hook_attr, attr(7, &text("filter"))].concat();
            next(self, MSG_NEWCHAIN, ack, INET, &body, 0);
            for protocol in
                [libc::IPPROTO_TCP, libc::IPPROTO_UDP, libc::IPPROTO_SCTP].into_iter().filter(|_| marks)
            {
                let body =
                    [attr(1, &text(name)), attr(2, &text(chain)), nested(4, &nftrace_if(protocol as u8))]
                        .concat();
                next(self, MSG_NEWRULE, ack | NLM_F_APPEND, INET, &body, 0);
            }
        }
        next(self, NFNL_MSG_BATCH_END, NLM_F_REQUEST, 0, &[], NFNL_SUBSYS_NFTABLES);
        self.socket
            .send(&batch, 0)
            .with_context(|| format!("adding table {name} in namespace {}", self.netns))?;
        // A request after the batch: its answer comes after every acknowledgement or error of
        // the batch.
        let sequence = self.send_one(MSG_GETGEN, NLM_F_REQUEST, 0, &[])?;
        self.receive(sequence, |_, _, _, _| Ok(true)).with_context(|| format!("adding table {name}"))
    }

    pub(super) fn send_one(&mut self, kind: u16, flags: u16, family: u8, body: &[u8]) -> Result<u32> {
        self.sequence += 1;
        let data = message(kind, flags, self.sequence, family, 0, body);
        self.socket
            .send(&data, 0)
            .with_context(|| format!("nf_tables request in namespace {}", self.netns))?;
        Ok(self.sequence)
    }

    /// Reads messages until `on` says the answer to `sequence` is complete (or NLMSG_DONE);
    /// any kernel error on the way is this call's error.
    pub(super) fn receive(
        &mut self,
        sequence: u32,
        mut on: impl FnMut(u16, u16, u8, &[u8]) -> Result<bool>,
    ) -> Result<()> {
        loop {
            let (data, _) = self
                .socket
                .recv_from_full()
                .with_context(|| format!("reading nf_tables answers in namespace {}", self.netns))?;
            let mut rest = &data[..];
            while rest.len() >= 16 {
                let len = u32::from_ne_bytes(rest[0..4].try_into().expect("4 bytes")) as usize;
                let kind = u16::from_ne_bytes([rest[4], rest[5]]);
                let flags = u16::from_ne_bytes([rest[6], rest[7]]);
                let seq = u32::from_ne_bytes(rest[8..12].try_into().expect("4 bytes"));
                if len < 16 || len > rest.len() {
                    bail!("a truncated nf_tables message from namespace {}", self.netns);
                }
                let body = &rest[16..len];
                rest = &rest[align(len).min(rest.len())..];
                match kind {
                    NLMSG_ERROR if body.len() >= 4 => {
                        let code = i32::from_ne_bytes(body[0..4].try_into().expect("4 bytes"));
                        if code != 0 {
                            // The header of the request refused follows the code.
                            let refused = body.get(8..10).map(|t| u16::from_ne_bytes([t[0], t[1]]) & 0xff);
                            return Err(std::io::Error::from_raw_os_error(-code)).with_context(|| {
                                format!("nf_tables in namespace {} refused message {refused:?}", self.netns)
                            });
                        }
                    }
                    NLMSG_DONE if seq == sequence => return Ok(()),
                    // nfgenmsg (4 bytes), then the attributes.
                    _ if seq == sequence && body.len() >= 4 && on(kind, flags, body[0], &body[4..])? => {
                        return Ok(());
                    }
                    _ => {}
                }
            }
        }
    }
}

fn set_receive_timeout(socket: &Socket, timeout: Duration) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let value = libc::timeval { tv_sec: timeout.as_secs() as libc::time_t, tv_usec: 0 };
    // SAFETY: a valid socket descriptor, and a timeval option of the length given.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&value as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if rc == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}

/// `meta l4proto PROTOCOL meta nftrace set 1`, as the expressions list of a rule.
fn nftrace_if(protocol: u8) -> Vec<u8> {
    const REG: u32 = 1;
    let expression =
        |name: &str, data: Vec<u8>| nested(1, &[attr(1, &text(name)), nested(2, &data)].concat());
    [
        // meta: NFTA_META_DREG, NFTA_META_KEY (NFT_META_L4PROTO).
        expression("meta", [attr(1, &REG.to_be_bytes()), attr(2, &16u32.to_be_bytes())].concat()),
        // cmp: NFTA_CMP_SREG, NFTA_CMP_OP (eq), NFTA_CMP_DATA { NFTA_DATA_VALUE }.
        expression(
            "cmp",
            [attr(1, &REG.to_be_bytes()), attr(2, &0u32.to_be_bytes()), nested(3, &attr(1, &[protocol]))]
                .concat(),
        ),
        // immediate: NFTA_IMMEDIATE_DREG, NFTA_IMMEDIATE_DATA { NFTA_DATA_VALUE }.
        expression("immediate", [attr(1, &REG.to_be_bytes()), nested(2, &attr(1, &[1]))].concat()),
        // meta: NFTA_META_KEY (NFT_META_NFTRACE), NFTA_META_SREG.
        expression("meta", [attr(2, &12u32.to_be_bytes()), attr(3, &REG.to_be_bytes())].concat()),
    ]
    .concat()
}

/// A NEWRULE message's table, chain and handle.
fn rule_handle(family: u8, attrs: &[u8]) -> Option<RuleHandle> {
    let (mut table, mut chain, mut handle) = (None, None, None);
    for (kind, value) in attributes(attrs) {
        match kind {
            1 => table = Some(name_of(value)),
            2 => chain = Some(name_of(value)),
            3 if value.len() == 8 => handle = Some(u64::from_be_bytes(value.try_into().expect("8 bytes"))),
            _ => {}
        }
    }
    Some(RuleHandle { family: family_name(family), table: table?, chain: chain?, handle: handle? })
}

pub(super) fn name_of(value: &[u8]) -> String {
    String::from_utf8_lossy(value.split(|&c| c == 0).next().unwrap_or_default()).into_owned()
}

/// The name nft gives an nfgenmsg family.
pub(crate) fn family_name(family: u8) -> &'static str {
    match family as i32 {
        libc::NFPROTO_INET => "inet",
        libc::NFPROTO_IPV4 => "ip",
        libc::NFPROTO_IPV6 => "ip6",
        libc::NFPROTO_ARP => "arp",
        libc::NFPROTO_BRIDGE => "bridge",
        libc::NFPROTO_NETDEV => "netdev",
        _ => "unknown",
    }
}

fn message(kind: u16, flags: u16, sequence: u32, family: u8, res_id: u16, body: &[u8]) -> Vec<u8> {
    let len = 16 + 4 + body.len();
    let mut out = Vec::with_capacity(align(len));
    out.extend((len as u32).to_ne_bytes());
    out.extend(kind.to_ne_bytes());
    out.extend(flags.to_ne_bytes());
    out.extend(sequence.to_ne_bytes());
    out.extend(0u32.to_ne_bytes());
    out.extend([family, 0]);
    out.extend(res_id.to_be_bytes());
    out.extend(body);
    out.resize(align(len), 0);
    out
}

pub(super) fn attr(kind: u16, value: &[u8]) -> Vec<u8> {
    let mut out = ((4 + value.len()) as u16).to_ne_bytes().to_vec();
    out.extend(kind.to_ne_bytes());
    out.extend(value);
    out.resize(align(out.len()), 0);
    out
}

fn nested(kind: u16, value: &[u8]) -> Vec<u8> {
    attr(kind | NLA_F_NESTED, value)
}

fn text(s: &str) -> Vec<u8> {
    let mut out = s.as_bytes().to_vec();
    out.push(0);
    out
}

fn align(n: usize) -> usize {
    (n + 3) & !3
}

/// `(type, payload)` of each netlink attribute in `data`, flags stripped from the type.
pub(super) fn attributes(mut data: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        if data.len() < 4 {
            return None;
        }
        let len = u16::from_ne_bytes([data[0], data[1]]) as usize;
        let kind = u16::from_ne_bytes([data[2], data[3]]) & 0x3fff;
        if len < 4 || len > data.len() {
            return None;
        }
        let value = &data[4..len];
        data = &data[align(len).min(data.len())..];
        Some((kind, value))
    })
}
