//! Expected versus observed, per probe: every attempt must match the oracle's outcome, and
//! with several equally likely backends each one's share must fall inside exact binomial
//! bounds chosen so that a correct proxy fails the check with probability at most
//! [`FALSE_FAILURE_RATE`] (the oracle's: it sizes the attempts by the same rate).

mod affinity;
pub mod evidence;
pub mod late;
mod phases;
pub mod symptom;

pub use phases::{ConntrackTables, SentProbe, Witnesses, judge_run};
pub use symptom::{Failure, Symptom};

use std::collections::BTreeMap;
use std::fmt::Write;
use std::net::SocketAddr;

use crate::model::Probe;
use crate::oracle::{Expectation, FALSE_FAILURE_RATE, Outcome, Spread};
use crate::traffic::Attempt;

/// One probe judged.
#[derive(Debug, Clone)]
pub struct ProbeVerdict {
    pub probe: Probe,
    pub destination: SocketAddr,
    pub expected: Expectation,
    pub observed: Vec<Attempt>,
    /// The proxy's failures, each proven by witnesses that agree; empty when it passed.
    pub failures: Vec<Failure>,
    /// Where the harness failed to observe: attempts whose witnesses contradict one another
    /// (see [`Symptom::WitnessesDisagree`]). They prove nothing about the proxy; a probe with
    /// some and no failure is neither passed nor failed, and its run is the machine's fault.
    pub harness_faults: Vec<Failure>,
}

impl ProbeVerdict {
    /// Judged, and every witness agrees that it met its expectation.
    pub fn passed(&self) -> bool {
        self.failures.is_empty() && self.harness_faults.is_empty()
    }

    /// The proxy failed it, on the evidence of attempts whose witnesses agree.
    pub fn failed(&self) -> bool {
        !self.failures.is_empty()
    }

    /// Not judged: no failure, but the harness failed to observe some attempt.
    pub fn faulted(&self) -> bool {
        self.failures.is_empty() && !self.harness_faults.is_empty()
    }

    /// Moves the failures that are the harness's (its witnesses disagree) to `harness_faults`.
    pub fn set_apart_harness_faults(&mut self) {
        let (faults, failures) =
            std::mem::take(&mut self.failures).into_iter().partition(Failure::is_harness_fault);
        self.failures = failures;
        self.harness_faults.extend::<Vec<Failure>>(faults);
    }

    /// One line summarising the attempts, e.g. `40/40 answered: coredns-a 19, coredns-b 21; saw 10.244.1.20`.
    pub(crate) fn observed_summary(&self) -> String {
        summarize(&self.observed)
    }
}

pub fn judge(
    probe: &Probe,
    destination: SocketAddr,
    expected: &Expectation,
    observed: Vec<Attempt>,
) -> ProbeVerdict {
    let failures = match &expected.outcome {
        Outcome::Answered { backends, spread, .. } => {
            // Sticky attempts all go one way by design; every other spread is uniform per attempt.
            let uniform = !matches!(spread, Spread::Sticky);
            let mut failures = check_answers(backends, uniform, &observed);
            // A probe from several clients is judged on expiry across them all (`affinity`).
            if probe.clients.is_none() || !matches!(spread, Spread::AffinityExpires { .. }) {
                let one_flow = probe.source_port.is_some();
                failures.extend(check_spread(*spread, backends.len(), &observed, one_flow));
            }
            failures
        }
        Outcome::Http { status, local_endpoints } => check_http(*status, *local_endpoints, &observed),
        Outcome::Rejected | Outcome::Closed { .. } => {
            check_all(&observed, "refused", |a| matches!(a, Attempt::Refused { .. }))
        }
        Outcome::Dropped => check_all(&observed, "silent (dropped)", |a| matches!(a, Attempt::Silent)),
        Outcome::Unanswered { .. } => {
            check_all(&observed, "silent (forwarded to an endpoint, unanswered)", |a| {
                matches!(a, Attempt::Silent)
            })
        }
        // Silent until the node's neighbour resolution gives up (about 3 s), then refused with
        // host unreachable: the evidence tells the two from a rule's refusal.
        Outcome::Forwarded => check_all(&observed, "silent or unreachable (forwarded, unanswered)", |a| {
            matches!(a, Attempt::Silent | Attempt::Refused { .. })
        }),
    };
    ProbeVerdict {
        probe: probe.clone(),
        destination,
        expected: expected.clone(),
        observed,
        failures,
        harness_faults: Vec::new(),
    }
}

/// A probe none of whose attempts can be judged (the harness saw none of them leave): no
/// failure, no observation; its harness faults say why.
pub(crate) fn unjudged(probe: &Probe, destination: SocketAddr, expected: &Expectation) -> ProbeVerdict {
    ProbeVerdict {
        probe: probe.clone(),
        destination,
        expected: expected.clone(),
        observed: Vec::new(),
        failures: Vec::new(),
        harness_faults: Vec::new(),
    }
}

fn check_all(observed: &[Attempt], wanted: &str, ok: impl Fn(&Attempt) -> bool) -> Vec<Failure> {
    let bad: Vec<&Attempt> = observed.iter().filter(|a| !ok(a)).collect();
    if bad.is_empty() {
        return Vec::new();
    }
    let message = format!(
        "{} of {} attempts were not {wanted}: {}",
        bad.len(),
        observed.len(),
        summarize(&bad.iter().map(|a| (*a).clone()).collect::<Vec<_>>())
    );
    vec![Failure::of_attempts(bad, message)]
}

/// Session affinity: sticky attempts must all reach one backend; attempts spaced past the
/// timeout must not (a correct proxy lands them all on one of `k` backends with probability
/// `k^(1-n)`, which the oracle keeps below [`FALSE_FAILURE_RATE`]).
/// `one_flow`: the attempts share a source port, so they are one conntrack flow, whatever the
/// affinity.
fn check_spread(spread: Spread, k: usize, observed: &[Attempt], one_flow: bool) -> Vec<Failure> {
    let mut reached: Vec<&str> = observed.iter().filter_map(Attempt::backend).collect();
    let answers = reached.len();
    reached.sort();
    reached.dedup();
    match spread {
        Spread::Sticky if one_flow && reached.len() > 1 => vec![Failure::new(
            Symptom::WrongBackend,
            format!(
                "one flow moved: attempts from one source port reached {} different backends ({}) in {answers} \
                 attempts, so its conntrack entry was lost",
                reached.len(),
                reached.join(", ")
            ),
        )],
        Spread::Sticky if reached.len() > 1 => vec![Failure::new(
            Symptom::AffinityBroken,
            format!(
                "session affinity broken: one client reached {} different backends ({}) in {answers} attempts",
                reached.len(),
                reached.join(", ")
            ),
        )],
        // Only where a correct proxy stays by chance at most at the false-failure rate: the
        // oracle sizes the attempts for it, and fewer answers cannot tell.
        Spread::AffinityExpires { timeout }
            if k > 1
                && answers > 1
                && reached.len() == 1
                && (k as f64).powi(1 - answers as i32) <= FALSE_FAILURE_RATE =>
        {
            vec![Failure::new(
                Symptom::AffinityKept,
                format!(
                    "session affinity never expired: all {answers} attempts, spaced past the {}s timeout, reached {} \
                 (a correct proxy does this with probability {:.1e})",
                    timeout.as_secs(),
                    reached[0],
                    (k as f64).powi(1 - answers as i32)
                ),
            )]
        }
        _ => Vec::new(),
    }
}

/// A health-check answer: the status and the `localEndpoints` count kube-proxy reports.
fn check_http(status: u16, local_endpoints: usize, observed: &[Attempt]) -> Vec<Failure> {
    let mut faults = Faults::default();
    for attempt in observed {
        let fault = match attempt {
            Attempt::Http { status: got, body } => {
                let count = serde_json::from_str::<serde_json::Value>(body)
                    .ok()
                    .and_then(|v| v.get("localEndpoints").and_then(|n| n.as_u64()));
                if *got != status {
                    Some(Failure::new(Symptom::WrongHealth, format!("HTTP {got}, expected {status}")))
                } else if count != Some(local_endpoints as u64) {
                    Some(Failure::new(
                        Symptom::WrongHealth,
                        format!("localEndpoints {count:?} in {body:?}, expected {local_endpoints}"),
                    ))
                } else {
                    None
                }
            }
            other => Some(wrong_kind(other)),
        };
        faults.add(fault);
    }
    faults.counted(observed.len())
}

/// An attempt of the wrong kind where another was expected: `silent`, `refused: why`.
fn wrong_kind(attempt: &Attempt) -> Failure {
    Failure::new(Symptom::of_attempt(attempt), format!("{}{}", attempt.kind(), reason(attempt)))
}

/// Identical faults of a probe's attempts, each kept once with how many attempts had it, so
/// a 100-attempt probe yields one failure per distinct fault.
#[derive(Default)]
pub(crate) struct Faults(BTreeMap<String, (Failure, u32)>);

impl Faults {
    pub(crate) fn add(&mut self, fault: Option<Failure>) {
        if let Some(f) = fault {
            self.0.entry(f.message.clone()).or_insert((f, 0)).1 += 1;
        }
    }

    /// Each fault with `(N of TOTAL attempts)` after its sentence.
    pub(crate) fn counted(self, total: usize) -> Vec<Failure> {
        self.0
            .into_values()
            .map(|(f, n)| {
                f.map_message(|m| format!("{m} ({n} of {total} attempts)")).of_attempts_counted(n as usize)
            })
            .collect()
    }
}

fn check_answers(
    backends: &BTreeMap<String, crate::oracle::SeenSource>,
    uniform: bool,
    observed: &[Attempt],
) -> Vec<Failure> {
    let mut counts: BTreeMap<&str, u64> = backends.keys().map(|k| (k.as_str(), 0)).collect();
    let mut faults = Faults::default();
    for attempt in observed {
        let fault = match attempt {
            Attempt::Answered { pod, seen } => match backends.get(pod) {
                None => Some(Failure::new(
                    Symptom::WrongBackend,
                    format!("answered by {pod}, which is not a valid backend"),
                )),
                Some(source) => {
                    *counts.get_mut(pod.as_str()).expect("keys mirror backends") += 1;
                    (!source.allows(seen.ip())).then(|| {
                        Failure::new(
                            Symptom::WrongSource,
                            format!("{pod} saw source {}, expected {source}", seen.ip()),
                        )
                    })
                }
            },
            other => Some(wrong_kind(other)),
        };
        faults.add(fault);
    }
    let mut failures = faults.counted(observed.len());
    let answered: u64 = counts.values().sum();
    if uniform && backends.len() > 1 && answered > 0 {
        let (low, high) = share_bounds(answered, backends.len() as u64, FALSE_FAILURE_RATE);
        for (pod, &n) in &counts {
            if n < low || n > high {
                failures.push(Failure::new(Symptom::Uneven, format!(
                    "{pod} answered {n} of {answered}; with {} equally likely backends a correct proxy gives {low}..={high} (false-failure rate ≤ {FALSE_FAILURE_RATE:e})",
                    backends.len()
                )));
            }
        }
    }
    failures
}

/// `: why` for attempts that carry a reason, nothing otherwise.
fn reason(attempt: &Attempt) -> String {
    match attempt {
        Attempt::Refused { reason } | Attempt::Broken { reason } => format!(": {reason}"),
        _ => String::new(),
    }
}

/// Bounds `[low, high]` on one backend's count out of `n` answers spread uniformly over `k`
/// backends, such that the chance any backend falls outside is at most `rate` (Bonferroni over
/// `k` backends, split evenly between the two tails; exact binomial tails).
pub(crate) fn share_bounds(n: u64, k: u64, rate: f64) -> (u64, u64) {
    let p = 1.0 / k as f64;
    let tail = rate / (2.0 * k as f64);
    let pmf: Vec<f64> = (0..=n).map(|x| binomial_pmf(n, x, p)).collect();
    let mut low = 0;
    let mut below = 0.0;
    while low < n && below + pmf[low as usize] <= tail {
        below += pmf[low as usize];
        low += 1;
    }
    let mut high = n;
    let mut above = 0.0;
    while high > 0 && above + pmf[high as usize] <= tail {
        above += pmf[high as usize];
        high -= 1;
    }
    (low, high)
}

fn binomial_pmf(n: u64, x: u64, p: f64) -> f64 {
    let ln_choose = ln_factorial(n) - ln_factorial(x) - ln_factorial(n - x);
    (ln_choose + x as f64 * p.ln() + (n - x) as f64 * (1.0 - p).ln()).exp()
}

fn ln_factorial(n: u64) -> f64 {
    (2..=n).map(|i| (i as f64).ln()).sum()
}

/// `40/40 answered: a 19, b 21; saw 10.244.1.20` or `3/3 refused` or mixes of both.
pub(crate) fn summarize(observed: &[Attempt]) -> String {
    let total = observed.len();
    let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
    let mut by_pod: BTreeMap<&str, usize> = BTreeMap::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for a in observed {
        *by_kind.entry(a.kind()).or_default() += 1;
        if let Attempt::Answered { pod, seen: s } = a {
            *by_pod.entry(pod).or_default() += 1;
            *seen.entry(s.ip().to_string()).or_default() += 1;
        }
    }
    let mut out = String::new();
    for (kind, n) in &by_kind {
        if !out.is_empty() {
            out.push_str("; ");
        }
        let _ = write!(out, "{n}/{total} {kind}");
        if *kind == "answered" {
            let pods: Vec<String> = by_pod.iter().map(|(p, n)| format!("{p} {n}")).collect();
            let _ = write!(out, ": {}", pods.join(", "));
            let sources: Vec<&str> = seen.keys().map(String::as_str).collect();
            let _ = write!(out, "; saw {}", sources.join("|"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Protocol, Source, Target};
    use crate::oracle::SeenSource;

    fn probe() -> Probe {
        let to = Target::Address("10.96.0.10:53".parse().unwrap());
        Probe { protocol: Protocol::Udp, count: 0, ..Probe::example(Source::Pod("client".into()), to) }
    }

    fn answered(pod: &str, ip: &str) -> Attempt {
        Attempt::Answered { pod: pod.into(), seen: format!("{ip}:20000").parse().unwrap() }
    }

    fn two_backends() -> Expectation {
        let client = SeenSource::Client { addrs: vec!["10.244.1.20".parse().unwrap()] };
        Expectation::required(
            Outcome::Answered {
                backends: [("a".to_string(), client.clone()), ("b".to_string(), client)].into(),
                spread: Spread::Uniform,
                translated_by: Some("node-a".into()),
            },
            "test",
        )
    }

    fn verdict(expected: &Expectation, observed: Vec<Attempt>) -> ProbeVerdict {
        judge(&probe(), "10.96.0.10:53".parse().unwrap(), expected, observed)
    }

    #[test]
    fn bounds_are_exact_binomial_tails() {
        // Two backends, 40 answers, tail budget 1e-6/4: P(X <= 4) ≈ 9.3e-8 fits, P(X <= 5) ≈ 6.9e-7 does not.
        assert_eq!(share_bounds(40, 2, 1e-6), (5, 35));
        // Too few attempts to demand anything.
        assert_eq!(share_bounds(10, 2, 1e-6), (0, 10));
        // Seven backends need about a hundred attempts before each must be seen at least once.
        assert_eq!(share_bounds(100, 7, 1e-6).0, 0);
        assert!(share_bounds(140, 7, 1e-6).0 >= 1);
    }

    #[test]
    fn even_spread_from_the_client_passes() {
        let observed = (0..40).map(|i| answered(if i % 2 == 0 { "a" } else { "b" }, "10.244.1.20")).collect();
        let v = verdict(&two_backends(), observed);
        assert!(v.passed(), "{:?}", v.failures);
        assert_eq!(v.observed_summary(), "40/40 answered: a 20, b 20; saw 10.244.1.20");
    }

    #[test]
    fn a_backend_never_chosen_fails() {
        let observed = (0..40).map(|_| answered("a", "10.244.1.20")).collect();
        let v = verdict(&two_backends(), observed);
        assert!(v.failures.iter().any(|f| f.message.starts_with("b answered 0 of 40")), "{:?}", v.failures);
    }

    #[test]
    fn a_masqueraded_source_fails_when_the_client_must_be_seen() {
        let v = verdict(&two_backends(), vec![answered("a", "10.244.1.1")]);
        assert_eq!(
            v.failures,
            vec!["a saw source 10.244.1.1, expected client 10.244.1.20 (1 of 1 attempts)"]
        );
    }

    #[test]
    fn wrong_backend_and_wrong_kind_fail() {
        let v = verdict(&two_backends(), vec![answered("c", "10.244.1.20"), Attempt::Silent]);
        assert_eq!(v.failures.len(), 2, "{:?}", v.failures);
        let reject = Expectation::required(Outcome::Rejected, "test");
        let v = verdict(&reject, vec![Attempt::Silent, Attempt::Refused { reason: "x".into() }]);
        assert_eq!(v.failures, vec!["1 of 2 attempts were not refused: 1/1 silent"]);
    }

    /// A signature's mark is certain only where every attempt shows its symptom
    /// (`commands::mutants`): the counts come from the failures, kind by kind.
    #[test]
    fn attempts_are_counted_by_the_kind_they_show() {
        let observed = vec![
            answered("a", "10.244.1.1"),
            answered("a", "10.244.1.1"),
            answered("b", "10.244.1.2"),
            Attempt::Silent,
        ];
        let v = verdict(&two_backends(), observed);
        assert_eq!(v.attempts_showing(Symptom::WrongSource), Some((3, 4)));
        assert_eq!(v.attempts_showing(Symptom::Silent), Some((1, 4)));
        assert_eq!(v.attempts_showing(Symptom::Refused), Some((0, 4)));
        let dropped = Expectation::required(Outcome::Dropped, "test");
        let v =
            verdict(&dropped, vec![answered("a", "10.244.1.20"), Attempt::Refused { reason: "x".into() }]);
        assert_eq!(v.attempts_showing(Symptom::Answered), Some((1, 2)));
        assert_eq!(v.attempts_showing(Symptom::Refused), Some((1, 2)));
        // A failure of the probe as a whole counts no attempts.
        let v = verdict(&two_backends(), (0..40).map(|_| answered("a", "10.244.1.20")).collect());
        assert_eq!(v.attempts_showing(Symptom::Uneven), None);
    }
}
