//! A probe: one line of the scenario's flow table, and what its author expects of it.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use super::{IpFamily, Profile, Protocol};

#[cfg(any(test, feature = "test-support"))]
impl Probe {
    /// The unit tests' probe: one TCP attempt named `p`, no pacing, no stated expectation.
    pub fn example(from: Source, to: Target) -> Probe {
        Probe {
            name: "p".into(),
            from,
            to,
            protocol: Protocol::Tcp,
            count: 1,
            interval: None,
            family: None,
            source_port: None,
            expect: None,
            life: Life::OneShot,
            clients: None,
        }
    }
}

/// One line of the scenario's flow table: traffic to send and (optionally) what the author
/// expects of it; the oracle's expectation is authoritative and must agree with the author's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// Given name, or `probe[N]` when the file gives none.
    pub name: String,
    pub from: Source,
    pub to: Target,
    pub protocol: Protocol,
    /// Number of separate attempts (each a new connection from a new source port).
    pub count: u32,
    /// Pause between attempts (`interval: 1500ms`), e.g. to outlast a session-affinity timeout.
    pub interval: Option<Duration>,
    /// The address family to probe over; `None` is the cluster's primary family (or the
    /// family of an address the target names).
    pub family: Option<IpFamily>,
    /// Every attempt from this one source port; `None` is a new port per attempt.
    pub source_port: Option<u16>,
    pub expect: Option<StatedExpectation>,
    /// Whether the probe's connection ends with its answer, or lives on into later phases.
    pub life: Life,
    /// The probe sent from several clients at once (`from: {pods: [...]}`) this one is the
    /// part of from one client; `None` for a probe of one client.
    pub clients: Option<Clients>,
}

/// A probe sent from several pods at once: one [`Probe`] per pod, all sent together, each
/// judged on its own flows, and judged together on whether ClientIP affinity expired: affinity
/// is per client address, so clients in parallel wait out one timeout where one client would
/// wait out one per attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Clients {
    /// The probe's name in the file; each part is named `NAME[POD]`.
    pub probe: String,
    /// How many clients (parts) the probe has.
    pub count: u32,
}

/// How long a probe's connection lives (`hold:` and `held:` in a scenario).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Life {
    /// Each attempt connects, reads the answer and closes.
    OneShot,
    /// One TCP connection, opened and judged like a one-shot attempt, then kept open for the
    /// later phases that check it.
    Hold,
    /// A check of the connection probe `opener` (an earlier phase's `Hold`) keeps: a line
    /// sent on it must still be answered by the same backend. With `out_of_window`, a
    /// hand-made segment far outside the TCP window, from the backend toward the client, is
    /// sent on the connection's path first (kubernetes/kubernetes#74839).
    Held { opener: String, out_of_window: bool },
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    Pod(String),
    /// A process in the node's own (host) network namespace.
    Node(String),
    External(String),
}

impl Source {
    /// The pod's, node's or external host's name.
    pub fn name(&self) -> &str {
        match self {
            Source::Pod(n) | Source::Node(n) | Source::External(n) => n,
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Pod(n) => write!(f, "pod {n}"),
            Source::Node(n) => write!(f, "node {n}"),
            Source::External(n) => write!(f, "external {n}"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A Service port through its cluster IP.
    ClusterIp { service: String, port: String },
    /// A Service port through its node port on the named node: on the node's primary IP, or
    /// on `address` (a secondary node IP, or 127.0.0.1 from the node itself).
    NodePort { service: String, port: String, node: String, address: Option<IpAddr> },
    /// A Service port through one of its `spec.externalIPs`. An external host's traffic enters
    /// the cluster at node `via` (as a router would send it); pods and nodes need no `via`.
    ExternalIp { service: String, port: String, ip: IpAddr, via: Option<String> },
    /// A Service port through one of its load-balancer ingress IPs, entering at node `via` for
    /// external hosts (as the cloud load balancer would send it).
    LoadBalancer { service: String, port: String, ip: IpAddr, via: Option<String> },
    /// The Service's `healthCheckNodePort` on a node: HTTP `GET /`.
    HealthCheck { service: String, node: String },
    /// A raw address, interpreted by the oracle (cluster IP, node port, pod or nothing).
    Address(SocketAddr),
    /// 127.0.0.1:`port` of `node`, sent by an external host on the node network as a
    /// hand-made frame to the node's MAC address (its own kernel never sends 127.0.0.1 out of
    /// an interface): the martian traffic that `route_localnet` would let in.
    Localhost { node: String, port: u16 },
}

/// What a scenario author wrote under `expect:`; checked against the oracle before running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatedExpectation {
    pub verdict: StatedVerdict,
    /// Pod names that may answer; `None` means the author did not say.
    pub backends: Option<Vec<String>>,
    /// Whether the backend must see the client's own address; `None` means not said.
    pub source: Option<StatedSource>,
    /// For health-check targets: the HTTP status (200 with local endpoints, 503 without).
    pub http_status: Option<u16>,
    /// The profile whose choice this is, where Kubernetes leaves the outcome open; `None`
    /// states what Kubernetes requires of every proxy.
    pub profile: Option<Profile>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatedVerdict {
    Answered,
    /// Rejected by a rule, or refused by the addressed host's own stack.
    Rejected,
    Dropped,
    /// Forwarded un-translated, unanswered.
    Forwarded,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatedSource {
    /// The backend sees the client's own address.
    Client,
    /// The backend sees an address of a node (SNAT/masquerade).
    Masqueraded,
}
