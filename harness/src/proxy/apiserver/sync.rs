//! Knowing when a node's proxy has applied the state: its `/healthz` reports a `lastUpdated`
//! after the moment the state was pushed (kube-proxy's and the reference proxy's form), or,
//! for proxies without one, the node's rules stop changing.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail};
use k8s_openapi::jiff::Timestamp;

use crate::topology::Netns;

const POLL: Duration = Duration::from_millis(50);

/// `lastUpdated` of a healthz answer body, if it has one.
pub fn last_updated(body: &str) -> Option<SystemTime> {
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    parse_time(v["lastUpdated"].as_str()?)
}

/// RFC 3339, or Go's `time.Time.String()` form that kube-proxy prints
/// (`2024-08-01 10:00:00.5 +0000 UTC m=+12.3`).
fn parse_time(text: &str) -> Option<SystemTime> {
    if let Ok(ts) = text.parse::<Timestamp>() {
        return Some(SystemTime::from(ts));
    }
    let text = text.split(" m=").next()?;
    let mut words = text.split(' ');
    let (date, time, offset) = (words.next()?, words.next()?, words.next()?);
    let (sign, digits) = offset.split_at(1);
    if digits.len() != 4 {
        return None;
    }
    let rfc = format!("{date}T{time}{sign}{}:{}", &digits[..2], &digits[2..]);
    rfc.parse::<Timestamp>().ok().map(SystemTime::from)
}

/// One `GET /healthz` from inside `netns`: the body, whatever the status.
pub fn get_healthz(netns: &Netns, addr: SocketAddr) -> Result<String> {
    netns.run(move || -> Result<String> {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
        s.set_read_timeout(Some(Duration::from_secs(2)))?;
        write!(s, "GET /healthz HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
        let mut text = String::new();
        s.read_to_string(&mut text)?;
        Ok(text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default())
    })?
}

/// Polls the healthz endpoint (at the first of `addrs` that answers) until `lastUpdated` is
/// at or after `pushed`. `alive` says
/// whether the proxy is still running (a dead one never syncs: fail at once).
pub fn wait_healthz(
    netns: &Netns,
    addrs: &[SocketAddr],
    pushed: SystemTime,
    deadline: Instant,
    mut alive: impl FnMut() -> Result<()>,
) -> Result<()> {
    let mut last;
    loop {
        alive()?;
        let mut answers = addrs.iter().map(|&a| get_healthz(netns, a));
        match answers.find(Result::is_ok).unwrap_or_else(|| get_healthz(netns, addrs[0])) {
            Ok(body) => {
                if last_updated(&body).is_some_and(|t| t >= pushed) {
                    return Ok(());
                }
                last = body;
            }
            Err(e) => last = format!("{e:#}"),
        }
        if Instant::now() >= deadline {
            bail!(
                "the proxy's healthz at {addrs:?} reported no sync after the change; last answer: {}",
                last.trim()
            );
        }
        std::thread::sleep(POLL);
    }
}

/// For proxies without healthz: polls `dump` until it has moved away from `baseline` (the
/// rules before the change) and then stayed the same for `quiet`. A change need not touch a
/// node's rules: with `unchanged_after`, rules that never move count as applied after it.
pub fn wait_stable(
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
pub fn without_counters(dump: &str) -> String {
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

    #[test]
    fn last_updated_reads_kube_proxys_healthz_body() {
        let body = r#"{"lastUpdated": "2024-08-01 10:00:00.5 +0000 UTC m=+12.345", "currentTime": "x"}"#;
        // kube-proxy 1.30 prints Go's time.Time String() form; the RFC 3339 form parses too.
        let rfc = r#"{"lastUpdated": "2024-08-01T10:00:00.5Z"}"#;
        let t = last_updated(rfc).unwrap();
        assert_eq!(t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_millis(), 1_722_506_400_500);
        assert_eq!(last_updated(body), last_updated(rfc));
        assert_eq!(last_updated("not json"), None);
    }
}
