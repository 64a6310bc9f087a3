//! A ctnetlink (NETLINK_NETFILTER) socket of one namespace: one request at a time, answered
//! by the messages of a dump or by an acknowledgement.

use anyhow::{Context, Result, bail};
use netlink_packet_core::{
    NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload,
};
use netlink_packet_netfilter::conntrack::ConntrackMessage;
use netlink_packet_netfilter::{
    NetfilterHeader, NetfilterMessage, NetfilterMessageInner, NetfilterProtoFamily,
};
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_NETFILTER};

use crate::topology::netns::Netns;

pub(super) struct CtSocket {
    socket: Socket,
    sequence: u32,
    netns: String,
}

/// How the kernel is to answer a request.
#[derive(Clone, Copy)]
pub(super) enum Reply {
    /// Every entry, then NLMSG_DONE.
    Dump,
    /// An acknowledgement or an error.
    Ack,
}

impl CtSocket {
    /// A socket bound to `ns`'s conntrack table: it is created on a thread inside `ns` and
    /// stays there wherever it is used.
    pub(super) fn open(ns: &Netns) -> Result<CtSocket> {
        let socket = ns
            .run(|| -> std::io::Result<Socket> {
                let mut socket = Socket::new(NETLINK_NETFILTER)?;
                socket.bind_auto()?;
                socket.connect(&SocketAddr::new(0, 0))?;
                Ok(socket)
            })?
            .with_context(|| format!("opening a conntrack netlink socket in namespace {}", ns.name()))?;
        Ok(CtSocket { socket, sequence: 0, netns: ns.name().to_string() })
    }

    pub(super) fn netns(&self) -> &str {
        &self.netns
    }

    /// Sends `message` for address family `family` (Unspec means both) and returns the
    /// conntrack messages of the answer; a kernel error becomes an `io::Error` in the chain.
    pub(super) fn request(
        &mut self,
        family: NetfilterProtoFamily,
        message: ConntrackMessage,
        reply: Reply,
    ) -> Result<Vec<ConntrackMessage>> {
        self.sequence += 1;
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST
            | match reply {
                Reply::Dump => NLM_F_DUMP,
                Reply::Ack => NLM_F_ACK,
            };
        header.sequence_number = self.sequence;
        let payload = NetfilterMessage::new(NetfilterHeader::new(family, 0, 0), message);
        let mut packet = NetlinkMessage::new(header, NetlinkPayload::from(payload));
        packet.finalize();
        let mut buf = vec![0; packet.buffer_len()];
        packet.serialize(&mut buf);
        self.socket.send(&buf, 0).context("sending a conntrack request")?;

        let mut answer = Vec::new();
        loop {
            let (data, _) = self.socket.recv_from_full().context("receiving conntrack messages")?;
            let mut rest = &data[..];
            while !rest.is_empty() {
                let message = NetlinkMessage::<NetfilterMessage>::deserialize(rest)
                    .context("decoding a conntrack message")?;
                let len = (message.header.length as usize).min(rest.len());
                if len == 0 {
                    bail!("zero-length netlink message from conntrack");
                }
                rest = &rest[len..];
                if message.header.sequence_number != self.sequence {
                    continue; // an answer to an earlier request that gave up
                }
                match message.payload {
                    NetlinkPayload::Done(_) => return Ok(answer),
                    NetlinkPayload::Error(e) if e.code.is_none() => return Ok(answer),
                    NetlinkPayload::Error(e) => return Err(e.to_io().into()),
                    NetlinkPayload::InnerMessage(NetfilterMessage {
                        inner: NetfilterMessageInner::Conntrack(ct),
                        ..
                    }) => answer.push(ct),
                    _ => {}
                }
            }
        }
    }
}
