//! A packet capture on one interface inside one namespace: a raw socket opened in the
//! namespace, and a background thread that keeps its queue drained until [`Capture::stop`].

use std::io::{self, PipeReader, PipeWriter, pipe};
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex, MutexGuard, mpsc};
use std::thread;
use std::time::SystemTime;

use anyhow::{Context, Result, anyhow};

use super::packet::Packet;
use super::packet_socket::PacketSocket;
use crate::topology::netns::Netns;

/// Largest frame kept whole: veth hands over GSO super-frames of up to 64 KiB.
const SNAPLEN: usize = 256 << 10;

/// One frame as it crossed the interface, in either direction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// When the kernel received it (SO_TIMESTAMPNS).
    pub timestamp: SystemTime,
    /// The Ethernet frame, cut at [`SNAPLEN`].
    pub data: Vec<u8>,
    /// What the verdict looks at; `None` for ARP, neighbour discovery, non-IP.
    pub packet: Option<Packet>,
    /// Sent out of the interface by its own namespace, rather than received on it.
    pub outgoing: bool,
}

impl Frame {
    /// The address this frame asks the link address of, if it is an ARP request or an IPv6
    /// neighbour solicitation: the sender is about to send to it (or forward toward it).
    pub fn neighbour_request(&self) -> Option<super::packet::NeighbourRequest> {
        super::packet::NeighbourRequest::from_ethernet(&self.data)
    }
}

pub struct Capture {
    /// `None` once stopping: the reader thread must hold the last reference, see `start`.
    shared: Option<Arc<Shared>>,
    /// Dropping it hangs up the pipe, which wakes the reader to finish.
    stop: Option<PipeWriter>,
    /// The reader's last word: every frame, or why the capture is not to be trusted. (In a
    /// mutex only so that a `&Capture` can be shared between threads.)
    outcome: Mutex<mpsc::Receiver<io::Result<Vec<Frame>>>>,
    /// `<namespace>/<interface>`, for errors.
    place: String,
}

struct Shared {
    socket: PacketSocket,
    state: Mutex<State>,
}

struct State {
    frames: Vec<Frame>,
    buf: Vec<u8>,
}

impl Capture {
    /// AF_PACKET socket created inside `ns` and bound to `interface`; a background thread
    /// reads frames (with timestamps) until stop.
    pub fn start(ns: &Netns, interface: &str) -> Result<Capture> {
        let place = format!("{}/{interface}", ns.name());
        let socket = ns
            .run(|| PacketSocket::open(interface))?
            .with_context(|| format!("opening a packet capture on {place}"))?;
        let shared = Arc::new(Shared {
            socket,
            // calloc'd: the pages cost nothing until a large frame touches them.
            state: Mutex::new(State { frames: Vec::new(), buf: vec![0; SNAPLEN] }),
        });
        let (stop_rx, stop_tx) = pipe().context("creating the capture's stop pipe")?;
        let (outcome_tx, outcome) = mpsc::channel();
        let reader = Arc::clone(&shared);
        thread::Builder::new()
            .name(format!("capture:{place}"))
            .spawn(move || {
                let _ = outcome_tx.send(reader.read_until_stopped(stop_rx));
                // Closing an AF_PACKET socket waits for an RCU grace period (10-15 ms here).
                // The caller let go of its reference before asking to stop, so this is the
                // last one and that wait is paid here, not by the caller.
                drop(reader);
            })
            .with_context(|| format!("starting the capture thread for {place}"))?;
        Ok(Capture { shared: Some(shared), stop: Some(stop_tx), outcome: Mutex::new(outcome), place })
    }

    /// Stops reading and returns every frame seen so far, in order. Fails if the kernel
    /// dropped frames: an incomplete capture cannot prove that something did not happen.
    pub fn stop(mut self) -> Result<Vec<Frame>> {
        self.hang_up();
        let outcome = self.outcome.get_mut().unwrap_or_else(|e| e.into_inner()).recv();
        outcome
            .map_err(|_| anyhow!("the capture thread panicked"))?
            .with_context(|| format!("reading the packet capture on {}", self.place))
    }

    /// Frames so far without stopping, including any the kernel queued before this call.
    pub fn frames(&self) -> Vec<Frame> {
        let shared = self.shared.as_ref().expect("only stop() and drop() take it");
        // A failed read here resurfaces at `stop`.
        let _ = shared.drain();
        shared.lock().frames.clone()
    }

    /// How many frames it has taken so far, including any the kernel queued before this call.
    pub fn count(&self) -> usize {
        let shared = self.shared.as_ref().expect("only stop() and drop() take it");
        // A failed read here resurfaces at `stop`.
        let _ = shared.drain();
        shared.lock().frames.len()
    }

    /// Lets go of the socket, then tells the reader to finish.
    fn hang_up(&mut self) {
        drop(self.shared.take());
        drop(self.stop.take());
    }
}

impl Drop for Capture {
    /// A capture dropped without `stop` still ends its thread and closes its socket, so the
    /// namespace can go away.
    fn drop(&mut self) {
        self.hang_up();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Drains the socket whenever frames are queued until `stop` hangs up; then takes what
    /// is still queued (it was sent before the caller asked to stop) and checks for drops.
    fn read_until_stopped(&self, stop: PipeReader) -> io::Result<Vec<Frame>> {
        while !self.socket.wait(stop.as_fd())? {
            self.drain()?;
        }
        self.drain()?;
        let drops = self.socket.drops()?;
        if drops > 0 {
            return Err(io::Error::other(format!(
                "overloaded: the kernel dropped {drops} frames this capture could not read in time (receive \
                 queue full), and an incomplete capture proves nothing"
            )));
        }
        Ok(std::mem::take(&mut self.lock().frames))
    }

    /// Moves every queued frame into the list. Holding the lock while reading keeps the
    /// frames in the kernel's order when `frames()` and the reader thread race.
    fn drain(&self) -> io::Result<()> {
        let mut state = self.lock();
        let State { frames, buf } = &mut *state;
        while let Some(r) = self.socket.recv(buf)? {
            let data = buf[..r.len].to_vec();
            let packet = Packet::from_ethernet(&data);
            frames.push(Frame { timestamp: r.timestamp, data, packet, outgoing: r.outgoing });
        }
        Ok(())
    }
}

/// Frames between `a` and `b` either way, and ICMP errors about packets between them.
pub fn flow_frames(frames: &[Frame], a: SocketAddr, b: SocketAddr) -> impl Iterator<Item = &Frame> {
    frames.iter().filter(move |f| f.packet.as_ref().is_some_and(|p| p.is_between(a, b)))
}
