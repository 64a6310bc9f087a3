//! Whose bug a case is that failed once and not on its two re-runs: the proxy's, the oracle's or
//! the harness's. It is never a finding, but the output says which it most likely is, and on
//! what evidence, so that nobody must re-run it to know where to look.
//!
//! The case runs [`RERUNS`] more times on the proxy under test and as many on a second
//! implementation of the same thing ([`crate::proxy::second_opinion`]), judged by the same
//! expectation:
//! - failing the same way on the second implementation too: two implementations agree against
//!   the expectation, so the oracle is the suspect (or a bug both share);
//! - failing again only on the proxy under test: the proxy's;
//! - otherwise the harness's: its witnesses disagreed on a re-run, or the failure did not come
//!   back at all, and a verdict that changes between runs of the same proxy is a harness bug
//!   until its mechanism is found.
//!
//! An oracle mistake that shows in a fraction `p` of runs of any correct proxy is missed by the
//! second implementation with probability `(1 - p)^RERUNS`: 20 % for `p` = 1/3.

/// Re-runs of a once-failing case on each of the two implementations.
pub const RERUNS: usize = 4;

/// Whose bug a once-failing case most likely is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Suspect {
    Proxy,
    Oracle,
    Harness,
}

impl Suspect {
    pub fn name(self) -> &'static str {
        match self {
            Suspect::Proxy => "the proxy",
            Suspect::Oracle => "the oracle",
            Suspect::Harness => "the harness",
        }
    }
}

/// What the re-runs showed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reruns {
    /// The second implementation, as reports name it.
    pub other: String,
    /// Of [`RERUNS`] on the proxy under test, those that failed the way the first run did.
    pub again: usize,
    /// Of [`RERUNS`] on the other implementation, those that failed the way the first run did.
    pub again_on_other: usize,
    /// Of all re-runs, those whose witnesses disagreed (or the machine was overloaded).
    pub faulted: usize,
}

/// The suspect and the evidence, in words.
pub fn classify(r: &Reruns) -> (Suspect, String) {
    let other = &r.other;
    if r.again_on_other > 0 {
        return (
            Suspect::Oracle,
            format!(
                "{other} fails it the same way in {} of {RERUNS} runs: two implementations agree \
                 against the expectation (or share a bug)",
                r.again_on_other
            ),
        );
    }
    if r.again > 0 {
        return (
            Suspect::Proxy,
            format!(
                "it fails the same way again in {} of {RERUNS} more runs of this proxy, and in none \
                 of {RERUNS} of {other}",
                r.again
            ),
        );
    }
    if r.faulted > 0 {
        return (
            Suspect::Harness,
            format!("its witnesses disagreed in {} of {} re-runs", r.faulted, 2 * RERUNS),
        );
    }
    (
        Suspect::Harness,
        format!(
            "it did not fail again in {} runs of this proxy nor in {RERUNS} of {other}: a verdict \
             that changes between runs is the harness's until its mechanism is found",
            2 + RERUNS
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reruns(again: usize, again_on_other: usize, faulted: usize) -> Reruns {
        Reruns { other: "builtin-nftables".into(), again, again_on_other, faulted }
    }

    #[test]
    fn a_failure_another_implementation_shares_is_the_oracles() {
        assert_eq!(classify(&reruns(0, 1, 0)).0, Suspect::Oracle);
        assert_eq!(classify(&reruns(3, 2, 1)).0, Suspect::Oracle);
    }

    #[test]
    fn a_failure_only_this_proxy_repeats_is_the_proxys() {
        let (suspect, why) = classify(&reruns(1, 0, 1));
        assert_eq!(suspect, Suspect::Proxy);
        assert!(why.contains("1 of 4 more runs"), "{why}");
    }

    #[test]
    fn a_failure_that_never_returns_or_whose_witnesses_disagree_is_the_harnesss() {
        let (suspect, why) = classify(&reruns(0, 0, 2));
        assert_eq!(suspect, Suspect::Harness);
        assert!(why.contains("2 of 8 re-runs"), "{why}");
        let (suspect, why) = classify(&reruns(0, 0, 0));
        assert_eq!(suspect, Suspect::Harness);
        assert!(why.contains("6 runs of this proxy nor in 4 of builtin-nftables"), "{why}");
    }
}
