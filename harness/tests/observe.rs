//! `observe` against the real kernel: captures and conntrack in two harness namespaces joined
//! by a veth pair. Nothing here touches the machine's own namespace.
//!
//! Timings are printed (run with `--nocapture` to see them), never asserted.

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use packetproof::observe::{Capture, L4, Packet, conntrack, flow_frames};
use packetproof::topology::netns::{self, Netns};

const A: &str = "10.77.0.1";
const B: &str = "10.77.0.2";
const A6: &str = "fd77::1";
const B6: &str = "fd77::2";

/// Two namespaces `a` and `b` joined by `eth0` ↔ `eth0`; removed on drop, pass or fail.
struct Pair {
    a: Netns,
    b: Netns,
}

impl Pair {
    fn new(tag: &str) -> Pair {
        let a =
            Netns::create(&format!("{}obs-{tag}-a", netns::process_prefix())).expect("creating namespace a");
        let b = match Netns::create(&format!("{}obs-{tag}-b", netns::process_prefix())) {
            Ok(b) => b,
            Err(e) => {
                let _ = a.remove();
                panic!("creating namespace b: {e:#}");
            }
        };
        let pair = Pair { a, b };
        let ip = |ns: &Netns, args: &str| {
            ns.exec("ip", &args.split(' ').collect::<Vec<_>>(), None).unwrap_or_else(|e| panic!("{e:#}"));
        };
        ip(&pair.a, &format!("link add eth0 type veth peer name eth0 netns {}", pair.b.name()));
        for (ns, v4, v6) in [(&pair.a, A, A6), (&pair.b, B, B6)] {
            ip(ns, &format!("addr add {v4}/24 dev eth0"));
            // nodad: the address is usable at once instead of after duplicate detection.
            ip(ns, &format!("addr add {v6}/64 dev eth0 nodad"));
            ip(ns, "link set eth0 up");
            ip(ns, "link set lo up");
            // ICMP errors are rate-limited per peer (a burst of ~6, then 1/s): the timing loop
            // sends more than that to one closed port.
            // (/proc/sys/net follows the calling thread's namespace.)
            for key in ["net/ipv4/icmp_ratelimit", "net/ipv6/icmp/ratelimit"] {
                ns.run(|| std::fs::write(format!("/proc/sys/{key}"), "0")).unwrap().unwrap();
            }
        }
        pair
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            if let Err(e) = ns.remove() {
                eprintln!("{e:#}");
            }
        }
    }
}

fn have_root() -> bool {
    packetproof::privileges::scenarios_can_run()
}

fn sa(ip: &str, port: u16) -> SocketAddr {
    SocketAddr::new(ip.parse().unwrap(), port)
}

/// A UDP datagram to a closed port; returns once the ICMP error has reached the socket.
fn udp_to_closed_port(from: SocketAddr, to: SocketAddr) {
    let socket = UdpSocket::bind(from).unwrap();
    socket.connect(to).unwrap();
    socket.send(b"hello").unwrap();
    socket.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let err = socket.recv(&mut [0; 16]).expect_err("nothing listens there");
    assert_eq!(
        err.kind(),
        ErrorKind::ConnectionRefused,
        "{from} > {to}: ICMP port unreachable reported to the socket"
    );
}

#[test]
fn capture_sees_udp_icmp_errors_and_tcp_resets() {
    if !have_root() {
        return;
    }
    let pair = Pair::new("cap");
    let capture = Capture::start(&pair.a, "eth0").unwrap();
    pair.a
        .run(|| {
            udp_to_closed_port(sa(A, 40000), sa(B, 9));
            let err = TcpStream::connect_timeout(&sa(B, 81), Duration::from_secs(2))
                .expect_err("port 81 is closed");
            assert_eq!(err.kind(), ErrorKind::ConnectionRefused);
            udp_to_closed_port(sa(A6, 40000), sa(B6, 9));
        })
        .unwrap();

    // Mid-run view: everything the kernel has already queued is there.
    let midway = capture.frames();
    let frames = capture.stop().unwrap();
    assert!(frames.len() >= midway.len());
    let shown: Vec<String> = frames.iter().filter_map(|f| f.packet.as_ref()).map(Packet::to_string).collect();
    let all = shown.join("\n");
    assert!(frames.iter().any(|f| f.packet.is_none()), "ARP is captured but not parsed:\n{all}");

    let udp: Vec<&Packet> =
        flow_frames(&frames, sa(A, 40000), sa(B, 9)).filter_map(|f| f.packet.as_ref()).collect();
    assert_eq!(udp.len(), 2, "datagram and its ICMP error:\n{all}");
    assert_eq!(udp[0].to_string(), "10.77.0.1:40000 > 10.77.0.2:9 UDP");
    assert_eq!(
        udp[1].to_string(),
        "ICMP port unreachable from 10.77.0.2 for 10.77.0.1:40000 > 10.77.0.2:9 UDP"
    );

    let tcp: Vec<&L4> = frames
        .iter()
        .filter_map(|f| f.packet.as_ref())
        .filter(|p| p.endpoints().is_some_and(|(s, d)| s == sa(B, 81) || d == sa(B, 81)))
        .map(|p| &p.l4)
        .collect();
    assert!(
        matches!(tcp[..], [L4::Tcp { syn: true, ack: false, .. }, L4::Tcp { rst: true, .. }]),
        "SYN then RST:\n{all}"
    );

    let udp6: Vec<String> = flow_frames(&frames, sa(A6, 40000), sa(B6, 9))
        .filter_map(|f| f.packet.as_ref())
        .map(Packet::to_string)
        .collect();
    assert_eq!(
        udp6,
        [
            "[fd77::1]:40000 > [fd77::2]:9 UDP",
            "ICMP port unreachable from fd77::2 for [fd77::1]:40000 > [fd77::2]:9 UDP"
        ],
        "{all}"
    );
    assert!(!all.contains("proto 58"), "neighbour discovery is filtered:\n{all}");
    // Frames come in the socket's queue order; their kernel timestamps need not be sorted (an
    // outgoing frame is stamped on its way out, an incoming one earlier, on the peer's side),
    // which is why probes are judged by positions in the capture, never by timestamps.
}

#[test]
fn conntrack_shows_the_dnat_of_a_udp_flow_and_deletes_it() {
    if !have_root() {
        return;
    }
    let pair = Pair::new("ct");
    pair.a.exec("ip", &["route", "add", "10.99.0.0/24", "via", B], None).unwrap();
    // Any nat rule makes conntrack track this namespace.
    let rules = format!(
        "*nat\n:OUTPUT ACCEPT [0:0]\n-A OUTPUT -d 10.99.0.1/32 -p udp -j DNAT --to-destination {B}:9\nCOMMIT\n"
    );
    pair.a.exec("iptables-restore", &[], Some(rules.as_bytes())).unwrap();
    pair.a.run(|| udp_to_closed_port(sa(A, 40001), sa("10.99.0.1", 53))).unwrap();

    let flows = conntrack::dump(&pair.a).unwrap();
    let listing: Vec<String> = flows.iter().map(ToString::to_string).collect();
    let flow = flows
        .iter()
        .find(|f| f.original.dst == sa("10.99.0.1", 53))
        .unwrap_or_else(|| panic!("no entry for the VIP in:\n{}", listing.join("\n")));
    assert_eq!(flow.original.src, sa(A, 40001));
    assert_eq!(flow.reply.src, sa(B, 9), "the reply comes from the DNAT target");
    assert_eq!(flow.reply.dst, sa(A, 40001));
    assert_eq!(
        flow.to_string(),
        "udp src=10.77.0.1 dst=10.99.0.1 sport=40001 dport=53 [UNREPLIED] src=10.77.0.2 dst=10.77.0.1 sport=9 dport=40001"
    );

    assert_eq!(conntrack::lookup(&pair.a, 17, &flow.original).unwrap().as_ref(), Some(flow));
    assert_eq!(
        conntrack::lookup(&pair.a, 17, &flow.reply).unwrap().as_ref(),
        Some(flow),
        "found by its reply too"
    );
    let absent = conntrack::Tuple { src: sa(A, 40009), dst: sa("10.99.0.1", 53) };
    assert_eq!(conntrack::lookup(&pair.a, 17, &absent).unwrap(), None);

    let deleted = conntrack::delete(&pair.a, |f| f.original.dst.ip().to_string() == "10.99.0.1").unwrap();
    assert_eq!(deleted, 1);
    assert!(conntrack::dump(&pair.a).unwrap().iter().all(|f| f.original.dst != sa("10.99.0.1", 53)));

    pair.a.run(|| udp_to_closed_port(sa(A, 40002), sa("10.99.0.1", 53))).unwrap();
    assert!(!conntrack::dump(&pair.a).unwrap().is_empty());
    conntrack::flush(&pair.a).unwrap();
    assert_eq!(conntrack::dump(&pair.a).unwrap(), []);
}

#[test]
fn conntrack_events_keep_an_entry_that_was_gone_before_the_table_was_read() {
    // The tables are read entry by entry, by the tuples announced: as a dump shows them.
    use packetproof::observe::conntrack_events::NodeRecorders;
    if !have_root() {
        return;
    }
    let pair = Pair::new("ev");
    pair.a.exec("ip", &["route", "add", "10.99.0.0/24", "via", B], None).unwrap();
    let rules = format!(
        "*nat\n:OUTPUT ACCEPT [0:0]\n-A OUTPUT -d 10.99.0.1/32 -p udp -j DNAT --to-destination {B}:9\nCOMMIT\n"
    );
    pair.a.exec("iptables-restore", &[], Some(rules.as_bytes())).unwrap();
    let mut recorders = NodeRecorders::start([("a", &pair.a)]).unwrap();

    // Phase one: an entry made, then gone (flushed, as an expired entry is) before the dump.
    pair.a.run(|| udp_to_closed_port(sa(A, 40011), sa("10.99.0.1", 53))).unwrap();
    conntrack::flush(&pair.a).unwrap();
    let dumped = conntrack::dump(&pair.a).unwrap();
    assert_eq!(dumped, [], "the table alone has lost it");
    let tables = recorders.tables(["a"]).unwrap();
    let shown: Vec<String> = tables["a"].iter().map(ToString::to_string).collect();
    assert_eq!(
        shown,
        [
            "udp src=10.77.0.1 dst=10.99.0.1 sport=40011 dport=53 [UNREPLIED] src=10.77.0.2 dst=10.77.0.1 sport=9 dport=40011"
        ],
        "the announced entry, with its DNAT"
    );
    let log = recorders.log("a");
    assert!(log.starts_with("[new] udp src=10.77.0.1 dst=10.99.0.1 sport=40011"), "{log}");
    assert!(log.contains("[destroy] udp src=10.77.0.1 dst=10.99.0.1 sport=40011"), "{log}");

    // Phase two starts afresh: what phase one announced is not announced again, and an entry
    // still in the table is there once, read by its tuple as a dump shows it.
    pair.a.run(|| udp_to_closed_port(sa(A, 40012), sa("10.99.0.1", 53))).unwrap();
    let dumped = conntrack::dump(&pair.a).unwrap();
    let tables = recorders.tables(["a"]).unwrap();
    assert_eq!(tables["a"], dumped);
}

#[test]
fn timings() {
    if !have_root() {
        return;
    }
    let pair = Pair::new("time");
    let (mut starts, mut stops, mut latencies) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..50 {
        let t = Instant::now();
        let capture = Capture::start(&pair.b, "eth0").unwrap();
        starts.push(t.elapsed());
        let t = Instant::now();
        capture.stop().unwrap();
        // stop() returns only after the reader thread has finished: this is the stop latency.
        stops.push(t.elapsed());
    }
    // Stop latency with traffic queued: frames arrive, then stop.
    for _ in 0..10 {
        let capture = Capture::start(&pair.b, "eth0").unwrap();
        pair.a.run(|| udp_to_closed_port(sa(A, 40003), sa(B, 9))).unwrap();
        let t = Instant::now();
        let frames = capture.stop().unwrap();
        latencies.push(t.elapsed());
        assert!(frames.len() >= 2);
    }

    // With iptables-nft a nat chain alone does not start conntrack; a NAT rule does.
    let rules = format!(
        "*nat\n:OUTPUT ACCEPT [0:0]\n-A OUTPUT -d 10.99.0.1/32 -p udp -j DNAT --to-destination {B}:9\nCOMMIT\n"
    );
    pair.a.exec("iptables-restore", &[], Some(rules.as_bytes())).unwrap();
    for port in 41000..41020 {
        pair.a.run(|| udp_to_closed_port(sa(A, port), sa(B, 9))).unwrap();
    }
    let mut dumps = Vec::new();
    let mut entries = 0;
    for _ in 0..20 {
        let t = Instant::now();
        entries = conntrack::dump(&pair.a).unwrap().len();
        dumps.push(t.elapsed());
    }

    let show = |what: &str, mut v: Vec<Duration>| {
        v.sort();
        println!("{what}: median {:?}, max {:?} (n={})", v[v.len() / 2], v[v.len() - 1], v.len());
    };
    show("Capture::start", starts);
    show("Capture::stop (idle)", stops);
    show("Capture::stop (after traffic)", latencies);
    let probe = conntrack::Tuple { src: sa(A, 41000), dst: sa(B, 9) };
    let mut lookups = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        assert!(conntrack::lookup(&pair.a, 17, &probe).unwrap().is_some());
        lookups.push(t.elapsed());
    }
    show(&format!("conntrack::dump ({entries} entries)"), dumps);
    show("conntrack::lookup", lookups);
}
