//! Clearing stale UDP conntrack entries after a change, as kube-proxy does after each sync
//! (pkg/proxy/conntrack/cleanup.go). UDP has no connection to end: a client that keeps its
//! source port keeps matching the entry that NATs it to an endpoint that is gone, or the
//! entry made while the Service had no endpoints, until the entry times out.
//!
//! [`stale`] decides what to delete from the state before and after (pure); [`delete`] runs
//! `conntrack -D` inside a node namespace.

use std::collections::BTreeMap;
use std::net::IpAddr;

use anyhow::Result;

use crate::model::{Cluster, Endpoint, Protocol, Service, ServicePort};
use crate::topology::Netns;

/// A set of UDP conntrack entries to delete.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Deletion {
    /// The un-translated entries to a Service IP (the Service had no endpoints: its traffic
    /// was rejected, and the entries of those attempts would keep new answers away). Entries
    /// already translated to an endpoint are left alone: their reply comes from the endpoint,
    /// not the Service IP (the precise filter of kubernetes/kubernetes#122741, so a restart,
    /// whose first sync finds every Service new, moves no client: #122740).
    ToIp(IpAddr),
    /// The un-translated entries to a node port (the reply comes from that port), on any
    /// address of `ipv6`'s family.
    ToPort { port: u16, ipv6: bool },
    /// Every entry to a Service IP, translated or not (kube-proxy v1.30's filter: a mutant).
    AllToIp(IpAddr),
    /// Every entry to a node port (kube-proxy v1.30's filter: a mutant).
    AllToPort { port: u16, ipv6: bool },
    /// Entries to a Service IP translated to a gone endpoint: those whose reply comes from it,
    /// kube-proxy's own filter (origDst and replySrc, pkg/proxy/conntrack/cleanup.go). Not
    /// `--dst-nat`: conntrack-tools 1.4.7 ignores its address for IPv6 and deleted the entries
    /// of every endpoint (found by `packetproof explore --seed 41`: a UDP stream on an endpoint
    /// that still served moved after a restart cleared its neighbour's entries).
    Nat { frontend: IpAddr, endpoint: IpAddr },
    /// Entries to a node port translated to a gone endpoint.
    PortNat { port: u16, endpoint: IpAddr },
}

impl Deletion {
    /// The `conntrack` arguments that delete these entries.
    pub fn args(&self) -> Vec<String> {
        let family = |ipv6: bool| if ipv6 { "ipv6" } else { "ipv4" };
        let args: Vec<String> = match self {
            Deletion::ToIp(ip) => vec![
                "-f".into(),
                family(ip.is_ipv6()).into(),
                "--orig-dst".into(),
                ip.to_string(),
                "--reply-src".into(),
                ip.to_string(),
            ],
            Deletion::ToPort { port, ipv6 } => vec![
                "-f".into(),
                family(*ipv6).into(),
                "--dport".into(),
                port.to_string(),
                "--reply-port-src".into(),
                port.to_string(),
            ],
            Deletion::AllToIp(ip) => {
                vec!["-f".into(), family(ip.is_ipv6()).into(), "--orig-dst".into(), ip.to_string()]
            }
            Deletion::AllToPort { port, ipv6 } => {
                vec!["-f".into(), family(*ipv6).into(), "--dport".into(), port.to_string()]
            }
            Deletion::Nat { frontend, endpoint } => vec![
                "-f".into(),
                family(endpoint.is_ipv6()).into(),
                "--orig-dst".into(),
                frontend.to_string(),
                "--reply-src".into(),
                endpoint.to_string(),
            ],
            Deletion::PortNat { port, endpoint } => vec![
                "-f".into(),
                family(endpoint.is_ipv6()).into(),
                "--dport".into(),
                port.to_string(),
                "--reply-src".into(),
                endpoint.to_string(),
            ],
        };
        ["-D", "-p", "udp"].into_iter().map(String::from).chain(args).collect()
    }
}

/// A UDP Service port's identity across states.
type PortKey<'c> = (&'c str, &'c str, &'c str);

/// A cleanup that leaves some stale entries behind: real proxies' bugs, for mutants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lapse {
    /// Nothing is cleared (kubernetes/kubernetes#59368, #72336).
    Everything,
    /// A Service port left with no serving endpoint keeps the entries of those it lost
    /// (kubernetes/kubernetes#139628, #139629).
    ScaledToZero,
    /// A deleted Service (or port) keeps its entries (kubernetes/kubernetes#141371).
    Deleted,
    /// Entries of endpoints that turned not ready are cleared although they still serve
    /// (kubernetes/kubernetes#134143).
    NotReadyCleared,
    /// The first sync after a (re)start clears every entry of every UDP Service, translated
    /// or not, as kube-proxy v1.30 does (kubernetes/kubernetes#122740); later syncs are right.
    FlushedOnStart,
}

/// What kube-proxy v1.30's first sync deletes: every Service is new, so every UDP Service port
/// with a serving endpoint loses all its entries, on every frontend and node port.
pub(crate) fn flushed_on_start(after: &Cluster) -> Vec<Deletion> {
    let nothing = Cluster { services: Vec::new(), ..after.clone() };
    stale(&nothing, after)
        .into_iter()
        .map(|d| match d {
            Deletion::ToIp(ip) => Deletion::AllToIp(ip),
            Deletion::ToPort { port, ipv6 } => Deletion::AllToPort { port, ipv6 },
            other => other,
        })
        .collect()
}

/// What to delete after the cluster changed from `before` to `after`: for every UDP Service
/// port, the entries NATed to an endpoint that was serving and no longer is (or is gone), and
/// all entries to a Service port that went from no serving endpoint to some.
pub fn stale(before: &Cluster, after: &Cluster) -> Vec<Deletion> {
    stale_with(before, after, None)
}

/// [`stale`], less what `lapse` leaves behind.
pub(crate) fn stale_with(before: &Cluster, after: &Cluster, lapse: Option<Lapse>) -> Vec<Deletion> {
    let old = udp_ports(before);
    let new = udp_ports(after);
    let mut out = Vec::new();
    if lapse == Some(Lapse::Everything) {
        return out;
    }
    for (key, (service, port)) in &old {
        let now = new.get(key).map(|(_, p)| p.endpoints.as_slice()).unwrap_or_default();
        let skipped = match lapse {
            Some(Lapse::Deleted) => !new.contains_key(key),
            Some(Lapse::ScaledToZero) => new.contains_key(key) && !now.iter().any(|e| e.serving),
            _ => false,
        };
        if skipped {
            continue;
        }
        let not_ready_cleared = lapse == Some(Lapse::NotReadyCleared);
        let gone_from = |e: &Endpoint| {
            !still_serving(e, now)
                || (not_ready_cleared && !now.iter().any(|n| n.address() == e.address() && n.ready))
        };
        for gone in port.endpoints.iter().filter(|e| e.serving && gone_from(e)) {
            // The old Service's frontends of the endpoint's family (kube-proxy runs a proxier
            // per family): where the stale entries were made. A dual-stack Service's other
            // family never translated to this endpoint, and conntrack refuses the mix.
            let same_family = |f: &IpAddr| f.is_ipv6() == gone.ip.is_ipv6();
            out.extend(
                frontends(service)
                    .filter(same_family)
                    .map(|frontend| Deletion::Nat { frontend, endpoint: gone.ip }),
            );
            if let Some(node_port) = port.node_port {
                out.push(Deletion::PortNat { port: node_port, endpoint: gone.ip });
            }
        }
    }
    for (key, (service, port)) in &new {
        let served_before = old.get(key).is_some_and(|(_, p)| p.endpoints.iter().any(|e| e.serving));
        if served_before || !port.endpoints.iter().any(|e| e.serving) {
            continue;
        }
        out.extend(frontends(service).map(Deletion::ToIp));
        if let Some(node_port) = port.node_port {
            let families: std::collections::BTreeSet<bool> =
                frontends(service).map(|ip| ip.is_ipv6()).collect();
            out.extend(families.into_iter().map(|ipv6| Deletion::ToPort { port: node_port, ipv6 }));
        }
    }
    out.sort();
    out.dedup();
    out
}

fn udp_ports(cluster: &Cluster) -> BTreeMap<PortKey<'_>, (&Service, &ServicePort)> {
    let mut ports = BTreeMap::new();
    for service in &cluster.services {
        for port in service.ports.iter().filter(|p| p.protocol == Protocol::Udp) {
            ports.insert(
                (service.namespace.as_str(), service.name.as_str(), port.name.as_str()),
                (service, port),
            );
        }
    }
    ports
}

fn still_serving(endpoint: &Endpoint, now: &[Endpoint]) -> bool {
    now.iter().any(|e| e.address() == endpoint.address() && e.serving)
}

/// What a proxy's first sync after a (re)start deletes, knowing nothing of the state before
/// it: from the UDP entries the node holds (`conntrack -L` output, `listing`), those to a UDP
/// Service's frontend or node port translated to an address that is no serving endpoint of
/// that port, and the un-translated ones of a port that has a serving endpoint (the rejects of
/// when it had none). kube-proxy v1.32's conntrack reconciler does this on every sync
/// (`CleanStaleEntries`, pkg/proxy/conntrack/cleanup.go); a diff of states misses what changed
/// while the proxy was down (found by `packetproof explore`: an endpoint replaced during a
/// restart kept its UDP stream). A port with no serving endpoint keeps its entries, as the
/// reconciler's does ("a Service without endpoints does not require to clean the conntrack
/// entries", v1.32 to v1.36) and as v1.31's first sync, which deletes nothing, does: whether
/// they are stale, a started proxy cannot tell (found by `packetproof explore --seed 13`: a
/// stream on an endpoint that never served).
pub(crate) fn reconciled(after: &Cluster, listing: &str) -> Vec<Deletion> {
    let ports = udp_ports(after);
    let mut out = Vec::new();
    for entry in listing.lines().filter_map(UdpEntry::parse) {
        for (service, port) in ports.values() {
            if !port.endpoints.iter().any(|e| e.serving) {
                continue;
            }
            let serving = |ip: IpAddr| port.endpoints.iter().any(|e| e.serving && e.ip == ip);
            let to_frontend = frontends(service).any(|f| f.eq(&entry.dst)) && entry.dport == port.port;
            let to_node_port = port.node_port == Some(entry.dport) && !to_frontend;
            if !to_frontend && !to_node_port {
                continue;
            }
            // Un-translated: a reject of when the port had no serving endpoint.
            let untranslated = entry.reply_src == entry.dst;
            let stale = untranslated || !serving(entry.reply_src);
            if !stale {
                continue;
            }
            out.push(match (untranslated, to_frontend) {
                (true, true) => Deletion::ToIp(entry.dst),
                (true, false) => Deletion::ToPort { port: entry.dport, ipv6: entry.dst.is_ipv6() },
                (false, true) => Deletion::Nat { frontend: entry.dst, endpoint: entry.reply_src },
                (false, false) => Deletion::PortNat { port: entry.dport, endpoint: entry.reply_src },
            });
        }
    }
    out.sort();
    out.dedup();
    out
}

/// A UDP entry of `conntrack -L`: its original destination and the reply's source.
struct UdpEntry {
    dst: IpAddr,
    dport: u16,
    reply_src: IpAddr,
}

impl UdpEntry {
    /// `udp 17 29 src=A dst=B sport=P dport=Q [UNREPLIED] src=C dst=D sport=R dport=S …`
    fn parse(line: &str) -> Option<UdpEntry> {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.first() != Some(&"udp") {
            return None;
        }
        let values = |key: &str| words.iter().filter_map(move |w| w.strip_prefix(key)).collect::<Vec<&str>>();
        let (dsts, dports, srcs) = (values("dst="), values("dport="), values("src="));
        Some(UdpEntry {
            dst: dsts.first()?.parse().ok()?,
            dport: dports.first()?.parse().ok()?,
            reply_src: srcs.get(1)?.parse().ok()?,
        })
    }
}

/// Lists the namespace's UDP conntrack entries (`conntrack -L -p udp`; an empty table is not an
/// error).
pub fn list_udp(netns: &Netns) -> Result<String> {
    let out = netns.exec("conntrack", &["-L", "-p", "udp"], None)?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Every address traffic to the Service arrives at, besides node ports.
fn frontends(service: &Service) -> impl Iterator<Item = IpAddr> + '_ {
    service
        .cluster_ips
        .copied()
        .chain(service.external_ips.iter().copied())
        .chain(service.load_balancer_ips.iter().copied())
}

/// Runs the deletions in `netns` with `conntrack -D`. Finding nothing to delete is not an
/// error (conntrack exits 1 and says "0 flow entries").
pub fn delete(netns: &Netns, deletions: &[Deletion]) -> Result<()> {
    for deletion in deletions {
        let args = deletion.args();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        if let Err(e) = netns.exec("conntrack", &args, None)
            && !format!("{e:#}").contains("0 flow entries have been deleted")
        {
            return Err(e.context("clearing stale UDP conntrack entries"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Service, ServicePort};

    fn endpoint(ip: &str, serving: bool) -> Endpoint {
        Endpoint {
            ip: ip.parse().unwrap(),
            port: 5353,
            ready: serving,
            serving,
            terminating: false,
            node: Some("node-a".into()),
            pod: format!("pod-{ip}"),
            zone_hints: Vec::new(),
        }
    }

    fn cluster(protocol: Protocol, node_port: Option<u16>, endpoints: Vec<Endpoint>) -> Cluster {
        let mut service = Service::new("default", "dns", "10.96.0.53".parse().unwrap());
        service.external_ips = vec!["203.0.113.5".parse().unwrap()];
        service.ports = vec![ServicePort { name: "dns".into(), protocol, port: 53, node_port, endpoints }];
        Cluster::example(vec![service])
    }

    /// Found by `packetproof explore`: a dual-stack Service's IPv6 endpoint gone paired its
    /// IPv4 cluster IP with the IPv6 address, which conntrack refuses ("mismatched address
    /// family"), failing the step.
    #[test]
    fn a_gone_endpoint_loses_its_entries_on_the_frontends_of_its_family_only() {
        let dual = |endpoints| {
            let mut c = cluster(Protocol::Udp, None, endpoints);
            c.services[0].cluster_ips = crate::model::PerFamily::dual(
                "10.96.0.53".parse().unwrap(),
                Some("fd00:10:96::53".parse().unwrap()),
            );
            c
        };
        let before = dual(vec![endpoint("fd00:10:244:1::10", true)]);
        let after = dual(vec![endpoint("fd00:10:244:1::11", true)]);
        let old: IpAddr = "fd00:10:244:1::10".parse().unwrap();
        assert_eq!(
            stale(&before, &after),
            vec![Deletion::Nat { frontend: "fd00:10:96::53".parse().unwrap(), endpoint: old }]
        );
    }

    #[test]
    fn an_endpoint_that_stops_serving_loses_its_entries_on_every_frontend() {
        let before = cluster(Protocol::Udp, Some(30053), vec![endpoint("10.244.1.10", true)]);
        let after = cluster(Protocol::Udp, Some(30053), vec![endpoint("10.244.1.11", true)]);
        let old: IpAddr = "10.244.1.10".parse().unwrap();
        assert_eq!(
            stale(&before, &after),
            vec![
                Deletion::Nat { frontend: "10.96.0.53".parse().unwrap(), endpoint: old },
                Deletion::Nat { frontend: "203.0.113.5".parse().unwrap(), endpoint: old },
                Deletion::PortNat { port: 30053, endpoint: old },
            ]
        );
        let not_serving = cluster(Protocol::Udp, Some(30053), vec![endpoint("10.244.1.10", false)]);
        assert_eq!(stale(&before, &not_serving).len(), 3);
    }

    #[test]
    fn a_service_that_gains_its_first_serving_endpoint_loses_every_entry() {
        let before = cluster(Protocol::Udp, Some(30053), vec![endpoint("10.244.1.10", false)]);
        let after = cluster(Protocol::Udp, Some(30053), vec![endpoint("10.244.1.10", true)]);
        assert_eq!(
            stale(&before, &after),
            vec![
                Deletion::ToIp("10.96.0.53".parse().unwrap()),
                Deletion::ToIp("203.0.113.5".parse().unwrap()),
                Deletion::ToPort { port: 30053, ipv6: false },
            ]
        );
    }

    #[test]
    fn unchanged_endpoints_and_tcp_services_leave_conntrack_alone() {
        let same = cluster(Protocol::Udp, None, vec![endpoint("10.244.1.10", true)]);
        assert_eq!(stale(&same, &same), vec![]);
        let before = cluster(Protocol::Tcp, None, vec![endpoint("10.244.1.10", true)]);
        let after = cluster(Protocol::Tcp, None, vec![endpoint("10.244.1.11", true)]);
        assert_eq!(stale(&before, &after), vec![]);
    }

    /// Against the kernel: two UDP flows to one IPv6 Service address, DNATed to two endpoints;
    /// clearing the entries of one endpoint leaves the other's. `conntrack --dst-nat` (1.4.7)
    /// deleted both.
    #[test]
    fn clearing_one_endpoints_entries_keeps_the_others_in_ipv6() {
        use crate::proxy::test_support::{Scratch, privileged};
        if !privileged() {
            eprintln!("skipped: needs the privileges scenarios need");
            return;
        }
        let scratch = Scratch::new("ct-nat6");
        let ns = &scratch.0;
        for addr in ["fd00::12/128", "fd00::13/128"] {
            ns.exec("ip", &["-6", "addr", "add", addr, "dev", "lo", "nodad"], None)
                .expect("an endpoint address");
        }
        ns.exec("ip", &["-6", "route", "add", "fd00:96::/64", "dev", "lo"], None)
            .expect("a route to the Service");
        // Locally sent datagrams to the Service address, each source port DNATed to its endpoint.
        let rules = "table ip6 pp-ct {\n chain out {\n type nat hook output priority -100;\n \
                     ip6 daddr fd00:96::101 udp sport 15000 dnat to [fd00::12]:8010\n \
                     ip6 daddr fd00:96::101 udp sport 15001 dnat to [fd00::13]:8010\n }\n}\n";
        ns.exec("nft", &["-f", "-"], Some(rules.as_bytes())).expect("the DNAT rules");
        ns.run(|| {
            for port in [15000, 15001] {
                let sender = std::net::UdpSocket::bind(format!("[::]:{port}")).expect("a client socket");
                sender.send_to(b"x", "[fd00:96::101]:81").expect("sending");
            }
        })
        .expect("in the namespace");
        let frontend: IpAddr = "fd00:96::101".parse().unwrap();
        let gone: IpAddr = "fd00::13".parse().unwrap();
        delete(ns, &[Deletion::Nat { frontend, endpoint: gone }]).expect("clearing");
        let left = list_udp(ns).expect("listing");
        assert!(
            left.contains("sport=15000") && left.contains("src=fd00::12"),
            "the kept endpoint's entry:\n{left}"
        );
        assert!(!left.contains("sport=15001"), "the gone endpoint's entry:\n{left}");
    }

    #[test]
    fn deletions_are_conntrack_arguments() {
        let d = Deletion::Nat {
            frontend: "10.96.0.53".parse().unwrap(),
            endpoint: "10.244.1.10".parse().unwrap(),
        };
        assert_eq!(d.args().join(" "), "-D -p udp -f ipv4 --orig-dst 10.96.0.53 --reply-src 10.244.1.10");
        let d = Deletion::ToPort { port: 30053, ipv6: true };
        assert_eq!(d.args().join(" "), "-D -p udp -f ipv6 --dport 30053 --reply-port-src 30053");
        let d = Deletion::ToIp("10.96.0.53".parse().unwrap());
        assert_eq!(d.args().join(" "), "-D -p udp -f ipv4 --orig-dst 10.96.0.53 --reply-src 10.96.0.53");
        let d = Deletion::AllToIp("10.96.0.53".parse().unwrap());
        assert_eq!(d.args().join(" "), "-D -p udp -f ipv4 --orig-dst 10.96.0.53");
    }

    #[test]
    fn a_start_deletes_the_entries_to_addresses_that_no_longer_serve() {
        let after = cluster(Protocol::Udp, Some(30053), vec![endpoint("10.244.1.11", true)]);
        let listing = "\
udp      17 100 src=10.244.1.20 dst=10.96.0.53 sport=15000 dport=53 src=10.244.1.10 dst=10.244.1.20 sport=5353 dport=15000 [ASSURED] mark=0 use=1
udp      17 100 src=10.244.1.21 dst=10.96.0.53 sport=15001 dport=53 src=10.244.1.11 dst=10.244.1.21 sport=5353 dport=15001 [ASSURED] mark=0 use=1
udp      17 20 src=10.244.1.22 dst=10.96.0.53 sport=15002 dport=53 [UNREPLIED] src=10.96.0.53 dst=10.244.1.22 sport=53 dport=15002 mark=0 use=1
udp      17 20 src=10.244.1.23 dst=10.96.0.99 sport=15003 dport=53 [UNREPLIED] src=10.96.0.99 dst=10.244.1.23 sport=53 dport=15003 mark=0 use=1
";
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(
            reconciled(&after, listing),
            [
                Deletion::ToIp(ip("10.96.0.53")),
                Deletion::Nat { frontend: ip("10.96.0.53"), endpoint: ip("10.244.1.10") }
            ]
        );
        // A TCP Service's entries are not a UDP proxy's to clear.
        let tcp = cluster(Protocol::Tcp, None, vec![endpoint("10.244.1.11", true)]);
        assert!(reconciled(&tcp, listing).is_empty());
        // Nor those of a port with no serving endpoint: which are stale, a start cannot tell.
        let none_serving = cluster(Protocol::Udp, Some(30053), vec![endpoint("10.244.1.11", false)]);
        assert!(reconciled(&none_serving, listing).is_empty());
    }

    #[test]
    fn a_flush_on_start_deletes_every_entry_of_every_served_udp_port() {
        let after = cluster(Protocol::Udp, Some(30053), vec![endpoint("10.244.1.10", true)]);
        assert_eq!(
            flushed_on_start(&after),
            vec![
                Deletion::AllToIp("10.96.0.53".parse().unwrap()),
                Deletion::AllToIp("203.0.113.5".parse().unwrap()),
                Deletion::AllToPort { port: 30053, ipv6: false },
            ]
        );
    }
}
