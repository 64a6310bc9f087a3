//! The kind of each failure the verdict writes ([`Symptom`], the known-bug catalog's
//! vocabulary) and the failure itself ([`Failure`]): each check makes its failure with its
//! kinds beside its sentence, so a signature can say "the hairpin probe goes silent" without
//! quoting addresses or counts, and rewording a sentence changes no kind.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use super::ProbeVerdict;
use crate::traffic::Attempt;

/// How a probe failed, in the words of the verdict: the kinds of failure a signature names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Symptom {
    /// Answered by a pod that is not a valid backend (or no longer backs the destination).
    WrongBackend,
    /// Answered by a valid backend that saw the wrong source address (masquerade missing or
    /// unwanted).
    WrongSource,
    /// Answered, where the flow should have been dropped, rejected or left unanswered.
    Answered,
    /// Nothing came back, where an answer or a refusal was expected.
    Silent,
    /// Refused (TCP RST, ICMP unreachable), where an answer or silence was expected.
    Refused,
    /// Something came back that is neither an answer nor a refusal.
    Broken,
    /// The valid backends' shares fall outside the binomial bounds (one never chosen).
    Uneven,
    /// Session affinity broken or lost: one client reached several backends.
    AffinityBroken,
    /// Session affinity never expired.
    AffinityKept,
    /// A health check answered with the wrong status or `localEndpoints` count.
    WrongHealth,
    /// The packets went on (forwarded out of a node) where a rule should have dropped or
    /// rejected them.
    Leaked,
    /// Refused by a host's own stack (a TCP reset of a closed port), not by a proxy's rule.
    RefusedByHost,
    /// The client saw the right thing but the packets took the wrong path (the capture or
    /// conntrack contradicts it).
    WrongPath,
    /// The proxy failed at its own job (a failed sync, an exit) before any probe: the
    /// signature's probe is then [`PROXY`].
    ProxyFailed,
    /// A failure the verdict gives no kind.
    Other,
    /// Not the proxy's: the harness's own witnesses of an attempt contradict one another (the
    /// client holds an answer whose request no capture saw arrive, or the client's request
    /// never left it), so the harness failed to observe the attempt. Such a failure is a
    /// harness fault ([`ProbeVerdict::harness_faults`]), never a proxy verdict.
    WitnessesDisagree,
    /// Not the proxy's: the machine could not keep the harness's own deadlines (a request left
    /// the client only after its probe's window had closed), so the attempt was not judged.
    /// A harness fault, as [`Symptom::WitnessesDisagree`] is.
    Overloaded,
}

impl Symptom {
    pub const ALL: [Symptom; 17] = [
        Symptom::WrongBackend,
        Symptom::WrongSource,
        Symptom::Answered,
        Symptom::Silent,
        Symptom::Refused,
        Symptom::Broken,
        Symptom::Uneven,
        Symptom::AffinityBroken,
        Symptom::AffinityKept,
        Symptom::WrongHealth,
        Symptom::Leaked,
        Symptom::RefusedByHost,
        Symptom::WrongPath,
        Symptom::ProxyFailed,
        Symptom::Other,
        Symptom::WitnessesDisagree,
        Symptom::Overloaded,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Symptom::WrongBackend => "wrong-backend",
            Symptom::WrongSource => "wrong-source",
            Symptom::Answered => "answered",
            Symptom::Silent => "silent",
            Symptom::Refused => "refused",
            Symptom::Broken => "broken",
            Symptom::Uneven => "uneven",
            Symptom::AffinityBroken => "affinity-broken",
            Symptom::AffinityKept => "affinity-kept",
            Symptom::WrongHealth => "wrong-health",
            Symptom::Leaked => "leaked",
            Symptom::RefusedByHost => "refused-by-host",
            Symptom::WrongPath => "wrong-path",
            Symptom::ProxyFailed => "proxy-failed",
            Symptom::Other => "other",
            Symptom::WitnessesDisagree => "witnesses-disagree",
            Symptom::Overloaded => "overloaded",
        }
    }
}

impl fmt::Display for Symptom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Symptom {
    type Err = String;

    fn from_str(s: &str) -> Result<Symptom, String> {
        Symptom::ALL.into_iter().find(|k| k.name() == s).ok_or_else(|| format!("unknown symptom {s:?}"))
    }
}

/// One failure of a probe: what the verdict says, and its kinds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub symptoms: BTreeSet<Symptom>,
    pub message: String,
    /// How many of the probe's attempts showed each kind, for a failure of single attempts;
    /// empty for a failure of the probe as a whole (shares, affinity, a failed sync).
    pub attempts: BTreeMap<Symptom, usize>,
}

impl Failure {
    pub fn new(symptom: Symptom, message: impl Into<String>) -> Failure {
        Failure { symptoms: BTreeSet::from([symptom]), message: message.into(), attempts: BTreeMap::new() }
    }

    /// A failure whose kinds are the attempts that should not be there (`Answered`, `Silent`,
    /// …), or `Other` when none names one.
    pub fn of_attempts<'a>(
        attempts: impl IntoIterator<Item = &'a Attempt>,
        message: impl Into<String>,
    ) -> Failure {
        let mut counts: BTreeMap<Symptom, usize> = BTreeMap::new();
        for attempt in attempts {
            *counts.entry(Symptom::of_attempt(attempt)).or_default() += 1;
        }
        let mut symptoms: BTreeSet<Symptom> = counts.keys().copied().collect();
        if symptoms.is_empty() {
            symptoms.insert(Symptom::Other);
        }
        Failure { symptoms, message: message.into(), attempts: counts }
    }

    /// The same failure, shown by `n` of the probe's attempts.
    pub(crate) fn of_attempts_counted(self, n: usize) -> Failure {
        let attempts = self.symptoms.iter().map(|&s| (s, n)).collect();
        Failure { attempts, ..self }
    }

    /// The same failure, its sentence extended (a count, a place): the kinds stay.
    pub fn map_message(self, f: impl FnOnce(String) -> String) -> Failure {
        Failure { message: f(self.message), ..self }
    }
}

/// Tests compare a failure with its sentence.
#[cfg(test)]
impl PartialEq<&str> for Failure {
    fn eq(&self, other: &&str) -> bool {
        self.message == *other
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl Symptom {
    /// An attempt's kind as the symptom of its being there, where an answer of another kind
    /// (or none) was expected.
    pub fn of_attempt(attempt: &Attempt) -> Symptom {
        match attempt {
            Attempt::Answered { .. } | Attempt::Http { .. } => Symptom::Answered,
            Attempt::Silent => Symptom::Silent,
            Attempt::Refused { .. } => Symptom::Refused,
            Attempt::Broken { .. } => Symptom::Broken,
        }
    }
}

impl Failure {
    /// The harness failed to observe, not the proxy to forward (see [`Symptom::WitnessesDisagree`]).
    pub fn witnesses_disagree(message: impl Into<String>) -> Failure {
        Failure::new(Symptom::WitnessesDisagree, format!("witnesses disagree: {}", message.into()))
    }

    /// The machine could not keep the harness's deadlines (see [`Symptom::Overloaded`]).
    pub fn overloaded(message: impl Into<String>) -> Failure {
        Failure::new(Symptom::Overloaded, format!("overloaded: {}", message.into()))
    }

    pub fn is_harness_fault(&self) -> bool {
        self.symptoms.iter().any(|s| matches!(s, Symptom::WitnessesDisagree | Symptom::Overloaded))
    }
}

impl ProbeVerdict {
    /// The kinds of this probe's failures (empty when it passed).
    pub fn symptoms(&self) -> BTreeSet<Symptom> {
        self.failures.iter().flat_map(|f| f.symptoms.iter().copied()).collect()
    }

    /// How many of the attempts the harness judged showed `symptom`, out of how many: `None`
    /// where a failure of that kind is of the probe as a whole, not of single attempts.
    pub fn attempts_showing(&self, symptom: Symptom) -> Option<(usize, usize)> {
        let mut showing = 0;
        for f in self.failures.iter().filter(|f| f.symptoms.contains(&symptom)) {
            showing += f.attempts.get(&symptom)?;
        }
        let unobserved: usize =
            self.harness_faults.iter().map(|f| f.attempts.values().max().copied().unwrap_or(0)).sum();
        Some((showing, self.observed.len().saturating_sub(unobserved)))
    }
}
