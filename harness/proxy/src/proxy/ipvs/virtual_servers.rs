//! IPVS virtual servers and their real servers as data: what a node should have, what
//! `ipvsadm -Ln` says it has, and the `ipvsadm -R` commands that turn one into the other as
//! kube-proxy's `syncService`/`syncEndpoint` do (pkg/proxy/ipvs/proxier.go, v1.30.3): services
//! added, edited or deleted in place, never flushed, so established connections live on; a
//! removed TCP real server that still has connections is kept with weight 0 until it has
//! none (`GracefulDeleteRS`, graceful_termination.go), UDP and SCTP ones go at once.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;

use anyhow::{Context, Result, bail};

use crate::model::Protocol;

/// kube-proxy's default scheduler (`--ipvs-scheduler` unset).
pub(crate) const SCHEDULER: &str = "rr";

/// A virtual server's identity: protocol, address and port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServiceKey {
    pub protocol: Protocol,
    pub address: SocketAddr,
}

impl ServiceKey {
    /// `-t ADDR`, `-u ADDR` or `--sctp-service ADDR` (IPv6 in brackets).
    fn flag(&self) -> String {
        let kind = match self.protocol {
            Protocol::Tcp => "-t",
            Protocol::Udp => "-u",
            Protocol::Sctp => "--sctp-service",
        };
        format!("{kind} {}", self.address)
    }
}

impl fmt::Display for ServiceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.protocol.as_k8s(), self.address)
    }
}

/// One virtual server as it should be, or as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VirtualServer {
    pub key: ServiceKey,
    pub scheduler: String,
    /// Persistence timeout in seconds (`sessionAffinity: ClientIP`).
    pub persistent: Option<u32>,
    /// Real servers (masquerading forward, kube-proxy's default) by address, with weight.
    pub reals: BTreeMap<SocketAddr, RealServer>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RealServer {
    pub weight: u32,
    /// Active plus inactive connections (only known for servers read from a node).
    pub connections: u64,
}

impl VirtualServer {
    pub fn new(key: ServiceKey, persistent: Option<u32>) -> VirtualServer {
        VirtualServer { key, scheduler: SCHEDULER.to_string(), persistent, reals: BTreeMap::new() }
    }

    fn service_line(&self, verb: &str) -> String {
        let mut line = format!("{verb} {} -s {}", self.key.flag(), self.scheduler);
        if let Some(timeout) = self.persistent {
            line.push_str(&format!(" -p {timeout}"));
        }
        line
    }

    fn real_line(&self, verb: &str, real: SocketAddr, weight: Option<u32>) -> String {
        let mut line = format!("{verb} {} -r {real}", self.key.flag());
        if let Some(w) = weight {
            line.push_str(&format!(" -m -w {w}"));
        }
        line
    }
}

/// The whole IPVS table of a node, by service.
pub type Table = BTreeMap<ServiceKey, VirtualServer>;

/// `ipvsadm -R` lines that turn `current` into `desired`, leaving other services alone only
/// if `desired` has them: the node's table is the proxy's alone.
pub(crate) fn sync_commands(current: &Table, desired: &Table) -> Vec<String> {
    let mut lines = Vec::new();
    for (key, want) in desired {
        let Some(have) = current.get(key) else {
            lines.push(want.service_line("-A"));
            for (addr, real) in &want.reals {
                lines.push(want.real_line("-a", *addr, Some(real.weight)));
            }
            continue;
        };
        if have.scheduler != want.scheduler || have.persistent != want.persistent {
            lines.push(want.service_line("-E"));
        }
        for (addr, real) in &want.reals {
            match have.reals.get(addr) {
                None => lines.push(want.real_line("-a", *addr, Some(real.weight))),
                Some(old) if old.weight != real.weight => {
                    lines.push(want.real_line("-e", *addr, Some(real.weight)))
                }
                Some(_) => {}
            }
        }
        for (addr, old) in &have.reals {
            if want.reals.contains_key(addr) {
                continue;
            }
            let graceful = key.protocol == Protocol::Tcp && old.connections > 0;
            if !graceful {
                lines.push(want.real_line("-d", *addr, None));
            } else if old.weight != 0 {
                lines.push(want.real_line("-e", *addr, Some(0)));
            }
        }
    }
    for (key, have) in current {
        if !desired.contains_key(key) {
            lines.push(format!("-D {}", have.key.flag()));
        }
    }
    lines
}

/// Parses `ipvsadm -Ln` output:
/// ```text
/// TCP  10.96.0.10:80 rr persistent 10800
///   -> 10.244.1.5:8080              Masq    1      0          0
/// ```
pub(crate) fn parse_list(text: &str) -> Result<Table> {
    let mut table = Table::new();
    let mut current: Option<ServiceKey> = None;
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["->", "RemoteAddress:Port", ..] | ["IP", "Virtual", ..] | ["Prot", ..] | [] => {}
            ["->", addr, _forward, weight, active, inactive, ..] => {
                let key = current.with_context(|| format!("a real server before any service: {line:?}"))?;
                let addr: SocketAddr =
                    addr.parse().with_context(|| format!("real server address in {line:?}"))?;
                let real = RealServer {
                    weight: weight.parse().with_context(|| format!("weight in {line:?}"))?,
                    connections: active.parse::<u64>().unwrap_or(0) + inactive.parse::<u64>().unwrap_or(0),
                };
                table.get_mut(&key).expect("the service was inserted").reals.insert(addr, real);
            }
            [proto, addr, scheduler, rest @ ..] => {
                let protocol = Protocol::parse_k8s(proto)
                    .with_context(|| format!("unknown IPVS protocol {proto:?} in {line:?}"))?;
                let address: SocketAddr =
                    addr.parse().with_context(|| format!("service address in {line:?}"))?;
                let persistent = match rest {
                    ["persistent", timeout, ..] => Some(timeout.parse().context("persistence timeout")?),
                    _ => None,
                };
                let key = ServiceKey { protocol, address };
                let mut vs = VirtualServer::new(key, persistent);
                vs.scheduler = scheduler.to_string();
                table.insert(key, vs);
                current = Some(key);
            }
            _ => bail!("unexpected line in `ipvsadm -Ln` output: {line:?}"),
        }
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(addr: &str) -> ServiceKey {
        ServiceKey { protocol: Protocol::Tcp, address: addr.parse().unwrap() }
    }

    fn vs(addr: &str, persistent: Option<u32>, reals: &[(&str, u32, u64)]) -> VirtualServer {
        let mut v = VirtualServer::new(key(addr), persistent);
        for (r, weight, connections) in reals {
            v.reals.insert(r.parse().unwrap(), RealServer { weight: *weight, connections: *connections });
        }
        v
    }

    fn table(servers: Vec<VirtualServer>) -> Table {
        servers.into_iter().map(|v| (v.key, v)).collect()
    }

    #[test]
    fn parses_ipvsadm_listing() {
        let text = "IP Virtual Server version 1.2.1 (size=4096)\n\
                    Prot LocalAddress:Port Scheduler Flags\n  \
                    -> RemoteAddress:Port           Forward Weight ActiveConn InActConn\n\
                    TCP  10.96.0.10:80 rr persistent 10800\n  \
                    -> 10.244.1.5:8080              Masq    1      2          1\n\
                    UDP  [fd00::a]:53 rr\n";
        let t = parse_list(text).unwrap();
        let tcp = &t[&key("10.96.0.10:80")];
        assert_eq!(tcp.persistent, Some(10800));
        assert_eq!(tcp.reals[&"10.244.1.5:8080".parse().unwrap()], RealServer { weight: 1, connections: 3 });
        let udp = ServiceKey { protocol: Protocol::Udp, address: "[fd00::a]:53".parse().unwrap() };
        assert!(t[&udp].reals.is_empty());
    }

    #[test]
    fn a_fresh_node_gets_services_then_their_real_servers() {
        let want = table(vec![vs("10.96.0.10:80", Some(30), &[("10.244.1.5:8080", 1, 0)])]);
        assert_eq!(
            sync_commands(&Table::new(), &want),
            ["-A -t 10.96.0.10:80 -s rr -p 30", "-a -t 10.96.0.10:80 -r 10.244.1.5:8080 -m -w 1"]
        );
    }

    #[test]
    fn removed_tcp_backends_with_connections_drain_at_weight_zero() {
        let have = table(vec![vs(
            "10.96.0.10:80",
            None,
            &[("10.244.1.5:8080", 1, 1), ("10.244.1.6:8080", 1, 0), ("10.244.1.7:8080", 0, 0)],
        )]);
        let want = table(vec![vs("10.96.0.10:80", Some(60), &[])]);
        assert_eq!(
            sync_commands(&have, &want),
            [
                "-E -t 10.96.0.10:80 -s rr -p 60",
                "-e -t 10.96.0.10:80 -r 10.244.1.5:8080 -m -w 0",
                "-d -t 10.96.0.10:80 -r 10.244.1.6:8080",
                "-d -t 10.96.0.10:80 -r 10.244.1.7:8080",
            ]
        );
        // A drained backend that comes back gets its weight again; a gone service is deleted.
        let have = table(vec![
            vs("10.96.0.10:80", None, &[("10.244.1.5:8080", 0, 1)]),
            vs("10.96.0.11:80", None, &[]),
        ]);
        let want = table(vec![vs("10.96.0.10:80", None, &[("10.244.1.5:8080", 1, 0)])]);
        assert_eq!(
            sync_commands(&have, &want),
            ["-e -t 10.96.0.10:80 -r 10.244.1.5:8080 -m -w 1", "-D -t 10.96.0.11:80"]
        );
    }
}
