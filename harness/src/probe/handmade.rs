//! Hand-made TCP SYNs to another node's 127.0.0.1: the martian traffic that `route_localnet`
//! (which kube-proxy sets for localhost node ports) would let in from an adjacent host
//! (CVE-2020-8558). A host's own kernel never sends 127.0.0.1 out of an interface, so the
//! frame is written whole (etherparse) to the node's MAC address through an AF_PACKET socket,
//! and the same socket watches for the SYN-ACK or RST that an exposed listener would send back.
//! The node's own listener on 127.0.0.1 is started for it; the answers are judged as a new
//! flow's.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use etherparse::{NetSlice, PacketBuilder, SlicedPacket, TransportSlice};

use super::{Kind, NewFlow, Shipment, Wire};
use crate::model::{Cluster, NODE_UPLINK, POD_INTERFACE, Probe, Profile, Source, Target};
use crate::observe::packet_socket::PacketSocket;
use crate::oracle::{self, Expectation, Prediction};
use crate::topology::Netns;
use crate::traffic::client::{Attempt, Sent, SourcePorts};

/// A probe to a node's 127.0.0.1 (`Target::Localhost`), which only an external host sends.
pub(super) struct HandMade;

impl Kind for HandMade {
    fn claims(&self, probe: &Probe) -> bool {
        matches!(probe.to, Target::Localhost { .. })
    }

    fn predict(&mut self, probe: &Probe, cluster: &Cluster, profile: Profile) -> Result<Prediction, String> {
        oracle::predict(cluster, probe, profile)
    }

    fn localhost_listener(&self, probe: &Probe) -> Option<(String, u16)> {
        match &probe.to {
            Target::Localhost { node, port } => Some((node.clone(), *port)),
            _ => None,
        }
    }

    fn send(&mut self, probe: &Probe, _expected: &Expectation, wire: &mut Wire<'_>) -> Result<Shipment> {
        let dst = wire.destination(probe)?;
        let sent = match (&probe.to, &probe.from) {
            (Target::Localhost { node, port }, Source::External(host)) => {
                send_martian(wire, &wire.cluster.probe_view(probe), host, node, *port, probe.count)
            }
            // The scenario reader lets only an external host send to another node's 127.0.0.1.
            _ => Err(anyhow::anyhow!("a hand-made SYN goes from an external host to a node's 127.0.0.1")),
        }
        .with_context(|| format!("sending probe {}", probe.name))?;
        Ok(Shipment { dst, sent, faults: Vec::new(), witnesses: Box::new(NewFlow) })
    }
}

/// Hand-made SYNs from external host `host` to `node`'s 127.0.0.1:`port`.
fn send_martian(
    wire: &Wire<'_>,
    cluster: &Cluster,
    host: &str,
    node: &str,
    port: u16,
    count: u32,
) -> Result<Vec<Sent>> {
    let topology = wire.topology;
    let host_ns = topology.source_netns(&Source::External(host.to_string()))?;
    let host_ip = match cluster.source_ip(&Source::External(host.to_string())) {
        Some(IpAddr::V4(ip)) => ip,
        _ => bail!("external host {host} has no IPv4 address to send from"),
    };
    let node_ip = match cluster.node(node).map(|n| n.ip()) {
        Some(IpAddr::V4(ip)) => ip,
        _ => bail!("node {node} has no IPv4 address"),
    };
    let martian = Martian::between(host_ns, host_ip, &topology.node(node)?.netns, node, node_ip)?;
    martian.send(host_ns, port, count, wire.ports, wire.timeout)
}

/// Where the frames go: from the external host's interface to the node's uplink.
struct Martian {
    host_ip: Ipv4Addr,
    /// The node's own address, which the host greets first (see [`Martian::send`]).
    node_ip: Ipv4Addr,
    host_mac: [u8; 6],
    node_mac: [u8; 6],
    node: String,
}

impl Martian {
    /// Looks up both interfaces' MAC addresses.
    fn between(
        host: &Netns,
        host_ip: Ipv4Addr,
        node: &Netns,
        node_name: &str,
        node_ip: Ipv4Addr,
    ) -> Result<Martian> {
        Ok(Martian {
            host_ip,
            node_ip,
            host_mac: mac_of(host, POD_INTERFACE)?,
            node_mac: mac_of(node, NODE_UPLINK)?,
            node: node_name.to_string(),
        })
    }

    /// `count` SYNs to 127.0.0.1:`port` of the node, from as many source ports, all sent at
    /// once; then up to `timeout` for their answers. Runs on a thread inside `host`.
    fn send(
        &self,
        host: &Netns,
        port: u16,
        count: u32,
        ports: &SourcePorts,
        timeout: Duration,
    ) -> Result<Vec<Sent>> {
        let socket = host
            .run(|| PacketSocket::open(POD_INTERFACE))?
            .with_context(|| format!("opening a packet socket on {POD_INTERFACE} in {}", host.name()))?;
        // The node must know the host's MAC address to answer at all: it would ask for it with
        // 127.0.0.1 as the sender, which no host answers. A neighbour on the same segment is
        // known (any traffic teaches it), so greet the node first, as an attacker would.
        let node_ip = self.node_ip;
        host.run(move || {
            let socket = std::net::UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?;
            socket.send_to(b"hello", (node_ip, DISCARD_PORT))
        })?
        .with_context(|| format!("greeting node {} from {}", self.node, host.name()))?;
        let mut sent: Vec<Sent> = Vec::new();
        for _ in 0..count {
            let source_port = ports.next();
            socket.send(&self.syn(source_port, port)?).context("sending a hand-made SYN")?;
            sent.push(Sent { source_port, request: None, attempt: Attempt::Silent });
        }
        let deadline = Instant::now() + timeout;
        let mut buf = vec![0u8; 2048];
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            if !socket.wait_for(left).context("waiting for answers")? {
                break;
            }
            while let Some(received) = socket.recv(&mut buf).context("reading a frame")? {
                let len = received.len;
                for s in sent.iter_mut().filter(|s| matches!(s.attempt, Attempt::Silent)) {
                    if let Some(answer) = self.answer(&buf[..len], s.source_port, port) {
                        s.attempt = answer;
                    }
                }
            }
        }
        Ok(sent)
    }

    fn syn(&self, source_port: u16, port: u16) -> Result<Vec<u8>> {
        let mut frame = Vec::new();
        PacketBuilder::ethernet2(self.host_mac, self.node_mac)
            .ipv4(self.host_ip.octets(), Ipv4Addr::LOCALHOST.octets(), 64)
            .tcp(source_port, port, u32::from(source_port) << 8, 64240)
            .syn()
            .write(&mut frame, &[])
            .context("building a SYN frame")?;
        Ok(frame)
    }

    /// What a frame says about our SYN, if it answers it: SYN-ACK (a listener answered) or RST.
    fn answer(&self, frame: &[u8], source_port: u16, port: u16) -> Option<Attempt> {
        let packet = SlicedPacket::from_ethernet(frame).ok()?;
        let Some(NetSlice::Ipv4(ip)) = &packet.net else { return None };
        let Some(TransportSlice::Tcp(tcp)) = &packet.transport else { return None };
        let ours = ip.header().destination_addr() == self.host_ip
            && tcp.destination_port() == source_port
            && tcp.source_port() == port;
        if !ours {
            return None;
        }
        let from = IpAddr::from(ip.header().source_addr());
        Some(if tcp.rst() {
            Attempt::Refused { reason: format!("TCP RST from {from}:{port}") }
        } else if tcp.syn() && tcp.ack() {
            Attempt::Answered {
                pod: format!("{}'s 127.0.0.1 listener", self.node),
                seen: SocketAddr::new(IpAddr::V4(self.host_ip), source_port),
            }
        } else {
            Attempt::Broken { reason: format!("an unexpected TCP segment from {from}:{port}") }
        })
    }
}

/// Where the greeting goes: the discard port, which nothing on a node serves.
const DISCARD_PORT: u16 = 9;

/// The MAC address of `interface` in `ns`, as `ip` prints it.
fn mac_of(ns: &Netns, interface: &str) -> Result<[u8; 6]> {
    let out = ns.exec("ip", &["-o", "link", "show", "dev", interface], None)?;
    let text = String::from_utf8_lossy(&out.stdout);
    let Some(mac) = text.split_whitespace().skip_while(|w| *w != "link/ether").nth(1) else {
        bail!("no MAC address for {interface} in {}: {text}", ns.name());
    };
    parse_mac(mac).with_context(|| format!("reading the MAC address {mac:?} of {interface} in {}", ns.name()))
}

fn parse_mac(text: &str) -> Result<[u8; 6]> {
    let bytes: Vec<u8> =
        text.split(':').map(|b| u8::from_str_radix(b, 16)).collect::<Result<_, _>>().context("not hex")?;
    bytes.try_into().map_err(|_| anyhow::anyhow!("not six bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_addresses_are_six_hex_bytes() {
        assert_eq!(parse_mac("02:42:ac:11:00:02").unwrap(), [2, 0x42, 0xac, 0x11, 0, 2]);
        assert!(parse_mac("02:42:ac:11:00").is_err());
        assert!(parse_mac("zz:42:ac:11:00:02").is_err());
    }

    #[test]
    fn only_answers_to_our_syn_count() {
        let m = Martian {
            host_ip: "192.168.50.190".parse().unwrap(),
            node_ip: "192.168.50.11".parse().unwrap(),
            host_mac: [2, 0, 0, 0, 0, 1],
            node_mac: [2, 0, 0, 0, 0, 2],
            node: "node-a".into(),
        };
        let reply = |src_port: u16, dst_port: u16, syn_ack: bool| {
            let mut frame = Vec::new();
            let b = PacketBuilder::ethernet2(m.node_mac, m.host_mac)
                .ipv4([127, 0, 0, 1], m.host_ip.octets(), 64)
                .tcp(src_port, dst_port, 1, 100);
            let b = if syn_ack { b.syn().ack(1) } else { b.rst() };
            b.write(&mut frame, &[]).unwrap();
            frame
        };
        assert!(matches!(m.answer(&reply(10248, 20001, true), 20001, 10248), Some(Attempt::Answered { .. })));
        assert!(matches!(m.answer(&reply(10248, 20001, false), 20001, 10248), Some(Attempt::Refused { .. })));
        assert!(m.answer(&reply(10248, 20002, true), 20001, 10248).is_none(), "another attempt's answer");
        assert!(m.answer(&reply(22, 20001, true), 20001, 10248).is_none(), "another port's answer");
    }
}
