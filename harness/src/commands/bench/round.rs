//! One round of `bench --scale`, run in a process of its own (so that its peak memory and its
//! children's are its own): a fresh topology, the proxy started on N generated Services, the
//! first-packet latencies to the first and last of them, then four API changes, each timed
//! from the change to the first packet seen taking the new path.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use super::scenario::{self, Change, WEB_KEPT, WEB_REMOVED};
use crate::model::{Protocol, ProxyChoice};
use crate::stage::Stage;
use crate::traffic::client::SourcePorts;
use crate::traffic::{Attempt, Prober};

/// How long a probe attempt waits for an answer. A cluster IP with no rules behind it is
/// silent in this topology, so this is also the resolution of "add a Service"; shorter, and an
/// answer delayed by a busy machine (2 cores, other work) is taken for none.
const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(100);
/// The shortest pause between two attempts; while the proxy has not yet reported the change
/// synced, the pause grows to 1 % of the time since the change, so a slow proxy costs a few
/// hundred attempts, not one per millisecond, and the figure is off by at most 1 %.
const MIN_PACE: Duration = Duration::from_millis(1);
/// After the proxy reported a change synced, how long the new path may take to show on the
/// wire before the round counts as the proxy's failure.
const WIRE_GRACE: Duration = Duration::from_secs(10);
/// "Remove an endpoint" is seen once this many attempts in a row, after the proxy reported
/// the change synced, reached only the endpoint kept. Before the change each attempt reaches
/// it with probability 1/2, so the figure (the first attempt after the last one that reached
/// the removed endpoint) is early by a geometric number of attempts, mean one.
const KEPT_IN_A_ROW: usize = 20;

/// What one round measured (durations in milliseconds, connect times in microseconds).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RoundFigures {
    pub start_ms: f64,
    /// Per change: from the change to the first packet on the new path (on the wire).
    pub wire_ms: Vec<(Change, f64)>,
    /// Per change: from the change to the proxy's own report of synced (the adapter's wait).
    pub synced_ms: Vec<(Change, f64)>,
    pub connect_first_us: Vec<f64>,
    pub connect_last_us: Vec<f64>,
    /// This process's peak resident set (VmHWM), in kB: the harness, and a built-in proxy's
    /// rule model, which lives in the harness.
    pub harness_peak_kb: u64,
    /// The largest peak resident set of any child process this round waited for
    /// (getrusage RUSAGE_CHILDREN), in kB: the proxy's daemon, or a built-in proxy's
    /// iptables-restore or nft.
    pub proxy_peak_kb: u64,
}

/// The proxy failed at its job during a round (exit 1, not 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ProxyFault(pub String);

/// Runs one round with `services` generated Services and writes its figures to `out` as JSON.
pub fn run(services: usize, choice: &ProxyChoice, connects: usize, out: &Path) -> Result<()> {
    if let Some(reason) = crate::privileges::preflight() {
        bail!("cannot benchmark here: {reason}");
    }
    let dir = scratch_dir()?;
    let file = dir.join(format!("scale-{services}.yaml"));
    std::fs::write(&file, scenario::text(services)).context("writing the scale scenario")?;
    let result = measure(services, choice, connects, &file);
    let _ = std::fs::remove_dir_all(&dir);
    let figures = result?;
    std::fs::write(out, serde_json::to_vec(&figures)?).with_context(|| format!("writing {}", out.display()))
}

fn scratch_dir() -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("packetproof-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

fn measure(services: usize, choice: &ProxyChoice, connects: usize, file: &Path) -> Result<RoundFigures> {
    let Some(mut loaded) = crate::commands::load_all(&[file.to_path_buf()])? else {
        bail!("the generated scale scenario is invalid (a packetproof bug)");
    };
    let scenario = loaded.pop().context("no scenario")?;
    // Adapter options name files relative to where the command was run, not to the scratch
    // scenario (whose directory is the adapters' working directory).
    let proxy = crate::proxy::build(choice, &std::env::current_dir()?)?;
    if let Some(reason) = proxy.unavailable() {
        bail!("{} cannot run here: {reason}", proxy.name());
    }
    let phases = scenario.phases();
    anyhow::ensure!(phases.len() == 1 + Change::ALL.len(), "the scale scenario has one step per change");
    let state = |i: usize| crate::proxy::State { cluster: phases[i].cluster, objects: phases[i].objects };
    let mut figures = RoundFigures::default();
    Stage::build(&scenario.cluster, &Default::default())?.play(|scene| {
        scene.start_servers(&scenario.cluster, [])?;
        let prober =
            Prober::new(&scene.topology().pods[scenario::CLIENT], SourcePorts::default(), ATTEMPT_TIMEOUT)?;
        let t = Instant::now();
        scene.start_proxy(proxy.as_ref(), &state(0), file)?;
        figures.start_ms = millis(t.elapsed());
        let ip = |name: &str| -> Result<SocketAddr> {
            let svc = scenario.cluster.service(name).with_context(|| format!("no Service {name}"))?;
            Ok(SocketAddr::new(svc.cluster_ip(), scenario::PORT))
        };
        let (first, last) =
            (ip(&scenario::generated(services, 0))?, ip(&scenario::generated(services, services - 1))?);
        for dst in [first, last] {
            let answered = prober.probe(Protocol::Tcp, dst, 1)?;
            if !matches!(answered.as_slice(), [Attempt::Answered { .. }]) {
                return Err(ProxyFault(format!("{dst} was not answered once synced: {answered:?}")).into());
            }
        }
        for _ in 0..connects {
            figures.connect_first_us.push(connect_time(&prober, first)?);
            figures.connect_last_us.push(connect_time(&prober, last)?);
        }
        for (i, change) in Change::ALL.into_iter().enumerate() {
            let dst = SocketAddr::new(change.address(), scenario::PORT);
            check_old_path(&prober, change, dst)?;
            let (wire, synced) = timed_change(&prober, scene.running()?, &state(i + 1), change, dst)?;
            figures.wire_ms.push((change, millis(wire)));
            figures.synced_ms.push((change, millis(synced)));
        }
        Ok(())
    })?;
    figures.harness_peak_kb = own_peak_kb()?;
    figures.proxy_peak_kb = children_peak_kb();
    Ok(figures)
}

/// The time `connect()` takes to a Service from the client pod: the first packet's trip
/// through the node's rules, the SYN-ACK's back, nothing else.
fn connect_time(prober: &Prober, dst: SocketAddr) -> Result<f64> {
    let took = prober.run_inside(move |_, timeout| {
        let t = Instant::now();
        std::net::TcpStream::connect_timeout(&dst, timeout).map(|_| t.elapsed())
    })?;
    let took = took.map_err(|e| ProxyFault(format!("connecting to {dst}: {e}")))?;
    Ok(took.as_secs_f64() * 1e6)
}

/// The state before a change must show the old path, or the change's figure means nothing.
fn check_old_path(prober: &Prober, change: Change, dst: SocketAddr) -> Result<()> {
    let attempt = one(prober, dst)?;
    let fine = match change {
        Change::AddService => !matches!(attempt, Attempt::Answered { .. }),
        Change::RemoveEndpoint | Change::DeleteService => matches!(attempt, Attempt::Answered { .. }),
        Change::ScaleUp => matches!(attempt, Attempt::Refused { .. }),
    };
    if !fine {
        return Err(ProxyFault(format!("before \"{}\", {dst} got {attempt:?}", change.title())).into());
    }
    Ok(())
}

fn one(prober: &Prober, dst: SocketAddr) -> Result<Attempt> {
    prober.probe(Protocol::Tcp, dst, 1)?.pop().context("a probe made no attempt")
}

/// Pushes `state` to the proxy while another thread probes `dst`: returns the time from the
/// push to the first attempt on the new path, and to the proxy's report of synced.
fn timed_change(
    prober: &Prober,
    running: &mut (dyn crate::proxy::Running + '_),
    state: &crate::proxy::State<'_>,
    change: Change,
    dst: SocketAddr,
) -> Result<(Duration, Duration)> {
    let synced = AtomicBool::new(false);
    let synced_at = std::sync::Mutex::new(None::<Instant>);
    let t0 = Instant::now();
    let (wire, pushed) = std::thread::scope(|scope| {
        let watcher = scope.spawn(|| watch(prober, change, dst, t0, &synced, &synced_at));
        let pushed = running.update(state);
        *synced_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        synced.store(true, Ordering::Release);
        (watcher.join(), pushed.map(|()| t0.elapsed()))
    });
    let synced = pushed?;
    let wire = wire.map_err(|_| anyhow::anyhow!("the probing thread panicked"))??;
    Ok((wire, synced))
}

/// Probes `dst` until an attempt takes the path `change` leads to; the time from `t0` to the
/// send of that attempt.
fn watch(
    prober: &Prober,
    change: Change,
    dst: SocketAddr,
    t0: Instant,
    synced: &AtomicBool,
    synced_at: &std::sync::Mutex<Option<Instant>>,
) -> Result<Duration> {
    let mut kept_since: Option<Duration> = None;
    let mut kept_in_a_row = 0;
    loop {
        let sent = t0.elapsed();
        let attempt = one(prober, dst)?;
        let answered_by = attempt.backend();
        let done = synced.load(Ordering::Acquire);
        match change {
            Change::AddService | Change::ScaleUp if answered_by.is_some() => return Ok(sent),
            // Refused or silent: no Service there (an answer merely late is no evidence).
            Change::DeleteService if matches!(attempt, Attempt::Refused { .. } | Attempt::Silent) => {
                return Ok(sent);
            }
            Change::RemoveEndpoint => match answered_by {
                Some(WEB_REMOVED) => (kept_since, kept_in_a_row) = (None, 0),
                Some(WEB_KEPT) => {
                    let since = *kept_since.get_or_insert(sent);
                    kept_in_a_row += 1;
                    if done && kept_in_a_row >= KEPT_IN_A_ROW {
                        return Ok(since);
                    }
                }
                Some(other) => {
                    return Err(ProxyFault(format!(
                        "while an endpoint was removed, {dst} was answered by {other}, no endpoint of it"
                    ))
                    .into());
                }
                // Not answered in time on a busy machine: evidence of neither path.
                None => {}
            },
            _ => {}
        }
        let reported = *synced_at.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(at) = reported
            && at.elapsed() > WIRE_GRACE
        {
            return Err(ProxyFault(format!(
                "\"{}\": {:?} after the proxy reported it synced, {dst} still took the old path ({attempt:?})",
                change.title(),
                WIRE_GRACE
            ))
            .into());
        }
        let pace = if done { MIN_PACE } else { MIN_PACE.max(t0.elapsed() / 100) };
        std::thread::sleep(pace);
    }
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// VmHWM of this process, in kB.
fn own_peak_kb() -> Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmHWM in /proc/self/status")
}

/// The largest peak resident set of a waited-for child, in kB (Linux reports kB).
fn children_peak_kb() -> u64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    if rc == 0 { u64::try_from(usage.ru_maxrss).unwrap_or(0) } else { 0 }
}
