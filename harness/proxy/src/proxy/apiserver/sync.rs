//! Knowing when a node's proxy has applied the state: kube-proxy's sync metrics (its last
//! successful sync after the push, no change queued since, a sync for every IP family the push
//! reached), or, for proxies without them, the node's rules settling.
//!
//! kube-proxy's `/healthz` cannot say it: it answers 200 with `lastUpdated` = now from
//! start-up, before any sync (pkg/proxy/healthcheck/proxier_health.go, `healthzHandler`).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::topology::Netns;

mod metrics;

pub use metrics::{Families, SyncJudge, SyncMetrics, unix_now};

/// How often rules are dumped, for proxies without sync metrics.
const POLL: Duration = Duration::from_millis(50);

/// The first look at a proxy's metrics after a push, and again whenever they moved: a
/// sync often follows another within milliseconds (kube-proxy's burst of two).
const METRICS_POLL_MIN: Duration = Duration::from_millis(25);
/// The longest wait between two looks at metrics that stand still. Each look costs the
/// proxy a whole `/metrics` page (kube-proxy v1.30: about 80 KB, 1,000 lines); at a fixed
/// 50 ms, the looks were a sixth of the CPU of a real-proxy suite (measurements.md).
const METRICS_POLL_MAX: Duration = Duration::from_millis(200);

/// The wait before the next look at metrics: short after they moved, then half as long
/// again after each look that found them unchanged, up to [`METRICS_POLL_MAX`].
fn next_metrics_poll(current: Duration, moved: bool) -> Duration {
    if moved { METRICS_POLL_MIN } else { (current * 3 / 2).min(METRICS_POLL_MAX) }
}

/// One `GET path` over HTTP/1.0 from inside `netns`: the body, whatever the status.
pub fn http_get(netns: &Netns, addr: SocketAddr, path: &str) -> Result<String> {
    let path = path.to_string();
    netns.run(move || -> Result<String> {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
        s.set_read_timeout(Some(Duration::from_secs(2)))?;
        write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
        let mut text = String::new();
        s.read_to_string(&mut text)?;
        Ok(text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default())
    })?
}

/// One node's wait for a sync, taken a look at a time, so that the waits of several nodes
/// run side by side ([`wait_all`]).
pub(crate) trait NodeWait {
    /// One look: `Ok(true)` once the node has applied the change.
    fn poll(&mut self) -> Result<bool>;
    /// How long to leave the node before the next look.
    fn interval(&self) -> Duration;
    /// The error when the deadline passed without the change applied: what was seen last.
    fn timed_out(&self) -> anyhow::Error;
}

/// Looks at every node's wait in turn until all are done. A node's signals must often stand
/// still for a while before they count (`SyncJudge`'s grace, `StableWait`'s quiet time):
/// waited side by side, that costs a phase one such wait, not one per node. Ends at the first
/// error, or the first wait still undone at `deadline`, with that wait's index.
pub(crate) fn wait_all(
    waits: &mut [&mut dyn NodeWait],
    deadline: Instant,
) -> Result<(), (usize, anyhow::Error)> {
    let mut next: Vec<Option<Instant>> = vec![Some(Instant::now()); waits.len()];
    loop {
        for (i, wait) in waits.iter_mut().enumerate() {
            if next[i].is_none_or(|at| Instant::now() < at) {
                continue;
            }
            next[i] = match wait.poll() {
                Ok(true) => None,
                Ok(false) if Instant::now() >= deadline => return Err((i, wait.timed_out())),
                Ok(false) => Some(Instant::now() + wait.interval()),
                Err(e) => return Err((i, e)),
            };
        }
        let Some(soonest) = next.iter().flatten().min() else { return Ok(()) };
        std::thread::sleep(soonest.saturating_duration_since(Instant::now()));
    }
}

/// Polls the proxy's `/metrics` at `addr` until `judge` finds the push applied. `alive` says
/// whether the proxy is still running (a dead one never syncs: fail at once).
pub(crate) fn wait_metrics(
    netns: &Netns,
    addr: SocketAddr,
    judge: SyncJudge,
    deadline: Instant,
    alive: impl FnMut() -> Result<()>,
) -> Result<()> {
    let mut wait = MetricsWait::new(netns, addr, judge, alive);
    wait_all(&mut [&mut wait], deadline).map_err(|(_, e)| e)
}

/// [`wait_metrics`] a look at a time.
pub(crate) struct MetricsWait<'n, A> {
    netns: &'n Netns,
    addr: SocketAddr,
    judge: SyncJudge,
    alive: A,
    last: String,
    /// The series at the last look, to tell whether they moved.
    seen: Option<SyncMetrics>,
    interval: Duration,
}

impl<'n, A: FnMut() -> Result<()>> MetricsWait<'n, A> {
    pub(crate) fn new(netns: &'n Netns, addr: SocketAddr, judge: SyncJudge, alive: A) -> Self {
        MetricsWait { netns, addr, judge, alive, last: String::new(), seen: None, interval: METRICS_POLL_MIN }
    }
}

impl<A: FnMut() -> Result<()>> NodeWait for MetricsWait<'_, A> {
    fn poll(&mut self) -> Result<bool> {
        (self.alive)()?;
        let addr = self.addr;
        self.last = match http_get(self.netns, addr, "/metrics") {
            Ok(body) => {
                let metrics = SyncMetrics::parse(&body);
                let failed = self.judge.failed_syncs(&metrics);
                if failed > 0.0 {
                    // The proxy will not apply the change (it retries only after its sync
                    // period): judging probes now would judge a ruleset it did not mean.
                    let message = format!(
                        "the proxy failed to apply the change: its metrics at {addr} count {failed} failed \
                         sync(s) since (kubeproxy_sync_proxy_rules_iptables_restore_failures_total, or from \
                         v1.31 in nftables mode _nftables_sync_failures_total; its log says why)"
                    );
                    return Err(crate::proxy::ProxyFailed { message, log: Vec::new() }.into());
                }
                if self.judge.synced(&metrics, Instant::now()) {
                    return Ok(true);
                }
                let moved = self.seen.as_ref() != Some(&metrics);
                self.interval = next_metrics_poll(self.interval, moved);
                let described = self.judge.describe(&metrics);
                self.seen = Some(metrics);
                described
            }
            Err(e) => {
                // Not serving yet (starting up): as for metrics that stand still.
                self.interval = next_metrics_poll(self.interval, false);
                format!("{e:#}")
            }
        };
        Ok(false)
    }

    fn interval(&self) -> Duration {
        self.interval
    }

    fn timed_out(&self) -> anyhow::Error {
        anyhow::anyhow!(
            "the proxy's metrics at {} reported no sync of the change; last seen: {}",
            self.addr,
            self.last
        )
    }
}

/// For proxies without healthz: polls the node's rules (`dump`) until they have moved away
/// from `baseline` (the rules before the change) and then stayed the same for `quiet`. A
/// change need not touch a node's rules: with `unchanged_after`, rules that never move count
/// as applied after it.
pub(crate) struct StableWait<'b, D, A> {
    baseline: &'b str,
    quiet: Duration,
    unchanged_after: Option<Duration>,
    dump: D,
    alive: A,
    started: Instant,
    /// The rules at the last look (none before the first), and since when they read so.
    last: Option<(String, Instant)>,
    moved: bool,
}

impl<'b, D, A> StableWait<'b, D, A>
where
    D: FnMut() -> Result<String>,
    A: FnMut() -> Result<()>,
{
    pub(crate) fn new(
        baseline: &'b str,
        quiet: Duration,
        unchanged_after: Option<Duration>,
        dump: D,
        alive: A,
    ) -> Self {
        let started = Instant::now();
        StableWait { baseline, quiet, unchanged_after, dump, alive, started, last: None, moved: false }
    }
}

impl<D, A> NodeWait for StableWait<'_, D, A>
where
    D: FnMut() -> Result<String>,
    A: FnMut() -> Result<()>,
{
    fn poll(&mut self) -> Result<bool> {
        (self.alive)()?;
        let now = without_counters(&(self.dump)().context("reading the node's rules")?);
        match &self.last {
            Some((last, since)) if *last == now => Ok(since.elapsed() >= self.quiet
                && (self.moved || self.unchanged_after.is_some_and(|u| self.started.elapsed() >= u))),
            _ => {
                self.moved |= now != self.baseline;
                self.last = Some((now, Instant::now()));
                Ok(false)
            }
        }
    }

    fn interval(&self) -> Duration {
        POLL * 4
    }

    fn timed_out(&self) -> anyhow::Error {
        anyhow::anyhow!(if self.moved {
            "the node's rules kept changing"
        } else {
            "the node's rules never changed"
        })
    }
}

/// A rule dump without packet and byte counters (`:CHAIN ACCEPT [3:180]`, `counter packets 3
/// bytes 180`), which traffic changes while the rules stay the same.
pub(crate) fn without_counters(dump: &str) -> String {
    let mut out = String::new();
    for line in dump.lines() {
        let line = match line.rfind(" [") {
            Some(i) if line.starts_with(':') && line.ends_with(']') => &line[..i],
            _ => line,
        };
        let mut words = line.split(' ').peekable();
        let mut kept: Vec<&str> = Vec::new();
        while let Some(w) = words.next() {
            kept.push(w);
            if w.trim_start() == "counter" && words.peek() == Some(&"packets") {
                // packets N bytes M
                for _ in 0..4 {
                    words.next();
                }
            }
        }
        out.push_str(&kept.join(" "));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Done after `polls` looks; each look is logged as its name.
    struct Countdown<'l> {
        name: &'static str,
        polls: u32,
        log: &'l std::cell::RefCell<Vec<&'static str>>,
        fails: bool,
    }

    impl NodeWait for Countdown<'_> {
        fn poll(&mut self) -> Result<bool> {
            self.log.borrow_mut().push(self.name);
            if self.fails {
                anyhow::bail!("{} failed", self.name);
            }
            self.polls = self.polls.saturating_sub(1);
            Ok(self.polls == 0)
        }

        fn interval(&self) -> Duration {
            Duration::from_millis(1)
        }

        fn timed_out(&self) -> anyhow::Error {
            anyhow::anyhow!("{} timed out", self.name)
        }
    }

    #[test]
    fn every_nodes_wait_is_polled_in_turn_and_the_first_failure_names_its_node() {
        let log = std::cell::RefCell::new(Vec::new());
        let later = Instant::now() + Duration::from_secs(60);
        let mut a = Countdown { name: "a", polls: 3, log: &log, fails: false };
        let mut b = Countdown { name: "b", polls: 2, log: &log, fails: false };
        wait_all(&mut [&mut a, &mut b], later).unwrap();
        // Side by side: b's waiting overlaps a's, rather than starting after it.
        assert_eq!(*log.borrow(), ["a", "b", "a", "b", "a"]);

        log.borrow_mut().clear();
        let mut a = Countdown { name: "a", polls: 5, log: &log, fails: false };
        let mut b = Countdown { name: "b", polls: 5, log: &log, fails: true };
        let (i, e) = wait_all(&mut [&mut a, &mut b], later).unwrap_err();
        assert_eq!((i, e.to_string()), (1, "b failed".to_string()));

        let mut a = Countdown { name: "a", polls: 5, log: &log, fails: false };
        let (i, e) = wait_all(&mut [&mut a], Instant::now()).unwrap_err();
        assert_eq!((i, e.to_string()), (0, "a timed out".to_string()));
    }

    #[test]
    fn metrics_are_looked_at_often_while_they_move_and_seldom_while_they_stand_still() {
        let mut interval = METRICS_POLL_MIN;
        let mut still = Vec::new();
        for _ in 0..8 {
            interval = next_metrics_poll(interval, false);
            still.push(interval.as_millis());
        }
        assert_eq!(still, [37, 56, 84, 126, 189, 200, 200, 200]);
        assert_eq!(next_metrics_poll(METRICS_POLL_MAX, true), METRICS_POLL_MIN);
    }

    #[test]
    fn counters_do_not_count_as_changes() {
        let a = ":KUBE-SERVICES - [0:0]\n:INPUT ACCEPT [12:720]\n-A X -j Y\n\t\tcounter packets 7 bytes 9 jump x\n\tip daddr 10.96.0.1 counter packets 3 bytes 180 jump svc\n";
        let b = ":KUBE-SERVICES - [0:0]\n:INPUT ACCEPT [0:0]\n-A X -j Y\n\t\tcounter packets 0 bytes 0 jump x\n\tip daddr 10.96.0.1 counter packets 0 bytes 0 jump svc\n";
        assert_eq!(without_counters(a), without_counters(b));
        assert!(without_counters(a).contains("counter jump svc"));
        assert_ne!(without_counters(a), without_counters("-A X -j Z\n"));
    }
}
