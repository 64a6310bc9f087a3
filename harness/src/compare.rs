//! Behaviour compared between two proxies: the same scenarios run with each, and every flow
//! whose observed behaviour differs is listed, whether or not either side passes. This is the
//! release gate's question, "what changed in data-plane behaviour between v1 and v2", so it
//! compares what happened (answered, refused or silent; which backends; which source they
//! saw), never the verdicts: a proxy that starts to masquerade where the other did not shows
//! up even under a profile that allows both. `packetproof diff` prints it; `explore --against`
//! runs it on generated cases.
//!
//! Both sides send every probe the same way (the kube-proxy iptables profile decides pacing
//! only), so that a difference is the proxies', not the harness's.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::engine::{Engine, Reporter, Run, RunProxy};
use crate::model::{Cluster, Profile, ProxyChoice, Scenario, Source, bridge_address};
use crate::results::{Outcome, ScenarioReport};
use crate::runner::RunOptions;
use crate::traffic::Attempt;
use crate::verdict::ProbeVerdict;

/// What one proxy did with one probe, summarised so that two runs of the same proxy agree:
/// which backend answers an attempt is chance, so backends are compared only where both sides
/// reached them (the source each saw), plus the backends the oracle does not allow at all, and
/// whether every attempt stuck to one backend.
#[derive(Debug, Clone)]
pub struct Behaviour {
    /// `answered`, `refused`, `silent`, `http 200`, …
    pub outcomes: BTreeSet<String>,
    /// Each backend reached, and how it saw the client: `client`, `node NAME`, or the address.
    pub sources: BTreeMap<String, BTreeSet<String>>,
    /// Backends reached that Kubernetes semantics do not allow for this probe.
    pub unexpected: BTreeSet<String>,
    /// Whether every answered attempt went to one backend, when enough were answered that a
    /// uniform spread over the allowed backends would not do that by chance (beyond 1e-6).
    pub stuck: Option<bool>,
}

impl Behaviour {
    /// Whether the two differ beyond chance.
    pub fn differs(&self, other: &Behaviour) -> bool {
        let shared_sources_differ = self
            .sources
            .iter()
            .any(|(pod, seen)| other.sources.get(pod).is_some_and(|theirs| theirs != seen));
        self.outcomes != other.outcomes
            || self.unexpected != other.unexpected
            || matches!((self.stuck, other.stuck), (Some(a), Some(b)) if a != b)
            || shared_sources_differ
    }
}

impl fmt::Display for Behaviour {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let join = |set: &BTreeSet<String>| set.iter().cloned().collect::<Vec<_>>().join("|");
        write!(f, "{}", join(&self.outcomes))?;
        if !self.sources.is_empty() {
            let by: Vec<String> =
                self.sources.iter().map(|(pod, seen)| format!("{pod} seeing {}", join(seen))).collect();
            write!(f, " by {}", by.join(", "))?;
        }
        if self.stuck == Some(true) {
            f.write_str(" (every attempt)")?;
        }
        if !self.unexpected.is_empty() {
            write!(f, " [not allowed: {}]", join(&self.unexpected))?;
        }
        Ok(())
    }
}

/// One flow whose behaviour differs, or a scenario one side could not judge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowDiff {
    pub scenario: String,
    pub probe: String,
    pub left: String,
    pub right: String,
    /// Whether each side's behaviour passed the oracle (`None`: not sent or not judged), to say
    /// which side the expectation agrees with.
    pub passed: (Option<bool>, Option<bool>),
}

/// A scenario whose two sides could not be compared: a side never set up (an input or machine
/// fault, as `run` counts it) or skipped here. Nothing was compared, so it is no difference.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotCompared {
    pub scenario: String,
    /// `left: setup error: …`, `right: skipped: …`, one line per side that did not run.
    pub why: String,
    /// Whether a side failed to set up (exit 2) rather than being skipped.
    pub error: bool,
}

/// What a diff found: the flows that behave differently, and the scenarios not compared.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Differences {
    pub flows: Vec<FlowDiff>,
    pub not_compared: Vec<NotCompared>,
    /// Scenarios both sides ran and that were compared.
    pub compared: usize,
}

impl Differences {
    /// Whether some scenario was not compared because a side could not be set up.
    pub fn setup_failed(&self) -> bool {
        self.not_compared.iter().any(|n| n.error)
    }
}

/// Runs every scenario with both proxies through `engine` (a run is one scenario with one
/// proxy; `reporters` hear of each) and returns the flows that behave differently and the
/// scenarios that could not be compared.
pub fn diff(
    scenarios: &[Scenario],
    left: &ProxyChoice,
    right: &ProxyChoice,
    engine: &Engine,
    reporters: &mut [&mut dyn Reporter],
) -> anyhow::Result<Differences> {
    let engine = Engine {
        options: RunOptions { profile: Some(Profile::KUBE_PROXY_IPTABLES), ..engine.options.clone() },
        ..engine.clone()
    };
    // Each side's evidence in a folder of its own (`left/SCENARIO`, `right/SCENARIO`).
    let folders = engine.options.artifacts.as_ref().map(|root| (root.join("left"), root.join("right")));
    let (left_folder, right_folder) = match &folders {
        Some((l, r)) => (Some(l.as_path()), Some(r.as_path())),
        None => (None, None),
    };
    let runs: Vec<Run> = scenarios
        .iter()
        .flat_map(|s| {
            [
                Run { artifacts: left_folder, ..Run::new(s, RunProxy::Choice(left)) },
                Run { artifacts: right_folder, ..Run::new(s, RunProxy::Choice(right)) },
            ]
        })
        .collect();
    let mut results = engine.execute(&runs, reporters)?.into_iter().map(|(_, result)| result);
    let mut out = Differences::default();
    for s in scenarios {
        match (results.next(), results.next()) {
            (Some(l), Some(r)) => match compare(s, l, r) {
                Ok(flows) => {
                    out.compared += 1;
                    out.flows.extend(flows);
                }
                Err(not) => out.not_compared.push(not),
            },
            _ => out.not_compared.push(NotCompared {
                scenario: s.name.clone(),
                why: "never ran".into(),
                error: true,
            }),
        }
    }
    Ok(out)
}

fn whole(s: &Scenario, left: String, right: String) -> FlowDiff {
    FlowDiff { scenario: s.name.clone(), probe: "(whole scenario)".into(), left, right, passed: (None, None) }
}

/// The flows of `s` that behave differently, or why its sides cannot be compared: a side
/// that was never set up or was skipped ran nothing, so nothing of it can differ. A proxy that
/// failed (crashed, never synced) did run: that is its behaviour, compared as such.
fn compare(
    s: &Scenario,
    l: anyhow::Result<ScenarioReport>,
    r: anyhow::Result<ScenarioReport>,
) -> Result<Vec<FlowDiff>, NotCompared> {
    let unrun = |side: &str, result: &anyhow::Result<ScenarioReport>| match result {
        Err(e) => Some((format!("{side}: setup error: {e:#}"), true)),
        Ok(ScenarioReport { outcome: Outcome::Skipped(why), .. }) => {
            Some((format!("{side}: skipped: {why}"), false))
        }
        Ok(_) => None,
    };
    let sides: Vec<(String, bool)> = [unrun("left", &l), unrun("right", &r)].into_iter().flatten().collect();
    if !sides.is_empty() {
        return Err(NotCompared {
            scenario: s.name.clone(),
            why: sides.iter().map(|(why, _)| why.as_str()).collect::<Vec<_>>().join("; "),
            error: sides.iter().any(|(_, error)| *error),
        });
    }
    let (Ok(lr), Ok(rr)) = (&l, &r) else { unreachable!("both sides ran") };
    let describe = |r: &ScenarioReport| match &r.outcome {
        Outcome::ProxyFailed(why) => format!("proxy failed: {why}"),
        _ => "ran".into(),
    };
    let (Outcome::Judged(lv), Outcome::Judged(rv)) = (&lr.outcome, &rr.outcome) else {
        let (ld, rd) = (describe(lr), describe(rr));
        return Ok(if ld == rd { Vec::new() } else { vec![whole(s, ld, rd)] });
    };
    let clusters: BTreeMap<&str, &Cluster> = s
        .phases()
        .iter()
        .flat_map(|p| p.probes.iter().map(move |probe| (probe.name.as_str(), p.cluster)))
        .collect();
    let behaviours = |verdicts: &[ProbeVerdict]| -> BTreeMap<String, Behaviour> {
        verdicts
            .iter()
            .map(|v| {
                let cluster = clusters.get(v.probe.name.as_str()).copied().unwrap_or(&s.cluster);
                (v.probe.name.clone(), behaviour(cluster, v))
            })
            .collect()
    };
    let (lb, rb) = (behaviours(lv), behaviours(rv));
    let passed = |verdicts: &[ProbeVerdict], name: &str| {
        verdicts.iter().find(|v| v.probe.name == name).map(ProbeVerdict::passed)
    };
    let names: BTreeSet<&String> = lb.keys().chain(rb.keys()).collect();
    Ok(names
        .into_iter()
        .filter_map(|name| {
            let show = |b: Option<&Behaviour>| b.map_or("(not sent)".to_string(), Behaviour::to_string);
            let (l, r) = (lb.get(name), rb.get(name));
            let differ = match (l, r) {
                (Some(l), Some(r)) => l.differs(r),
                _ => true,
            };
            differ.then(|| FlowDiff {
                scenario: s.name.clone(),
                probe: name.clone(),
                left: show(l),
                right: show(r),
                passed: (passed(lv, name), passed(rv, name)),
            })
        })
        .collect())
}

/// The summary of a probe's attempts (see [`Behaviour`]).
pub fn behaviour(cluster: &Cluster, verdict: &ProbeVerdict) -> Behaviour {
    let client = client_addresses(cluster, &verdict.probe.from);
    let allowed: BTreeSet<&String> = match &verdict.expected.outcome {
        crate::oracle::Outcome::Answered { backends, .. } => backends.keys().collect(),
        _ => BTreeSet::new(),
    };
    let mut b = Behaviour {
        outcomes: BTreeSet::new(),
        sources: BTreeMap::new(),
        unexpected: BTreeSet::new(),
        stuck: None,
    };
    let mut answered = 0u32;
    for attempt in &verdict.observed {
        let outcome = match attempt {
            Attempt::Http { status, .. } => format!("http {status}"),
            other => other.kind().to_string(),
        };
        b.outcomes.insert(outcome);
        if let Attempt::Answered { pod, seen } = attempt {
            answered += 1;
            b.sources.entry(pod.clone()).or_default().insert(source_class(cluster, &client, seen.ip()));
            if !allowed.contains(pod) {
                b.unexpected.insert(pod.clone());
            }
        }
    }
    // k^(1-n) <= 1e-6: n attempts uniform over k backends all land on one only by chance.
    let k = allowed.len().max(b.sources.len()) as f64;
    let decidable = k >= 2.0 && f64::from(answered) >= 1.0 + 6.0 / k.log10();
    b.stuck = decidable.then_some(b.sources.len() == 1);
    b
}

/// Every address the source may send from: a pod's, an external host's, or any of a node's.
fn client_addresses(cluster: &Cluster, from: &Source) -> Vec<IpAddr> {
    match from {
        Source::Node(name) => cluster.node(name).map(|n| node_addresses(n).collect()).unwrap_or_default(),
        Source::Pod(name) => cluster.pod(name).map(|p| p.ips.copied().collect()).unwrap_or_default(),
        Source::External(name) => {
            cluster.external_host(name).map(|h| h.ips.copied().collect()).unwrap_or_default()
        }
    }
}

fn node_addresses(n: &crate::model::Node) -> impl Iterator<Item = IpAddr> + '_ {
    n.all_ips().chain(n.pod_cidrs.iter().map(bridge_address))
}

fn source_class(cluster: &Cluster, client: &[IpAddr], seen: IpAddr) -> String {
    if client.contains(&seen) {
        return "client".into();
    }
    match cluster.nodes.iter().find(|n| node_addresses(n).any(|ip| ip == seen)) {
        Some(n) => format!("node {}", n.name),
        None => seen.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::model::PerFamily;

    fn answered(pod: &str, seen: &str) -> Attempt {
        Attempt::Answered { pod: pod.into(), seen: format!("{seen}:40000").parse().unwrap() }
    }

    fn verdict(observed: Vec<Attempt>) -> ProbeVerdict {
        let client = crate::oracle::SeenSource::Client { addrs: vec![] };
        let backends = [("web-0".to_string(), client.clone()), ("web-1".to_string(), client)].into();
        let outcome = crate::oracle::Outcome::Answered {
            backends,
            spread: crate::oracle::Spread::Uniform,
            translated_by: None,
        };
        ProbeVerdict {
            probe: crate::model::Probe {
                count: observed.len() as u32,
                ..crate::model::Probe::example(
                    Source::External("outside".into()),
                    crate::model::Target::Address("10.96.0.1:80".parse().unwrap()),
                )
            },
            destination: "10.96.0.1:80".parse().unwrap(),
            expected: crate::oracle::Expectation::required(outcome, "test"),
            observed,
            failures: vec![],
            harness_faults: vec![],
        }
    }

    fn hairpin() -> Scenario {
        let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/hairpin.yaml");
        crate::admission::load(&file).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_side_that_never_ran_is_not_compared_and_never_a_difference() {
        let s = hairpin();
        let ran = || {
            Ok(ScenarioReport {
                outcome: Outcome::Judged(vec![]),
                ..ScenarioReport::skipped(&s, "r", String::new())
            })
        };
        let not =
            compare(&s, Err(anyhow::anyhow!("starting nonexistent-proxy: not found")), ran()).unwrap_err();
        assert!(
            not.error && not.why == "left: setup error: starting nonexistent-proxy: not found",
            "{not:?}"
        );
        let skipped = Ok(ScenarioReport::skipped(&s, "r", "no SCTP sockets".into()));
        let not = compare(&s, ran(), skipped).unwrap_err();
        assert!(!not.error && not.why == "right: skipped: no SCTP sockets", "{not:?}");

        let errored = NotCompared { error: true, ..not };
        let found = Differences { flows: vec![], not_compared: vec![errored], compared: 0 };
        assert!(found.setup_failed());
    }

    #[test]
    fn differences_beyond_chance_are_kept_and_chance_is_not_a_difference() {
        let mut c = Cluster::example(vec![]);
        c.external_hosts.push(crate::model::ExternalHost {
            name: "outside".into(),
            ips: PerFamily::single("192.168.50.100".parse().unwrap()),
            routes: vec![],
        });
        let b = |attempts: Vec<Attempt>| behaviour(&c, &verdict(attempts));
        let kept = b(vec![answered("web-0", "192.168.50.100"), answered("web-1", "192.168.50.100")]);
        let masq = b(vec![answered("web-0", "192.168.50.2"), answered("web-1", "10.244.0.1")]);
        assert_eq!(kept.to_string(), "answered by web-0 seeing client, web-1 seeing client");
        assert_eq!(masq.to_string(), "answered by web-0 seeing node node-a, web-1 seeing node node-a");
        assert!(kept.differs(&masq), "masquerading where the other did not");

        // Which backends a few attempts reach is chance; the sources of the shared ones agree.
        let only_first = b(vec![answered("web-0", "192.168.50.100"); 2]);
        let only_second = b(vec![answered("web-1", "192.168.50.100"); 2]);
        assert!(!only_first.differs(&only_second), "two attempts on one backend is chance");
        assert!(!only_first.differs(&kept), "two attempts on one backend is chance");
        let stuck = b(vec![answered("web-0", "192.168.50.100"); 21]);
        let spread =
            b([vec![answered("web-0", "192.168.50.100"); 20], vec![answered("web-1", "192.168.50.100")]]
                .concat());
        assert_eq!(stuck.stuck, Some(true));
        assert!(stuck.differs(&spread), "21 attempts on one of two backends is no chance");

        let stranger = b(vec![answered("web-9", "192.168.50.100"), answered("web-0", "192.168.50.100")]);
        assert!(stranger.differs(&kept), "a backend Kubernetes does not allow");
        let refused = b(vec![Attempt::Refused { reason: "RST".into() }]);
        assert_eq!(refused.to_string(), "refused");
        assert!(refused.differs(&kept));
    }
}
