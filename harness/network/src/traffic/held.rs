//! Held connections: a TCP connection a probe opens in one phase and later phases check. The
//! pod's server answers the connection with its reply line and then answers every line the
//! client sends with the line again, so a check on a held connection proves that its bytes
//! still reach a backend (the same one) and come back through the same translation.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::Result;
use socket2::{Domain, Socket, Type};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use super::attempt::{Attempt, answer, classify_error};
use super::client::{Prober, Sent};
use super::reply;

/// The server's side: the reply line, then the line again for every line received, until
/// the client closes its side (a one-shot client does so at once).
pub async fn answer_and_echo(stream: tokio::net::TcpStream, peer: SocketAddr, pod: String) {
    let line = reply::encode(&pod, peer);
    let (read, mut write) = stream.into_split();
    if write.write_all(line.as_bytes()).await.is_err() {
        return;
    }
    let mut lines = tokio::io::BufReader::new(read).lines();
    while let Ok(Some(_)) = lines.next_line().await {
        if write.write_all(line.as_bytes()).await.is_err() {
            return;
        }
    }
    let _ = write.shutdown().await;
}

/// An open connection a probe holds: the socket, and the flow it is (its source port names
/// its packets and its conntrack entry).
#[derive(Debug)]
pub struct HeldConnection {
    stream: TcpStream,
    pub source_port: u16,
    pub dst: SocketAddr,
    timeout: Duration,
}

/// Opens a connection to `dst` from a new source port inside the prober's namespace and
/// reads the backend's first answer; the connection is kept only if a backend answered.
pub fn open(prober: &Prober, dst: SocketAddr) -> Result<(Sent, Option<HeldConnection>)> {
    prober.run_inside(move |ports, timeout| {
        let mut last = Attempt::Broken { reason: "no free source port".into() };
        let mut source_port = 0;
        for _ in 0..16 {
            source_port = ports.next();
            match connect(dst, source_port, timeout) {
                Ok(Ok(mut stream)) => {
                    let attempt = read_answer(&mut stream);
                    let sent = Sent { source_port, request: None, attempt: attempt.clone() };
                    let held = matches!(attempt, Attempt::Answered { .. }).then_some(HeldConnection {
                        stream,
                        source_port,
                        dst,
                        timeout,
                    });
                    return (sent, held);
                }
                Ok(Err(attempt)) => return (Sent { source_port, request: None, attempt }, None),
                Err(e) if e.kind() == ErrorKind::AddrInUse => continue,
                Err(e) => {
                    last = Attempt::Broken { reason: format!("binding source port {source_port}: {e}") };
                    break;
                }
            }
        }
        (Sent { source_port, request: None, attempt: last }, None)
    })
}

/// A bound socket connected to `dst`; the outer error is a bind failure (try another port),
/// the inner one what the connection attempt got instead of a connection.
fn connect(
    dst: SocketAddr,
    source_port: u16,
    timeout: Duration,
) -> std::io::Result<Result<TcpStream, Attempt>> {
    let socket = Socket::new(Domain::for_address(dst), Type::STREAM, None)?;
    let unspecified: std::net::IpAddr = if dst.is_ipv6() {
        std::net::Ipv6Addr::UNSPECIFIED.into()
    } else {
        std::net::Ipv4Addr::UNSPECIFIED.into()
    };
    socket.bind(&SocketAddr::new(unspecified, source_port).into())?;
    if let Err(e) = socket.connect_timeout(&dst.into(), timeout) {
        super::attempt::abandon(&socket);
        return Ok(Err(classify_error(e)));
    }
    let stream: TcpStream = socket.into();
    stream.set_read_timeout(Some(timeout))?;
    Ok(Ok(stream))
}

impl HeldConnection {
    /// Sends a line on the connection and reads the backend's answer to it.
    pub fn check(&mut self) -> Sent {
        let attempt = match self.stream.write_all(b"still there?\n") {
            Ok(()) => read_answer(&mut self.stream),
            Err(e) => broken_connection(e),
        };
        Sent { source_port: self.source_port, request: None, attempt }
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}

/// One answer line, however it arrives.
fn read_answer(stream: &mut TcpStream) -> Attempt {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        match stream.read(&mut byte) {
            Ok(0) if line.is_empty() => {
                return Attempt::Broken { reason: "the connection was closed by the other end".into() };
            }
            Ok(0) => break,
            Ok(_) => {
                line.push(byte[0]);
                if byte[0] == b'\n' {
                    break;
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => {
                return match classify_error_held(e) {
                    Attempt::Silent => {
                        Attempt::Broken { reason: "connected, but no answer before the timeout".into() }
                    }
                    other => other,
                };
            }
        }
    }
    answer(&String::from_utf8_lossy(&line))
}

/// A reset shows as a refusal: the connection's other end (or something on its path) sent a
/// RST.
fn classify_error_held(e: std::io::Error) -> Attempt {
    match e.kind() {
        ErrorKind::ConnectionReset | ErrorKind::BrokenPipe => broken_connection(e),
        _ => classify_error(e),
    }
}

fn broken_connection(e: std::io::Error) -> Attempt {
    match e.kind() {
        ErrorKind::ConnectionReset | ErrorKind::BrokenPipe => {
            Attempt::Refused { reason: format!("the held connection was reset ({e})") }
        }
        _ => classify_error(e),
    }
}
