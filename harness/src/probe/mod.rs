//! Probe kinds: what sort of traffic a probe is decides how it is planned (its expectation,
//! and what it carries from one phase to the next), sent, observed and judged. Each kind is
//! one module implementing [`Kind`]; [`Kinds`] is the one place a probe is told its kind, and
//! the runner calls it rather than matching on the probe's fields.
//!
//! A new kind is a module here and a line in [`Kinds::new`]; the scenario reader says which
//! probes are of it.

mod handmade;
mod health_check;
mod held;
mod out_of_window;
mod request;
mod schedule;
mod udp_stream;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use anyhow::{Context, Result};

use crate::model::{Cluster, Probe, Profile, Source};
use crate::observe::{Capture, Frame};
use crate::oracle::{Expectation, Outcome, Prediction};
use crate::topology::Topology;
use crate::traffic::client::SourcePorts;
use crate::traffic::{Plan, Prober, Sent};
use crate::verdict::Failure;
pub use crate::verdict::Witnesses;
use crate::verdict::evidence::Evidence;
pub use schedule::{send_phase, shared_routes};

/// One kind of probe. A kind that carries something from phase to phase (a held connection,
/// a UDP stream's expectation) keeps it in itself: [`Kinds`] lives for one scenario run.
pub trait Kind {
    /// Whether `probe` is of this kind.
    fn claims(&self, probe: &Probe) -> bool;

    /// What `profile` expects of `probe` in the state `cluster`, or why nothing can be (a
    /// scenario error). Phases are predicted in order, all before any is sent.
    fn predict(&mut self, probe: &Probe, cluster: &Cluster, profile: Profile) -> Result<Prediction, String>;

    /// Every probe of a phase has been predicted.
    fn phase_predicted(&mut self) {}

    /// The phase about to be predicted starts with the proxy stopped and started again.
    fn proxy_restarts(&mut self) {}

    /// The listener on a node's 127.0.0.1 the probe's traffic is aimed at, if it needs one
    /// (a node's own servers listen on its pods' addresses only): the node and the port.
    fn localhost_listener(&self, _probe: &Probe) -> Option<(String, u16)> {
        None
    }

    /// Whether `probe`, expected to meet `expected`, goes out with others of its phase: a
    /// one-shot request whose attempts all wait out a silence, or a client's part of a probe
    /// from several clients. Such probes go out together, by [`send_together`] rather than
    /// [`Kind::send`], so their waits overlap. Each is judged on its own flows only (its source
    /// ports), so sharing a window changes none of its evidence. No kind with state does.
    fn goes_together(&self, _probe: &Probe, _expected: &Expectation) -> bool {
        false
    }

    /// Sends `probe`, expected to meet `expected`, from its source.
    fn send(&mut self, probe: &Probe, expected: &Expectation, wire: &mut Wire<'_>) -> Result<Shipment>;
}

/// Sends `probes`, each one that [`Kind::goes_together`], at once; their shipments in the
/// order given. Two probes that need different routes from one external host to one address
/// (see [`route`]) must not be among them.
pub fn send_together(probes: &[(&Probe, &Expectation)], wire: &mut Wire<'_>) -> Result<Vec<Shipment>> {
    request::send_together(probes, wire)
}

/// Every kind, each told apart by [`Kind::claims`] in this order (the first that claims a
/// probe has it): a held connection before the destination it holds, the catch-all last.
pub struct Kinds {
    all: Vec<Box<dyn Kind>>,
}

impl Default for Kinds {
    fn default() -> Self {
        Kinds::new()
    }
}

impl Kinds {
    pub fn new() -> Kinds {
        Kinds {
            all: vec![
                Box::new(held::Held::default()),
                Box::new(health_check::HealthCheck),
                Box::new(handmade::HandMade),
                Box::new(udp_stream::UdpStream::default()),
                Box::new(request::Request),
            ],
        }
    }

    /// The kind of `probe`.
    pub fn of(&mut self, probe: &Probe) -> &mut dyn Kind {
        // `request::Request`, the last, claims every probe.
        let at = self.all.iter().position(|k| k.claims(probe)).unwrap_or(self.all.len() - 1);
        self.all[at].as_mut()
    }

    /// Every probe of a phase has been predicted.
    pub fn phase_predicted(&mut self) {
        self.all.iter_mut().for_each(|k| k.phase_predicted());
    }

    /// The phase about to be predicted starts with the proxy stopped and started again.
    pub fn proxy_restarts(&mut self) {
        self.all.iter_mut().for_each(|k| k.proxy_restarts());
    }
}

/// A probe as its kind sent it: its destination, its attempts, faults found while sending
/// (a held connection answered by another backend than before), and the witnesses that judge
/// it on the wire and in conntrack.
pub struct Shipment {
    pub dst: SocketAddr,
    pub sent: Vec<Sent>,
    pub faults: Vec<Failure>,
    pub witnesses: Box<dyn Witnesses>,
}

/// The witnesses of a new flow: the client's, the backend's and the translating node's view
/// of it (`verdict::evidence`).
struct NewFlow;

impl Witnesses for NewFlow {
    fn check(
        &self,
        cluster: &Cluster,
        probe: &Probe,
        dst: SocketAddr,
        outcome: &Outcome,
        sent: &[Sent],
        during: &Evidence,
    ) -> Vec<Failure> {
        let view = cluster.probe_view(probe);
        crate::verdict::evidence::check(&view, probe, dst, outcome, sent, during)
    }

    fn never_left(
        &self,
        cluster: &Cluster,
        probe: &Probe,
        dst: SocketAddr,
        sent: &[Sent],
        during: &Evidence,
    ) -> Vec<usize> {
        crate::verdict::evidence::never_left(&cluster.probe_view(probe), probe, dst, sent, during)
    }
}

/// The route an external host's probe takes to its destination: the host, the destination's
/// address, and the node the probe steers that route through (none: it takes the route as it
/// finds it, the host's own or one an earlier probe steered).
pub fn route(cluster: &Cluster, probe: &Probe) -> Option<(String, IpAddr, Option<String>)> {
    let Source::External(host) = &probe.from else { return None };
    let view = cluster.probe_view(probe);
    let dst = view.target_address(&probe.to)?;
    Some((host.clone(), dst.ip(), view.entry_node(&probe.to).map(|n| n.name.clone())))
}

/// What a kind sends with during one phase: the phase's state, the namespaces, the capture
/// points, and a prober per source namespace.
pub struct Wire<'a> {
    cluster: &'a Cluster,
    topology: &'a Topology,
    runtime: &'a tokio::runtime::Runtime,
    ports: &'a SourcePorts,
    captures: &'a [(String, Capture)],
    /// How long an attempt waits before it counts as silent.
    timeout: Duration,
    probers: BTreeMap<Source, Prober>,
}

impl<'a> Wire<'a> {
    pub fn new(
        cluster: &'a Cluster,
        topology: &'a Topology,
        runtime: &'a tokio::runtime::Runtime,
        ports: &'a SourcePorts,
        captures: &'a [(String, Capture)],
        timeout: Duration,
    ) -> Wire<'a> {
        Wire { cluster, topology, runtime, ports, captures, timeout, probers: BTreeMap::new() }
    }

    /// The prober inside `source`'s namespace, started on first use.
    fn prober(&mut self, source: &Source) -> Result<&Prober> {
        Ok(match self.probers.entry(source.clone()) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                let ns = self.topology.source_netns(source)?;
                e.insert(Prober::new(ns, self.ports.clone(), self.timeout)?)
            }
        })
    }

    /// Carries out every plan at once, each from its source's prober (started already);
    /// their attempts in the order given.
    fn send_all(&self, plans: &[(Source, Plan)]) -> Result<Vec<Vec<Sent>>> {
        let mut by_source: BTreeMap<&Source, Vec<usize>> = BTreeMap::new();
        for (i, (source, _)) in plans.iter().enumerate() {
            by_source.entry(source).or_default().push(i);
        }
        let mut out = vec![Vec::new(); plans.len()];
        std::thread::scope(|scope| {
            let mut running = Vec::new();
            for (source, at) in &by_source {
                let prober = self.probers.get(*source).with_context(|| format!("no prober in {source}"))?;
                let mine: Vec<Plan> = at.iter().map(|&i| plans[i].1).collect();
                running.push((at, scope.spawn(move || prober.send_all(mine))));
            }
            for (at, handle) in running {
                let sent = handle.join().map_err(|_| anyhow::anyhow!("a prober's thread panicked"))??;
                for (&i, s) in at.iter().zip(sent) {
                    out[i] = s;
                }
            }
            Ok::<_, anyhow::Error>(())
        })?;
        Ok(out)
    }

    /// Where `probe` goes in its family; an external host's route to it is steered through
    /// the node its traffic enters by.
    fn destination(&self, probe: &Probe) -> Result<SocketAddr> {
        let view = self.cluster.probe_view(probe);
        let dst = view
            .target_address(&probe.to)
            .with_context(|| format!("probe {}: no destination address", probe.name))?;
        match (&probe.from, view.entry_node(&probe.to)) {
            (Source::External(host), Some(via)) => {
                self.runtime.block_on(self.topology.steer(host, dst.ip(), via.ip()))?
            }
            (Source::External(host), None) => self.runtime.block_on(self.topology.unsteer(host, dst.ip()))?,
            _ => {}
        }
        Ok(dst)
    }

    /// How many frames each capture point has taken so far.
    pub fn frame_counts(&self) -> Vec<(String, usize)> {
        self.captures.iter().map(|(key, capture)| (key.clone(), capture.count())).collect()
    }

    /// The frames capture points `points` took since `counts` were read.
    fn frames_since(&self, counts: &[(String, usize)], points: &[String]) -> Vec<Frame> {
        self.captures
            .iter()
            .zip(counts)
            .filter(|((key, _), _)| points.contains(key))
            .flat_map(|((_, capture), (_, from))| capture.frames().split_off(*from))
            .collect()
    }
}
