//! Knowing when a node's proxy has applied the state: kube-proxy's sync metrics (its last
//! successful sync after the push, no change queued since, a sync for every IP family the push
//! reached), or, for proxies without them, the node's rules settling.
//!
//! kube-proxy's `/healthz` cannot say it: it answers 200 with `lastUpdated` = now from
//! start-up, before any sync (pkg/proxy/healthcheck/proxier_health.go, `healthzHandler`).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::topology::Netns;

mod metrics;

pub use metrics::{Families, SyncJudge, SyncMetrics, unix_now};

const POLL: Duration = Duration::from_millis(50);

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

/// Polls the proxy's `/metrics` at `addr` until `judge` finds the push applied. `alive` says
/// whether the proxy is still running (a dead one never syncs: fail at once).
pub(crate) fn wait_metrics(
    netns: &Netns,
    addr: SocketAddr,
    mut judge: SyncJudge,
    deadline: Instant,
    mut alive: impl FnMut() -> Result<()>,
) -> Result<()> {
    loop {
        alive()?;
        let last = match http_get(netns, addr, "/metrics") {
            Ok(body) => {
                let metrics = SyncMetrics::parse(&body);
                let failed = judge.failed_syncs(&metrics);
                if failed > 0.0 {
                    // The proxy will not apply the change (it retries only after its sync
                    // period): judging probes now would judge a ruleset it did not mean.
                    let message = format!(
                        "the proxy failed to apply the change: its metrics at {addr} count {failed} failed \
                         sync(s) since (kubeproxy_sync_proxy_rules_iptables_restore_failures_total; its log says why)"
                    );
                    return Err(crate::proxy::ProxyFailed { message, log: Vec::new() }.into());
                }
                if judge.synced(&metrics, Instant::now()) {
                    return Ok(());
                }
                judge.describe(&metrics)
            }
            Err(e) => format!("{e:#}"),
        };
        if Instant::now() >= deadline {
            bail!("the proxy's metrics at {addr} reported no sync of the change; last seen: {last}");
        }
        std::thread::sleep(POLL);
    }
}

/// For proxies without healthz: polls `dump` until it has moved away from `baseline` (the
/// rules before the change) and then stayed the same for `quiet`. A change need not touch a
/// node's rules: with `unchanged_after`, rules that never move count as applied after it.
pub(crate) fn wait_stable(
    baseline: &str,
    quiet: Duration,
    unchanged_after: Option<Duration>,
    deadline: Instant,
    mut dump: impl FnMut() -> Result<String>,
    mut alive: impl FnMut() -> Result<()>,
) -> Result<()> {
    let started = Instant::now();
    let mut last = without_counters(&dump()?);
    let mut moved = last != baseline;
    let mut since = Instant::now();
    loop {
        alive()?;
        std::thread::sleep(POLL * 4);
        let now = without_counters(&dump().context("reading the node's rules")?);
        if now != last {
            moved |= now != baseline;
            last = now;
            since = Instant::now();
        } else if since.elapsed() >= quiet
            && (moved || unchanged_after.is_some_and(|u| started.elapsed() >= u))
        {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!(if moved { "the node's rules kept changing" } else { "the node's rules never changed" });
        }
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

    #[test]
    fn counters_do_not_count_as_changes() {
        let a = ":KUBE-SERVICES - [0:0]\n:INPUT ACCEPT [12:720]\n-A X -j Y\n\t\tcounter packets 7 bytes 9 jump x\n\tip daddr 10.96.0.1 counter packets 3 bytes 180 jump svc\n";
        let b = ":KUBE-SERVICES - [0:0]\n:INPUT ACCEPT [0:0]\n-A X -j Y\n\t\tcounter packets 0 bytes 0 jump x\n\tip daddr 10.96.0.1 counter packets 0 bytes 0 jump svc\n";
        assert_eq!(without_counters(a), without_counters(b));
        assert!(without_counters(a).contains("counter jump svc"));
        assert_ne!(without_counters(a), without_counters("-A X -j Z\n"));
    }
}
