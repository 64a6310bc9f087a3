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

/// Polls `dump` until it returns the same text for `quiet` in a row.
pub fn wait_stable(
    quiet: Duration,
    deadline: Instant,
    mut dump: impl FnMut() -> Result<String>,
    mut alive: impl FnMut() -> Result<()>,
) -> Result<()> {
    let mut last = dump()?;
    let mut since = Instant::now();
    loop {
        alive()?;
        std::thread::sleep(POLL * 4);
        let now = dump().context("reading the node's rules")?;
        if now != last {
            last = now;
            since = Instant::now();
        } else if since.elapsed() >= quiet {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("the node's rules kept changing");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
