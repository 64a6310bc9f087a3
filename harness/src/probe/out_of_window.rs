//! A hand-made TCP segment far outside the window of a held connection, sent from the
//! backend toward the client: what a late retransmission or a segment of a reused port looks
//! like to conntrack. Conntrack marks it INVALID, and without a rule that drops INVALID
//! packets it crosses the node un-translated (NAT skips untracked packets), so the client's
//! stack, knowing no connection from the pod's own address, answers with a RST that the
//! backend accepts: a healthy connection dies (kubernetes/kubernetes#74839). kube-proxy's
//! iptables mode drops conntrack-invalid packets for this (pkg/proxy/iptables/proxier.go).
//!
//! The segment acknowledges exactly what the client has sent, read from the backend's
//! capture, so that the client's RST (whose sequence number is the segment's acknowledgement)
//! lands inside the backend's window.

use std::net::{IpAddr, SocketAddr, SocketAddrV4};

use anyhow::{Context, Result, bail};
use etherparse::{NetSlice, PacketBuilder, SlicedPacket, TransportSlice};

use crate::observe::Frame;
use crate::topology::Netns;

/// How far past the backend's next sequence number the segment starts: far beyond any
/// window (at most 1 GiB with scaling, 64 KiB here).
const OUT_OF_WINDOW: u32 = 1 << 30;

/// The segment to send: from the backend's address and port to the client as the backend
/// sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutOfWindow {
    pub from: SocketAddrV4,
    pub to: SocketAddrV4,
    pub seq: u32,
    pub ack: u32,
}

impl OutOfWindow {
    /// The segment for the connection between `client` (as the backend sees it) and the
    /// backend at `backend_ip`, from the last segment the client sent it in `frames` (the
    /// backend's capture).
    pub fn after(frames: &[Frame], client: SocketAddr, backend_ip: IpAddr) -> Result<OutOfWindow> {
        let (SocketAddr::V4(client), IpAddr::V4(backend_ip)) = (client, backend_ip) else {
            bail!("out-of-window segments over IPv6: not modelled");
        };
        let last = frames.iter().rev().filter(|f| !f.outgoing).find_map(|f| {
            let sliced = SlicedPacket::from_ethernet(&f.data).ok()?;
            let (Some(NetSlice::Ipv4(ip)), Some(TransportSlice::Tcp(tcp))) = (&sliced.net, &sliced.transport)
            else {
                return None;
            };
            let header = ip.header();
            let from_client = header.source_addr() == *client.ip() && tcp.source_port() == client.port();
            (from_client && header.destination_addr() == backend_ip).then(|| {
                let len = tcp.payload().len() as u32 + u32::from(tcp.syn()) + u32::from(tcp.fin());
                (tcp.destination_port(), tcp.sequence_number().wrapping_add(len), tcp.acknowledgment_number())
            })
        });
        let (port, client_next, backend_next) =
            last.with_context(|| format!("the backend's capture holds no segment from {client}"))?;
        Ok(OutOfWindow {
            from: SocketAddrV4::new(backend_ip, port),
            to: client,
            seq: backend_next.wrapping_add(OUT_OF_WINDOW),
            ack: client_next,
        })
    }

    /// The IPv4 packet, checksums and all.
    fn packet(&self) -> Result<Vec<u8>> {
        let payload = b"out of window\n";
        let builder = PacketBuilder::ipv4(self.from.ip().octets(), self.to.ip().octets(), 64)
            .tcp(self.from.port(), self.to.port(), self.seq, 502)
            .ack(self.ack)
            .psh();
        let mut packet = Vec::with_capacity(builder.size(payload.len()));
        builder.write(&mut packet, payload).context("building the out-of-window segment")?;
        Ok(packet)
    }

    /// Sends the segment from `backend` (the pod's namespace) through a raw socket, so it
    /// leaves by the pod's own route as the pod's packets do.
    pub fn send(&self, backend: &Netns) -> Result<()> {
        let packet = self.packet()?;
        let to = SocketAddr::V4(SocketAddrV4::new(*self.to.ip(), 0));
        backend
            .run(move || -> std::io::Result<()> {
                // IPPROTO_RAW: the packet carries its own IP header.
                let socket = socket2::Socket::new(
                    socket2::Domain::IPV4,
                    socket2::Type::RAW,
                    Some(socket2::Protocol::from(libc::IPPROTO_RAW)),
                )?;
                socket.send_to(&packet, &to.into())?;
                Ok(())
            })?
            .with_context(|| {
                format!("sending an out-of-window segment {} > {} in {}", self.from, self.to, backend.name())
            })
    }
}

impl OutOfWindow {
    /// What a client's capture (`frames`, taken since the segment was sent) says of it: the
    /// segment arriving from the pod's own address (un-translated), and the RST the client's
    /// stack sent back.
    pub(crate) fn witnessed(&self, frames: &[Frame], client_port: u16) -> String {
        let from = SocketAddr::V4(self.from);
        let packets = || frames.iter().filter_map(|f| f.packet.as_ref().map(|p| (f, p)));
        let arrived = packets().any(|(f, p)| {
            !f.outgoing && p.endpoints().is_some_and(|(src, dst)| src == from && dst.port() == client_port)
        });
        let reset = packets().any(|(f, p)| {
            f.outgoing
                && matches!(p.l4, crate::observe::L4::Tcp { rst: true, .. })
                && p.endpoints().is_some_and(|(src, dst)| dst == from && src.port() == client_port)
        });
        match (arrived, reset) {
            (true, true) => format!(
                "the client's capture shows it arriving un-translated from {from}, and the client's RST to {from}"
            ),
            (true, false) => format!("the client's capture shows it arriving un-translated from {from}"),
            _ => "the client's capture does not show it arriving".to_string(),
        }
    }
}

impl std::fmt::Display for OutOfWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} > {} [P.] seq {} ack {}", self.from, self.to, self.seq, self.ack)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(
        from: SocketAddrV4,
        to: SocketAddrV4,
        seq: u32,
        ack: u32,
        payload: &[u8],
        outgoing: bool,
    ) -> Frame {
        let builder = PacketBuilder::ethernet2([2; 6], [4; 6])
            .ipv4(from.ip().octets(), to.ip().octets(), 64)
            .tcp(from.port(), to.port(), seq, 1000)
            .ack(ack);
        let mut data = Vec::new();
        builder.write(&mut data, payload).unwrap();
        Frame { timestamp: std::time::SystemTime::UNIX_EPOCH, packet: None, data, outgoing }
    }

    #[test]
    fn acknowledges_what_the_client_sent_and_starts_far_past_the_backends_window() {
        let client: SocketAddrV4 = "10.244.1.20:20001".parse().unwrap();
        let backend: SocketAddrV4 = "10.244.1.10:8080".parse().unwrap();
        let frames = [
            frame(client, backend, 100, 500, b"hello\n", false),
            // The backend's own answer does not count, nor does another flow's segment.
            frame(backend, client, 500, 106, b"answer\n", true),
            frame("10.244.1.21:20001".parse().unwrap(), backend, 7, 7, b"", false),
        ];
        let segment = OutOfWindow::after(&frames, client.into(), (*backend.ip()).into()).unwrap();
        assert_eq!(segment, OutOfWindow { from: backend, to: client, seq: 500 + OUT_OF_WINDOW, ack: 106 });
        let packet = segment.packet().unwrap();
        let sliced = SlicedPacket::from_ip(&packet).unwrap();
        assert!(matches!(sliced.transport, Some(TransportSlice::Tcp(t)) if t.psh() && t.ack()));
    }

    #[test]
    fn without_a_segment_from_the_client_there_is_nothing_to_answer() {
        let err = OutOfWindow::after(&[], "10.244.1.20:1".parse().unwrap(), "10.244.1.10".parse().unwrap());
        assert!(err.is_err());
    }
}
