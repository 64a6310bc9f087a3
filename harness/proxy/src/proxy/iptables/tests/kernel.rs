//! In the kernel (root only): every rule form and every mutant loads into a namespace and
//! saves back as written; the health check servers answer from inside a node namespace.

use super::*;
use crate::proxy::test_support::{Scratch, privileged, runtime};

/// Loads every node's rules, under each proxy configuration and with each mutant, into a
/// scratch namespace through the real `Proxy` methods, and checks that `iptables-save` prints
/// back exactly [`RuleSet::render_saved`].
#[test]
fn loads_and_saves_back_identically() {
    if !privileged() {
        return;
    }

    let scratch = Scratch::new("iptables-roundtrip").with_host_addresses(&[
        "192.168.50.2",
        "192.168.50.102",
        "192.168.50.3",
    ]);
    let runtime = runtime();
    let _in_runtime = runtime.enter();
    let mut restricted = everything();
    restricted.proxy.masquerade_all = true;
    restricted.proxy.node_port_addresses =
        vec!["192.168.50.0/24".parse().unwrap(), "127.0.0.0/8".parse().unwrap()];
    let mut no_localhost = everything();
    no_localhost.proxy.localhost_node_ports = false;
    assert_round_trips(
        &scratch,
        [("default", everything()), ("restricted", restricted), ("no-localhost", no_localhost)],
    );
}

/// Programs every node of every configuration, unbroken and with each mutant, into `scratch`
/// and checks that the save prints back exactly [`RuleSet::render_saved`].
fn assert_round_trips<const N: usize>(scratch: &Scratch, configs: [(&str, crate::model::Cluster); N]) {
    use crate::proxy::NodeProgrammer;
    use crate::topology::NodeHandle;

    for (config, c) in configs {
        for mutant in std::iter::once(None).chain(Mutant::ALL.map(Some)) {
            for node in ["node-a", "node-b", "node-c"] {
                let handle = NodeHandle { name: node.to_string(), netns: scratch.0.clone() };
                let proxy = BuiltinIptables { mutant };
                let what = format!("{config} config, {mutant:?} on {node}");
                let mut state = crate::proxy::NodeState::default();
                proxy.program_node(&c, &handle, &mut state).unwrap_or_else(|e| panic!("{what}: {e:#}"));
                let dump = normalize_save(&proxy.dump_node(&handle, &state).unwrap());
                assert_eq!(dump, node_ruleset(&c, node, mutant).render_saved(), "{what}");
            }
        }
    }
}

/// The IPv6 twin of [`loads_and_saves_back_identically`]: `ip6tables-restore` takes every
/// rule form and mutant of an IPv6 cluster and `ip6tables-save` prints them back as
/// [`RuleSet::render_saved`] says (`/128` hosts, `icmp6-port-unreachable`, the `::1/128`
/// exclusion, `[addr]:port` DNAT targets, full-length `recent` masks).
#[test]
fn loads_and_saves_back_identically_in_ipv6() {
    if !privileged() {
        return;
    }
    use super::ipv6::v6;

    let scratch = Scratch::new("ip6tables-roundtrip").with_host_addresses(&[
        "fd00:192:168:150::2",
        "fd00:192:168:150::102",
        "fd00:192:168:150::3",
    ]);
    let runtime = runtime();
    let _in_runtime = runtime.enter();
    let mut restricted = v6(&everything());
    restricted.proxy.masquerade_all = true;
    restricted.proxy.node_port_addresses =
        vec!["fd00:192:168:150::/64".parse().unwrap(), "::1/128".parse().unwrap()];
    assert_round_trips(&scratch, [("default", v6(&everything())), ("restricted", restricted)]);
    // The IPv4 tables stay empty and route_localnet off: IPv6 has no localhost node ports.
    let v4 = scratch.0.exec("iptables-save", &[], None).unwrap();
    assert!(!String::from_utf8_lossy(&v4.stdout).contains("KUBE-"));
    assert_eq!(scratch.route_localnet(), "0");
}

/// `GET /` on `port` at `ip` from inside the namespace: status line, headers, body.
fn get(ns: &crate::topology::Netns, ip: &str, port: u16) -> (String, Vec<String>, String) {
    use std::io::{Read, Write};
    let addr: std::net::SocketAddr = format!("{ip}:{port}").parse().unwrap();
    let mut stream = ns
        .run(move || std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(2)))
        .unwrap()
        .unwrap_or_else(|e| panic!("connecting to {addr}: {e}"));
    stream.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
    stream.write_all(b"GET / HTTP/1.1\r\nHost: node\r\nUser-Agent: probe\r\n\r\n").unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no header end in {text:?}"));
    let mut head = head.split("\r\n").map(String::from);
    let status = head.next().unwrap();
    (status, head.collect(), body.to_string())
}

#[test]
fn health_check_node_port_answers_from_inside_the_node() {
    if !privileged() {
        return;
    }
    use crate::proxy::NodeProgrammer;
    use crate::topology::NodeHandle;

    let scratch = Scratch::new("health-check");
    let runtime = runtime();
    let _in_runtime = runtime.enter();
    let mut c = cluster(vec![lb_service()]);
    // One running proxy's state: its servers answer between the programmings.
    let mut state = crate::proxy::NodeState::default();
    let mut program = |c: &Cluster, node: &str, mutant: Option<Mutant>| {
        let handle = NodeHandle { name: node.to_string(), netns: scratch.0.clone() };
        let programmed = BuiltinIptables { mutant }.program_node(c, &handle, &mut state);
        programmed.unwrap_or_else(|e| panic!("{node}: {e:#}"));
    };

    // node-a has one ready endpoint (its serving-terminating one does not count).
    program(&c, "node-a", None);
    let (status, headers, body) = get(&scratch.0, "127.0.0.1", 32100);
    assert_eq!(status, "HTTP/1.1 200 OK");
    for header in [
        "Content-Type: application/json",
        "X-Content-Type-Options: nosniff",
        "X-Load-Balancing-Endpoint-Weight: 1",
    ] {
        assert!(headers.iter().any(|h| h == header), "{header} missing from {headers:?}");
    }
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"service": {"namespace": "default", "name": "lb"}, "localEndpoints": 1, "serviceProxyHealthy": true})
    );
    // kube-proxy's iptables mode turns route_localnet on for localhost node ports.
    assert_eq!(scratch.route_localnet(), "1");

    // Reprogrammed as a node without endpoints: the same server now says 503.
    program(&c, "node-c", None);
    let (status, headers, body) = get(&scratch.0, "127.0.0.1", 32100);
    assert_eq!(status, "HTTP/1.1 503 Service Unavailable");
    assert!(headers.iter().any(|h| h == "X-Load-Balancing-Endpoint-Weight: 0"), "{headers:?}");
    assert!(body.contains("\"localEndpoints\": 0,"), "{body}");

    // The mutant's server answers 200 there all the same.
    program(&c, "node-c", Some(Mutant::HealthCheckAlwaysOk));
    let (status, _, body) = get(&scratch.0, "127.0.0.1", 32100);
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(body.contains("\"localEndpoints\": 0,"), "{body}");

    // With --nodeport-addresses the server moves to the matching node addresses.
    c.proxy.node_port_addresses = vec!["127.0.0.0/8".parse().unwrap()];
    program(&c, "node-a", None);
    let (status, _, _) = get(&scratch.0, "127.0.0.1", 32100);
    assert_eq!(status, "HTTP/1.1 200 OK");

    // A Service that no longer needs a health check stops being served.
    c.services[0].external_traffic_policy = TrafficPolicy::Cluster;
    program(&c, "node-a", None);
    assert!(!answers(&scratch.0, "127.0.0.1:32100"), "the server of a Cluster-policy service still answers");
}

/// A stopped server stops listening even while a child forked by another thread holds its
/// descriptor (an `iptables-restore` between fork and exec, under load): it is shut down, not
/// only closed. The child here holds every descriptor until the check is done.
#[test]
fn a_stopped_health_check_server_stops_listening_while_a_forked_child_holds_its_socket() {
    if !privileged() {
        return;
    }
    use std::os::fd::AsRawFd;

    use crate::proxy::NodeProgrammer;
    use crate::topology::NodeHandle;

    let scratch = Scratch::new("health-fork");
    let runtime = runtime();
    let _in_runtime = runtime.enter();
    let mut c = cluster(vec![lb_service()]);
    let mut state = crate::proxy::NodeState::default();
    let handle = NodeHandle { name: "node-a".to_string(), netns: scratch.0.clone() };
    BuiltinIptables { mutant: None }.program_node(&c, &handle, &mut state).unwrap();
    assert!(answers(&scratch.0, "127.0.0.1:32100"), "the Local-policy service's server answers");

    let (hold, release) = nix::unistd::pipe().unwrap();
    // SAFETY: the child only calls async-signal-safe functions (close, read, _exit).
    let child = match unsafe { nix::unistd::fork() }.unwrap() {
        nix::unistd::ForkResult::Child => unsafe {
            libc::close(release.as_raw_fd());
            let mut byte = 0u8;
            libc::read(hold.as_raw_fd(), (&mut byte as *mut u8).cast(), 1);
            libc::_exit(0)
        },
        nix::unistd::ForkResult::Parent { child } => child,
    };
    c.services[0].external_traffic_policy = TrafficPolicy::Cluster;
    BuiltinIptables { mutant: None }.program_node(&c, &handle, &mut state).unwrap();
    let still_answers = answers(&scratch.0, "127.0.0.1:32100");
    drop(release);
    nix::sys::wait::waitpid(child, None).unwrap();
    assert!(!still_answers, "the stopped server still accepts while the child holds its socket");
}

/// A running proxy's servers are its own: stopping it (dropping its node state) stops them,
/// and a proxy started again on the node binds the port anew (a restart step).
#[test]
fn health_check_servers_stop_with_the_proxy_and_start_again() {
    if !privileged() {
        return;
    }
    use crate::proxy::{NodeProgrammer, NodeState};
    use crate::topology::NodeHandle;

    let scratch = Scratch::new("health-restart");
    let runtime = runtime();
    let _in_runtime = runtime.enter();
    let c = cluster(vec![lb_service()]);
    let handle = NodeHandle { name: "node-a".to_string(), netns: scratch.0.clone() };
    let start = || {
        let mut state = NodeState::default();
        BuiltinIptables::default().program_node(&c, &handle, &mut state).unwrap_or_else(|e| panic!("{e:#}"));
        state
    };
    let first = start();
    assert!(answers(&scratch.0, "127.0.0.1:32100"));
    drop(first);
    assert!(!answers(&scratch.0, "127.0.0.1:32100"), "a stopped proxy's server still answers");
    let again = start();
    let (status, _, _) = get(&scratch.0, "127.0.0.1", 32100);
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert_eq!(again.loaded, [crate::model::IpFamily::V4].into());
}

#[test]
fn health_check_node_port_answers_on_ipv6() {
    if !privileged() {
        return;
    }
    use super::ipv6::v6;
    use crate::proxy::NodeProgrammer;
    use crate::topology::NodeHandle;

    let scratch = Scratch::new("health-check-v6").with_host_addresses(&["fd00:192:168:150::2"]);
    let runtime = runtime();
    let _in_runtime = runtime.enter();
    let mut c = v6(&cluster(vec![lb_service()]));
    let handle = NodeHandle { name: "node-a".to_string(), netns: scratch.0.clone() };
    let mut state = crate::proxy::NodeState::default();
    BuiltinIptables::default().program_node(&c, &handle, &mut state).unwrap_or_else(|e| panic!("{e:#}"));
    // Bound on [::]: the node's address and ::1 both answer.
    for ip in ["[fd00:192:168:150::2]", "[::1]"] {
        let (status, _, body) = get(&scratch.0, ip, 32100);
        assert_eq!(status, "HTTP/1.1 200 OK", "{ip}");
        assert!(body.contains("\"localEndpoints\": 1,"), "{body}");
    }
    // With --nodeport-addresses, on the matching node address only.
    c.proxy.node_port_addresses = vec!["fd00:192:168:150::/64".parse().unwrap()];
    BuiltinIptables::default().program_node(&c, &handle, &mut state).unwrap_or_else(|e| panic!("{e:#}"));
    let (status, _, _) = get(&scratch.0, "[fd00:192:168:150::2]", 32100);
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(!answers(&scratch.0, "[::1]:32100"), "::1 is outside the node port addresses");
}

#[test]
fn load_errors_name_the_node_and_the_line() {
    if !privileged() {
        return;
    }
    use crate::topology::NodeHandle;

    let scratch = Scratch::new("iptables-bad-input");
    let node = NodeHandle { name: "node-x".to_string(), netns: scratch.0.clone() };
    let mut rules = node_rules(&cluster(vec![kube_dns()]), "node-x");
    rules.nat.append("KUBE-SERVICES", ruleset::args!["-j", "KUBE-NO-SUCH-CHAIN"]);
    let err = format!("{:#}", load::restore(&node, &rules.render(), crate::model::IpFamily::V4).unwrap_err());
    assert!(err.contains("node node-x"), "{err}");
    assert!(err.contains("-A KUBE-SERVICES -j KUBE-NO-SUCH-CHAIN"), "{err}");
}

/// Whether a TCP connection to `addr` from inside `ns` is accepted.
fn answers(ns: &crate::topology::Netns, addr: &str) -> bool {
    let addr: std::net::SocketAddr = addr.parse().unwrap();
    let connected =
        ns.run(move || std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(2)));
    connected.expect("a thread in the scratch namespace").is_ok()
}
