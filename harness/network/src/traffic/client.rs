//! Probes: real sockets opened in the source namespace, one new connection (and one new source
//! port) per attempt, each classified as answered, refused or silent.

use std::io::Read;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;
use socket2::{Domain, Socket, Type};

use super::attempt::{Unsent, abandon, answer, bind_error, classify_error};
use super::reply;
use crate::model::Protocol;
use crate::topology::Netns;
use crate::topology::netns::NsThread;

pub use super::attempt::Attempt;

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
    /// The port [`SourcePorts::next`] hands out next.
    pub fn peek(&self) -> u16 {
        self.0.load(Ordering::Relaxed)
    }

    pub fn next(&self) -> u16 {
        // Wraps within [20000, 65535) after ~45k attempts; far more than any scenario sends.
        let port = self.0.fetch_add(1, Ordering::Relaxed);
        if port == u16::MAX {
            self.0.store(FIRST_SOURCE_PORT, Ordering::Relaxed);
        }
        port
    }
}

/// What to send: `count` attempts to `dst`.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub dst: SocketAddr,
    /// Every attempt from this source port, rather than a new one each.
    pub source_port: Option<u16>,
    pub count: u32,
    pub speech: Speech,
    pub pace: Pace,
}

/// What an attempt says once connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Speech {
    /// Our pods' one-line protocol over TCP, UDP or SCTP.
    Plain(Protocol),
    /// `GET /` over TCP (health-check node ports).
    HttpGet,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pace {
    /// One attempt after another, with an optional pause between them.
    Sequential { interval: Option<Duration> },
    /// All attempts at once: for traffic expected to vanish, so waiting for silence costs one
    /// wait instead of one per attempt. Each waits [`silent_wait`] of the timeout.
    Concurrent,
}

/// How long an attempt expected to vanish waits: three tenths of `timeout` (300 ms at the
/// default). Its verdict comes from the captures and conntrack tables, which hold the packet's
/// fate once the kernel has handled it, during the send itself; the wait only gives an answer
/// that should not come time to show. tests/timeout_invariance.rs proves the verdicts the same
/// at 90 ms as at 1.2 s.
pub fn silent_wait(timeout: Duration) -> Duration {
    timeout * 3 / 10
}

/// One attempt and the source port it was sent from (the key to its conntrack entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    pub source_port: u16,
    /// The id its request carried (UDP), which the server's answer echoes: the key to its
    /// answer on the wire when several attempts share a source port.
    pub request: Option<u64>,
    pub attempt: Attempt,
}

/// Request ids, unique within the process, so an answer names its attempt in every capture.
static NEXT_REQUEST: AtomicU64 = AtomicU64::new(1);

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

    /// Runs `f` on the thread inside the source namespace, with the next free source port
    /// and the timeout (held connections open their sockets there).
    pub fn run_inside<R: Send + 'static>(
        &self,
        f: impl FnOnce(&SourcePorts, Duration) -> R + Send + 'static,
    ) -> Result<R> {
        let (ports, timeout) = (self.ports.clone(), self.timeout);
        self.thread.run(move || f(&ports, timeout))
    }

    /// Makes `count` attempts to `dst`, one after another, inside the source namespace.
    pub fn probe(&self, protocol: Protocol, dst: SocketAddr, count: u32) -> Result<Vec<Attempt>> {
        let plan = Plan {
            dst,
            source_port: None,
            count,
            speech: Speech::Plain(protocol),
            pace: Pace::Sequential { interval: None },
        };
        Ok(self.send(plan)?.into_iter().map(|s| s.attempt).collect())
    }

    /// Carries out `plan` inside the source namespace.
    pub fn send(&self, plan: Plan) -> Result<Vec<Sent>> {
        let (ports, timeout) = (self.ports.clone(), self.timeout);
        self.thread.run(move || carry_out(&plan, &ports, timeout))
    }

    /// Carries out every plan of `plans` at once inside the source namespace, each paced as
    /// its own (probes that go out together), so their waits overlap. Answers in the order given.
    pub fn send_all(&self, plans: Vec<Plan>) -> Result<Vec<Vec<Sent>>> {
        let (ports, timeout) = (self.ports.clone(), self.timeout);
        self.thread.run(move || {
            // Threads spawned here inherit this thread's network namespace.
            std::thread::scope(|scope| {
                let handles: Vec<_> =
                    plans.iter().map(|plan| scope.spawn(|| carry_out(plan, &ports, timeout))).collect();
                handles
                    .into_iter()
                    .zip(&plans)
                    .map(|(h, plan)| h.join().unwrap_or_else(|_| vec![panicked(); plan.count as usize]))
                    .collect()
            })
        })
    }

    /// A bare connect-and-read with no classification, for benchmarks.
    pub fn raw_tcp_round_trip(&self, dst: SocketAddr) -> Result<std::io::Result<usize>> {
        let timeout = self.timeout;
        self.thread.run(move || {
            let mut stream = std::net::TcpStream::connect_timeout(&dst, timeout)?;
            // As a one-shot probe does: the pod's server answers, then echoes until we close.
            stream.shutdown(std::net::Shutdown::Write)?;
            stream.set_read_timeout(Some(timeout))?;
            let mut buf = Vec::new();
            stream.read_to_end(&mut buf)
        })
    }
}

/// Makes `plan`'s attempts, on a thread already inside the source namespace.
fn carry_out(plan: &Plan, ports: &SourcePorts, timeout: Duration) -> Vec<Sent> {
    match plan.pace {
        Pace::Sequential { interval } => (0..plan.count)
            .map(|i| {
                if let (Some(pause), true) = (interval, i > 0) {
                    std::thread::sleep(pause);
                }
                attempt(plan, ports, timeout)
            })
            .collect(),
        // Threads spawned here inherit this thread's network namespace.
        Pace::Concurrent => std::thread::scope(|scope| {
            let wait = silent_wait(timeout);
            let handles: Vec<_> =
                (0..plan.count).map(|_| scope.spawn(move || attempt(plan, ports, wait))).collect();
            handles.into_iter().map(|h| h.join().unwrap_or_else(|_| panicked())).collect()
        }),
    }
}

/// An attempt whose thread panicked.
fn panicked() -> Sent {
    Sent {
        source_port: 0,
        request: None,
        attempt: Attempt::Broken { reason: "the attempt's thread panicked".into() },
    }
}

fn attempt(plan: &Plan, ports: &SourcePorts, timeout: Duration) -> Sent {
    let (speech, dst) = (plan.speech, plan.dst);
    // A source port may still be taken by something else in the namespace: move on to the next.
    // A fixed port is waited for instead: the attempt before it closed its socket, but a child
    // process forked meanwhile (by any thread: `iptables-restore`, `conntrack`) holds a copy
    // until it execs, and the port is busy until then.
    let give_up = Instant::now() + timeout;
    let mut tried = 0;
    let mut source_port = 0;
    while tried < AUTOMATIC_PORT_TRIES || (plan.source_port.is_some() && Instant::now() < give_up) {
        tried += 1;
        source_port = plan.source_port.unwrap_or_else(|| ports.next());
        let src = SocketAddr::new(unspecified(dst.ip()), source_port);
        let request =
            (speech == Speech::Plain(Protocol::Udp)).then(|| NEXT_REQUEST.fetch_add(1, Ordering::Relaxed));
        let result = match speech {
            Speech::Plain(Protocol::Tcp) => tcp(src, dst, timeout, b"", answer),
            Speech::HttpGet => tcp(src, dst, timeout, HTTP_GET, http_answer),
            Speech::Plain(Protocol::Udp) => udp(src, dst, timeout, request.unwrap_or_default()),
            Speech::Plain(Protocol::Sctp) => super::sctp::attempt(src, dst, timeout),
        };
        let attempt = match result {
            Ok(attempt) => attempt,
            Err(Unsent::PortInUse) if plan.source_port.is_some() => {
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
            Err(Unsent::PortInUse) => continue,
            Err(Unsent::Other(reason)) => Attempt::Broken { reason },
        };
        return Sent { source_port, request, attempt };
    }
    let reason = match plan.source_port {
        Some(port) => format!("source port {port} stayed taken for {timeout:?}"),
        None => format!("no free source port after {AUTOMATIC_PORT_TRIES} tries"),
    };
    Sent { source_port, request: None, attempt: Attempt::Broken { reason } }
}

/// How many automatic source ports an attempt tries before it gives up.
const AUTOMATIC_PORT_TRIES: u32 = 16;

const HTTP_GET: &[u8] = b"GET / HTTP/1.1\r\nHost: packetproof\r\nConnection: close\r\n\r\n";

/// Connects, sends `request` (if any), reads to the end and lets `interpret` judge the answer.
fn tcp(
    src: SocketAddr,
    dst: SocketAddr,
    timeout: Duration,
    request: &[u8],
    interpret: fn(&str) -> Attempt,
) -> Result<Attempt, Unsent> {
    let socket = Socket::new(Domain::for_address(dst), Type::STREAM, None)
        .map_err(|e| Unsent::Other(format!("creating a TCP socket: {e}")))?;
    if dst.is_ipv6() {
        report_icmp_errors(&socket).map_err(|e| Unsent::Other(format!("setting IPV6_RECVERR: {e}")))?;
    }
    socket.bind(&src.into()).map_err(|e| bind_error(e, src))?;
    if let Err(e) = socket.connect_timeout(&dst.into(), timeout) {
        abandon(&socket);
        return Ok(classify_error(e));
    }
    let mut stream: std::net::TcpStream = socket.into();
    let _ = stream.set_read_timeout(Some(timeout));
    if request.is_empty() {
        // Nothing to say: the pod's server answers, then echoes until the client is done.
        let _ = stream.shutdown(std::net::Shutdown::Write);
    } else {
        use std::io::Write;
        if let Err(e) = stream.write_all(request) {
            return Ok(classify_error(e));
        }
    }
    let mut text = String::new();
    Ok(match stream.read_to_string(&mut text) {
        Ok(_) => interpret(&text),
        Err(e) => match classify_error(e) {
            Attempt::Silent => {
                Attempt::Broken { reason: "connected, but no answer before the timeout".into() }
            }
            other => other,
        },
    })
}

/// Asks for ICMPv6 errors on a TCP socket (`IPV6_RECVERR`), so that a refusal ends the attempt
/// however it arrives. Measured on kernel 6.18: the whole round trip of a SYN (pod, veth,
/// node, REJECT, ICMPv6 back) runs inside `connect()`, while the socket is locked; IPv6 TCP
/// then keeps the port unreachable only as a soft error (`LockDroppedIcmps`) and retries the
/// SYN a second later, so a reject looked like silence to a one-second probe. With the option
/// the error is also queued, which wakes the poll in `connect_timeout`, and `SO_ERROR` hands
/// back the soft error (`ECONNREFUSED`). IPv4 TCP refuses at once without it (kept as it was).
fn report_icmp_errors(socket: &Socket) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let on: libc::c_int = 1;
    // SAFETY: a valid socket descriptor, and an int option of the length given.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_IPV6,
            libc::IPV6_RECVERR,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}

/// Sends request `id` and reads until its own answer comes. From a fixed source port every
/// attempt is the same flow, so a late answer to an earlier attempt can arrive here first: it
/// is skipped, not taken for this attempt's (the evidence gives it to its own attempt).
fn udp(src: SocketAddr, dst: SocketAddr, timeout: Duration, id: u64) -> Result<Attempt, Unsent> {
    let socket = UdpSocket::bind(src).map_err(|e| bind_error(e, src))?;
    // Connected, so the kernel delivers only replies from `dst` (proof of reverse NAT) and
    // reports an ICMP port unreachable as ECONNREFUSED.
    let io = |e: std::io::Error| Unsent::Other(format!("UDP probe to {dst}: {e}"));
    socket.connect(dst).map_err(io)?;
    if let Err(e) = socket.send(reply::request(id).as_bytes()) {
        return Ok(classify_error(e));
    }
    // The wait bounds this socket's patience, not the verdict: an answer that comes after it
    // is still on the client's capture, where the evidence finds it (verdict/late.rs).
    let give_up = Instant::now() + timeout;
    let mut buf = [0u8; 512];
    loop {
        let left = give_up.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(Attempt::Silent);
        }
        socket.set_read_timeout(Some(left)).map_err(io)?;
        let n = match socket.recv(&mut buf) {
            Ok(n) => n,
            Err(e) => return Ok(classify_error(e)),
        };
        let text = String::from_utf8_lossy(&buf[..n]);
        match reply::parse(&text) {
            Some(reply::Answer { re: Some(re), .. }) if re != id => continue,
            _ => return Ok(answer(&text)),
        }
    }
}

/// `HTTP/1.1 200 OK ... \r\n\r\nbody` → status and body.
fn http_answer(text: &str) -> Attempt {
    let status =
        text.strip_prefix("HTTP/1.").and_then(|rest| rest.get(2..5)).and_then(|code| code.parse().ok());
    match (status, text.split_once("\r\n\r\n")) {
        (Some(status), Some((_, body))) => Attempt::Http { status, body: body.to_string() },
        _ if text.is_empty() => Attempt::Broken { reason: "connection closed without an answer".into() },
        _ => {
            Attempt::Broken { reason: format!("not an HTTP answer: {:?}", text.lines().next().unwrap_or("")) }
        }
    }
}

fn unspecified(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
    }
}
