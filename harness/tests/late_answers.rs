//! A UDP answer that comes after the client stopped waiting, against the real kernel: the
//! verdict must not depend on the client's timeout. Two harness namespaces joined by a veth
//! pair; a server that holds its answer to the first request until the second request
//! arrives, then sends both. That order is forced by events, not by the clock: the first
//! attempt is silent to its socket at any timeout, and its answer reaches the second
//! attempt's socket (both use one fixed source port, as a resolver does) before the second's
//! own answer.
//!
//! Expected: the second attempt takes its own answer, not the first's; the evidence finds the
//! first attempt's answer on the client's capture and judges it answered (late), not dropped.

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use packetproof::model::{Life, Probe, Protocol, Source, Target};
use packetproof::observe::Capture;
use packetproof::topology::netns::{self, Netns};
use packetproof::traffic::client::SourcePorts;
use packetproof::traffic::{Attempt, Pace, Plan, Prober, Speech, reply};
use packetproof::verdict::evidence::{Evidence, Window};
use packetproof::verdict::late;

const CLIENT: &str = "10.78.0.1";
const SERVER: &str = "10.78.0.2";
const PORT: u16 = 5353;
const SOURCE_PORT: u16 = 15353;

/// Two namespaces joined by `eth0` ↔ `eth0`; removed on drop, pass or fail.
struct Pair {
    client: Netns,
    server: Netns,
}

impl Pair {
    fn new() -> Pair {
        let name = |side: &str| format!("{}late-{side}", netns::process_prefix());
        let client = Netns::create(&name("c")).expect("creating the client's namespace");
        let server = match Netns::create(&name("s")) {
            Ok(s) => s,
            Err(e) => {
                let _ = client.remove();
                panic!("creating the server's namespace: {e:#}");
            }
        };
        let pair = Pair { client, server };
        let ip = |ns: &Netns, args: &str| {
            ns.exec("ip", &args.split(' ').collect::<Vec<_>>(), None).unwrap_or_else(|e| panic!("{e:#}"));
        };
        ip(&pair.client, &format!("link add eth0 type veth peer name eth0 netns {}", pair.server.name()));
        for (ns, v4) in [(&pair.client, CLIENT), (&pair.server, SERVER)] {
            ip(ns, &format!("addr add {v4}/24 dev eth0"));
            ip(ns, "link set eth0 up");
        }
        pair
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for ns in [&self.client, &self.server] {
            if let Err(e) = ns.remove() {
                eprintln!("{e:#}");
            }
        }
    }
}

/// Answers "warm-up" at once (until the link carries traffic); holds its answer to the first
/// request until the second arrives, answers the first as pod `first`, then every request as
/// pod `second`.
fn serve(socket: UdpSocket, probes: usize) {
    let mut buf = [0u8; 512];
    let mut held: Option<(u64, SocketAddr)> = None;
    let mut answered = 0;
    while answered < probes {
        let (n, peer) = socket.recv_from(&mut buf).expect("server receive");
        let Some(id) = reply::request_id(&buf[..n]) else {
            socket.send_to(b"warm", peer).expect("server send");
            continue;
        };
        match held.take() {
            None if answered == 0 => {
                held = Some((id, peer));
                answered += 1;
                continue;
            }
            Some((first, first_peer)) => {
                let line = reply::encode_answer_to("first", first_peer, first);
                socket.send_to(line.as_bytes(), first_peer).expect("server send");
            }
            None => {}
        }
        let line = reply::encode_answer_to("second", peer, id);
        socket.send_to(line.as_bytes(), peer).expect("server send");
        answered += 1;
    }
}

/// Sends warm-up datagrams until one is answered: the link carries traffic and the neighbour
/// entries exist, so the probe's first request cannot be lost on the way.
fn warm_up(client: &Netns, server: SocketAddr) {
    let answered = client
        .run(move || {
            let socket = UdpSocket::bind((CLIENT, 0)).unwrap();
            socket.connect(server).unwrap();
            socket.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
            (0..100).any(|_| {
                socket.send(b"warm-up").unwrap();
                socket.recv(&mut [0u8; 16]).is_ok()
            })
        })
        .unwrap();
    assert!(answered, "the link never carried a warm-up datagram");
}

#[test]
fn a_late_answer_goes_to_its_own_attempt_and_is_judged_answered() {
    if !packetproof::privileges::scenarios_can_run() {
        return;
    }
    let pair = Pair::new();
    let dst = SocketAddr::new(SERVER.parse().unwrap(), PORT);
    let socket = pair.server.run(move || UdpSocket::bind(dst)).unwrap().expect("binding the server");
    let server = std::thread::spawn(move || serve(socket, 2));
    warm_up(&pair.client, dst);

    let capture = Capture::start(&pair.client, "eth0").expect("capturing on the client's eth0");
    let before = capture.count();
    // A short wait: the first attempt is silent however long it waits (its answer is held
    // until the second request), so the shortest keeps the test quick.
    let prober = Prober::new(&pair.client, SourcePorts::default(), Duration::from_millis(300)).unwrap();
    let plan = Plan {
        dst,
        source_port: Some(SOURCE_PORT),
        count: 2,
        speech: Speech::Plain(Protocol::Udp),
        pace: Pace::Sequential { interval: None },
    };
    let sent = prober.send(plan).unwrap();
    server.join().expect("the server");
    // Both answers left the server before the second attempt returned; the capture reads
    // whatever the kernel queued for it before `count`/`stop` return.
    let after = capture.count();
    let frames = capture.stop().unwrap();

    let attempts: Vec<&Attempt> = sent.iter().map(|s| &s.attempt).collect();
    let seen = SocketAddr::new(CLIENT.parse().unwrap(), SOURCE_PORT);
    assert_eq!(
        attempts,
        [&Attempt::Silent, &Attempt::Answered { pod: "second".into(), seen }],
        "the second attempt must skip the first's late answer"
    );

    let probe = Probe {
        name: "late".into(),
        from: Source::Pod("client".into()),
        to: Target::Address(dst),
        protocol: Protocol::Udp,
        count: 2,
        interval: None,
        family: None,
        source_port: Some(SOURCE_PORT),
        expect: None,
        life: Life::OneShot,
        clients: None,
    };
    let key = "pod/client".to_string();
    let evidence = Evidence { frames: [(key.clone(), frames)].into(), ..Default::default() };
    let window = Window { frames: [(key, before..after)].into() };
    let judged = late::reconcile(&probe, dst, sent, &evidence, &window);
    let attempts: Vec<&Attempt> = judged.iter().map(|s| &s.attempt).collect();
    assert_eq!(
        attempts,
        [&Attempt::Answered { pod: "first".into(), seen }, &Attempt::Answered { pod: "second".into(), seen }],
        "the first attempt's answer is on the client's capture: answered (late), not silent"
    );
}
