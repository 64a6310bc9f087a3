//! ClientIP affinity across phases: a client stuck to a backend stays on it through changes
//! that leave that backend serving, and through a proxy restart, for as long as the timeout
//! allows (every phase here is far shorter than any timeout a sticky probe is judged with).
//! kube-proxy keeps it in both modes (the iptables `recent` lists outlive a restore; the
//! nftables affinity sets are never flushed by a sync), and lost it on restart in one release
//! (kubernetes/kubernetes#123162).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Duration;

use crate::model::Source;
use crate::oracle::{Outcome, Spread};
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

/// The failure of the parts `members` if every client stayed on one backend, with chances to
/// move (two answers or more) in some.
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
    (chances > 0).then(|| {
        Failure::new(
            Symptom::AffinityKept,
            format!(
                "session affinity never expired: {} clients at once, each stayed on one backend through \
                 attempts spaced past the {}s timeout ({}) (a correct proxy does this with probability {:.1e})",
                stayed.len(),
                timeout.as_secs(),
                stayed.join(", "),
                (k as f64).powi(-(chances as i32))
            ),
        )
    })
}

/// The backend each client reached through each destination under affinity, so far, per node
/// that translated it: each node keeps its own affinity table, so a client reaching an external
/// IP through node-a and through node-b is stuck on each apart (found by `packetproof explore`).
#[derive(Debug, Default)]
pub(super) struct Stuck(BTreeMap<(Source, SocketAddr, Option<String>), String>);

impl Stuck {
    /// Checks `verdicts` (one phase's, `phase` its step name) against the backends clients
    /// stuck to in earlier phases, then remembers where they are now.
    pub(super) fn check_phase(&mut self, phase: &str, verdicts: &mut [ProbeVerdict]) {
        for v in verdicts.iter_mut() {
            let Outcome::Answered { backends, spread: Spread::Sticky, translated_by } = &v.expected.outcome
            else {
                continue;
            };
            let Some(now) = v.observed.iter().find_map(Attempt::backend).map(str::to_string) else {
                continue;
            };
            let key = (v.probe.from.clone(), v.destination, translated_by.clone());
            if let Some(before) = self.0.get(&key)
                && *before != now
                && backends.contains_key(before)
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
            self.0.insert(key, now);
        }
    }
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
        }
    }

    #[test]
    fn every_client_kept_on_one_backend_fails_every_part() {
        let mut v = [part("x", 2, &["a", "a", "a"]), part("y", 2, &["c", "c"])];
        check_expiry_across_clients(&mut v);
        for part in &v {
            assert_eq!(
                part.failures.iter().map(|f| f.message.as_str()).collect::<Vec<_>>(),
                [
                    "session affinity never expired: 2 clients at once, each stayed on one backend through attempts \
                  spaced past the 1s timeout (pod x on a, pod y on c) (a correct proxy does this with probability 1.6e-2)"
                ]
            );
        }
    }

    #[test]
    fn one_client_that_moved_shows_expiry() {
        let mut v = [part("x", 2, &["a", "a", "a"]), part("y", 2, &["c", "d"])];
        check_expiry_across_clients(&mut v);
        assert!(v.iter().all(|p| p.failures.is_empty()), "{v:?}");
    }
}
