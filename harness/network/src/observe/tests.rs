//! Parsing and pcap writing on frames built with etherparse; no kernel involved.

use std::net::SocketAddr;
use std::time::{Duration, UNIX_EPOCH};

use etherparse::icmpv4::DestUnreachableHeader;
use etherparse::icmpv6::DestUnreachableCode;
use etherparse::{
    ArpHardwareId, ArpOperation, ArpPacket, EtherType, Icmpv4Type, Icmpv6Type, IpNumber, PacketBuilder,
};

use super::*;

const MAC_A: [u8; 6] = [2, 0, 0, 0, 0, 1];
const MAC_B: [u8; 6] = [2, 0, 0, 0, 0, 2];
const CLIENT: [u8; 4] = [10, 244, 1, 5];
const VIP: [u8; 4] = [10, 96, 0, 10];

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn udp_frame() -> Vec<u8> {
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(MAC_A, MAC_B)
        .ipv4(CLIENT, VIP, 64)
        .udp(40000, 53)
        .write(&mut frame, b"query")
        .unwrap();
    frame
}

#[test]
fn a_udp_datagram() {
    let p = Packet::from_ethernet(&udp_frame()).unwrap();
    assert_eq!(p.l4, L4::Udp { src_port: 40000, dst_port: 53 });
    assert_eq!(p.to_string(), "10.244.1.5:40000 > 10.96.0.10:53 UDP");
}

#[test]
fn a_tcp_syn_and_a_rst_ack() {
    let mut syn = Vec::new();
    PacketBuilder::ethernet2(MAC_A, MAC_B)
        .ipv4(CLIENT, VIP, 64)
        .tcp(40000, 80, 1, 64240)
        .syn()
        .write(&mut syn, &[])
        .unwrap();
    let p = Packet::from_ethernet(&syn).unwrap();
    assert_eq!(
        p.l4,
        L4::Tcp { src_port: 40000, dst_port: 80, syn: true, ack: false, rst: false, fin: false }
    );
    assert_eq!(p.to_string(), "10.244.1.5:40000 > 10.96.0.10:80 TCP [S]");

    let mut rst = Vec::new();
    PacketBuilder::ethernet2(MAC_B, MAC_A)
        .ipv4(VIP, CLIENT, 64)
        .tcp(80, 40000, 0, 0)
        .rst()
        .ack(2)
        .write(&mut rst, &[])
        .unwrap();
    let p = Packet::from_ethernet(&rst).unwrap();
    assert_eq!(p.to_string(), "10.96.0.10:80 > 10.244.1.5:40000 TCP [R.]");
}

#[test]
fn an_ipv6_udp_datagram_shows_addresses_in_brackets() {
    let (a, b) = (
        "fd00::5".parse::<std::net::Ipv6Addr>().unwrap(),
        "fd00:96::a".parse::<std::net::Ipv6Addr>().unwrap(),
    );
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(MAC_A, MAC_B)
        .ipv6(a.octets(), b.octets(), 64)
        .udp(40000, 53)
        .write(&mut frame, b"q")
        .unwrap();
    let p = Packet::from_ethernet(&frame).unwrap();
    assert_eq!(p.to_string(), "[fd00::5]:40000 > [fd00:96::a]:53 UDP");
}

/// The quoted packet of an ICMP error: the IP header and the UDP header of `udp_frame`.
fn quoted_udp() -> Vec<u8> {
    udp_frame()[14..].to_vec()
}

#[test]
fn an_icmp_port_unreachable_names_the_packet_it_answers() {
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(MAC_B, MAC_A)
        .ipv4([10, 0, 0, 1], CLIENT, 64)
        .icmpv4(Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::Port))
        .write(&mut frame, &quoted_udp())
        .unwrap();
    let p = Packet::from_ethernet(&frame).unwrap();
    let L4::IcmpError { kind, original } = &p.l4 else { panic!("not an ICMP error: {p:?}") };
    assert_eq!(kind, "port unreachable");
    assert_eq!(original.as_ref().unwrap().l4, L4::Udp { src_port: 40000, dst_port: 53 });
    assert_eq!(p.to_string(), "ICMP port unreachable from 10.0.0.1 for 10.244.1.5:40000 > 10.96.0.10:53 UDP");
    assert!(
        p.is_between(sa("10.96.0.10:53"), sa("10.244.1.5:40000")),
        "an error about the flow belongs to it"
    );
    assert!(!p.is_between(sa("10.96.0.10:53"), sa("10.244.1.5:40001")));
}

#[test]
fn an_icmp_error_quoting_only_eight_bytes_of_tcp_still_has_ports() {
    let mut syn = Vec::new();
    PacketBuilder::ipv4(CLIENT, VIP, 64).tcp(40000, 80, 1, 100).syn().write(&mut syn, &[]).unwrap();
    syn.truncate(20 + 8); // RFC 792's minimum quote
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(MAC_B, MAC_A)
        .ipv4(VIP, CLIENT, 64)
        .icmpv4(Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::FilterProhibited))
        .write(&mut frame, &syn)
        .unwrap();
    let p = Packet::from_ethernet(&frame).unwrap();
    assert_eq!(
        p.to_string(),
        "ICMP admin prohibited from 10.96.0.10 for 10.244.1.5:40000 > 10.96.0.10:80 TCP []"
    );
}

#[test]
fn an_icmpv6_port_unreachable() {
    let (a, b) = (
        "fd00::5".parse::<std::net::Ipv6Addr>().unwrap(),
        "fd00:96::a".parse::<std::net::Ipv6Addr>().unwrap(),
    );
    let mut quoted = Vec::new();
    PacketBuilder::ipv6(a.octets(), b.octets(), 64).udp(40000, 53).write(&mut quoted, b"q").unwrap();
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(MAC_B, MAC_A)
        .ipv6(b.octets(), a.octets(), 64)
        .icmpv6(Icmpv6Type::DestinationUnreachable(DestUnreachableCode::Port))
        .write(&mut frame, &quoted)
        .unwrap();
    let p = Packet::from_ethernet(&frame).unwrap();
    assert_eq!(
        p.to_string(),
        "ICMP port unreachable from fd00:96::a for [fd00::5]:40000 > [fd00:96::a]:53 UDP"
    );
}

#[test]
fn arp_and_neighbour_discovery_are_not_packets() {
    let mut arp = Vec::new();
    let request = ArpPacket::new(
        ArpHardwareId::ETHERNET,
        EtherType::IPV4,
        ArpOperation::REQUEST,
        &MAC_A,
        &CLIENT,
        &[0; 6],
        &VIP,
    )
    .unwrap();
    PacketBuilder::ethernet2(MAC_A, [0xff; 6]).arp(request).write(&mut arp).unwrap();
    assert_eq!(Packet::from_ethernet(&arp), None);
    let asked = NeighbourRequest::from_ethernet(&arp).unwrap();
    assert_eq!(asked.to_string(), "ARP who-has 10.96.0.10 tell 10.244.1.5");

    let (a, b) = (
        "fe80::1".parse::<std::net::Ipv6Addr>().unwrap(),
        "ff02::1:ff00:2".parse::<std::net::Ipv6Addr>().unwrap(),
    );
    let mut ns = Vec::new();
    PacketBuilder::ethernet2(MAC_A, [0x33, 0x33, 0xff, 0, 0, 2])
        .ipv6(a.octets(), b.octets(), 255)
        .icmpv6(Icmpv6Type::NeighborSolicitation)
        .write(&mut ns, &[&"fd00::2".parse::<std::net::Ipv6Addr>().unwrap().octets()[..], &[0; 4]].concat())
        .unwrap();
    assert_eq!(Packet::from_ethernet(&ns), None);
    assert_eq!(NeighbourRequest::from_ethernet(&ns).unwrap().to_string(), "NS who-has fd00::2 tell fe80::1");
    // An ARP reply and a plain UDP frame ask for nothing.
    assert_eq!(NeighbourRequest::from_ethernet(&udp_frame()), None);
}

#[test]
fn echo_requests_and_unknown_protocols_are_other() {
    let mut ping = Vec::new();
    PacketBuilder::ethernet2(MAC_A, MAC_B)
        .ipv4(CLIENT, VIP, 64)
        .icmpv4_echo_request(1, 1)
        .write(&mut ping, &[])
        .unwrap();
    assert_eq!(Packet::from_ethernet(&ping).unwrap().l4, L4::Other { protocol: 1 });

    let mut gre = Vec::new();
    PacketBuilder::ethernet2(MAC_A, MAC_B)
        .ipv4(CLIENT, VIP, 64)
        .write(&mut gre, IpNumber::GRE, &[0; 8])
        .unwrap();
    let p = Packet::from_ethernet(&gre).unwrap();
    assert_eq!(p.to_string(), "10.244.1.5 > 10.96.0.10 proto 47");
}

#[test]
fn wrong_checksums_are_ignored() {
    // veth offload leaves L4 checksums unfilled in captures.
    let mut frame = udp_frame();
    let udp_checksum = 14 + 20 + 6;
    frame[udp_checksum] ^= 0xff;
    assert_eq!(Packet::from_ethernet(&frame).unwrap().l4, L4::Udp { src_port: 40000, dst_port: 53 });
}

#[test]
fn sctp_ports_are_read() {
    let mut frame = Vec::new();
    let mut sctp = vec![0u8; 12];
    sctp[..4].copy_from_slice(&[0x9c, 0x40, 0x00, 0x50]);
    PacketBuilder::ethernet2(MAC_A, MAC_B)
        .ipv4(CLIENT, VIP, 64)
        .write(&mut frame, IpNumber::SCTP, &sctp)
        .unwrap();
    assert_eq!(Packet::from_ethernet(&frame).unwrap().to_string(), "10.244.1.5:40000 > 10.96.0.10:80 SCTP");
}

fn frame_at(nanos: u64, data: Vec<u8>) -> Frame {
    let packet = Packet::from_ethernet(&data);
    Frame { timestamp: UNIX_EPOCH + Duration::from_nanos(nanos), data, packet, outgoing: false }
}

#[test]
fn flow_frames_picks_both_directions_and_errors_about_the_flow() {
    let mut reply = Vec::new();
    PacketBuilder::ethernet2(MAC_B, MAC_A)
        .ipv4(VIP, CLIENT, 64)
        .udp(53, 40000)
        .write(&mut reply, b"a")
        .unwrap();
    let mut other = Vec::new();
    PacketBuilder::ethernet2(MAC_A, MAC_B)
        .ipv4(CLIENT, VIP, 64)
        .udp(40001, 53)
        .write(&mut other, b"q")
        .unwrap();
    let mut error = Vec::new();
    PacketBuilder::ethernet2(MAC_B, MAC_A)
        .ipv4(VIP, CLIENT, 64)
        .icmpv4(Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::Port))
        .write(&mut error, &quoted_udp())
        .unwrap();
    let frames: Vec<Frame> = [udp_frame(), other, reply, error]
        .into_iter()
        .enumerate()
        .map(|(i, d)| frame_at(i as u64, d))
        .collect();
    let picked: Vec<u64> = flow_frames(&frames, sa("10.244.1.5:40000"), sa("10.96.0.10:53"))
        .map(|f| f.timestamp.duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64)
        .collect();
    assert_eq!(picked, [0, 2, 3]);
}

#[test]
fn pcap_round_trip_keeps_bytes_and_nanosecond_timestamps() {
    let frames = vec![
        frame_at(1_700_000_000_123_456_789, udp_frame()),
        frame_at(1_700_000_001_000_000_001, udp_frame()),
    ];
    let dir = std::env::temp_dir().join(format!("packetproof-pcap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("round-trip.pcap");
    write_pcap(&path, &frames).unwrap();

    let mut reader = pcap_file::pcap::PcapReader::new(std::fs::File::open(&path).unwrap()).unwrap();
    assert_eq!(reader.header().datalink, pcap_file::DataLink::ETHERNET);
    let mut read = Vec::new();
    while let Some(packet) = reader.next_packet() {
        let packet = packet.unwrap();
        read.push((UNIX_EPOCH + packet.timestamp, packet.orig_len as usize, packet.data.into_owned()));
    }
    std::fs::remove_dir_all(&dir).unwrap();
    let expected: Vec<_> = frames.iter().map(|f| (f.timestamp, f.data.len(), f.data.clone())).collect();
    assert_eq!(read, expected);
}

#[test]
fn captures_can_be_shared_between_threads() {
    fn shareable<T: Send + Sync>() {}
    shareable::<Capture>();
    shareable::<Frame>();
}
