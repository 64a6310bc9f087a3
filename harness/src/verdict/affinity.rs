//! ClientIP affinity across phases: a client stuck to a backend stays on it through changes
//! that leave that backend serving, and through a proxy restart, for as long as the timeout
//! allows (every phase here is far shorter than any timeout a sticky probe is judged with).
//! kube-proxy keeps it in both modes (the iptables `recent` lists outlive a restore; the
//! nftables affinity sets are never flushed by a sync), and lost it on restart in one release
//! (kubernetes/kubernetes#123162).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Duration;

use crate::kubernetes::endpoints::{PortPolicy, kube_proxy_set, select_with};
use crate::kubernetes::topology;
use crate::model::{Cluster, Life, Probe, Service, ServicePort, SessionAffinity, Source, Target};
use crate::oracle::{FALSE_FAILURE_RATE, Outcome, Spread};
use crate::traffic::Attempt;

use super::{Failure, ProbeVerdict, Symptom};

/// Whether ClientIP affinity expired, judged over the parts of each probe sent from several
/// clients at once (one phase's `verdicts`). Affinity is per client address, so each client
/// that answered `n` times saw the timeout pass `n - 1` times; a correct proxy keeps every
/// client on one backend throughout with probability `k^-(sum of n - 1)`, which the oracle keeps
/// below the false-failure rate. A proxy whose affinity never expires does it every time.
/// Every part of such a probe fails, each naming where every client stayed.
pub(super) fn check_expiry_across_clients(verdicts: &mut [ProbeVerdict]) {
    let mut parts: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, v) in verdicts.iter().enumerate() {
        if let (Some(clients), Some(_)) = (&v.probe.clients, expiry(v)) {
            parts.entry(clients.probe.as_str()).or_default().push(i);
        }
    }
    let failures: Vec<(Vec<usize>, Failure)> = parts
        .into_values()
        .filter_map(|members| {
            let failure = never_expired(members.iter().map(|&i| &verdicts[i]))?;
            Some((members, failure))
        })
        .collect();
    for (members, failure) in failures {
        for i in members {
            verdicts[i].failures.push(failure.clone());
        }
    }
}

/// The timeout and the number of backends of a part expected to see affinity expire.
fn expiry(v: &ProbeVerdict) -> Option<(Duration, usize)> {
    match &v.expected.outcome {
        Outcome::Answered { backends, spread: Spread::AffinityExpires { timeout }, .. }
            if backends.len() > 1 =>
        {
            Some((*timeout, backends.len()))
        }
        _ => None,
    }
}

/// The failure of the parts `members` if every client stayed on one backend, with enough
/// chances to move (each answer after a client's first) that a correct proxy keeps them all with
/// probability at most the false-failure rate.
fn never_expired<'v>(members: impl Iterator<Item = &'v ProbeVerdict>) -> Option<Failure> {
    let mut stayed = Vec::new();
    let mut chances = 0;
    let mut judged = None;
    for v in members {
        judged = judged.or(expiry(v));
        let reached: Vec<&str> = v.observed.iter().filter_map(Attempt::backend).collect();
        let distinct: BTreeSet<&str> = reached.iter().copied().collect();
        if distinct.len() > 1 {
            return None;
        }
        if let Some(backend) = distinct.first() {
            chances += reached.len() - 1;
            stayed.push(format!("{} on {backend}", v.probe.from));
        }
    }
    let (timeout, k) = judged?;
    // Too few chances to move (clients the oracle counted on that did not answer: a Local
    // policy's or the topology's drops) and a correct proxy could keep every client by chance:
    // the check cannot tell, so it fails nothing.
    let by_chance = (k as f64).powi(-(chances as i32));
    (chances > 0 && by_chance <= FALSE_FAILURE_RATE).then(|| {
        Failure::new(
            Symptom::AffinityKept,
            format!(
                "session affinity never expired: {} clients at once, each stayed on one backend through \
                 attempts spaced past the {}s timeout ({}) (a correct proxy does this with probability {:.1e})",
                stayed.len(),
                timeout.as_secs(),
                stayed.join(", "),
                by_chance
            ),
        )
    })
}

/// The backend each client reached through each destination under affinity, so far, per node
/// that translated it: each node keeps its own affinity table, so a client reaching an external
/// IP through node-a and through node-b is stuck on each apart (found by `packetproof explore`).
///
/// A node's table is shared by every frontend of a Service port (kube-proxy's `recent` list,
/// or nftables affinity set, is one per endpoint, checked by the cluster IP's, node port's and
/// load balancer's chains alike, in the endpoints' order). So a client that a frontend on the
/// same node had to send elsewhere (its traffic policy left out the backend the client was
/// stuck to) is then in two endpoints' lists, and the proxy takes the first in its order:
/// through any frontend, now or in a later phase, it may be sent to any backend it reached on
/// that node. Such a move is not a loss (found by `packetproof explore`, after
/// `internalTrafficPolicy: Local` sent a node's cluster IP traffic to its own endpoint, through
/// the node port in the same phase, and through the cluster IP once the policy was Cluster
/// again). While no frontend ever left out a backend the client reached, it is in one list
/// only, and any move is a loss.
///
/// The table outlives a phase only while the node keeps the endpoint's affinity: a phase in
/// which the Service had no ClientIP affinity, or the node no rules for that endpoint, deletes
/// it (the last rule naming an xt_recent list frees it; nftables deletes the set with its
/// chain), and the client starts afresh (found by `packetproof explore`: affinity off, then on).
#[derive(Debug, Default)]
pub(super) struct Stuck {
    stuck: BTreeMap<(Source, SocketAddr, Option<String>), Stuck1>,
    /// Each client's answers, per translating node.
    reached: BTreeMap<(Source, Option<String>), Vec<Answer>>,
    /// The phases checked so far.
    phases: usize,
}

impl Stuck {
    /// Checks `verdicts` (one phase's, `phase` its step name) against the backends clients
    /// stuck to in earlier phases, then remembers where they are now.
    pub(super) fn check_phase(&mut self, phase: &str, cluster: &Cluster, verdicts: &mut [ProbeVerdict]) {
        self.stuck.retain(|(_, _, node), s| s.still_kept(cluster, node.as_deref()));
        self.phases += 1;
        let phase_index = self.phases;
        // This phase's answers count whatever the order its probes were sent in.
        for v in verdicts.iter() {
            if let (Some((client, destination, now)), Outcome::Answered { backends, .. }) =
                (sticky_answer(v), &v.expected.outcome)
            {
                let usable = backends.keys().cloned().collect();
                let answer = Answer { phase: phase_index, destination, backend: now, usable };
                self.reached.entry(client).or_default().push(answer);
            }
        }
        for v in verdicts.iter_mut() {
            let Some(((from, translated_by), destination, now)) = sticky_answer(v) else { continue };
            let Outcome::Answered { backends, .. } = &v.expected.outcome else { continue };
            let key = (from, destination, translated_by);
            if let Some(Stuck1 { backend: before, .. }) = self.stuck.get(&key)
                && *before != now
                && backends.contains_key(before)
                && !self.may_have_moved(&key, &now)
            {
                v.failures.push(Failure::new(
                    Symptom::AffinityBroken,
                    format!(
                        "session affinity lost at step {phase}: {} was stuck to {before}, which still serves, \
                         and now reached {now}",
                        v.probe.from
                    ),
                ));
            }
            match service_port_of(cluster, &v.probe, key.1) {
                Some((service, port)) => self.stuck.insert(key, Stuck1 { backend: now, service, port }),
                // A destination of no Service port the reader knows: nothing to keep.
                None => self.stuck.remove(&key),
            };
        }
    }

    /// Whether the client of `key` may be in `now`'s list on its node as well as in the one it
    /// was stuck to: it reached `now` there before (an earlier phase, or another destination),
    /// and some frontend there once could not use a backend it had reached.
    fn may_have_moved(&self, key: &(Source, SocketAddr, Option<String>), now: &str) -> bool {
        let (from, destination, translated_by) = key;
        let Some(answers) = self.reached.get(&(from.clone(), translated_by.clone())) else { return false };
        let reached_before = answers
            .iter()
            .any(|a| a.backend == now && (a.phase < self.phases || a.destination != *destination));
        let all_reached: BTreeSet<&str> = answers.iter().map(|a| a.backend.as_str()).collect();
        let left_one_out = answers.iter().any(|a| all_reached.iter().any(|b| !a.usable.contains(*b)));
        reached_before && left_one_out
    }
}

/// One answer of a client, on one node.
#[derive(Debug)]
struct Answer {
    /// The phase it came in (counted from 1).
    phase: usize,
    destination: SocketAddr,
    /// The backend reached.
    backend: String,
    /// The backends the destination could use.
    usable: BTreeSet<String>,
}

/// Where one client is stuck through one destination: the backend, and the Service port whose
/// affinity table holds it.
#[derive(Debug)]
struct Stuck1 {
    backend: String,
    service: String,
    port: String,
}

impl Stuck1 {
    /// Whether `node` (the translating node; none: any) still keeps the table in `cluster`: the
    /// Service port has ClientIP affinity and the node has rules for the backend. A new timeout
    /// keeps it: iptables' `recent` list is the same list, and kube-proxy's nftables mode updates
    /// the set's timeout in place, its elements kept (v1.30.3 on kernel 6.18, seen by
    /// `packetproof explore`).
    fn still_kept(&self, cluster: &Cluster, node: Option<&str>) -> bool {
        let Some(svc) = cluster.service(&self.service) else { return false };
        let Some(port) = svc.ports.iter().find(|p| p.name == self.port) else { return false };
        if !matches!(svc.session_affinity, SessionAffinity::ClientIp { .. }) {
            return false;
        }
        match node {
            Some(node) => has_rules_for(cluster, svc, port, node, &self.backend),
            None => port.endpoints.iter().any(|e| e.pod == self.backend && e.ready),
        }
    }
}

/// Whether `node` writes rules (an endpoint chain, its affinity list) for `backend` of `port`.
fn has_rules_for(cluster: &Cluster, svc: &Service, port: &ServicePort, node: &str, backend: &str) -> bool {
    let topo = topology::Context::of(cluster, svc, node);
    let eps = select_with(port, PortPolicy::of(svc, port), node, kube_proxy_set, topo, topology::zone_filter);
    eps.reachable.iter().any(|e| e.pod == backend)
}

/// The Service and port `probe` reaches at `destination`: named by its target, or found by
/// address and protocol for a raw one (a TCP and a UDP port may share a number).
fn service_port_of(cluster: &Cluster, probe: &Probe, destination: SocketAddr) -> Option<(String, String)> {
    match &probe.to {
        Target::ClusterIp { service, port }
        | Target::NodePort { service, port, .. }
        | Target::ExternalIp { service, port, .. }
        | Target::LoadBalancer { service, port, .. } => Some((service.clone(), port.clone())),
        _ => cluster.services.iter().find_map(|svc| {
            let port = svc.ports.iter().filter(|p| p.protocol == probe.protocol).find(|p| {
                let ip = destination.ip();
                let frontend = svc.cluster_ips.iter().any(|c| *c == ip)
                    || svc.external_ips.contains(&ip)
                    || svc.load_balancer_ips.contains(&ip);
                (frontend && p.port == destination.port()) || p.node_port == Some(destination.port())
            })?;
            Some((svc.name.clone(), port.name.clone()))
        }),
    }
}

/// The client (and translating node), destination and first backend of a probe expected to
/// stick, if it was answered.
fn sticky_answer(v: &ProbeVerdict) -> Option<((Source, Option<String>), SocketAddr, String)> {
    let Outcome::Answered { spread: Spread::Sticky, translated_by, .. } = &v.expected.outcome else {
        return None;
    };
    // A held connection's check and a UDP stream travel on a conntrack entry made before:
    // no affinity chooses their backend, and none is recorded by them (the `recent` and
    // affinity-set updates sit on the path of a new connection only). Found by `packetproof
    // explore`: two connections a client held, checked once affinity was switched on.
    if matches!(v.probe.life, Life::Held { .. }) || v.probe.source_port.is_some() {
        return None;
    }
    let now = v.observed.iter().find_map(Attempt::backend)?;
    Some(((v.probe.from.clone(), translated_by.clone()), v.destination, now.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Clients, Probe, Target};
    use crate::oracle::{Expectation, SeenSource};

    /// Client `c`'s part of a probe from `clients` clients, expected to see a one-second
    /// affinity expire over four backends, answered by `reached`.
    fn part(c: &str, clients: u32, reached: &[&str]) -> ProbeVerdict {
        let seen = SeenSource::Client { addrs: vec![] };
        let backends = ["a", "b", "c", "d"].map(|b| (b.to_string(), seen.clone())).into();
        let spread = Spread::AffinityExpires { timeout: Duration::from_secs(1) };
        let outcome = Outcome::Answered { backends, spread, translated_by: None };
        let to = Target::Address("10.96.0.1:80".parse().unwrap());
        ProbeVerdict {
            probe: Probe {
                name: format!("p[{c}]"),
                clients: Some(Clients { probe: "p".into(), count: clients }),
                ..Probe::example(Source::Pod(c.into()), to)
            },
            destination: "10.96.0.1:80".parse().unwrap(),
            expected: Expectation::required(outcome, "test"),
            observed: reached
                .iter()
                .map(|&pod| Attempt::Answered { pod: pod.into(), seen: "10.244.1.9:20000".parse().unwrap() })
                .collect(),
            failures: vec![],
            harness_faults: vec![],
        }
    }

    #[test]
    fn every_client_kept_on_one_backend_fails_every_part() {
        let mut v = [part("x", 2, &["a"; 6]), part("y", 2, &["c"; 6])];
        check_expiry_across_clients(&mut v);
        for part in &v {
            assert_eq!(
                part.failures.iter().map(|f| f.message.as_str()).collect::<Vec<_>>(),
                [
                    "session affinity never expired: 2 clients at once, each stayed on one backend through attempts \
                  spaced past the 1s timeout (pod x on a, pod y on c) (a correct proxy does this with probability 9.5e-7)"
                ]
            );
        }
    }

    /// Found by exploration (seed 91, case 1847): an internalTrafficPolicy Local Service left
    /// one client answering, six times; staying on one of two backends then has odds of 3.1e-2,
    /// and that failed a correct proxy. Here: three chances among four backends, 1.6e-2.
    #[test]
    fn too_few_chances_to_move_fail_nothing() {
        let mut v = [part("x", 2, &["a", "a", "a"]), part("y", 2, &["c", "c"])];
        check_expiry_across_clients(&mut v);
        assert!(v.iter().all(|p| p.failures.is_empty()), "{v:?}");
    }

    #[test]
    fn one_client_that_moved_shows_expiry() {
        let mut v = [part("x", 2, &["a", "a", "a"]), part("y", 2, &["c", "d"])];
        check_expiry_across_clients(&mut v);
        assert!(v.iter().all(|p| p.failures.is_empty()), "{v:?}");
    }

    /// Pod `c`'s probe of `to`, which may use `usable`, translated on node-a, answered by `reached`.
    fn sticky(c: &str, to: &str, usable: &[&str], reached: &str) -> ProbeVerdict {
        let seen = SeenSource::Client { addrs: vec![] };
        let backends = usable.iter().map(|b| (b.to_string(), seen.clone())).collect();
        let outcome =
            Outcome::Answered { backends, spread: Spread::Sticky, translated_by: Some("node-a".into()) };
        let destination: SocketAddr = to.parse().unwrap();
        ProbeVerdict {
            probe: Probe::example(Source::Pod(c.into()), Target::Address(destination)),
            destination,
            expected: Expectation::required(outcome, "test"),
            observed: vec![Attempt::Answered {
                pod: reached.into(),
                seen: "10.244.1.9:20000".parse().unwrap(),
            }],
            failures: vec![],
            harness_faults: vec![],
        }
    }

    fn broken(v: &[ProbeVerdict]) -> Vec<bool> {
        v.iter().map(|v| v.failures.iter().any(|f| f.symptoms.contains(&Symptom::AffinityBroken))).collect()
    }

    const CLUSTER_IP: &str = "10.96.0.1:80";
    const NODE_PORT: &str = "192.168.50.2:30000";

    /// Service web (cluster IP 10.96.0.1:80, node port 30000) with endpoints a and b, and
    /// ClientIP affinity if `sticky`.
    fn web(sticky: bool) -> Cluster {
        let endpoint = |pod: &str, ip: &str| crate::model::Endpoint {
            ip: ip.parse().unwrap(),
            port: 8080,
            ready: true,
            serving: true,
            terminating: false,
            node: Some("node-a".into()),
            pod: pod.into(),
            zone_hints: Vec::new(),
        };
        let svc = Service {
            service_type: crate::model::ServiceType::NodePort,
            session_affinity: if sticky {
                SessionAffinity::ClientIp { timeout_seconds: 10800 }
            } else {
                SessionAffinity::None
            },
            ports: vec![ServicePort {
                name: "http".into(),
                protocol: crate::model::Protocol::Tcp,
                port: 80,
                node_port: Some(30000),
                endpoints: vec![endpoint("a", "10.244.0.10"), endpoint("b", "10.244.0.11")],
            }],
            ..Service::new("default", "web", "10.96.0.1".parse().unwrap())
        };
        Cluster::example(vec![svc])
    }

    #[test]
    fn a_client_moved_off_a_backend_that_still_serves_lost_its_affinity() {
        let mut stuck = Stuck::default();
        stuck.check_phase("first", &web(true), &mut [sticky("c", NODE_PORT, &["a", "b"], "b")]);
        let mut next = [sticky("c", NODE_PORT, &["a", "b"], "a")];
        stuck.check_phase("next", &web(true), &mut next);
        assert_eq!(broken(&next), [true]);
    }

    /// A new timeout keeps the table (kube-proxy's nftables mode updates the set in place): a
    /// move after it is a loss (found by `packetproof explore`, where builtin-nftables made the
    /// set again).
    #[test]
    fn a_new_timeout_keeps_where_clients_were() {
        let with_timeout = |timeout_seconds| {
            let mut cluster = web(true);
            cluster.services[0].session_affinity = SessionAffinity::ClientIp { timeout_seconds };
            cluster
        };
        let mut stuck = Stuck::default();
        stuck.check_phase("first", &with_timeout(600), &mut [sticky("c", NODE_PORT, &["a", "b"], "b")]);
        let mut next = [sticky("c", NODE_PORT, &["a", "b"], "a")];
        stuck.check_phase("default timeout", &with_timeout(10800), &mut next);
        assert_eq!(broken(&next), [true]);
    }

    /// Held connections and UDP streams ride conntrack entries made before: a client's two
    /// connections on two backends say nothing of its affinity (found by `packetproof explore`).
    #[test]
    fn flows_on_earlier_conntrack_entries_are_not_affinity() {
        let mut stuck = Stuck::default();
        let held = |reached: &str| {
            let mut v = sticky("c", CLUSTER_IP, &["a", "b"], reached);
            v.probe.life = Life::Held { opener: "session".into(), out_of_window: false };
            v
        };
        let stream = |reached: &str| {
            let mut v = sticky("c", CLUSTER_IP, &["a", "b"], reached);
            v.probe.source_port = Some(15000);
            v
        };
        let mut phase = [held("a"), held("b"), stream("a"), stream("b")];
        stuck.check_phase("on", &web(true), &mut phase);
        assert_eq!(broken(&phase), [false, false, false, false]);
        let mut next = [sticky("c", CLUSTER_IP, &["a", "b"], "b")];
        stuck.check_phase("next", &web(true), &mut next);
        assert_eq!(broken(&next), [false]);
    }

    /// A restart that forgets every client moves them on every frontend at once: that the
    /// other frontends moved too excuses nothing, since they could have kept the backend.
    #[test]
    fn moving_on_every_frontend_at_once_is_still_a_loss() {
        let mut stuck = Stuck::default();
        let both = ["a", "b"];
        stuck.check_phase(
            "first",
            &web(true),
            &mut [sticky("c", NODE_PORT, &both, "b"), sticky("c", CLUSTER_IP, &both, "b")],
        );
        let mut next = [sticky("c", NODE_PORT, &both, "a"), sticky("c", CLUSTER_IP, &both, "a")];
        stuck.check_phase("next", &web(true), &mut next);
        assert_eq!(broken(&next), [true, true]);
    }

    /// The cluster IP, now `internalTrafficPolicy: Local`, had to send the client to its node's
    /// own endpoint; the node port's chain then finds the client in that endpoint's list first.
    #[test]
    fn a_move_another_frontend_forced_is_not_a_loss() {
        let mut stuck = Stuck::default();
        stuck.check_phase("first", &web(true), &mut [sticky("c", NODE_PORT, &["a", "b"], "b")]);
        let mut next = [sticky("c", CLUSTER_IP, &["a"], "a"), sticky("c", NODE_PORT, &["a", "b"], "a")];
        stuck.check_phase("next", &web(true), &mut next);
        assert_eq!(broken(&next), [false, false]);
    }

    /// The client, stuck to b, was sent to a while the cluster IP could use only a (its entry for
    /// b stays); once it may use both again, the proxy finds the client in a's list first.
    #[test]
    fn an_older_entry_the_proxy_finds_first_is_not_a_loss() {
        let mut stuck = Stuck::default();
        stuck.check_phase("first", &web(true), &mut [sticky("c", CLUSTER_IP, &["a", "b"], "a")]);
        stuck.check_phase("local", &web(true), &mut [sticky("c", CLUSTER_IP, &["b"], "b")]);
        let mut next = [sticky("c", CLUSTER_IP, &["a", "b"], "a")];
        stuck.check_phase("cluster", &web(true), &mut next);
        assert_eq!(broken(&next), [false]);
    }

    /// Affinity switched off for a phase deletes the node's table: the client starts afresh.
    #[test]
    fn a_phase_without_affinity_forgets_where_clients_were() {
        let mut stuck = Stuck::default();
        stuck.check_phase("first", &web(true), &mut [sticky("c", NODE_PORT, &["a", "b"], "b")]);
        stuck.check_phase("off", &web(false), &mut []);
        let mut next = [sticky("c", NODE_PORT, &["a", "b"], "a")];
        stuck.check_phase("on", &web(true), &mut next);
        assert_eq!(broken(&next), [false]);
    }
}
