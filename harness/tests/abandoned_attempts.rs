//! An attempt that gives up while its TCP socket still connects must end that socket in the
//! kernel, though a process forked meanwhile holds a copy of it. Otherwise the socket goes on
//! retransmitting its SYN, and a later probe that steers the same destination through another
//! node gets those SYNs answered: `packetproof soak --stress 2` saw a flow expected dropped via
//! node-b answered one second later through node-a, by retransmissions of its own sockets,
//! while another scenario's thread had forked a program.
//!
//! Forced by events, not by the clock: the child is forked once the attempt's socket is listed
//! in SYN-SENT, so it holds the socket when the attempt gives up; then the namespace's TCP
//! sockets are read. The SYNs wait for an address nobody on the link answers for.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use packetproof::model::Protocol;
use packetproof::topology::netns::{self, Netns};
use packetproof::traffic::client::SourcePorts;
use packetproof::traffic::{Attempt, Pace, Plan, Prober, Speech};

const NOWHERE: Ipv4Addr = Ipv4Addr::new(10, 79, 0, 2);
const PORT: u16 = 80;
/// `st` of a socket in SYN-SENT in `/proc/net/tcp` (include/net/tcp_states.h).
const SYN_SENT: &str = "02";

/// A namespace whose only route leads to a veth whose peer holds no address (so no one
/// answers for `NOWHERE`); removed on drop.
struct Blackhole(Netns);

impl Blackhole {
    fn new() -> Blackhole {
        let ns = Netns::create(&format!("{}abandon", netns::process_prefix())).expect("creating a namespace");
        let hole = Blackhole(ns);
        for args in [
            "link add v0 type veth peer name v1",
            "addr add 10.79.0.1/24 dev v0",
            "link set v0 up",
            "link set v1 up",
        ] {
            hole.0.exec("ip", &args.split(' ').collect::<Vec<_>>(), None).unwrap_or_else(|e| panic!("{e:#}"));
        }
        hole
    }

    /// Whether a socket of the namespace is in SYN-SENT to `NOWHERE:PORT`.
    fn connecting(&self) -> bool {
        let tcp = self.0.run(|| std::fs::read_to_string("/proc/thread-self/net/tcp")).unwrap().unwrap();
        let remote = format!("{:08X}:{PORT:04X}", u32::from_le_bytes(NOWHERE.octets()));
        tcp.lines().skip(1).any(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.get(2) == Some(&remote.as_str()) && fields.get(3) == Some(&SYN_SENT)
        })
    }
}

impl Drop for Blackhole {
    fn drop(&mut self) {
        if let Err(e) = self.0.remove() {
            eprintln!("{e:#}");
        }
    }
}

/// A process forked from this one (so holding a copy of every descriptor), which waits to be
/// killed; killed and reaped on drop.
struct Holder(libc::pid_t);

impl Holder {
    fn fork() -> Holder {
        // SAFETY: the child calls only async-signal-safe functions before it exits.
        match unsafe { libc::fork() } {
            0 => unsafe {
                libc::sleep(60);
                libc::_exit(0)
            },
            -1 => panic!("fork: {}", std::io::Error::last_os_error()),
            pid => Holder(pid),
        }
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        // SAFETY: our own child, killed and reaped once.
        unsafe {
            libc::kill(self.0, libc::SIGKILL);
            libc::waitpid(self.0, std::ptr::null_mut(), 0);
        }
    }
}

#[test]
fn a_silent_attempt_ends_its_socket_though_a_forked_process_holds_it() {
    if !packetproof::privileges::scenarios_can_run() {
        return;
    }
    let hole = Blackhole::new();
    let prober = Prober::new(&hole.0, SourcePorts::default(), Duration::from_secs(2)).unwrap();
    let plan = Plan {
        dst: SocketAddr::new(NOWHERE.into(), PORT),
        source_port: None,
        count: 1,
        speech: Speech::Plain(Protocol::Tcp),
        pace: Pace::Sequential { interval: None },
    };
    let holder = std::thread::scope(|scope| {
        let attempt = scope.spawn(|| prober.send(plan).unwrap());
        // The child is forked while the attempt's socket connects.
        let started = Instant::now();
        while !hole.connecting() {
            assert!(started.elapsed() < Duration::from_secs(10), "the attempt's socket never connected");
            assert!(!attempt.is_finished(), "the attempt ended before its socket was seen connecting");
            std::thread::sleep(Duration::from_millis(5));
        }
        let holder = Holder::fork();
        let sent = attempt.join().unwrap();
        assert_eq!(sent[0].attempt, Attempt::Silent);
        holder
    });
    assert!(!hole.connecting(), "the abandoned socket still connects, held by the forked process");
    drop(holder);
}
