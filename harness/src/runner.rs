//! Runs one scenario end to end: expectations from the oracle, namespaces, proxy programming,
//! servers and captures, probes, conntrack, verdicts, evidence, and teardown on every path out.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::coverage::{self, ScenarioCoverage};
use crate::model::{NODE_UPLINK, POD_INTERFACE};
use crate::model::{Phase, Probe, Protocol, Scenario};
use crate::observe::conntrack_events::NodeRecorders;
use crate::observe::{Capture, conntrack, write_pcap};
use crate::oracle;
use crate::probe::{Kinds, Shipment, Wire, Witnesses};
use crate::proxy::{Env, Proxy, ProxyFailed, Running, State};
use crate::topology::Topology;
use crate::traffic::client::SourcePorts;
use crate::traffic::{Sent, Servers};
use crate::verdict::evidence::{Evidence, Window};
use crate::verdict::{self, ProbeVerdict};

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
        }
    }
}

/// How a scenario ended.
#[derive(Debug)]
pub enum Outcome {
    /// Every probe was judged; some may have failed.
    Judged(Vec<ProbeVerdict>),
    /// The proxy under test failed at its own job (its syncs failed) before its probes
    /// could be judged: the scenario fails, as a probe would.
    ProxyFailed(String),
    /// The scenario could not run here; never counts as passed.
    Skipped(String),
}

#[derive(Debug)]
pub struct ScenarioReport {
    pub scenario: String,
    pub source: PathBuf,
    pub proxy: String,
    pub outcome: Outcome,
    pub elapsed: Duration,
    /// Where this scenario's evidence was written, if it was.
    pub artifacts: Option<PathBuf>,
    /// Probes and generated flows left out because their outcome is undefined (under the
    /// profile), with the reason.
    pub unjudged: Vec<(String, String)>,
    /// The profile the probes were judged under (none for a scenario that did not run).
    pub profile: Option<crate::model::Profile>,
    /// Which of the proxy's rules the probes matched, when the run measured it (boxed: a
    /// report travels between threads by value).
    pub coverage: Option<Box<ScenarioCoverage>>,
}

impl ScenarioReport {
    pub fn passed(&self) -> bool {
        matches!(&self.outcome, Outcome::Judged(v) if v.iter().all(ProbeVerdict::passed))
    }

    /// Whether the scenario failed: a probe failed, or the proxy did.
    pub fn failed(&self) -> bool {
        match &self.outcome {
            Outcome::Judged(v) => !v.iter().all(ProbeVerdict::passed),
            Outcome::ProxyFailed(_) => true,
            Outcome::Skipped(_) => false,
        }
    }

    pub fn skipped(scenario: &Scenario, proxy: &str, reason: String) -> ScenarioReport {
        ScenarioReport {
            scenario: scenario.name.clone(),
            source: scenario.source.clone(),
            proxy: proxy.to_string(),
            outcome: Outcome::Skipped(reason),
            elapsed: Duration::ZERO,
            artifacts: None,
            unjudged: scenario.unjudged_flows.clone(),
            profile: None,
            coverage: None,
        }
    }
}

/// Runs `scenario` with `proxy`. An `Err` is a setup failure (the input, the machine), distinct
/// from probes that ran and failed and from a proxy that failed at its job ([`ProxyFailed`]).
pub fn run(scenario: &Scenario, proxy: &dyn Proxy, options: &RunOptions) -> Result<ScenarioReport> {
    let started = Instant::now();
    // Evidence of an earlier run of this scenario would be read as this run's.
    let evidence_dir = match &options.artifacts {
        Some(root) => Some(clear_evidence_dir(root, &scenario.name)?),
        None => None,
    };
    let error = match run_in(scenario, proxy, options, evidence_dir.clone(), started) {
        Ok(report) => return Ok(report),
        Err(error) => error,
    };
    let Some(failed) = error.chain().find_map(|c| c.downcast_ref::<ProxyFailed>()) else { return Err(error) };
    let artifacts = match evidence_dir {
        Some(dir) => {
            write_proxy_log(&dir, failed)?;
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
    })
}

/// The evidence of a proxy that failed: its log, and the error that says how.
fn write_proxy_log(dir: &std::path::Path, failed: &ProxyFailed) -> Result<()> {
    if let Some(root) = dir.parent() {
        std::fs::create_dir_all(root).with_context(|| format!("creating {}", root.display()))?;
    }
    std::fs::create_dir(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut files = failed.log.clone();
    files.push(("failure.txt".into(), format!("{}\n", failed.message).into_bytes()));
    for (name, contents) in files {
        let path = dir.join(format!("proxy-{name}"));
        std::fs::write(&path, contents).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn run_in(
    scenario: &Scenario,
    proxy: &dyn Proxy,
    options: &RunOptions,
    evidence_dir: Option<PathBuf>,
    started: Instant,
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
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let topology = runtime
        .block_on(async {
            if options.nodes.is_empty() {
                Topology::build(&scenario.cluster).await
            } else {
                Topology::build_on_existing(&scenario.cluster, &options.nodes).await
            }
        })
        .with_context(|| format!("building the namespaces of scenario {}", scenario.name))?;
    // From here, dropping `topology` (on error or panic) removes every namespace.
    let env = Env { topology: &topology, runtime: runtime.handle().clone(), source: &scenario.source };
    let mut running = Some(
        proxy
            .start(&state_of(&phases[0]), &env)
            .with_context(|| format!("starting {} on every node", proxy.name()))?,
    );
    let servers = {
        let _in_runtime = runtime.enter();
        let mut servers = Servers::start(&scenario.cluster, &topology)?;
        for (node, port) in localhost_listeners(&phases, &mut kinds) {
            servers.listen_on_localhost(&topology.node(&node)?.netns, port)?;
        }
        servers
    };

    // Coverage traces what the proxy wrote at start, never its start itself: a proxy that
    // replaces the whole ruleset would take the trace table with it.
    let mut recorder = match options.coverage {
        true if !options.nodes.is_empty() => {
            anyhow::bail!("--coverage adds a table to every node: not on existing nodes")
        }
        true => Some(coverage::Recorder::start(&topology)?),
        false => None,
    };
    let captures = start_captures(&topology)?;
    // Entries that expire before a phase's table is read are still announced: the evidence
    // is the same however long the phase took.
    let mut announced = NodeRecorders::start(topology.nodes.iter().map(|n| (n.name.as_str(), &n.netns)))?;
    let probed = probe_phases(
        &phases,
        &expectations,
        Restartable { proxy, env: &env, running: &mut running },
        &mut kinds,
        &topology,
        &runtime,
        &captures,
        &mut announced,
        recorder.as_mut(),
        options,
    );
    let frames = stop_captures(captures)?;
    let probed = probed?;
    // Closes the held connections.
    drop(kinds);
    let running = running.context("the proxy did not start again after a restart")?;

    // Each phase is judged with the conntrack tables read after it; the last stay as evidence.
    let mut verdicts: Vec<ProbeVerdict> = Vec::new();
    let mut evidence = Evidence { frames, conntrack: BTreeMap::new() };
    let mut stuck = verdict::affinity::Stuck::default();
    for ((phase, expectations), (sent, tables)) in phases.iter().zip(&expectations).zip(probed) {
        evidence.conntrack = tables;
        let mut judged = judge_phase(phase, expectations, sent, &evidence);
        stuck.check_phase(phase.name, &mut judged);
        verdict::affinity::check_expiry_across_clients(&mut judged);
        verdicts.extend(judged);
    }
    let passed = verdicts.iter().all(ProbeVerdict::passed);
    let artifacts = match evidence_dir {
        Some(dir) if !passed || options.keep_passing => {
            keep_evidence(&dir, &topology, running.as_ref(), &evidence, &announced)?;
            Some(dir)
        }
        _ => None,
    };

    runtime.block_on(servers.stop());
    running.stop().with_context(|| format!("stopping {}", proxy.name()))?;
    drop(runtime);
    drop(announced);
    let coverage = recorder.map(|r| Box::new(r.finish()));
    topology.teardown().context("removing the scenario's namespaces")?;
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
    })
}

/// A capture on every interface traffic can reach a pod, a node or an external host by.
fn start_captures(topology: &Topology) -> Result<Vec<(String, Capture)>> {
    let mut captures = Vec::new();
    for (name, ns) in &topology.pods {
        captures.push((format!("pod/{name}"), Capture::start(ns, POD_INTERFACE)?));
    }
    for (name, ns) in &topology.external_hosts {
        captures.push((format!("external/{name}"), Capture::start(ns, POD_INTERFACE)?));
    }
    for node in &topology.nodes {
        captures.push((format!("node/{}", node.name), Capture::start(&node.netns, NODE_UPLINK)?));
        captures.push((format!("node/{}/lo", node.name), Capture::start(&node.netns, "lo")?));
        // Where a local pod's traffic reaches a host-network endpoint of its own node.
        captures.push((format!("bridge/{}", node.name), Capture::start(&node.netns, &topology.pod_bridge)?));
    }
    Ok(captures)
}

fn stop_captures(captures: Vec<(String, Capture)>) -> Result<BTreeMap<String, Vec<crate::observe::Frame>>> {
    captures
        .into_iter()
        .map(|(key, capture)| {
            Ok((key.clone(), capture.stop().with_context(|| format!("stopping capture {key}"))?))
        })
        .collect()
}

/// The conntrack table of every node that translated some probe's traffic, and of every node
/// when some probe must be dropped or forwarded: a node that let a flow through holds a
/// confirmed entry for it, one that dropped it does not.
fn dump_conntrack(topology: &Topology, expectations: &[oracle::Expectation]) -> Result<ConntrackTables> {
    let mut tables = BTreeMap::new();
    let everywhere = expectations
        .iter()
        .any(|e| matches!(e.outcome, oracle::Outcome::Dropped | oracle::Outcome::Forwarded));
    let all_nodes: Vec<String> =
        if everywhere { topology.nodes.iter().map(|n| n.name.clone()).collect() } else { Vec::new() };
    let translating = expectations.iter().filter_map(|e| match &e.outcome {
        oracle::Outcome::Answered { translated_by: Some(node), .. } => Some(node),
        _ => None,
    });
    for node in translating.chain(&all_nodes) {
        if !tables.contains_key(node) {
            let flows = conntrack::dump(&topology.node(node)?.netns)
                .with_context(|| format!("reading the conntrack table of node {node}"))?;
            tables.insert(node.clone(), flows);
        }
    }
    Ok(tables)
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

/// A probe as sent: its destination, its attempts, the frames it is judged on, faults found
/// while sending (a held connection answered by another backend than before), and the
/// witnesses its kind judges it by.
struct SentProbe {
    dst: SocketAddr,
    sent: Vec<Sent>,
    window: Window,
    faults: Vec<verdict::Failure>,
    witnesses: Box<dyn Witnesses>,
}

impl SentProbe {
    fn new(Shipment { dst, sent, faults, witnesses }: Shipment, window: Window) -> SentProbe {
        SentProbe { dst, sent, window, faults, witnesses }
    }
}

/// Each translating node's conntrack table, by node name.
type ConntrackTables = BTreeMap<String, Vec<conntrack::Flow>>;

/// The running proxy, with what it takes to start it again (a restart step).
struct Restartable<'r, 'a> {
    proxy: &'a dyn Proxy,
    env: &'r Env<'a>,
    running: &'r mut Option<Box<dyn Running + 'a>>,
}

impl Restartable<'_, '_> {
    fn get(&mut self) -> Result<&mut (dyn Running + '_)> {
        let running = self.running.as_mut().context("the proxy is not running")?;
        Ok(running.as_mut())
    }

    /// Stops the proxy and starts it again on the same nodes with `state`, as a node's
    /// kube-proxy restarts: what it programmed and the conntrack table stay as they are.
    fn restart(&mut self, state: &State<'_>) -> Result<()> {
        if self.get()?.restart(state)? {
            return Ok(());
        }
        if let Some(running) = self.running.take() {
            running.stop().with_context(|| format!("stopping {} for a restart", self.proxy.name()))?;
        }
        let started = self.proxy.start(state, self.env);
        *self.running = Some(started.with_context(|| format!("starting {} again", self.proxy.name()))?);
        Ok(())
    }
}

/// Each phase in turn: the proxy changed to its state (the first is started with it, a
/// restart step stops and starts it), its probes sent, then the conntrack tables its
/// answers must be in.
#[allow(clippy::too_many_arguments)]
fn probe_phases(
    phases: &[Phase<'_>],
    expectations: &[Vec<oracle::Expectation>],
    mut proxy: Restartable<'_, '_>,
    kinds: &mut Kinds,
    topology: &Topology,
    runtime: &tokio::runtime::Runtime,
    captures: &[(String, Capture)],
    announced: &mut NodeRecorders,
    mut recorder: Option<&mut coverage::Recorder>,
    options: &RunOptions,
) -> Result<Vec<(Vec<SentProbe>, ConntrackTables)>> {
    let ports = SourcePorts::default();
    let shared_routes = shared_routes(phases);
    let mut out = Vec::new();
    for (i, (phase, expected)) in phases.iter().zip(expectations).enumerate() {
        if i > 0 && phase.restart_proxy {
            proxy.restart(&state_of(phase)).with_context(|| format!("restarting at step {}", phase.name))?;
        } else if i > 0 {
            proxy.get()?.update(&state_of(phase)).with_context(|| format!("applying step {}", phase.name))?;
        }
        if i > 0
            && let Some(recorder) = recorder.as_deref_mut()
        {
            recorder.rules_changed().context("measuring rule coverage")?;
        }
        let wire = Wire::new(phase.cluster, topology, runtime, &ports, captures, options.timeout);
        let sent = send_probes(phase, expected, kinds, wire, &shared_routes)?;
        if let Some(recorder) = recorder.as_deref_mut() {
            recorder.phase_done(probe_flows(phase, &sent)).context("measuring rule coverage")?;
        }
        out.push((sent, announced.complete(dump_conntrack(topology, expected)?)?));
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

/// Judges one phase's probes on what they got back, what the wire carried while each ran,
/// and the conntrack tables read after the phase.
fn judge_phase(
    phase: &Phase<'_>,
    expectations: &[oracle::Expectation],
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
            let sent = verdict::late::reconcile(phase.cluster, probe, dst, sent, evidence, &window);
            let mut v =
                verdict::judge(probe, dst, expected, sent.iter().map(|s| s.attempt.clone()).collect());
            v.failures.extend(faults);
            v.failures.extend(witnesses.check(phase.cluster, probe, dst, &expected.outcome, &sent, &during));
            v
        })
        .collect()
}

/// Sends each probe of `phase` as its kind does, one after another, except the probes that
/// go out together (those that wait out a silence, and the clients of a probe from several):
/// they go out at once where the first of them stands, so a phase's silences cost one timeout
/// rather than one each, and clients wait out their pauses side by side. Each of them is
/// judged on its own flows only (its source ports), so a window shared with the others changes
/// none of its evidence.
/// Probes on a route in `shared_routes` keep their places: another probe steers that route.
fn send_probes(
    phase: &Phase<'_>,
    expectations: &[oracle::Expectation],
    kinds: &mut Kinds,
    mut wire: Wire<'_>,
    shared_routes: &BTreeSet<(String, IpAddr)>,
) -> Result<Vec<SentProbe>> {
    let mut together = Vec::new();
    for (i, (probe, expected)) in phase.probes.iter().zip(expectations).enumerate() {
        let route = crate::probe::route(phase.cluster, probe);
        let shared = route.is_some_and(|(host, ip, _)| shared_routes.contains(&(host, ip)));
        if kinds.of(probe).goes_together(probe, expected) && !shared {
            together.push(i);
        }
    }
    let mut all: Vec<Option<SentProbe>> = phase.probes.iter().map(|_| None).collect();
    for (i, (probe, expected)) in phase.probes.iter().zip(expectations).enumerate() {
        if together.first() == Some(&i) {
            for wave in waves(phase, &together) {
                let before = wire.frame_counts();
                let probes: Vec<_> = wave.iter().map(|&j| (&phase.probes[j], &expectations[j])).collect();
                let shipments = crate::probe::send_together(&probes, &mut wire)?;
                let window = window(before, wire.frame_counts());
                for (j, shipment) in wave.into_iter().zip(shipments) {
                    all[j] = Some(SentProbe::new(shipment, window.clone()));
                }
            }
        }
        if together.contains(&i) {
            continue;
        }
        let before = wire.frame_counts();
        let shipment = kinds.of(probe).send(probe, expected, &mut wire)?;
        all[i] = Some(SentProbe::new(shipment, window(before, wire.frame_counts())));
    }
    Ok(all.into_iter().flatten().collect())
}

/// The most attempts sent together: each waits on a thread of its own.
const MOST_AT_ONCE: u32 = 256;

/// The probes `together` (positions in `phase`) in waves sent one after another. An external
/// host has one route to an address: probes steering it through different nodes go in
/// different waves. A wave holds at most [`MOST_AT_ONCE`] attempts, unless one probe has more.
fn waves(phase: &Phase<'_>, together: &[usize]) -> Vec<Vec<usize>> {
    struct Wave {
        probes: Vec<usize>,
        routes: Vec<(String, IpAddr, Option<String>)>,
        attempts: u32,
    }
    let mut waves: Vec<Wave> = Vec::new();
    for &i in together {
        let probe = &phase.probes[i];
        let route = crate::probe::route(phase.cluster, probe);
        let clashes = |w: &Wave| match &route {
            Some((host, ip, via)) => w.routes.iter().any(|(h, i, v)| h == host && i == ip && v != via),
            None => false,
        };
        let fits = |w: &&mut Wave| w.attempts.saturating_add(probe.count) <= MOST_AT_ONCE && !clashes(w);
        let wave = match waves.iter_mut().find(fits) {
            Some(wave) => wave,
            None => {
                waves.push(Wave { probes: Vec::new(), routes: Vec::new(), attempts: 0 });
                waves.last_mut().expect("just pushed")
            }
        };
        wave.probes.push(i);
        wave.routes.extend(route);
        wave.attempts = wave.attempts.saturating_add(probe.count);
    }
    waves.into_iter().map(|w| w.probes).collect()
}

/// The frames each capture point took between `before` and `after` (frame counts).
fn window(before: Vec<(String, usize)>, after: Vec<(String, usize)>) -> Window {
    Window { frames: before.into_iter().zip(after).map(|((key, from), (_, to))| (key, from..to)).collect() }
}

/// Routes (an external host's to an address) that one probe of the scenario steers through
/// a node and another takes as it finds it: the latter depends on the order of the two.
fn shared_routes(phases: &[Phase<'_>]) -> BTreeSet<(String, IpAddr)> {
    let routes: Vec<_> = phases
        .iter()
        .flat_map(|phase| phase.probes.iter().filter_map(|p| crate::probe::route(phase.cluster, p)))
        .collect();
    let steered =
        |host: &str, ip: &IpAddr| routes.iter().any(|(h, i, via)| h == host && i == ip && via.is_some());
    routes
        .iter()
        .filter(|(h, ip, via)| via.is_none() && steered(h, ip))
        .map(|(h, ip, _)| (h.clone(), *ip))
        .collect()
}

/// The folder for `name`'s evidence under `root`, emptied of an earlier run's. `name` must be
/// one plain path component: the reader allows only DNS-1123 names, and this refuses anything
/// else again, since the folder is written as root.
pub(crate) fn clear_evidence_dir(root: &std::path::Path, name: &str) -> Result<PathBuf> {
    use std::path::Component;
    let mut components = std::path::Path::new(name).components();
    let single =
        matches!(components.next(), Some(Component::Normal(c)) if c == name) && components.next().is_none();
    if !single || name.contains(['/', '\\', '\0']) {
        anyhow::bail!(
            "scenario name {name:?} cannot name an evidence folder: it must be one plain path component"
        );
    }
    let dir = root.join(name);
    match std::fs::symlink_metadata(&dir) {
        // A link is removed, never followed.
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(&dir),
        Ok(_) => std::fs::remove_file(&dir),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
    .with_context(|| format!("removing the earlier evidence in {}", dir.display()))?;
    Ok(dir)
}

/// Writes what a reviewer needs to fix a failure without re-running (the engine adds the flow
/// table as `summary.txt`): a pcap
/// per capture point, each node's conntrack table and rules as loaded.
fn keep_evidence(
    dir: &std::path::Path,
    topology: &Topology,
    proxy: &dyn Running,
    evidence: &Evidence,
    announced: &NodeRecorders,
) -> Result<()> {
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
    };
    if let Some(root) = dir.parent() {
        std::fs::create_dir_all(root).with_context(|| format!("creating {}", root.display()))?;
    }
    // A fresh folder (cleared when the scenario started): create_dir fails rather than write
    // through anything planted there since.
    std::fs::create_dir(dir).with_context(|| format!("creating {}", dir.display()))?;
    for (key, frames) in &evidence.frames {
        write_pcap(&dir.join(format!("{}.pcap", key.replace('/', "-"))), frames)?;
    }
    for node in &topology.nodes {
        let rules = proxy.dump_node(node).unwrap_or_else(|e| format!("(no dump: {e:#})"));
        write(&format!("node-{}.rules", node.name), &rules)?;
        let table = match conntrack::dump(&node.netns) {
            Ok(flows) => flows.iter().map(|f| format!("{f}\n")).collect(),
            Err(e) => format!("(no conntrack table: {e:#})\n"),
        };
        write(&format!("node-{}.conntrack", node.name), &table)?;
        write(&format!("node-{}.conntrack-events", node.name), announced.log(&node.name))?;
    }
    for (name, contents) in proxy.artifacts() {
        let path = dir.join(format!("proxy-{name}"));
        std::fs::write(&path, contents).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Source, Target};

    fn load(name: &str) -> Scenario {
        let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../scenarios/{name}.yaml"));
        crate::scenario::load(&file).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn probes_steering_one_route_through_different_nodes_go_in_different_waves() {
        // blocked-via-node-a and -b: internet-scanner to 198.51.100.25 via node-a, then node-b.
        let s = load("loadbalancer-source-ranges");
        let phase = &s.phases()[0];
        let names: Vec<&str> = [2, 3, 4, 5].iter().map(|&i| phase.probes[i].name.as_str()).collect();
        assert_eq!(names, ["blocked-via-node-a", "blocked-via-node-b", "pod-to-lb-ip", "node-host-to-lb-ip"]);
        assert_eq!(waves(phase, &[2, 3, 4, 5]), [vec![2, 4, 5], vec![3]]);
        // Through the same node, they share one.
        assert_eq!(waves(phase, &[2, 2]), [vec![2, 2]]);
    }

    #[test]
    fn a_wave_holds_a_bounded_number_of_attempts() {
        let mut s = load("loadbalancer-source-ranges");
        s.probes.iter_mut().for_each(|p| p.count = MOST_AT_ONCE / 2);
        s.probes[0].count = MOST_AT_ONCE + 1;
        let phase = &s.phases()[0];
        assert_eq!(waves(phase, &[0, 4, 5, 6, 7]), [vec![0], vec![4, 5], vec![6, 7]]);
    }

    #[test]
    fn a_route_one_probe_steers_and_another_takes_as_it_finds_it_is_shared() {
        // office steers its route to 192.168.50.11 (an external IP on node-a's address) via node-a.
        let mut s = load("external-ip-on-node-address");
        assert!(shared_routes(&s.phases()).is_empty());
        let node_a = Target::Address("192.168.50.11:31053".parse().unwrap());
        s.probes.push(Probe::example(Source::External("office".into()), node_a));
        let shared = shared_routes(&s.phases());
        assert_eq!(
            shared.into_iter().collect::<Vec<_>>(),
            [("office".to_string(), "192.168.50.11".parse().unwrap())]
        );
    }
}
