//! Every conntrack entry a namespace confirms or destroys, as ctnetlink announces it (what
//! `conntrack -E -e NEW,DESTROY` prints). A table dumped once per phase misses entries that
//! expired before the dump (an SCTP or TCP entry lingers 10 s after its close, and a phase
//! runs 58–86 s under TCG): the announcements keep every entry the probes made, however long
//! the phase took.
//!
//! The kernel queues the announcement of an entry on the socket when it confirms the entry,
//! before the packet that created it goes on, so once a probe got its answer the entries its
//! attempts made are already queued: reading the queue then (no waiting) gets them.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result, bail};
use netlink_packet_core::{NetlinkMessage, NetlinkPayload};
use netlink_packet_netfilter::conntrack::ConntrackMessage;
use netlink_packet_netfilter::{NetfilterMessage, NetfilterMessageInner};
use netlink_sys::{Socket, protocols::NETLINK_NETFILTER};

use super::conntrack::{Flow, Tuple, from_netlink};
use crate::topology::netns::Netns;

/// `NFNLGRP_CONNTRACK_NEW` and `NFNLGRP_CONNTRACK_DESTROY` (linux/netfilter/nfnetlink.h).
const GROUP_NEW: u32 = 1;
const GROUP_DESTROY: u32 = 3;

/// Room for the announcements of a whole phase even if nobody reads them meanwhile (an
/// attempt makes two, each under 2 KiB with its buffer's overhead): 16 MiB is some 4000
/// attempts. Overflowing is an error, never silence.
const BUFFER_BYTES: libc::c_int = 16 << 20;

/// What an announcement said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Confirmed: its first packet went through.
    New,
    /// Gone: expired, deleted or flushed.
    Destroyed,
}

/// The announcements of one namespace, read as they come by a thread of its own (so that a
/// long phase on a busy node never overflows the socket), and by [`Recorder::take`], which
/// first reads whatever the kernel has queued so far.
pub struct Recorder {
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

struct Shared {
    socket: Socket,
    netns: String,
    /// Read but not yet taken, in the order announced; or why reading stopped. Reads happen
    /// only under this lock, so the order is the kernel's.
    state: Mutex<Result<Vec<(Change, Flow)>, String>>,
}

impl Recorder {
    /// Starts listening in `ns` (the socket is created there and stays there).
    pub fn start(ns: &Netns) -> Result<Recorder> {
        let socket = ns
            .run(|| -> std::io::Result<Socket> {
                let mut socket = Socket::new(NETLINK_NETFILTER)?;
                socket.bind_auto()?;
                force_receive_buffer(&socket)?;
                socket.add_membership(GROUP_NEW)?;
                socket.add_membership(GROUP_DESTROY)?;
                socket.set_non_blocking(true)?;
                Ok(socket)
            })?
            .with_context(|| format!("listening to conntrack events in namespace {}", ns.name()))?;
        let shared =
            Arc::new(Shared { socket, netns: ns.name().to_string(), state: Mutex::new(Ok(Vec::new())) });
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (shared, stop) = (shared.clone(), stop.clone());
            std::thread::Builder::new()
                .name(format!("ct-events-{}", ns.name()))
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        // Wakes when something is queued, or now and then to see `stop`.
                        wait_readable(&shared.socket, 100);
                        if shared.read_queued().is_err() {
                            return;
                        }
                    }
                })
                .context("starting the conntrack events thread")?
        };
        Ok(Recorder { shared, stop, thread: Some(thread) })
    }

    /// Every announcement since the last call, in order; an error if some were lost.
    pub fn take(&mut self) -> Result<Vec<(Change, Flow)>> {
        self.shared.read_queued().map_err(anyhow::Error::msg)?;
        let mut state = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        match &mut *state {
            Ok(pending) => Ok(std::mem::take(pending)),
            Err(e) => bail!("{e}"),
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Shared {
    /// Reads every announcement the kernel has queued, under the lock.
    fn read_queued(&self) -> Result<(), String> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let pending = match &mut *state {
            Ok(pending) => pending,
            Err(e) => return Err(e.clone()),
        };
        loop {
            let failure = match self.socket.recv_from_full() {
                Ok((data, _)) => match decode(&data) {
                    Ok(announced) => {
                        pending.extend(announced);
                        continue;
                    }
                    Err(e) => format!("conntrack events of namespace {}: {e:#}", self.netns),
                },
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => format!(
                    "conntrack events of namespace {} overflowed their {} MiB buffer: entries were lost, \
                     so the conntrack evidence would be incomplete",
                    self.netns,
                    BUFFER_BYTES >> 20
                ),
                Err(e) => format!("reading conntrack events of namespace {}: {e}", self.netns),
            };
            *state = Err(failure.clone());
            return Err(failure);
        }
    }
}

pub(super) fn wait_readable(socket: &Socket, timeout_ms: i32) {
    use std::os::fd::AsRawFd;
    let mut fd = libc::pollfd { fd: socket.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut fd, 1, timeout_ms) };
}

fn force_receive_buffer(socket: &Socket) -> std::io::Result<()> {
    force_receive_buffer_of(socket, BUFFER_BYTES)
}

/// `SO_RCVBUFFORCE`: beyond `rmem_max`, as conntrack-tools does for `-E` (needs CAP_NET_ADMIN,
/// which every caller of this module has).
pub(super) fn force_receive_buffer_of(socket: &Socket, bytes: libc::c_int) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: a valid socket descriptor, and an int option of the length given.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&bytes as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}

/// The announcements in one datagram.
fn decode(mut data: &[u8]) -> Result<Vec<(Change, Flow)>> {
    let mut out = Vec::new();
    while !data.is_empty() {
        let message =
            NetlinkMessage::<NetfilterMessage>::deserialize(data).context("decoding a conntrack event")?;
        let len = (message.header.length as usize).min(data.len());
        if len == 0 {
            bail!("zero-length netlink message from conntrack");
        }
        data = &data[len..];
        if let NetlinkPayload::InnerMessage(NetfilterMessage {
            inner: NetfilterMessageInner::Conntrack(ct),
            ..
        }) = message.payload
        {
            let (change, attrs) = match &ct {
                ConntrackMessage::New(attrs) => (Change::New, attrs),
                ConntrackMessage::Delete(attrs) => (Change::Destroyed, attrs),
                _ => continue,
            };
            // Only the protocols probes speak: a busy existing node announces much else.
            if let Some(flow) = from_netlink(attrs).filter(|f| f.protocol().is_some()) {
                out.push((change, flow));
            }
        }
    }
    Ok(out)
}

/// A recorder on every node, the log of what each announced (kept as evidence), and every
/// entry announced and not yet destroyed: what a node's table holds of the run's traffic, to be
/// read entry by entry ([`NodeRecorders::tables`]) instead of dumped.
pub struct NodeRecorders {
    recorders: BTreeMap<String, Recorder>,
    netns: BTreeMap<String, Netns>,
    log: BTreeMap<String, String>,
    /// By node: (protocol, original tuple) of each entry confirmed and not destroyed since the
    /// recorders started, with its place in the order announced (a destroy is one removal, not
    /// a walk of every entry).
    live: BTreeMap<String, HashMap<(u8, Tuple), u64>>,
    /// The place the next entry announced takes.
    announced: u64,
}

impl NodeRecorders {
    /// Starts a recorder in each `(node name, namespace)`, before the run's first probe: the
    /// table then holds no entry of the run's traffic that is not announced.
    pub fn start<'n>(nodes: impl IntoIterator<Item = (&'n str, &'n Netns)>) -> Result<NodeRecorders> {
        let mut recorders = BTreeMap::new();
        let mut netns = BTreeMap::new();
        for (name, ns) in nodes {
            recorders.insert(name.to_string(), Recorder::start(ns).with_context(|| format!("node {name}"))?);
            netns.insert(name.to_string(), ns.clone());
        }
        Ok(NodeRecorders { recorders, netns, log: BTreeMap::new(), live: BTreeMap::new(), announced: 0 })
    }

    /// A phase's tables of `nodes`, completed with the entries its probes made that were gone
    /// by then ([`with_gone`]). Not dumped: each entry announced since the recorders started
    /// and not destroyed is looked up by its tuple (its state now; one hash lookup, where a
    /// dump walks the host's whole conntrack table, some 10 ms, whatever the namespace holds).
    /// They hold every entry the run's traffic made, as a dump does; not what came before the
    /// recorders (none of a probe's). Every node's announcements are taken, so the next phase
    /// starts afresh.
    pub fn tables<'a>(
        &mut self,
        nodes: impl IntoIterator<Item = &'a str>,
    ) -> Result<BTreeMap<String, Vec<Flow>>> {
        let announced = self.take_all()?;
        let mut out = BTreeMap::new();
        for node in nodes {
            let ns = self.netns.get(node).with_context(|| format!("no conntrack recorder on node {node}"))?;
            let mut live: Vec<(&(u8, Tuple), &u64)> = self.live.get(node).into_iter().flatten().collect();
            live.sort_unstable_by_key(|&(_, place)| *place);
            let keys: Vec<(u8, Tuple)> = live.into_iter().map(|(key, _)| *key).collect();
            let table = super::conntrack::lookup_each(ns, &keys)
                .with_context(|| format!("reading the conntrack entries of node {node}"))?;
            let events = announced.get(node).map(Vec::as_slice).unwrap_or_default();
            out.insert(node.to_string(), with_gone(table, events));
        }
        Ok(out)
    }

    /// Every node's announcements since the last call, logged and applied to `live`.
    fn take_all(&mut self) -> Result<BTreeMap<String, Vec<(Change, Flow)>>> {
        let mut announced = BTreeMap::new();
        for (node, recorder) in &mut self.recorders {
            let events = recorder.take().with_context(|| format!("node {node}"))?;
            self.log.entry(node.clone()).or_default().push_str(&log_lines(&events));
            let live = self.live.entry(node.clone()).or_default();
            for (change, flow) in &events {
                let key = (flow.ip_protocol, flow.original);
                match change {
                    Change::New => {
                        live.insert(key, self.announced);
                        self.announced += 1;
                    }
                    Change::Destroyed => {
                        live.remove(&key);
                    }
                }
            }
            announced.insert(node.clone(), events);
        }
        Ok(announced)
    }

    /// What `node` announced in the phases completed so far, one line each.
    pub fn log(&self, node: &str) -> &str {
        self.log.get(node).map_or("", String::as_str)
    }
}

/// The table as the probes of a phase left it: `table` (dumped at the phase's end) and every
/// entry confirmed during the phase that is no longer in it, as last announced (a destroyed
/// entry as it was when destroyed). An entry confirmed in an earlier phase (a held
/// connection's) and destroyed in this one stays gone: its absence is the evidence.
pub fn with_gone(table: Vec<Flow>, announced: &[(Change, Flow)]) -> Vec<Flow> {
    let key = |f: &Flow| (f.ip_protocol, f.original);
    let present: HashSet<_> = table.iter().map(key).collect();
    // In the order they were confirmed.
    let mut gone: Vec<Flow> = Vec::new();
    let mut at: HashMap<_, usize> = HashMap::new();
    for (change, flow) in announced {
        let k = key(flow);
        if present.contains(&k) {
            continue;
        }
        match (change, at.get(&k)) {
            (Change::New, _) => {
                at.insert(k, gone.len());
                gone.push(flow.clone());
            }
            (Change::Destroyed, Some(&i)) => gone[i] = flow.clone(),
            (Change::Destroyed, None) => {}
        }
    }
    let mut out = table;
    out.extend(gone);
    out
}

/// `new tcp SYN_SENT src=… [UNREPLIED] src=…`, one line per announcement, for the evidence.
pub fn log_lines(announced: &[(Change, Flow)]) -> String {
    announced
        .iter()
        .map(|(change, flow)| {
            let word = match change {
                Change::New => "new",
                Change::Destroyed => "destroy",
            };
            format!("[{word}] {flow}\n")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::Tuple;

    fn flow(sport: u16, seen_reply: bool) -> Flow {
        Flow {
            ip_protocol: 132,
            original: Tuple {
                src: format!("10.244.2.39:{sport}").parse().unwrap(),
                dst: "10.96.38.68:3868".parse().unwrap(),
            },
            reply: Tuple {
                src: "10.244.1.38:3868".parse().unwrap(),
                dst: format!("10.244.2.39:{sport}").parse().unwrap(),
            },
            state: None,
            seen_reply,
        }
    }

    #[test]
    fn entries_gone_before_the_dump_are_kept_as_last_announced() {
        let table = vec![flow(20001, true)];
        let announced = [
            (Change::New, flow(20000, false)),
            (Change::New, flow(20001, false)),
            (Change::Destroyed, flow(20000, true)),
        ];
        let all = with_gone(table, &announced);
        // The dumped entry as dumped; the expired one as its destruction announced it.
        assert_eq!(all, [flow(20001, true), flow(20000, true)]);
    }

    #[test]
    fn an_entry_of_an_earlier_phase_destroyed_in_this_one_stays_gone() {
        // A held connection's entry, confirmed before this phase, deleted during it.
        assert!(with_gone(Vec::new(), &[(Change::Destroyed, flow(20000, true))]).is_empty());
    }

    #[test]
    fn the_log_names_each_change() {
        let lines = log_lines(&[(Change::New, flow(20000, false)), (Change::Destroyed, flow(20000, true))]);
        assert!(
            lines
                .starts_with("[new] sctp src=10.244.2.39 dst=10.96.38.68 sport=20000 dport=3868 [UNREPLIED]")
        );
        assert!(lines.lines().nth(1).unwrap().starts_with("[destroy] sctp src=10.244.2.39"));
    }
}
