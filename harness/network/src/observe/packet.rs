//! The parts of a captured frame that a verdict looks at: addresses, ports, TCP flags, and the
//! packet an ICMP error answers. Everything else (ARP, IPv6 neighbour discovery, payloads,
//! checksums, which veth offload leaves wrong) is deliberately dropped.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use etherparse::{IpNumber, LaxNetSlice, LaxSlicedPacket, TcpHeaderSlice};

/// One IPv4 or IPv6 packet, reduced to what a verdict compares.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Packet {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub l4: L4,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum L4 {
    Tcp {
        src_port: u16,
        dst_port: u16,
        syn: bool,
        ack: bool,
        rst: bool,
        fin: bool,
    },
    Udp {
        src_port: u16,
        dst_port: u16,
    },
    Sctp {
        src_port: u16,
        dst_port: u16,
    },
    /// ICMP/ICMPv6 errors with the header of the packet they answer. `kind` is one of
    /// "net unreachable", "host unreachable", "protocol unreachable", "port unreachable",
    /// "fragmentation needed", "net prohibited", "host prohibited", "admin prohibited" (IPv4),
    /// "no route", "admin prohibited", "address unreachable", "port unreachable",
    /// "packet too big" (IPv6), "time exceeded", "parameter problem", or "type T code C".
    IcmpError {
        kind: String,
        original: Option<Box<Packet>>,
    },
    /// Anything else carried by IP (echo requests, IGMP, …), by protocol number.
    Other {
        protocol: u8,
    },
}

impl Packet {
    /// Parses an Ethernet frame; `None` for ARP, IPv6 neighbour discovery and multicast
    /// listener chatter, and anything that is not IP.
    pub fn from_ethernet(frame: &[u8]) -> Option<Packet> {
        // Lax: a GSO super-frame or a cut-off frame still yields its headers.
        let sliced = LaxSlicedPacket::from_ethernet(frame).ok()?;
        from_sliced(&sliced, true)
    }

    /// Parses a bare IP packet (as quoted inside an ICMP error, possibly cut short).
    pub fn from_ip(packet: &[u8]) -> Option<Packet> {
        from_sliced(&LaxSlicedPacket::from_ip(packet).ok()?, false)
    }

    /// Source and destination as socket addresses, for protocols with ports.
    pub fn endpoints(&self) -> Option<(SocketAddr, SocketAddr)> {
        let (sp, dp) = self.l4.ports()?;
        Some((SocketAddr::new(self.src, sp), SocketAddr::new(self.dst, dp)))
    }

    /// Whether this packet goes between `a` and `b` (either way), or is an ICMP error about
    /// a packet that did.
    pub fn is_between(&self, a: SocketAddr, b: SocketAddr) -> bool {
        if let L4::IcmpError { original: Some(original), .. } = &self.l4 {
            return original.is_between(a, b);
        }
        match self.endpoints() {
            Some((s, d)) => (s, d) == (a, b) || (s, d) == (b, a),
            None => false,
        }
    }
}

/// An ARP request or IPv6 neighbour solicitation: `sender` asks for `target`'s link address,
/// which a host does before it sends (or forwards) a packet to an on-link address it has no
/// neighbour entry for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NeighbourRequest {
    pub sender: IpAddr,
    pub target: IpAddr,
}

impl NeighbourRequest {
    /// Reads an Ethernet frame carrying an ARP request (IPv4 over Ethernet) or an ICMPv6
    /// neighbour solicitation (directly after the IPv6 header, as Linux sends it).
    pub fn from_ethernet(frame: &[u8]) -> Option<NeighbourRequest> {
        let body = frame.get(14..)?;
        match be16(frame.get(12..14)?, 0) {
            0x0806 => {
                // htype 1, ptype IPv4, hlen 6, plen 4, operation 1 (request).
                if body.get(..8)? != [0, 1, 0x08, 0, 6, 4, 0, 1] {
                    return None;
                }
                let ip = |at: usize| -> Option<IpAddr> {
                    let b: [u8; 4] = body.get(at..at + 4)?.try_into().ok()?;
                    Some(IpAddr::from(b))
                };
                Some(NeighbourRequest { sender: ip(14)?, target: ip(24)? })
            }
            0x86dd => {
                let icmp = body.get(40..)?;
                if body.get(6) != Some(&58) || icmp.first() != Some(&135) {
                    return None;
                }
                let ip = |b: &[u8]| -> Option<IpAddr> {
                    let b: [u8; 16] = b.try_into().ok()?;
                    Some(IpAddr::from(b))
                };
                Some(NeighbourRequest { sender: ip(body.get(8..24)?)?, target: ip(icmp.get(8..24)?)? })
            }
            _ => None,
        }
    }
}

/// `ARP who-has 10.96.0.9 tell 192.168.50.11`, `NS who-has fd00::9 tell fd00::11`.
impl fmt::Display for NeighbourRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if self.target.is_ipv4() { "ARP" } else { "NS" };
        write!(f, "{kind} who-has {} tell {}", self.target, self.sender)
    }
}

impl L4 {
    /// Source and destination ports of TCP, UDP and SCTP.
    pub fn ports(&self) -> Option<(u16, u16)> {
        match *self {
            L4::Tcp { src_port, dst_port, .. }
            | L4::Udp { src_port, dst_port }
            | L4::Sctp { src_port, dst_port } => Some((src_port, dst_port)),
            L4::IcmpError { .. } | L4::Other { .. } => None,
        }
    }

    /// `TCP`, `UDP`, `SCTP`, `ICMP` or the protocol number.
    fn name(&self) -> String {
        match self {
            L4::Tcp { .. } => "TCP".into(),
            L4::Udp { .. } => "UDP".into(),
            L4::Sctp { .. } => "SCTP".into(),
            L4::IcmpError { .. } => "ICMP".into(),
            L4::Other { protocol } => format!("proto {protocol}"),
        }
    }
}

/// `top_level` is false inside an ICMP error: there a quoted error is not unwrapped again.
fn from_sliced(sliced: &LaxSlicedPacket<'_>, top_level: bool) -> Option<Packet> {
    let (src, dst, payload) = match sliced.net.as_ref()? {
        LaxNetSlice::Ipv4(ip) => {
            let h = ip.header();
            (IpAddr::V4(h.source_addr()), IpAddr::V4(h.destination_addr()), ip.payload())
        }
        LaxNetSlice::Ipv6(ip) => {
            let h = ip.header();
            (IpAddr::V6(h.source_addr()), IpAddr::V6(h.destination_addr()), ip.payload())
        }
        LaxNetSlice::Arp(_) => return None,
    };
    // A fragment past the first carries no L4 header; report only its protocol.
    if payload.fragmented && !starts_l4(sliced) {
        return Some(Packet { src, dst, l4: L4::Other { protocol: payload.ip_number.0 } });
    }
    let l4 = parse_l4(payload.ip_number, payload.payload, top_level)?;
    Some(Packet { src, dst, l4 })
}

/// Whether the IP payload begins with the L4 header. For IPv6 fragments (rare here) the
/// offset is not looked up: all of them count as later fragments.
fn starts_l4(sliced: &LaxSlicedPacket<'_>) -> bool {
    match sliced.net.as_ref() {
        Some(LaxNetSlice::Ipv4(ip)) => ip.header().fragments_offset().value() == 0,
        _ => false,
    }
}

/// `None` only for traffic that a verdict should never see (neighbour discovery, MLD).
fn parse_l4(proto: IpNumber, data: &[u8], top_level: bool) -> Option<L4> {
    // Ports are read by hand where the header may be cut short: a quoted header inside an
    // ICMP error is only guaranteed its first 8 bytes.
    let ports = || (data.len() >= 4).then(|| (be16(data, 0), be16(data, 2)));
    let other = L4::Other { protocol: proto.0 };
    Some(match proto {
        IpNumber::TCP => match TcpHeaderSlice::from_slice(data) {
            Ok(t) => L4::Tcp {
                src_port: t.source_port(),
                dst_port: t.destination_port(),
                syn: t.syn(),
                ack: t.ack(),
                rst: t.rst(),
                fin: t.fin(),
            },
            Err(_) => match ports() {
                // Flags sit in byte 13; a quote shorter than that shows none.
                Some((src_port, dst_port)) => {
                    let flags = data.get(13).copied().unwrap_or(0);
                    L4::Tcp {
                        src_port,
                        dst_port,
                        fin: flags & 0x01 != 0,
                        syn: flags & 0x02 != 0,
                        rst: flags & 0x04 != 0,
                        ack: flags & 0x10 != 0,
                    }
                }
                None => other,
            },
        },
        IpNumber::UDP => ports().map_or(other, |(src_port, dst_port)| L4::Udp { src_port, dst_port }),
        IpNumber::SCTP => ports().map_or(other, |(src_port, dst_port)| L4::Sctp { src_port, dst_port }),
        IpNumber::ICMP => match (data.first(), data.get(1)) {
            (Some(&t), Some(&c)) => match icmpv4_error(t, c) {
                Some(kind) => icmp_error(kind, data, top_level),
                None => other,
            },
            _ => other,
        },
        IpNumber::IPV6_ICMP => match (data.first(), data.get(1)) {
            // Router/neighbour discovery, redirects and MLD: link chatter, never a verdict.
            (Some(130..=137 | 143), _) => return None,
            (Some(&t), Some(&c)) => match icmpv6_error(t, c) {
                Some(kind) => icmp_error(kind, data, top_level),
                None => other,
            },
            _ => other,
        },
        _ => other,
    })
}

/// The quoted packet starts after the 8-byte ICMP header (both families).
fn icmp_error(kind: String, data: &[u8], top_level: bool) -> L4 {
    let original = if top_level { data.get(8..).and_then(Packet::from_ip).map(Box::new) } else { None };
    L4::IcmpError { kind, original }
}

fn icmpv4_error(icmp_type: u8, code: u8) -> Option<String> {
    let kind = match (icmp_type, code) {
        (3, 0) => "net unreachable",
        (3, 1) => "host unreachable",
        (3, 2) => "protocol unreachable",
        (3, 3) => "port unreachable",
        (3, 4) => "fragmentation needed",
        (3, 9) => "net prohibited",
        (3, 10) => "host prohibited",
        (3, 13) => "admin prohibited",
        (11, _) => "time exceeded",
        (12, _) => "parameter problem",
        // Other unreachable codes and source quench; redirects are advice, not errors.
        (3..=4, _) => return Some(format!("type {icmp_type} code {code}")),
        _ => return None,
    };
    Some(kind.to_string())
}

fn icmpv6_error(icmp_type: u8, code: u8) -> Option<String> {
    let kind = match (icmp_type, code) {
        (1, 0) => "no route",
        (1, 1) => "admin prohibited",
        (1, 3) => "address unreachable",
        (1, 4) => "port unreachable",
        (2, _) => "packet too big",
        (3, _) => "time exceeded",
        (4, _) => "parameter problem",
        (1, _) => return Some(format!("type {icmp_type} code {code}")),
        _ => return None,
    };
    Some(kind.to_string())
}

fn be16(data: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([data[at], data[at + 1]])
}

/// `10.244.1.5:40000 > 10.96.0.10:53 UDP`, `… TCP [S.]`,
/// `ICMP port unreachable from 10.0.0.1 for 10.244.1.5:40000 > 10.96.0.10:53 UDP`
/// (IPv6 addresses in brackets).
impl fmt::Display for Packet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.l4 {
            L4::IcmpError { kind, original } => {
                // The error goes back to the original's source, so its sender is what matters.
                match original {
                    Some(o) => write!(f, "ICMP {kind} from {} for {o}", self.src),
                    None => write!(f, "ICMP {kind} from {} to {}", self.src, self.dst),
                }
            }
            l4 => {
                match self.endpoints() {
                    Some((s, d)) => write!(f, "{s} > {d} {}", l4.name())?,
                    None => write!(f, "{} > {} {}", self.src, self.dst, l4.name())?,
                }
                if let L4::Tcp { syn, ack, rst, fin, .. } = *l4 {
                    // tcpdump's letters: S(yn) F(in) R(st) and "." for ack.
                    let flags: String = [(syn, 'S'), (fin, 'F'), (rst, 'R'), (ack, '.')]
                        .iter()
                        .filter(|(on, _)| *on)
                        .map(|(_, c)| *c)
                        .collect();
                    write!(f, " [{flags}]")?;
                }
                Ok(())
            }
        }
    }
}
