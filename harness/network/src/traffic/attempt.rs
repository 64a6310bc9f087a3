//! What one attempt to reach a server got back, read from its answer or its socket error;
//! shared by every kind of client (TCP, UDP and HTTP in `client`, SCTP in `sctp`, held
//! connections in `held`).

use std::io::ErrorKind;
use std::net::SocketAddr;

use super::reply;

/// What one attempt got back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// A pod's server answered; `seen` is the source address it saw.
    Answered { pod: String, seen: SocketAddr },
    /// An HTTP server answered (a node's health-check port).
    Http { status: u16, body: String },
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
            Attempt::Http { .. } => "http",
            Attempt::Refused { .. } => "refused",
            Attempt::Silent => "silent",
            Attempt::Broken { .. } => "broken",
        }
    }

    /// The pod that answered, if one did.
    pub fn backend(&self) -> Option<&str> {
        match self {
            Attempt::Answered { pod, .. } => Some(pod),
            _ => None,
        }
    }
}

/// Why an attempt was not sent.
pub(super) enum Unsent {
    PortInUse,
    Other(String),
}

pub(super) fn bind_error(e: std::io::Error, src: SocketAddr) -> Unsent {
    if e.kind() == ErrorKind::AddrInUse {
        Unsent::PortInUse
    } else {
        Unsent::Other(format!("binding source {src}: {e}"))
    }
}

pub fn answer(text: &str) -> Attempt {
    match reply::decode(text) {
        Some((pod, seen)) => Attempt::Answered { pod, seen },
        None if text.is_empty() => Attempt::Broken { reason: "connection closed without an answer".into() },
        None => Attempt::Broken { reason: format!("unexpected answer {:?}", text.trim_end()) },
    }
}

pub fn classify_error(e: std::io::Error) -> Attempt {
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

/// Ends an attempt given up while still connecting, in the kernel and not only in this
/// process: a process forked meanwhile (any thread's `iptables-restore`, `nft` or `conntrack`,
/// until it execs) holds a copy of every descriptor, so closing ours leaves the socket
/// retransmitting its SYN, which a later probe's route may carry to another node and get
/// answered (found by `packetproof soak --stress 2`: a flow expected dropped via node-b
/// answered through node-a, one second later, by SYNs of its own sockets). `shutdown` of a
/// socket still connecting disconnects it (`inet_shutdown`: TCP_SYN_SENT; an SCTP association
/// in COOKIE-WAIT is deleted), whoever else holds it.
pub(super) fn abandon(socket: &socket2::Socket) {
    let _ = socket.shutdown(std::net::Shutdown::Both);
}
