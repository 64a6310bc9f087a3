//! Runs one scenario end to end: expectations from the oracle, namespaces, proxy programming,
//! servers, probes, verdicts, and teardown on every path out.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::model::{Probe, Protocol, Scenario, Source, Target};
use crate::oracle;
use crate::proxy::Proxy;
use crate::topology::Topology;
use crate::traffic::client::SourcePorts;
use crate::traffic::{Pace, Plan, Prober, Servers, Speech};
use crate::verdict::{self, ProbeVerdict};

#[derive(Debug, Clone)]
pub struct RunOptions {
    /// How long an attempt waits before it counts as silent (dropped).
    pub timeout: Duration,
}

impl Default for RunOptions {
    fn default() -> Self {
        // Answers take well under a millisecond here; a second is three orders of margin.
        RunOptions { timeout: Duration::from_secs(1) }
    }
}

/// How a scenario ended.
#[derive(Debug)]
pub enum Outcome {
    /// Every probe was judged; some may have failed.
    Judged(Vec<ProbeVerdict>),
    /// The scenario could not run here; never counts as passed.
    Skipped(String),
}

#[derive(Debug)]
pub struct ScenarioReport {
    pub scenario: String,
    pub source: std::path::PathBuf,
    pub proxy: String,
    pub outcome: Outcome,
    pub elapsed: Duration,
    /// The data-plane state of each node as loaded, kept when a probe failed.
    pub node_dumps: Vec<(String, String)>,
}

impl ScenarioReport {
    pub fn passed(&self) -> bool {
        matches!(&self.outcome, Outcome::Judged(v) if v.iter().all(ProbeVerdict::passed))
    }

    pub fn failed_probes(&self) -> usize {
        match &self.outcome {
            Outcome::Judged(v) => v.iter().filter(|p| !p.passed()).count(),
            Outcome::Skipped(_) => 0,
        }
    }
}

/// Why scenarios cannot run on this machine at all, if they cannot (checked once per run).
pub fn preflight() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) to create network namespaces".into());
    }
    None
}

/// Runs `scenario` with `proxy`. An `Err` is a setup failure (topology, proxy programming),
/// distinct from probes that ran and failed.
pub fn run(scenario: &Scenario, proxy: &dyn Proxy, options: &RunOptions) -> Result<ScenarioReport> {
    let started = Instant::now();
    let report = |outcome, node_dumps| ScenarioReport {
        scenario: scenario.name.clone(),
        source: scenario.source.clone(),
        proxy: proxy.name().to_string(),
        outcome,
        elapsed: started.elapsed(),
        node_dumps,
    };
    if let Some(reason) = unsupported(scenario) {
        return Ok(report(Outcome::Skipped(reason), Vec::new()));
    }
    // The oracle speaks first, before any namespace exists.
    let expectations = scenario
        .probes
        .iter()
        .map(|p| oracle::expect(&scenario.cluster, p).map_err(|e| anyhow::anyhow!("probe {}: {e}", p.name)))
        .collect::<Result<Vec<_>>>()?;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let topology = runtime
        .block_on(Topology::build(&scenario.cluster))
        .with_context(|| format!("building the namespaces of scenario {}", scenario.name))?;
    // From here, dropping `topology` (on error or panic) removes every namespace.
    let servers = {
        // Proxies may start servers of their own (health checks) on this runtime.
        let _in_runtime = runtime.enter();
        for node in &topology.nodes {
            proxy
                .program_node(&scenario.cluster, node)
                .with_context(|| format!("programming node {} with {}", node.name, proxy.name()))?;
        }
        Servers::start(&scenario.cluster, &topology)?
    };

    let verdicts = send_probes(scenario, &topology, &runtime, &expectations, options);
    let node_dumps = match &verdicts {
        Ok(v) if v.iter().any(|p| !p.passed()) => topology
            .nodes
            .iter()
            .map(|n| (n.name.clone(), proxy.dump_node(n).unwrap_or_else(|e| format!("(no dump: {e:#})"))))
            .collect(),
        _ => Vec::new(),
    };

    runtime.block_on(servers.stop());
    drop(runtime);
    topology.teardown().context("removing the scenario's namespaces")?;
    Ok(report(Outcome::Judged(verdicts?), node_dumps))
}

fn send_probes(
    scenario: &Scenario,
    topology: &Topology,
    runtime: &tokio::runtime::Runtime,
    expectations: &[oracle::Expectation],
    options: &RunOptions,
) -> Result<Vec<ProbeVerdict>> {
    let ports = SourcePorts::default();
    let mut probers: BTreeMap<&Source, Prober> = BTreeMap::new();
    let mut verdicts = Vec::new();
    for (probe, expected) in scenario.probes.iter().zip(expectations) {
        let prober = match probers.entry(&probe.from) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                let ns = topology.source_netns(&probe.from)?;
                e.insert(Prober::new(ns, ports.clone(), options.timeout)?)
            }
        };
        let dst = scenario
            .cluster
            .target_address(&probe.to)
            .with_context(|| format!("probe {}: no destination address", probe.name))?;
        if let (Source::External(host), Some(via)) = (&probe.from, scenario.cluster.entry_node(&probe.to)) {
            runtime.block_on(topology.steer(host, dst.ip(), via.ip))?;
        }
        let sent = prober.send(plan(probe, dst, expected)).with_context(|| format!("sending probe {}", probe.name))?;
        let observed = sent.into_iter().map(|s| s.attempt).collect();
        verdicts.push(verdict::judge(probe, dst, expected, observed));
    }
    Ok(verdicts)
}

/// How to send a probe. Traffic expected to vanish is sent all at once, so waiting out the
/// silence costs one timeout rather than one per attempt; everything else goes one by one.
fn plan(probe: &Probe, dst: std::net::SocketAddr, expected: &oracle::Expectation) -> Plan {
    let speech = match probe.to {
        Target::HealthCheck { .. } => Speech::HttpGet,
        _ => Speech::Plain(probe.protocol),
    };
    let pace = match expected.outcome {
        oracle::Outcome::Dropped if probe.interval.is_none() => Pace::Concurrent,
        _ => Pace::Sequential { interval: probe.interval },
    };
    Plan { dst, count: probe.count, speech, pace }
}

/// Why this host cannot run `scenario`, if it cannot.
pub fn unsupported(scenario: &Scenario) -> Option<String> {
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
