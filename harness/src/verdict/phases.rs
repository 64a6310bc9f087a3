//! A run judged, phase by phase: each probe on what it got back, what the wire carried while
//! it ran and the conntrack tables read after its phase; then across probes: a client's
//! affinity from step to step, and expiry across the clients of one probe (`affinity`).

use std::collections::BTreeMap;
use std::net::SocketAddr;

use super::evidence::{Evidence, Window};
use super::{Failure, ProbeVerdict, affinity, late};
use crate::model::{Cluster, Phase, Probe};
use crate::observe::{Flow, Frame};
use crate::oracle::{Expectation, Outcome};
use crate::traffic::Sent;

/// What the captures and conntrack tables must show of a probe that got `sent` back; each
/// kind of probe has its own (`probe`).
pub trait Witnesses {
    /// Failures of the witnesses; `during` is what the wire carried while the probe ran, with
    /// the conntrack tables read after its phase.
    fn check(
        &self,
        cluster: &Cluster,
        probe: &Probe,
        dst: SocketAddr,
        outcome: &Outcome,
        sent: &[Sent],
        during: &Evidence,
    ) -> Vec<Failure>;

    /// The attempts (positions in `sent`) whose request, by the witnesses, never left the
    /// client: they prove nothing about the proxy, and are set apart before the probe is
    /// judged. None, for a kind that cannot tell.
    fn never_left(
        &self,
        _cluster: &Cluster,
        _probe: &Probe,
        _dst: SocketAddr,
        _sent: &[Sent],
        _during: &Evidence,
    ) -> Vec<usize> {
        Vec::new()
    }
}

/// A probe as sent: its destination, its attempts, the frames it is judged on, faults found
/// while sending (a held connection answered by another backend than before), and the
/// witnesses its kind judges it by.
pub struct SentProbe {
    pub dst: SocketAddr,
    pub sent: Vec<Sent>,
    pub window: Window,
    pub faults: Vec<Failure>,
    pub witnesses: Box<dyn Witnesses>,
}

/// Each node's conntrack table read after a phase, by node name.
pub type ConntrackTables = BTreeMap<String, Vec<Flow>>;

/// Judges every phase's probes (`expectations` and `probed`: per phase, in the order of its
/// probes) on the run's `frames`. Returns the verdicts, and the evidence as it stands after
/// the last phase (the frames, the last conntrack tables).
pub fn judge_run(
    phases: &[Phase<'_>],
    expectations: &[Vec<Expectation>],
    probed: Vec<(Vec<SentProbe>, ConntrackTables)>,
    frames: BTreeMap<String, Vec<Frame>>,
) -> (Vec<ProbeVerdict>, Evidence) {
    let mut verdicts = Vec::new();
    let mut evidence = Evidence { frames, conntrack: BTreeMap::new() };
    let mut stuck = affinity::Stuck::default();
    for ((phase, expectations), (sent, tables)) in phases.iter().zip(expectations).zip(probed) {
        evidence.conntrack = tables;
        let mut judged = judge_phase(phase, expectations, sent, &evidence);
        stuck.check_phase(phase.name, phase.cluster, &mut judged);
        affinity::check_expiry_across_clients(&mut judged);
        verdicts.extend(judged);
    }
    (verdicts, evidence)
}

/// Judges one phase's probes on what they got back, what the wire carried while each ran,
/// and the conntrack tables read after the phase.
fn judge_phase(
    phase: &Phase<'_>,
    expectations: &[Expectation],
    sent: Vec<SentProbe>,
    evidence: &Evidence,
) -> Vec<ProbeVerdict> {
    phase
        .probes
        .iter()
        .zip(expectations)
        .zip(sent)
        .map(|((probe, expected), SentProbe { dst, sent, window, faults, witnesses })| {
            // Each probe is judged on what the wire carried while it ran (a probe sent together
            // with others, while they all ran: it reads only its own flows there).
            let during = evidence.during(&window);
            // An answer that came after the client's wait is an answer, not a drop.
            let sent = late::reconcile(phase.cluster, probe, dst, sent, evidence, &window);
            // Before anything is judged: attempts that never left the client prove nothing.
            let never_left = witnesses.never_left(phase.cluster, probe, dst, &sent, &during);
            let (sent, unsent): (Vec<_>, Vec<_>) =
                sent.into_iter().enumerate().partition(|(i, _)| never_left.binary_search(i).is_err());
            let sent: Vec<Sent> = sent.into_iter().map(|(_, s)| s).collect();
            let mut v = if sent.is_empty() {
                super::unjudged(probe, dst, expected)
            } else {
                super::judge(probe, dst, expected, sent.iter().map(|s| s.attempt.clone()).collect())
            };
            v.failures.extend(faults);
            if !sent.is_empty() {
                v.failures.extend(witnesses.check(
                    phase.cluster,
                    probe,
                    dst,
                    &expected.outcome,
                    &sent,
                    &during,
                ));
            }
            v.set_apart_harness_faults();
            if !unsent.is_empty() {
                let total = unsent.len() + sent.len();
                let ports: Vec<u16> = unsent.iter().map(|(_, s)| s.source_port).collect();
                let late = super::evidence::left_late(probe, &ports, evidence, &window);
                let (late, never): (Vec<u16>, Vec<u16>) = ports.iter().partition(|p| late.contains(p));
                let list = |ports: &[u16]| ports.iter().map(u16::to_string).collect::<Vec<_>>().join(", ");
                if !never.is_empty() {
                    v.harness_faults.insert(
                        0,
                        Failure::witnesses_disagree(format!(
                            "{} of {total} attempts never left the client: its socket sent them, its capture \
                             shows no packet of theirs leaving it (source ports {} > {dst}); they prove nothing \
                             about the proxy and were not judged",
                            never.len(),
                            list(&never)
                        )),
                    );
                }
                if !late.is_empty() {
                    v.harness_faults.insert(
                        0,
                        Failure::overloaded(format!(
                            "{} of {total} attempts left the client only after the probe's window had closed, \
                             by its capture (source ports {} > {dst}): the machine could not keep the \
                             harness's deadlines, so they prove nothing about the proxy and were not judged",
                            late.len(),
                            list(&late)
                        )),
                    );
                }
            }
            v
        })
        .collect()
}
