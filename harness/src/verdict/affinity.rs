//! ClientIP affinity across phases: a client stuck to a backend stays on it through changes
//! that leave that backend serving, and through a proxy restart, for as long as the timeout
//! allows (every phase here is far shorter than any timeout a sticky probe is judged with).
//! kube-proxy keeps it in both modes (the iptables `recent` lists outlive a restore; the
//! nftables affinity sets are never flushed by a sync), and lost it on restart in one release
//! (kubernetes/kubernetes#123162).

use std::collections::BTreeMap;
use std::net::SocketAddr;

use crate::model::Source;
use crate::oracle::{Outcome, Spread};
use crate::traffic::Attempt;

use super::ProbeVerdict;

/// The backend each client reached through each destination under affinity, so far.
#[derive(Debug, Default)]
pub struct Stuck(BTreeMap<(Source, SocketAddr), String>);

impl Stuck {
    /// Checks `verdicts` (one phase's, `phase` its step name) against the backends clients
    /// stuck to in earlier phases, then remembers where they are now.
    pub(crate) fn check_phase(&mut self, phase: &str, verdicts: &mut [ProbeVerdict]) {
        for v in verdicts.iter_mut() {
            let Outcome::Answered { backends, spread: Spread::Sticky, .. } = &v.expected.outcome else {
                continue;
            };
            let Some(now) = v.observed.iter().find_map(|a| match a {
                Attempt::Answered { pod, .. } => Some(pod.clone()),
                _ => None,
            }) else {
                continue;
            };
            let key = (v.probe.from.clone(), v.destination);
            if let Some(before) = self.0.get(&key)
                && *before != now
                && backends.contains_key(before)
            {
                v.failures.push(format!(
                    "session affinity lost at step {phase}: {} was stuck to {before}, which still serves, \
                     and now reached {now}",
                    v.probe.from
                ));
            }
            self.0.insert(key, now);
        }
    }
}
