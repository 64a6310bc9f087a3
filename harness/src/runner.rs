//! Runs one scenario end to end: expectations from the oracle, namespaces, proxy programming,
//! servers and captures, probes, conntrack, verdicts, evidence, and teardown on every path out.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::model::{Life, Phase, Probe, Protocol, Scenario, Source, Target};
use crate::model::{NODE_UPLINK, POD_INTERFACE};
use crate::observe::conntrack_events::NodeRecorders;
use crate::observe::{Capture, conntrack, write_pcap};
use crate::oracle;
use crate::proxy::{Env, Proxy, ProxyFailed, Running, State};
use crate::topology::Topology;
use crate::traffic::Attempt;
use crate::traffic::client::SourcePorts;
use crate::traffic::handmade::Martian;
use crate::traffic::held::{self, HeldConnection};
use crate::traffic::out_of_window::OutOfWindow;
use crate::traffic::{Pace, Plan, Prober, Sent, Servers, Speech};
use crate::verdict::evidence::{self, Evidence, Window};
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
    let mut opened = BTreeMap::new();
    let mut streams = BTreeMap::new();
    let (judged, expectations): (Vec<Vec<Probe>>, Vec<Vec<oracle::Expectation>>) = all
        .iter()
        .map(|phase| predict_phase(phase, profile, &mut opened, &mut streams, &mut unjudged))
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
        for (node, port) in localhost_targets(&phases) {
            servers.listen_on_localhost(&topology.node(&node)?.netns, port)?;
        }
        servers
    };

    let captures = start_captures(&topology)?;
    // Entries that expire before a phase's table is read are still announced: the evidence
    // is the same however long the phase took.
    let mut announced = NodeRecorders::start(topology.nodes.iter().map(|n| (n.name.as_str(), &n.netns)))?;
    let mut held = BTreeMap::new();
    let probed = probe_phases(
        &phases,
        &expectations,
        Restartable { proxy, env: &env, running: &mut running },
        &mut held,
        &topology,
        &runtime,
        &captures,
        &mut announced,
        options,
    );
    let frames = stop_captures(captures)?;
    let probed = probed?;
    drop(held);
    let running = running.context("the proxy did not start again after a restart")?;

    // Each phase is judged with the conntrack tables read after it; the last stay as evidence.
    let mut verdicts: Vec<ProbeVerdict> = Vec::new();
    let mut evidence = Evidence { frames, conntrack: BTreeMap::new() };
    let mut stuck = verdict::affinity::Stuck::default();
    for ((phase, expectations), (sent, tables)) in phases.iter().zip(&expectations).zip(probed) {
        evidence.conntrack = tables;
        let mut judged = judge_phase(phase, expectations, sent, &evidence);
        stuck.check_phase(phase.name, &mut judged);
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

/// The nodes' 127.0.0.1 ports some probe sends martian traffic to.
fn localhost_targets(phases: &[Phase<'_>]) -> std::collections::BTreeSet<(String, u16)> {
    let probes = phases.iter().flat_map(|p| p.probes);
    probes
        .filter_map(|p| match &p.to {
            Target::Localhost { node, port } => Some((node.clone(), *port)),
            _ => None,
        })
        .collect()
}

/// The probes of `phase` that `profile` judges, with their expectations; the others go to
/// `unjudged` with the reason.
fn predict_phase(
    phase: &Phase<'_>,
    profile: crate::model::Profile,
    opened: &mut BTreeMap<String, oracle::Expectation>,
    streams: &mut BTreeMap<(Source, u16), oracle::Expectation>,
    unjudged: &mut Vec<(String, String)>,
) -> Result<(Vec<Probe>, Vec<oracle::Expectation>)> {
    let mut judged = (Vec::new(), Vec::new());
    let mut next_streams = BTreeMap::new();
    for probe in phase.probes {
        let prediction = match &probe.life {
            // A held connection's fate is decided by the state it was opened in and this one.
            Life::Held { opener, .. } => match opened.get(opener) {
                Some(at_open) => oracle::live::predict_held(at_open, phase.cluster, probe, profile),
                None => Ok(oracle::Prediction::Open(format!("its opener {opener} is not judged"))),
            },
            _ => oracle::predict(phase.cluster, probe, profile),
        };
        // A UDP stream keeps its conntrack entry from one phase to the next.
        let prediction = match (probe.kind(), probe.source_port, prediction) {
            (crate::model::ProbeKind::UdpStream, Some(port), Ok(fresh)) => {
                let key = (probe.from.clone(), port);
                let p = match streams.get(&key) {
                    Some(previous) => {
                        oracle::live::predict_stream(previous, phase.cluster, probe, fresh, profile)
                    }
                    None => fresh,
                };
                if let oracle::Prediction::Expected(e) = &p {
                    next_streams.insert(key, e.clone());
                }
                Ok(p)
            }
            (_, _, other) => other,
        };
        match prediction.map_err(|e| anyhow::anyhow!("probe {}: {e}", probe.name))? {
            oracle::Prediction::Expected(expectation) => {
                if probe.life == Life::Hold {
                    opened.insert(probe.name.clone(), expectation.clone());
                }
                judged.0.push(probe.clone());
                judged.1.push(expectation);
            }
            oracle::Prediction::Open(reason) => {
                unjudged.push((probe.name.clone(), format!("{reason} (profile {profile})")))
            }
        }
    }
    *streams = next_streams;
    Ok(judged)
}

/// A probe as sent: its destination, its attempts, the frames it is judged on, faults found
/// while sending (a held connection answered by another backend than before), and for a check
/// of a held connection, the backend it was opened to.
struct SentProbe {
    dst: SocketAddr,
    sent: Vec<Sent>,
    window: Window,
    faults: Vec<String>,
    held: Option<(String, SocketAddr, SocketAddr)>,
}

/// A connection a probe holds open for later phases, and who answered it when it opened:
/// the pod, its address, and the source it saw.
struct Held {
    connection: HeldConnection,
    pod: String,
    backend: SocketAddr,
    seen: SocketAddr,
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
    held: &mut BTreeMap<String, Held>,
    topology: &Topology,
    runtime: &tokio::runtime::Runtime,
    captures: &[(String, Capture)],
    announced: &mut NodeRecorders,
    options: &RunOptions,
) -> Result<Vec<(Vec<SentProbe>, ConntrackTables)>> {
    let ports = SourcePorts::default();
    let mut out = Vec::new();
    for (i, (phase, expected)) in phases.iter().zip(expectations).enumerate() {
        if i > 0 && phase.restart_proxy {
            proxy.restart(&state_of(phase)).with_context(|| format!("restarting at step {}", phase.name))?;
        } else if i > 0 {
            proxy.get()?.update(&state_of(phase)).with_context(|| format!("applying step {}", phase.name))?;
        }
        let sent = send_probes(phase, topology, runtime, expected, &ports, held, captures, options)?;
        out.push((sent, announced.complete(dump_conntrack(topology, expected)?)?));
    }
    Ok(out)
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
        .map(|((probe, expected), SentProbe { dst, sent, window, faults, held })| {
            // Probes run one after another: each is judged on what the wire carried meanwhile.
            let during = evidence.during(&window);
            // An answer that came after the client's wait is an answer, not a drop.
            let sent = verdict::late::reconcile(probe, dst, sent, evidence, &window);
            let mut v =
                verdict::judge(probe, dst, expected, sent.iter().map(|s| s.attempt.clone()).collect());
            v.failures.extend(faults);
            match (held, &expected.outcome) {
                (Some((pod, backend, seen)), oracle::Outcome::Answered { translated_by, .. }) => {
                    let flow = verdict::held::HeldFlow {
                        dst,
                        pod: &pod,
                        backend,
                        seen,
                        translated_by: translated_by.as_deref(),
                    };
                    v.failures.extend(sent.iter().flat_map(|s| verdict::held::check(&flow, s, &during)));
                }
                _ => {
                    let view = phase.cluster.probe_view(probe);
                    v.failures.extend(evidence::check(&view, probe, dst, &expected.outcome, &sent, &during));
                }
            }
            v
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn send_probes(
    phase: &Phase<'_>,
    topology: &Topology,
    runtime: &tokio::runtime::Runtime,
    expectations: &[oracle::Expectation],
    ports: &SourcePorts,
    held: &mut BTreeMap<String, Held>,
    captures: &[(String, Capture)],
    options: &RunOptions,
) -> Result<Vec<SentProbe>> {
    let mut probers: BTreeMap<&Source, Prober> = BTreeMap::new();
    let mut all = Vec::new();
    for (probe, expected) in phase.probes.iter().zip(expectations) {
        let prober = match probers.entry(&probe.from) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                let ns = topology.source_netns(&probe.from)?;
                e.insert(Prober::new(ns, ports.clone(), options.timeout)?)
            }
        };
        if let Life::Held { opener, out_of_window } = &probe.life {
            let before = frame_counts(captures);
            let (dst, sent, faults, opened) = match held.get_mut(opener) {
                Some(h) => {
                    let mut faults = Vec::new();
                    let mut poked = None;
                    if *out_of_window {
                        let backend = phase.cluster.pods.iter().find(|p| p.name == h.pod);
                        let backend = backend.with_context(|| format!("no pod {} in the scenario", h.pod))?;
                        let point = format!("pod/{}", h.pod);
                        let capture = captures.iter().find(|(k, _)| *k == point).map(|(_, c)| c);
                        let frames = capture.with_context(|| format!("no capture at {point}"))?.frames();
                        let segment = OutOfWindow::after(&frames, h.seen, backend.ip())?;
                        segment.send(topology.pods.get(&h.pod).context("the backend's namespace")?)?;
                        poked = Some(segment);
                    }
                    let sent = h.connection.check();
                    if let (Some(segment), false) = (&poked, matches!(sent.attempt, Attempt::Answered { .. }))
                    {
                        let points = evidence::client_capture_points(probe);
                        let client: Vec<crate::observe::Frame> = captures
                            .iter()
                            .zip(&before)
                            .filter(|((key, _), _)| points.contains(key))
                            .flat_map(|((_, capture), (_, from))| capture.frames().split_off(*from))
                            .collect();
                        faults.push(format!(
                            "after the hand-made out-of-window segment {segment} from pod {}: {} (a proxy that \
                             drops conntrack-invalid packets stops it on the node)",
                            h.pod,
                            segment.witnessed(&client, h.connection.source_port)
                        ));
                    }
                    if let Attempt::Answered { pod, seen } = &sent.attempt
                        && (*pod != h.pod || *seen != h.seen)
                    {
                        faults.push(format!(
                            "the held connection moved: opened to {} seeing {}, now answered by {pod} seeing {seen}",
                            h.pod, h.seen
                        ));
                    }
                    let opened = Some((h.pod.clone(), h.backend, h.seen));
                    (h.connection.dst, vec![sent], faults, opened)
                }
                None => {
                    let reason = format!("{opener} holds no connection (it was never answered)");
                    let sent = Sent { source_port: 0, request: None, attempt: Attempt::Broken { reason } };
                    (SocketAddr::from(([0, 0, 0, 0], 0)), vec![sent], Vec::new(), None)
                }
            };
            let after = frame_counts(captures);
            let frames =
                before.into_iter().zip(after).map(|((key, from), (_, to))| (key, from..to)).collect();
            all.push(SentProbe { dst, sent, window: Window { frames }, faults, held: opened });
            continue;
        }
        // The probe's family: a dual-stack cluster's addresses of it.
        let view = phase.cluster.probe_view(probe);
        let dst = view
            .target_address(&probe.to)
            .with_context(|| format!("probe {}: no destination address", probe.name))?;
        if let (Source::External(host), Some(via)) = (&probe.from, view.entry_node(&probe.to)) {
            runtime.block_on(topology.steer(host, dst.ip(), via.ip()))?;
        }
        let before = frame_counts(captures);
        let sent = match (&probe.to, &probe.from) {
            (Target::Localhost { node, port }, Source::External(host)) => {
                send_martian(&view, topology, host, node, *port, probe.count, ports, options)
            }
            _ if probe.life == Life::Hold => {
                let (sent, connection) = held::open(prober, dst)?;
                if let (Some(connection), Attempt::Answered { pod, seen }) = (connection, &sent.attempt) {
                    let backend = held_backend(phase.cluster, probe, pod)?;
                    held.insert(
                        probe.name.clone(),
                        Held { connection, pod: pod.clone(), backend, seen: *seen },
                    );
                }
                Ok(vec![sent])
            }
            _ => prober.send(plan(probe, dst, expected)),
        }
        .with_context(|| format!("sending probe {}", probe.name))?;
        let after = frame_counts(captures);
        let frames = before.into_iter().zip(after).map(|((key, from), (_, to))| (key, from..to)).collect();
        all.push(SentProbe { dst, sent, window: Window { frames }, faults: Vec::new(), held: None });
    }
    Ok(all)
}

/// The address of the endpoint `pod` that answered a held connection of `probe`.
fn held_backend(cluster: &crate::model::Cluster, probe: &Probe, pod: &str) -> Result<SocketAddr> {
    let (Target::ClusterIp { service, port }
    | Target::NodePort { service, port, .. }
    | Target::ExternalIp { service, port, .. }
    | Target::LoadBalancer { service, port, .. }) = &probe.to
    else {
        anyhow::bail!("probe {}: held connections to a raw address or a node: not modelled", probe.name);
    };
    let endpoints =
        cluster.service_port(service, port).map(|(_, p)| p.endpoints.as_slice()).unwrap_or_default();
    let endpoint = endpoints.iter().find(|e| e.pod == pod);
    endpoint
        .map(|e| e.address())
        .with_context(|| format!("probe {}: {pod} is no endpoint of {service}:{port}", probe.name))
}

/// How many frames each capture point has taken so far.
fn frame_counts(captures: &[(String, Capture)]) -> Vec<(String, usize)> {
    captures.iter().map(|(key, capture)| (key.clone(), capture.count())).collect()
}

/// Hand-made SYNs from external host `host` to `node`'s 127.0.0.1:`port`.
#[allow(clippy::too_many_arguments)]
fn send_martian(
    cluster: &crate::model::Cluster,
    topology: &Topology,
    host: &str,
    node: &str,
    port: u16,
    count: u32,
    ports: &SourcePorts,
    options: &RunOptions,
) -> Result<Vec<Sent>> {
    let host_ns = topology.source_netns(&Source::External(host.to_string()))?;
    let host_ip = match cluster.source_ip(&Source::External(host.to_string())) {
        Some(std::net::IpAddr::V4(ip)) => ip,
        _ => anyhow::bail!("external host {host} has no IPv4 address to send from"),
    };
    let node_ip = match cluster.node(node).map(|n| n.ip()) {
        Some(std::net::IpAddr::V4(ip)) => ip,
        _ => anyhow::bail!("node {node} has no IPv4 address"),
    };
    let martian = Martian::between(host_ns, host_ip, &topology.node(node)?.netns, node, node_ip)?;
    martian.send(host_ns, port, count, ports, options.timeout)
}

/// How to send a probe. Traffic expected to vanish is sent all at once, so waiting out the
/// silence costs one timeout rather than one per attempt; everything else goes one by one.
fn plan(probe: &Probe, dst: SocketAddr, expected: &oracle::Expectation) -> Plan {
    let speech = match probe.to {
        Target::HealthCheck { .. } => Speech::HttpGet,
        _ => Speech::Plain(probe.protocol),
    };
    let pace = match expected.outcome {
        oracle::Outcome::Dropped | oracle::Outcome::Forwarded | oracle::Outcome::Unanswered { .. }
            if probe.interval.is_none() && probe.source_port.is_none() =>
        {
            Pace::Concurrent
        }
        _ => Pace::Sequential { interval: probe.interval },
    };
    Plan { dst, source_port: probe.source_port, count: probe.count, speech, pace }
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
