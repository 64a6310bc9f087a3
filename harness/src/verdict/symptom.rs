//! The kind of each failure the verdict writes ([`Symptom`], the known-bug catalog's
//! vocabulary): the verdict's modules write every failure as a sentence, and this module, beside
//! them, reads each sentence's opening back into its kind, so a signature can say "the hairpin
//! probe goes silent" without quoting addresses or counts.

use std::collections::BTreeSet;

use super::ProbeVerdict;
use crate::kubernetes::known_bugs::Symptom;

impl ProbeVerdict {
    /// The kinds of this probe's failures (empty when it passed).
    pub fn symptoms(&self) -> BTreeSet<Symptom> {
        self.failures.iter().flat_map(|f| of_failure(f)).collect()
    }
}

/// The kinds of one failure sentence, as the verdict's modules write them (`mod.rs`'s checks,
/// `evidence`, `held`, `affinity`, and the live steps' checks).
pub fn of_failure(failure: &str) -> BTreeSet<Symptom> {
    use Symptom::*;
    let f = failure;
    let one = |s| BTreeSet::from([s]);
    if f.contains(", which is not a valid backend") || f.contains("answered, but it backs no endpoint") {
        return one(WrongBackend);
    }
    if f.contains(" saw source ") {
        return one(WrongSource);
    }
    if f.starts_with("session affinity broken") || f.starts_with("session affinity lost") {
        return one(AffinityBroken);
    }
    if f.starts_with("session affinity never expired") {
        return one(AffinityKept);
    }
    if f.contains(" equally likely backends ") {
        return one(Uneven);
    }
    if f.starts_with("HTTP ") || f.starts_with("localEndpoints ") {
        return one(WrongHealth);
    }
    if f.starts_with("reset by a host") || (f.starts_with("refused by ") && f.contains("'s own stack")) {
        return one(RefusedByHost);
    }
    if [
        "not dropped:",
        "forwarded, not rejected",
        "rejected to the client, yet",
        "forwarded, unanswered",
        "forwarded:",
    ]
    .iter()
    .any(|p| f.starts_with(p))
    {
        return one(Leaked);
    }
    // `N of M attempts were not refused: 3/3 answered: web-0 3; saw …`: the kinds of the others.
    if let Some((_, others)) = f.split_once(" attempts were not ").and_then(|(_, rest)| rest.split_once(": "))
    {
        let kinds: BTreeSet<Symptom> = others
            .split("; ")
            .filter_map(|part| part.split_once(' ').map(|(_, kind)| kind))
            .filter_map(|kind| attempt_kind(kind.split(':').next().unwrap_or_default()))
            .collect();
        return if kinds.is_empty() { one(Other) } else { kinds };
    }
    // An attempt of the wrong kind where an answer was expected: `silent (2 of 6 attempts)`,
    // `refused: why (…)`.
    if let Some(kind) = attempt_kind(f.split([' ', ':']).next().unwrap_or_default()) {
        return one(kind);
    }
    if ["on the wire:", "conntrack on ", "expected forwarded", "after the hand-made"]
        .iter()
        .any(|p| f.starts_with(p))
    {
        return one(WrongPath);
    }
    one(Other)
}

/// An attempt's kind (`traffic::Attempt::kind`) as the symptom of its being there.
fn attempt_kind(kind: &str) -> Option<Symptom> {
    Some(match kind {
        "answered" | "http" => Symptom::Answered,
        "silent" => Symptom::Silent,
        "refused" => Symptom::Refused,
        "broken" => Symptom::Broken,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use Symptom::*;

    #[test]
    fn each_sentence_reads_back_as_its_kind() {
        let cases = [
            ("answered by web-9, which is not a valid backend (3 of 6 attempts)", vec![WrongBackend]),
            (
                "dns-old answered, but it backs no endpoint of this destination (10 of 10 attempts)",
                vec![WrongBackend],
            ),
            (
                "web-0 saw source 10.244.1.10, expected masq node-a 10.244.1.1 (6 of 6 attempts)",
                vec![WrongSource],
            ),
            ("silent (4 of 6 attempts)", vec![Silent]),
            ("refused: connection refused (RST or ICMP port unreachable) (3 of 3 attempts)", vec![Refused]),
            (
                "refused: the held connection was reset (Connection reset by peer (os error 104)) (1 of 1 attempts)",
                vec![Refused],
            ),
            ("3 of 3 attempts were not refused: 3/3 silent", vec![Silent]),
            (
                "5 of 5 attempts were not silent (dropped): 2/5 answered: a 2; saw 10.0.0.1; 3/5 refused",
                vec![Answered, Refused],
            ),
            (
                "session affinity broken: one client reached 3 different backends (a, b, c) in 9 attempts",
                vec![AffinityBroken],
            ),
            (
                "session affinity lost at step proxy-restart: pod client-a was stuck to cart-1, which still serves, and now reached cart-3",
                vec![AffinityBroken],
            ),
            (
                "session affinity never expired: all 8 attempts, spaced past the 1s timeout, reached a",
                vec![AffinityKept],
            ),
            (
                "web-1 answered 0 of 40; with 2 equally likely backends a correct proxy gives 7..=33 (false-failure rate ≤ 1e-6)",
                vec![Uneven],
            ),
            ("HTTP 200, expected 503 (3 of 3 attempts)", vec![WrongHealth]),
            ("not dropped: forwarded: 1.2.3.4:5 > 6.7.8.9:80 TCP [S] left node node-a", vec![Leaked]),
            ("reset by a host, not rejected by a rule: x came back", vec![RefusedByHost]),
            (
                "after the hand-made out-of-window segment 10.244.2.10:8080 > 10.244.1.20:20000 [P.]",
                vec![WrongPath],
            ),
            ("conntrack on node-a: no entry for source port 20000 > 10.96.0.1:80", vec![WrongPath]),
            ("something new", vec![Other]),
        ];
        for (sentence, kinds) in cases {
            assert_eq!(of_failure(sentence), kinds.into_iter().collect(), "{sentence}");
        }
    }
}
