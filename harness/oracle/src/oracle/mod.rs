//! Kubernetes Service semantics: from the Services, their endpoints and a probe alone, what
//! must happen to the probe's traffic. Never reads rules; never knows which proxy runs.
//!
//! The semantics are kube-proxy's (the reference every conformant proxy is held to here), with
//! its local-traffic detector as the scenario configures it (`local.rs`; none without a
//! cluster CIDR, when nothing to a cluster IP is masqueraded and what comes back follows from
//! the routes):
//! - a Service port with no usable endpoints rejects;
//! - usable endpoints are the ready ones, or, when none is ready, the serving terminating ones
//!   (chosen separately for the cluster-wide and the node-local set);
//! - a ClusterIP keeps the client's address, except from outside the pod CIDR (a node's own
//!   processes), for hairpin traffic (a pod reaching itself) and with masquerade-all;
//! - external destinations (node ports, external IPs, load-balancer IPs) masquerade with
//!   externalTrafficPolicy Cluster; with Local, traffic from outside keeps its address and
//!   reaches only the receiving node's endpoints (none: dropped), while pods and the
//!   receiving node itself are sent to any endpoint;
//! - internalTrafficPolicy Local sends cluster-IP traffic only to endpoints on the client's
//!   node (none: dropped);
//! - topology hints narrow the Cluster-policy set (never the Local one) to the endpoints
//!   hinted for the zone of the node that translates, when kube-proxy v1.30's rules let them
//!   (`kubernetes::topology`: the hints annotation or the ServiceTrafficDistribution gate, a
//!   zoned node, every ready endpoint hinted, one for this zone);
//! - loadBalancerSourceRanges admit only those sources to the load-balancer IPs (node ports
//!   bypass them);
//! - sessionAffinity ClientIP sends a client to one backend until the timeout passes;
//! - the health-check node port answers 200 with the node's ready local endpoint count, or 503,
//!   on the node addresses nodePortAddresses selects (all of them when it selects none of the
//!   family); elsewhere the node's own stack refuses.

mod endpoints;
#[cfg(test)]
mod explored_tests;
#[cfg(test)]
mod flow_tests;
mod frontend;
#[cfg(test)]
mod ipvs_tests;
pub mod live;
mod local;
mod paths;
mod profile;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

use crate::model::{Cluster, Probe, Profile, StatedExpectation, StatedSource, StatedVerdict};
use frontend::NotAFrontend;
pub use profile::Basis;

/// What Kubernetes requires of every attempt of a probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expectation {
    pub outcome: Outcome,
    /// One line on why, e.g. `ClusterIP kube-system/kube-dns:dns, 2 usable endpoints`.
    pub because: String,
    /// Required of every proxy, or one implementation's choice.
    pub basis: Basis,
}

impl Expectation {
    /// An outcome Kubernetes requires.
    pub fn required(outcome: Outcome, because: impl Into<String>) -> Expectation {
        Expectation { outcome, because: because.into(), basis: Basis::Contract }
    }
}

/// What the oracle says of a probe under a profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prediction {
    Expected(Expectation),
    /// Kubernetes leaves the outcome open and the profile (`kubernetes`) chooses none: the
    /// probe is not judged, for this reason.
    Open(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Answered by one of `backends`, each seeing the source given for it, spread as `spread`
    /// says. `translated_by` is the node whose conntrack table holds the NAT (none for traffic
    /// sent straight to a pod).
    Answered { backends: BTreeMap<String, SeenSource>, spread: Spread, translated_by: Option<String> },
    /// An HTTP answer from the node itself (a health-check node port).
    Http { status: u16, local_endpoints: usize },
    /// Rejected by a rule on a node (kube-proxy's REJECT): an ICMP error comes back from the
    /// node, and the flow goes no further.
    Rejected,
    /// Refused by `host`'s own stack (a node or a pod): the packet reached it as addressed and
    /// nothing listens there (a TCP RST, or for UDP an ICMP port unreachable).
    Closed { host: String },
    /// Dropped on a node: the flow's packets entered it, nothing of the flow left it (no
    /// forwarded frame, no ARP or neighbour solicitation for its destination), nothing came back.
    Dropped,
    /// No rule claims it: the node forwards it un-translated, as addressed, toward its routes,
    /// and nothing answers (or, once the node's neighbour resolution fails, an ICMP host
    /// unreachable comes back).
    Forwarded,
    /// Translated on `translated_by` and sent on toward one of `backends`, and nothing comes
    /// back to the client: the backend's reply bypasses that node, or the backend's node drops
    /// the packet for a source address of its own (kube-proxy's IPVS mode sending
    /// un-masqueraded traffic to another node's endpoint).
    Unanswered { backends: Vec<String>, translated_by: String },
}

/// The chance that a correct proxy fails one probe's statistical check: the oracle sizes the
/// attempts that must see an affinity expire by it, the verdict sets its binomial bounds by it.
pub const FALSE_FAILURE_RATE: f64 = 1e-6;

/// How the attempts of one probe spread over the backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spread {
    /// Each attempt picks a backend independently and uniformly.
    Uniform,
    /// Session affinity: every attempt goes to the backend the first one reached.
    Sticky,
    /// Session affinity whose timeout passes between attempts: each attempt picks afresh, so
    /// they cannot all land on one backend (beyond chance).
    AffinityExpires { timeout: Duration },
}

/// The source address a backend must see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SeenSource {
    /// The client's own address (one of them, for a node with several).
    Client { addrs: Vec<IpAddr> },
    /// An address of the node that masqueraded the traffic.
    Masqueraded { node: String, addrs: Vec<IpAddr> },
}

impl SeenSource {
    pub fn allows(&self, ip: IpAddr) -> bool {
        match self {
            SeenSource::Client { addrs } | SeenSource::Masqueraded { addrs, .. } => addrs.contains(&ip),
        }
    }
}

impl fmt::Display for SeenSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |addrs: &[IpAddr]| addrs.iter().map(|a| a.to_string()).collect::<Vec<_>>().join("|");
        match self {
            SeenSource::Client { addrs } => write!(f, "client {}", list(addrs)),
            SeenSource::Masqueraded { node, addrs } => write!(f, "masq {node} {}", list(addrs)),
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Rejected => f.write_str("REJECT"),
            Outcome::Closed { host } => write!(f, "CLOSED {host}"),
            Outcome::Dropped => f.write_str("DROP"),
            Outcome::Forwarded => f.write_str("FORWARD un-translated"),
            Outcome::Unanswered { backends, .. } => {
                write!(f, "FORWARD to {}, unanswered", backends.join("|"))
            }
            Outcome::Http { status, local_endpoints } => {
                write!(f, "HTTP {status} localEndpoints={local_endpoints}")
            }
            Outcome::Answered { backends, .. } => {
                let names: Vec<&str> = backends.keys().map(String::as_str).collect();
                write!(f, "{}", names.join("|"))
            }
        }
    }
}

/// The expectation for a probe under kube-proxy's iptables mode (the profile that chooses an
/// outcome everywhere and that scenario files are checked against), or why none can be
/// computed (a scenario error).
pub fn expect(cluster: &Cluster, probe: &Probe) -> Result<Expectation, String> {
    match predict(cluster, probe, Profile::KUBE_PROXY_IPTABLES)? {
        Prediction::Expected(expectation) => Ok(expectation),
        Prediction::Open(reason) => Err(reason),
    }
}

/// What `profile` expects of a probe, or why nothing can be (a scenario error).
pub fn predict(cluster: &Cluster, probe: &Probe, profile: Profile) -> Result<Prediction, String> {
    // A dual-stack cluster is two single-stack ones, as kube-proxy runs a proxier per family.
    let view;
    let cluster = if cluster.second_family.is_some() {
        view = cluster.probe_view(probe);
        if let Some(problem) = family_problem(cluster, &view, probe) {
            return Err(problem);
        }
        &view
    } else {
        cluster
    };
    let dst = cluster
        .target_address(&probe.to)
        .ok_or_else(|| "the destination does not resolve to an address".to_string())?;
    match frontend::classify(cluster, probe, dst, profile) {
        Ok(front) => paths::predict(cluster, probe, front, profile),
        Err(NotAFrontend::Invalid(reason)) => Err(reason),
        Err(NotAFrontend::Open(frontend::Open(reason))) => {
            Ok(Prediction::Open(format!("Kubernetes leaves it open: {reason}")))
        }
    }
}

/// Why a probe of a dual-stack cluster cannot travel over its family, if it cannot: its source
/// or the target's Service (or node) has no address of that family.
fn family_problem(cluster: &Cluster, view: &Cluster, probe: &Probe) -> Option<String> {
    let family = view.ip_family();
    if cluster.source_ip(&probe.from).is_some() && view.source_ip(&probe.from).is_none() {
        return Some(format!("{} has no {family} address to probe over {family} from", probe.from));
    }
    let service = match &probe.to {
        crate::model::Target::ClusterIp { service, .. }
        | crate::model::Target::NodePort { service, .. }
        | crate::model::Target::ExternalIp { service, .. }
        | crate::model::Target::LoadBalancer { service, .. }
        | crate::model::Target::HealthCheck { service, .. } => Some(service),
        crate::model::Target::Address(_) | crate::model::Target::Localhost { .. } => None,
    };
    if let Some(service) = service
        && cluster.service(service).is_some()
        && view.service(service).is_none()
    {
        return Some(format!("Service {service} has no {family} cluster IP (it is single-stack)"));
    }
    None
}

/// Compares what a scenario author wrote under `expect:` with the oracle's expectation.
pub fn check_stated(expectation: &Expectation, stated: &StatedExpectation) -> Result<(), String> {
    let says = match expectation.basis {
        Basis::Contract => "Kubernetes semantics say".to_string(),
        Basis::Choice(by) => format!("{by} chooses"),
    };
    let mismatch =
        |what: String| Err(format!("{what}, but {says} {} ({})", expectation.outcome, expectation.because));
    let backends = match (&expectation.outcome, stated.verdict) {
        (Outcome::Answered { backends, .. }, StatedVerdict::Answered) => backends,
        (Outcome::Http { status, .. }, StatedVerdict::Answered) => {
            return match stated.http_status {
                Some(s) if s != *status => mismatch(format!("the scenario expects HTTP {s}")),
                _ => Ok(()),
            };
        }
        (Outcome::Rejected | Outcome::Closed { .. }, StatedVerdict::Rejected)
        | (Outcome::Dropped, StatedVerdict::Dropped)
        | (Outcome::Forwarded, StatedVerdict::Forwarded) => {
            return Ok(());
        }
        (_, verdict) => return mismatch(format!("the scenario expects {verdict:?}").to_lowercase()),
    };
    if let Some(stated_backends) = &stated.backends {
        let mut stated_sorted = stated_backends.clone();
        stated_sorted.sort();
        let expected: Vec<String> = backends.keys().cloned().collect();
        if stated_sorted != expected {
            return mismatch(format!("the scenario expects backends {}", stated_sorted.join("|")));
        }
    }
    if let Some(stated_source) = stated.source {
        for (pod, seen) in backends {
            let agrees = matches!(
                (stated_source, seen),
                (StatedSource::Client, SeenSource::Client { .. })
                    | (StatedSource::Masqueraded, SeenSource::Masqueraded { .. })
            );
            if !agrees {
                return mismatch(format!(
                    "the scenario expects source {stated_source:?} at {pod}, not {seen}"
                ));
            }
        }
    }
    Ok(())
}

/// Problems with a scenario that only the oracle sees: probes it cannot predict, and stated
/// expectations that disagree with Kubernetes semantics or with the profile they name.
/// `(probe index, field, message)`.
pub fn scenario_problems(cluster: &Cluster, probes: &[Probe]) -> Vec<(usize, &'static str, String)> {
    let mut problems = Vec::new();
    for (i, probe) in probes.iter().enumerate() {
        if let Err(message) = expect(cluster, probe) {
            problems.push((i, "to", message));
        } else if let Some(Err(message)) =
            probe.expect.as_ref().map(|s| check_stated_under(cluster, probe, s))
        {
            problems.push((i, "expect", message));
        }
    }
    problems
}

/// A stated expectation against the profile it names; one that names none states what
/// Kubernetes requires, so it holds for every profile, and an outcome Kubernetes leaves open
/// must say whose choice it states (`profile: kube-proxy-nftables`).
fn check_stated_under(cluster: &Cluster, probe: &Probe, stated: &StatedExpectation) -> Result<(), String> {
    // kube-proxy's iptables mode chooses everywhere Kubernetes leaves an outcome open, so its
    // expectation tells a required outcome (basis Contract) from a choice.
    let profile = stated.profile.unwrap_or(Profile::KUBE_PROXY_IPTABLES);
    let expectation = match predict(cluster, probe, profile)? {
        Prediction::Expected(expectation) => expectation,
        Prediction::Open(reason) => {
            return Err(format!(
                "{reason}, so profile {profile} expects nothing here: name the profile whose choice this is"
            ));
        }
    };
    if let (None, Basis::Choice(_)) = (stated.profile, expectation.basis) {
        let choices: Vec<String> = [Profile::KUBE_PROXY_IPTABLES, Profile::KUBE_PROXY_NFTABLES]
            .into_iter()
            .filter_map(|p| match predict(cluster, probe, p) {
                Ok(Prediction::Expected(e)) => Some(format!("{p} chooses {}", e.outcome)),
                _ => None,
            })
            .collect();
        return Err(format!(
            "Kubernetes leaves this outcome open ({}): say whose choice the scenario states, e.g. \
             `profile: {}`",
            choices.join(", "),
            Profile::KUBE_PROXY_IPTABLES
        ));
    }
    check_stated(&expectation, stated)
}
