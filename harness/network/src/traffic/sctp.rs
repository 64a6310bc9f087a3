//! SCTP probes and servers, with one-to-one style sockets (`socket(AF_INET, SOCK_STREAM,
//! IPPROTO_SCTP)`, RFC 6458 §4): one association per attempt, like a TCP connection, from a
//! fresh source port. The server accepts an association, writes the reply line (pod name and
//! the peer address it saw) and shuts down; the client reads to the end.
//!
//! One-to-one style sockets take the same calls as TCP sockets (bind, listen, accept, connect,
//! read, write, shutdown), so the server runs on tokio's TCP listener type, which only makes
//! those calls; nothing TCP-specific (no TCP socket options) is ever set on them.

use std::io::Read;
use std::net::SocketAddr;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

use super::attempt::{Attempt, Unsent, answer, bind_error, classify_error};

const IPPROTO_SCTP: i32 = 132;

/// Whether `e` means the kernel has no SCTP (no module, or built without it).
pub fn unsupported(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EPROTONOSUPPORT) | Some(libc::ESOCKTNOSUPPORT) | Some(libc::EAFNOSUPPORT)
    )
}

fn socket(addr: SocketAddr) -> std::io::Result<Socket> {
    Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::from(IPPROTO_SCTP)))
}

/// A listening SCTP socket on `addr` (IPv6-only on an IPv6 address, as the TCP servers).
pub fn listen(addr: SocketAddr) -> std::io::Result<Socket> {
    let socket = socket(addr)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(128)?;
    Ok(socket)
}

/// The listener as tokio's TCP listener type (see the module's note), ready to serve.
pub fn into_tokio(listener: Socket) -> std::io::Result<tokio::net::TcpListener> {
    let listener = std::net::TcpListener::from(listener);
    listener.set_nonblocking(true)?;
    tokio::net::TcpListener::from_std(listener)
}

/// One association from `src` to `dst`: answered (the reply line), refused (ABORT or an ICMP
/// error), silent (not established before the timeout) or broken (established, then no
/// answer).
pub(super) fn attempt(src: SocketAddr, dst: SocketAddr, timeout: Duration) -> Result<Attempt, Unsent> {
    let socket = socket(dst).map_err(|e| {
        Unsent::Other(if unsupported(&e) {
            "this kernel has no SCTP sockets".into()
        } else {
            format!("creating an SCTP socket: {e}")
        })
    })?;
    // Without IP_RECVERR, SCTP keeps an ICMP port unreachable as a soft error and retransmits
    // its INIT (sctp_v4_err and sctp_v6_err in net/sctp), so a reject would look like silence.
    report_icmp_errors(&socket, dst).map_err(|e| Unsent::Other(format!("setting IP_RECVERR: {e}")))?;
    socket.bind(&src.into()).map_err(|e| bind_error(e, src))?;
    // Not `connect_timeout`: a non-blocking SCTP connect reports the socket writable as soon as
    // the INIT is sent (sctp_poll in net/sctp/socket.c: writable whenever there is send buffer,
    // unless CLOSED), so it returned "connected" before any INIT ACK, and an association that
    // never came up was reported as "associated, but no answer". A blocking connect waits for
    // ESTABLISHED (sctp_wait_for_connect) up to SO_SNDTIMEO, then fails with EINPROGRESS.
    socket
        .set_write_timeout(Some(timeout))
        .map_err(|e| Unsent::Other(format!("setting SO_SNDTIMEO: {e}")))?;
    match socket.connect(&dst.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {
            super::attempt::abandon(&socket);
            return Ok(Attempt::Silent);
        }
        Err(e) => return Ok(classify_error(e)),
    }
    let _ = socket.set_read_timeout(Some(timeout));
    let mut stream = std::net::TcpStream::from(socket);
    let mut bytes = Vec::new();
    Ok(match stream.read_to_end(&mut bytes) {
        Ok(_) => answer(&String::from_utf8_lossy(&bytes)),
        Err(e) => match classify_error(e) {
            Attempt::Silent => {
                Attempt::Broken { reason: "associated, but no answer before the timeout".into() }
            }
            other => other,
        },
    })
}

fn report_icmp_errors(socket: &Socket, dst: SocketAddr) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let (level, name) = match dst {
        SocketAddr::V4(_) => (libc::IPPROTO_IP, libc::IP_RECVERR),
        SocketAddr::V6(_) => (libc::IPPROTO_IPV6, libc::IPV6_RECVERR),
    };
    let on: libc::c_int = 1;
    // SAFETY: a valid socket descriptor, and an int option of the length given.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            name,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}
