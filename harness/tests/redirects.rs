//! Hosts follow no redirect (`HOST_SETTINGS` in `topology/sysctl.rs`): the false failure of
//! `packetproof explore --seed 12` (case 20), made on purpose in a cluster the harness builds.
//!
//! An external host routes a load-balancer IP through a node's global address; the node routes
//! that IP out of the link the packet came in on, so `ip6_forward` sends the host an ICMPv6
//! redirect, "the destination is on the link" (target == destination), before the FORWARD
//! hook: whatever the proxy does with the flow. A host that follows it asks for the
//! destination's link address, nobody answers, and its next attempts never leave it.
//!
//! What makes the kernel follow it with a global gateway: `ndisc_send_redirect` sends it from
//! the node's link-local address. ICMP echo, UDP and raw sockets hand it to `ip6_redirect`,
//! whose `__ip6_route_redirect` (`ip6_redirect_nh_match`) takes it only from the gateway of the
//! host's route: never here. TCP does not: `tcp_v6_err` gives it to the socket's own route
//! (`rt6_do_redirect`), which checks only the receiving link's `accept_redirects` and
//! `forwarding` (not `all`'s). But not while the socket is owned: the first SYN leaves inside
//! `connect()`, its redirect comes back in the same softirq run and is dropped
//! (TcpExtLockDroppedIcmps). The SYN the retransmit timer sends a second later gets the one
//! that is followed, every time.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use packetproof::model::{Cluster, ExternalHost, HostRoute, Node, PerFamily, Service, ServiceType};
use packetproof::topology::{Netns, Topology};

const NODE: &str = "fd00:192:168:50::12";
const LB_IP: &str = "2001:db8:1b::10";
/// The link of an external host to the node network (`model::POD_INTERFACE`).
const HOST_LINK: &str = "eth0";

#[test]
fn a_host_follows_a_nodes_redirect_unless_the_harness_made_it() {
    if !packetproof::privileges::scenarios_can_run() {
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    // Dropped on every path out (a panic too), it removes every namespace it made.
    let topology = runtime.block_on(Topology::build(&cluster())).unwrap();
    let plain = &topology.external_hosts["plain"];
    let harness = &topology.external_hosts["harness"];
    // `plain` as any Linux host: its link takes redirects (the kernel's default).
    sysctl(plain, &format!("net/ipv6/conf/{HOST_LINK}/accept_redirects"), Some("1"));

    let lb = SocketAddr::new(LB_IP.parse().unwrap(), 80);
    let sockets = [connect(plain, lb), connect(harness, lb)];
    // Evidence, not a delay: until `plain` routes the IP on the link, and `harness` has had
    // both redirects (the SYN's, the retransmitted SYN's) that `plain` had.
    let deadline = Instant::now() + Duration::from_secs(3);
    while route(plain).contains(" via ") || redirects_received(harness) < 2 {
        assert!(
            Instant::now() < deadline,
            "no redirect followed in 3 s: plain routes {:?}, harness received {} redirects",
            route(plain),
            redirects_received(harness)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let settings = ["all", "default", HOST_LINK]
        .map(|c| format!("{c}={}", sysctl(harness, &format!("net/ipv6/conf/{c}/accept_redirects"), None)));
    assert!(
        route(harness).contains(&format!(" via {NODE} ")),
        "the harness's host followed the redirect (accept_redirects {settings:?}): {}",
        route(harness)
    );
    drop(sockets);
    topology.teardown().unwrap();
}

/// One node, a LoadBalancer Service (so the node routes its IP on the node network, as for
/// every load-balancer IP), and two external hosts that route it through the node.
fn cluster() -> Cluster {
    let host = |name: &str, ip: &str| ExternalHost {
        name: name.into(),
        ips: PerFamily::single(ip.parse().unwrap()),
        routes: vec![HostRoute { to: format!("{LB_IP}/128").parse().unwrap(), via: "node-a".into() }],
    };
    let lb = Service {
        service_type: ServiceType::LoadBalancer,
        load_balancer_ips: vec![LB_IP.parse().unwrap()],
        ..Service::new("default", "lb", "fd00:10:96::10".parse().unwrap())
    };
    Cluster {
        pod_cidr: "fd00:10:244::/56".parse().unwrap(),
        service_cidr: "fd00:10:96::/112".parse().unwrap(),
        node_network: "fd00:192:168:50::/64".parse().unwrap(),
        nodes: vec![Node {
            name: "node-a".into(),
            ips: PerFamily::single(NODE.parse().unwrap()),
            secondary_ips: vec![],
            pod_cidrs: PerFamily::single("fd00:10:244:1::/64".parse().unwrap()),
            zone: None,
        }],
        external_hosts: vec![host("plain", "fd00:192:168:50::100"), host("harness", "fd00:192:168:50::101")],
        pods: vec![],
        services: vec![lb],
        proxy: Default::default(),
        second_family: None,
    }
}

/// A TCP connection attempt from inside `ns`, left in progress: the socket is owned by no
/// call when the retransmitted SYN's redirect arrives.
fn connect(ns: &Netns, to: SocketAddr) -> socket2::Socket {
    ns.run(|| {
        let socket = socket2::Socket::new(socket2::Domain::IPV6, socket2::Type::STREAM, None)?;
        socket.set_nonblocking(true)?;
        match socket.connect(&to.into()) {
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => Ok(socket),
            other => other.map(|()| socket),
        }
    })
    .unwrap()
    .unwrap_or_else(|e| panic!("connecting to {to} from {}: {e}", ns.name()))
}

/// The route `ns` takes to the load-balancer IP (a redirect's exception route included).
fn route(ns: &Netns) -> String {
    let out = ns.exec("ip", &["-6", "route", "get", LB_IP], None).unwrap_or_else(|e| panic!("{e:#}"));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// ICMPv6 redirects `ns` has received, followed or not (`Icmp6InRedirects`).
fn redirects_received(ns: &Netns) -> u64 {
    let snmp6 = ns.run(|| std::fs::read_to_string("/proc/thread-self/net/snmp6")).unwrap().unwrap();
    let line = snmp6.lines().find_map(|l| l.strip_prefix("Icmp6InRedirects"));
    line.and_then(|n| n.trim().parse().ok()).expect("Icmp6InRedirects in snmp6")
}

/// Reads `key` under `/proc/sys` inside `ns`, after writing `value` if given.
fn sysctl(ns: &Netns, key: &str, value: Option<&str>) -> String {
    let path = format!("/proc/sys/{key}");
    let done = ns.run(|| {
        value.map(|v| std::fs::write(&path, v)).transpose()?;
        std::fs::read_to_string(&path)
    });
    done.unwrap().unwrap_or_else(|e| panic!("{key} in {}: {e}", ns.name())).trim().to_string()
}
