//! Probes: real sockets opened in the source namespace, one new connection (and one new source
//! port) per attempt, each classified as answered, refused or silent.

use std::io::{ErrorKind, Read};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use anyhow::Result;
use socket2::{Domain, Socket, Type};

use super::reply;
use crate::model::Protocol;
use crate::topology::Netns;
use crate::topology::netns::NsThread;

/// What one attempt got back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// A pod's server answered; `seen` is the source address it saw.
    Answered { pod: String, seen: SocketAddr },
    /// The connection was actively refused: TCP RST or an ICMP unreachable.
    Refused { reason: String },
    /// Nothing came back before the timeout (dropped somewhere).
    Silent,
    /// Something came back that is neither an answer nor a refusal.
    Broken { reason: String },
}

impl Attempt {
    pub fn kind(&self) -> &'static str {
        match self {
            Attempt::Answered { .. } => "answered",
            Attempt::Refused { .. } => "refused",
            Attempt::Silent => "silent",
            Attempt::Broken { .. } => "broken",
        }
    }
}

/// Source ports for a scenario: each attempt gets a port never used before in the scenario, so
/// every attempt is a new conntrack flow and load balancing is sampled afresh.
#[derive(Debug, Clone)]
pub struct SourcePorts(Arc<AtomicU16>);

impl Default for SourcePorts {
    fn default() -> Self {
        SourcePorts(Arc::new(AtomicU16::new(FIRST_SOURCE_PORT)))
    }
}

const FIRST_SOURCE_PORT: u16 = 20000;

impl SourcePorts {
    fn next(&self) -> u16 {
        // Wraps within [20000, 65535) after ~45k attempts; far more than any scenario sends.
        let port = self.0.fetch_add(1, Ordering::Relaxed);
        if port == u16::MAX {
            self.0.store(FIRST_SOURCE_PORT, Ordering::Relaxed);
        }
        port
    }
}

/// Sends probes from one namespace.
pub struct Prober {
    thread: NsThread,
    ports: SourcePorts,
    timeout: Duration,
}

impl Prober {
    pub fn new(source: &Netns, ports: SourcePorts, timeout: Duration) -> Result<Prober> {
        Ok(Prober { thread: source.thread()?, ports, timeout })
    }

    /// Makes `count` attempts to `dst`, one after another, inside the source namespace.
    pub fn probe(&self, protocol: Protocol, dst: SocketAddr, count: u32) -> Result<Vec<Attempt>> {
        let (ports, timeout) = (self.ports.clone(), self.timeout);
        self.thread.run(move || (0..count).map(|_| attempt(protocol, &ports, dst, timeout)).collect())
    }

    /// A bare connect-and-read with no classification, for benchmarks.
    pub fn raw_tcp_round_trip(&self, dst: SocketAddr) -> Result<std::io::Result<usize>> {
        let timeout = self.timeout;
        self.thread.run(move || {
            let mut stream = std::net::TcpStream::connect_timeout(&dst, timeout)?;
            let mut buf = Vec::new();
            stream.read_to_end(&mut buf)
        })
    }
}

fn attempt(protocol: Protocol, ports: &SourcePorts, dst: SocketAddr, timeout: Duration) -> Attempt {
    // A source port may still be taken by something else in the namespace: move on to the next.
    for _ in 0..16 {
        let src = SocketAddr::new(unspecified(dst.ip()), ports.next());
        let result = match protocol {
            Protocol::Tcp => tcp(src, dst, timeout),
            Protocol::Udp => udp(src, dst, timeout),
            Protocol::Sctp => Err(Unsent::Other("SCTP probes are not supported on this host".into())),
        };
        match result {
            Ok(attempt) => return attempt,
            Err(Unsent::PortInUse) => continue,
            Err(Unsent::Other(reason)) => return Attempt::Broken { reason },
        }
    }
    Attempt::Broken { reason: "no free source port after 16 tries".into() }
}

enum Unsent {
    PortInUse,
    Other(String),
}

fn bind_error(e: std::io::Error, src: SocketAddr) -> Unsent {
    if e.kind() == ErrorKind::AddrInUse {
        Unsent::PortInUse
    } else {
        Unsent::Other(format!("binding source {src}: {e}"))
    }
}

fn tcp(src: SocketAddr, dst: SocketAddr, timeout: Duration) -> Result<Attempt, Unsent> {
    let socket = Socket::new(Domain::for_address(dst), Type::STREAM, None)
        .map_err(|e| Unsent::Other(format!("creating a TCP socket: {e}")))?;
    socket.bind(&src.into()).map_err(|e| bind_error(e, src))?;
    if let Err(e) = socket.connect_timeout(&dst.into(), timeout) {
        return Ok(classify_error(e));
    }
    let mut stream: std::net::TcpStream = socket.into();
    let _ = stream.set_read_timeout(Some(timeout));
    let mut text = String::new();
    Ok(match stream.read_to_string(&mut text) {
        Ok(_) => answer(&text),
        Err(e) => match classify_error(e) {
            Attempt::Silent => {
                Attempt::Broken { reason: "connected, but no answer before the timeout".into() }
            }
            other => other,
        },
    })
}

fn udp(src: SocketAddr, dst: SocketAddr, timeout: Duration) -> Result<Attempt, Unsent> {
    let socket = UdpSocket::bind(src).map_err(|e| bind_error(e, src))?;
    // Connected, so the kernel delivers only replies from `dst` (proof of reverse NAT) and
    // reports an ICMP port unreachable as ECONNREFUSED.
    let io = |e: std::io::Error| Unsent::Other(format!("UDP probe to {dst}: {e}"));
    socket.connect(dst).map_err(io)?;
    socket.set_read_timeout(Some(timeout)).map_err(io)?;
    if let Err(e) = socket.send(b"packetproof probe\n") {
        return Ok(classify_error(e));
    }
    let mut buf = [0u8; 512];
    Ok(match socket.recv(&mut buf) {
        Ok(n) => answer(&String::from_utf8_lossy(&buf[..n])),
        Err(e) => classify_error(e),
    })
}

fn answer(text: &str) -> Attempt {
    match reply::decode(text) {
        Some((pod, seen)) => Attempt::Answered { pod, seen },
        None if text.is_empty() => Attempt::Broken { reason: "connection closed without an answer".into() },
        None => Attempt::Broken { reason: format!("unexpected answer {:?}", text.trim_end()) },
    }
}

fn classify_error(e: std::io::Error) -> Attempt {
    match e.kind() {
        ErrorKind::TimedOut | ErrorKind::WouldBlock => Attempt::Silent,
        ErrorKind::ConnectionRefused => {
            Attempt::Refused { reason: "connection refused (RST or ICMP port unreachable)".into() }
        }
        ErrorKind::HostUnreachable => Attempt::Refused { reason: "ICMP host unreachable".into() },
        // No route in the source namespace: a topology fault, not a proxy's reject.
        ErrorKind::NetworkUnreachable => {
            Attempt::Broken { reason: "no route to the destination (ENETUNREACH)".into() }
        }
        ErrorKind::PermissionDenied => Attempt::Refused { reason: "ICMP administratively prohibited".into() },
        _ => Attempt::Broken { reason: e.to_string() },
    }
}

fn unspecified(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
    }
}
