//! Runs one scenario end to end, in order: the oracle's expectations, before any namespace
//! exists; on a [`Stage`], the proxy, servers and captures; each phase's probes (sent as
//! `probe` schedules them) and the conntrack tables read after it; the verdicts (`verdict`);
//! for a failure, the evidence (`report::evidence`). The stage takes it all down again.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::coverage;
use crate::model::{Phase, Probe, Protocol, Scenario};
use crate::observe::conntrack;
use crate::observe::conntrack_events::NodeRecorders;
use crate::oracle;
use crate::probe::{Kinds, Wire};
use crate::proxy::{Proxy, ProxyFailed, Running, State};
use crate::report::evidence;
use crate::results::{Outcome, ScenarioReport, Timings};
use crate::stage::{Keeper, Scene, Stage};
use crate::topology::Topology;
use crate::verdict::{self, ConntrackTables, ProbeVerdict, SentProbe};

#[derive(Debug, Clone)]
pub struct RunOptions {
    /// How long an attempt waits before it counts as silent (dropped).
    pub timeout: Duration,
    /// Where scenarios leave their evidence (pcaps, conntrack, rules); none keeps nothing.
    pub artifacts: Option<PathBuf>,
    /// Keep evidence for passing scenarios too, not only for failing ones.
    pub keep_passing: bool,
    /// The profile to judge by; none takes the proxy's own.
    pub profile: Option<crate::model::Profile>,
    /// Nodes that already exist (kind nodes, containers, namespaces), by scenario node name;
    /// empty: packetproof makes the nodes.
    pub nodes: crate::topology::existing::NodeMap,
    /// Trace which of the proxy's rules each probe's packets matched (`run --coverage`).
    pub coverage: bool,
    /// Each worker keeps its topology, reset, for its next run of the same topology
    /// (`stage::Keeper`): the mutant hunt runs every scenario once per mutant.
    pub reuse_topologies: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        // Answers take well under a millisecond here; a second is three orders of margin.
        RunOptions {
            timeout: Duration::from_secs(1),
            artifacts: None,
            keep_passing: false,
            profile: None,
            nodes: Default::default(),
            coverage: false,
            reuse_topologies: false,
        }
    }
}

/// Runs `scenario` with `proxy`. An `Err` is a setup failure (the input, the machine), distinct
/// from probes that ran and failed and from a proxy that failed at its job ([`ProxyFailed`]).
pub fn run(scenario: &Scenario, proxy: &dyn Proxy, options: &RunOptions) -> Result<ScenarioReport> {
    run_kept(scenario, proxy, options, None)
}

/// As [`run`], on `keeper`'s stage where it kept one of this topology, and keeping the stage
/// there afterwards (on nodes packetproof makes).
pub fn run_kept(
    scenario: &Scenario,
    proxy: &dyn Proxy,
    options: &RunOptions,
    keeper: Option<&mut Keeper>,
) -> Result<ScenarioReport> {
    let started = Instant::now();
    // Evidence of an earlier run of this scenario would be read as this run's.
    let evidence_dir = match &options.artifacts {
        Some(root) => Some(evidence::clear(root, &scenario.name)?),
        None => None,
    };
    let error = match run_in(scenario, proxy, options, evidence_dir.clone(), started, keeper) {
        Ok(report) => return Ok(report),
        Err(error) => error,
    };
    let Some(failed) = error.chain().find_map(|c| c.downcast_ref::<ProxyFailed>()) else { return Err(error) };
    let artifacts = match evidence_dir {
        Some(dir) => {
            evidence::proxy_failure(&dir, &failed.log, &failed.message)?;
            Some(dir)
        }
        None => None,
    };
    Ok(ScenarioReport {
        scenario: scenario.name.clone(),
        source: scenario.source.clone(),
        proxy: proxy.name().to_string(),
        outcome: Outcome::ProxyFailed(format!("{error:#}")),
        elapsed: started.elapsed(),
        artifacts,
        unjudged: scenario.unjudged_flows.clone(),
        profile: Some(options.profile.unwrap_or_else(|| proxy.profile())),
        coverage: None,
        timings: Timings::default(),
    })
}

fn run_in(
    scenario: &Scenario,
    proxy: &dyn Proxy,
    options: &RunOptions,
    evidence_dir: Option<PathBuf>,
    started: Instant,
    keeper: Option<&mut Keeper>,
) -> Result<ScenarioReport> {
    if let Some(reason) = unsupported(scenario).or_else(|| proxy.unavailable()) {
        return Ok(ScenarioReport::skipped(scenario, proxy.name(), reason));
    }
    // The oracle speaks first, before any namespace exists. Probes whose outcome the profile
    // leaves open are set aside, reported as not judged.
    let profile = options.profile.unwrap_or_else(|| proxy.profile());
    let mut unjudged = scenario.unjudged_flows.clone();
    let all = scenario.phases();
    // The probes' kinds, with what each carries from phase to phase (held connections).
    let mut kinds = Kinds::new();
    let (judged, expectations): (Vec<Vec<Probe>>, Vec<Vec<oracle::Expectation>>) = all
        .iter()
        .map(|phase| predict_phase(phase, profile, &mut kinds, &mut unjudged))
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .unzip();
    let phases: Vec<Phase<'_>> =
        all.into_iter().zip(&judged).map(|(phase, probes)| Phase { probes, ..phase }).collect();
    if expectations.iter().all(Vec::is_empty) {
        let reason = format!("no probe has an outcome under profile {profile}");
        return Ok(ScenarioReport { unjudged, ..ScenarioReport::skipped(scenario, proxy.name(), reason) });
    }

    // On nodes packetproof did not make, a proxy it starts would rewrite the node's own rules.
    if !options.nodes.is_empty() && proxy.name() != crate::proxy::cluster::NAME {
        anyhow::bail!(
            "against existing nodes the proxy is the cluster's own: run with --proxy {} (not {})",
            crate::proxy::cluster::NAME,
            proxy.name()
        );
    }
    let mut timings = Timings::default();
    let mut lap = Lap(Instant::now());
    let mut keeper = keeper.filter(|_| options.nodes.is_empty());
    let stage = match keeper {
        Some(ref mut keeper) => keeper.stage_for(&scenario.cluster),
        None => Stage::build(&scenario.cluster, &options.nodes),
    }
    .with_context(|| format!("building the namespaces of scenario {}", scenario.name))?;
    timings.build = lap.next();
    // From here, the stage takes down whatever is up on every way out.
    let (verdicts, artifacts, coverage) = stage.play_keeping(keeper, |scene| {
        scene.start_proxy(proxy, &state_of(&phases[0]), &scenario.source)?;
        scene.start_servers(&scenario.cluster, localhost_listeners(&phases, &mut kinds))?;
        let topology = scene.topology();
        // Coverage traces what the proxy wrote at start, never its start itself: a proxy that
        // replaces the whole ruleset would take the trace table with it.
        let mut recorder = match options.coverage {
            true if !options.nodes.is_empty() => {
                anyhow::bail!("--coverage adds a table to every node: not on existing nodes")
            }
            true => Some(coverage::Recorder::start(topology)?),
            false => None,
        };
        scene.start_captures()?;
        // Entries that expire before a phase's table is read are still announced: the evidence
        // is the same however long the phase took.
        let mut announced = NodeRecorders::start(topology.nodes.iter().map(|n| (n.name.as_str(), &n.netns)))?;
        timings.start = lap.next();
        let probed = probe_phases(
            &phases,
            &expectations,
            scene,
            &mut kinds,
            &mut announced,
            recorder.as_mut(),
            options,
        );
        timings.probes = lap.next();
        let frames = scene.stop_captures()?;
        let probed = probed?;
        // Closes the held connections.
        drop(kinds);
        let running = scene.proxy().context("the proxy did not start again after a restart")?;

        // Each phase is judged with the conntrack tables read after it; the last stay as evidence.
        let (verdicts, judged_on) = verdict::judge_run(&phases, &expectations, probed, frames);
        let passed = verdicts.iter().all(ProbeVerdict::passed);
        let artifacts = match evidence_dir {
            Some(dir) if !passed || options.keep_passing => {
                evidence::keep(
                    &dir,
                    &judged_on.frames,
                    &node_states(topology, running, &announced),
                    running.artifacts(),
                )?;
                Some(dir)
            }
            _ => None,
        };
        let coverage = recorder.map(|r| Box::new(r.finish()));
        timings.judge = lap.next();
        Ok((verdicts, artifacts, coverage))
    })?;
    timings.teardown = lap.next();
    Ok(ScenarioReport {
        scenario: scenario.name.clone(),
        source: scenario.source.clone(),
        proxy: proxy.name().to_string(),
        outcome: Outcome::Judged(verdicts),
        elapsed: started.elapsed(),
        artifacts,
        unjudged,
        profile: Some(profile),
        coverage,
        timings,
    })
}

/// A stopwatch read lap by lap.
struct Lap(Instant);

impl Lap {
    /// The time since the last lap (or the start).
    fn next(&mut self) -> Duration {
        let now = Instant::now();
        now - std::mem::replace(&mut self.0, now)
    }
}

/// Each node as the run ended, for its evidence files.
fn node_states<'a>(
    topology: &'a Topology,
    proxy: &dyn Running,
    announced: &'a NodeRecorders,
) -> Vec<evidence::NodeState<'a>> {
    let state = |node: &'a crate::topology::NodeHandle| evidence::NodeState {
        name: &node.name,
        rules: proxy.dump_node(node),
        conntrack: conntrack::dump(&node.netns),
        events: announced.log(&node.name),
    };
    topology.nodes.iter().map(state).collect()
}

/// The nodes whose conntrack tables a phase is judged on: every node that translated some
/// probe's traffic or answered it (a host-network endpoint: its own NAT may remap the source
/// port the flow arrived with), and every node when some probe must be dropped or forwarded: a
/// node that let a flow through holds a confirmed entry for it, one that dropped it does not.
fn tables_to_read(topology: &Topology, expectations: &[oracle::Expectation]) -> Result<BTreeSet<String>> {
    let mut nodes = BTreeSet::new();
    let everywhere = expectations
        .iter()
        .any(|e| matches!(e.outcome, oracle::Outcome::Dropped | oracle::Outcome::Forwarded));
    let all_nodes: Vec<String> =
        if everywhere { topology.nodes.iter().map(|n| n.name.clone()).collect() } else { Vec::new() };
    let translating = expectations.iter().flat_map(|e| match &e.outcome {
        oracle::Outcome::Answered { translated_by, backends, .. } => {
            let answering = backends.keys().filter(|b| topology.node(b).is_ok());
            translated_by.iter().chain(answering).collect()
        }
        _ => Vec::new(),
    });
    for node in translating.chain(&all_nodes) {
        topology.node(node)?;
        nodes.insert(node.clone());
    }
    Ok(nodes)
}

/// The nodes' 127.0.0.1 ports some probe's traffic is aimed at.
fn localhost_listeners(phases: &[Phase<'_>], kinds: &mut Kinds) -> std::collections::BTreeSet<(String, u16)> {
    let probes = phases.iter().flat_map(|p| p.probes);
    probes.filter_map(|p| kinds.of(p).localhost_listener(p)).collect()
}

/// The probes of `phase` that `profile` judges, with their expectations; the others go to
/// `unjudged` with the reason.
fn predict_phase(
    phase: &Phase<'_>,
    profile: crate::model::Profile,
    kinds: &mut Kinds,
    unjudged: &mut Vec<(String, String)>,
) -> Result<(Vec<Probe>, Vec<oracle::Expectation>)> {
    let mut judged = (Vec::new(), Vec::new());
    if phase.restart_proxy {
        kinds.proxy_restarts();
    }
    for probe in phase.probes {
        let prediction = kinds.of(probe).predict(probe, phase.cluster, profile);
        match prediction.map_err(|e| anyhow::anyhow!("probe {}: {e}", probe.name))? {
            oracle::Prediction::Expected(expectation) => {
                judged.0.push(probe.clone());
                judged.1.push(expectation);
            }
            oracle::Prediction::Open(reason) => {
                unjudged.push((probe.name.clone(), format!("{reason} (profile {profile})")))
            }
        }
    }
    kinds.phase_predicted();
    Ok(judged)
}

/// Each phase in turn: the proxy changed to its state (the first is started with it, a
/// restart step stops and starts it), its probes sent, then the conntrack tables its
/// answers must be in.
fn probe_phases(
    phases: &[Phase<'_>],
    expectations: &[Vec<oracle::Expectation>],
    scene: &mut Scene<'_, '_>,
    kinds: &mut Kinds,
    announced: &mut NodeRecorders,
    mut recorder: Option<&mut coverage::Recorder>,
    options: &RunOptions,
) -> Result<Vec<(Vec<SentProbe>, ConntrackTables)>> {
    let ports = scene.source_ports().clone();
    let shared_routes = crate::probe::shared_routes(phases);
    let mut out = Vec::new();
    for (i, (phase, expected)) in phases.iter().zip(expectations).enumerate() {
        if i > 0 && phase.restart_proxy {
            scene.restart(&state_of(phase)).with_context(|| format!("restarting at step {}", phase.name))?;
        } else if i > 0 {
            scene.update(&state_of(phase)).with_context(|| format!("applying step {}", phase.name))?;
        }
        if i > 0
            && let Some(recorder) = recorder.as_deref_mut()
        {
            recorder.rules_changed().context("measuring rule coverage")?;
        }
        let topology = scene.topology();
        let wire =
            Wire::new(phase.cluster, topology, scene.runtime(), &ports, scene.captures(), options.timeout);
        let sent = crate::probe::send_phase(phase, expected, kinds, wire, &shared_routes)?;
        if let Some(recorder) = recorder.as_deref_mut() {
            recorder.phase_done(probe_flows(phase, &sent)).context("measuring rule coverage")?;
        }
        // Entry by entry, as announced: a dump would walk the host's whole conntrack table.
        let nodes = tables_to_read(topology, expected)?;
        let tables = announced.tables(nodes.iter().map(String::as_str)).context("reading conntrack")?;
        out.push((sent, tables));
    }
    Ok(out)
}

/// What each probe of `phase` sent, as coverage ties packets to it.
fn probe_flows(phase: &Phase<'_>, sent: &[SentProbe]) -> Vec<coverage::ProbeFlows> {
    phase
        .probes
        .iter()
        .zip(sent)
        .map(|(probe, s)| coverage::ProbeFlows {
            label: probe.name.clone(),
            dst: s.dst,
            ports: s.sent.iter().map(|a| a.source_port).collect(),
        })
        .collect()
}

fn state_of<'s>(phase: &Phase<'s>) -> State<'s> {
    State { cluster: phase.cluster, objects: phase.objects }
}

/// Why this host cannot run `scenario`, if it cannot.
pub fn unsupported(scenario: &Scenario) -> Option<String> {
    if let Some(min) = scenario.min_kernel {
        let Some((release, running)) = crate::kernel::KernelVersion::running() else {
            return Some(format!(
                "needs kernel {min} or newer (minKernel); this kernel's version is unreadable"
            ));
        };
        if let Some(reason) = crate::kernel::too_old(min, &release, running) {
            return Some(reason);
        }
    }
    let uses_sctp = scenario.probes.iter().any(|p| p.protocol == Protocol::Sctp);
    if uses_sctp && !sctp_available() {
        return Some("SCTP: this kernel has no SCTP sockets (run it in a VM with the sctp module)".into());
    }
    None
}

fn sctp_available() -> bool {
    socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, Some(socket2::Protocol::from(132)))
        .is_ok()
}
