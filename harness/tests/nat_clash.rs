//! A port remapped by NAT clash resolution on a second node, against the real kernel: the
//! verdict must accept the flow as the kernel made it, and only with the evidence of the node
//! that remapped it.
//!
//! A client, a node X that translates a cluster IP (DNAT to the backend, masquerade toward Y),
//! a node Y that routes to the backend, and the backend; each in a namespace of its own, joined
//! by veth pairs. Before the attempt, Y's conntrack table is given an entry whose reply tuple is
//! the one the masqueraded flow will need (`conntrack -I`: the clash is made, not waited for).
//! Y's null binding then gives the flow another source port, so the backend sees a port that
//! X's entry does not hold. Expected: the evidence fails the attempt on X's entry alone and
//! passes it with Y's entry, which records the remap.

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use packetproof::model::{
    Cluster, Endpoint, Life, PerFamily, Pod, Probe, Protocol, Service, ServicePort, Source, Target,
};
use packetproof::observe::{Capture, conntrack};
use packetproof::oracle::{Outcome, SeenSource, Spread};
use packetproof::topology::netns::{self, Netns};
use packetproof::traffic::{Attempt, Sent};
use packetproof::verdict::evidence::{self, Evidence};

const CLIENT: &str = "10.81.1.2";
const X_TO_Y: &str = "10.81.0.1";
const BACKEND: &str = "10.81.2.2";
const VIP: &str = "10.96.81.1";
const SOURCE_PORT: u16 = 24680;

/// Client, X, Y and the backend; removed on drop, pass or fail.
struct Chain(Vec<Netns>);

impl Chain {
    fn new() -> Chain {
        let mut made = Vec::new();
        for side in ["c", "x", "y", "b"] {
            match Netns::create(&format!("{}clash-{side}", netns::process_prefix())) {
                Ok(ns) => made.push(ns),
                Err(e) => {
                    made.iter().for_each(|ns: &Netns| drop(ns.remove()));
                    panic!("creating the namespaces: {e:#}");
                }
            }
        }
        let chain = Chain(made);
        let [client, x, y, backend] = [&chain.0[0], &chain.0[1], &chain.0[2], &chain.0[3]];
        let ip = |ns: &Netns, args: &str| {
            ns.exec("ip", &args.split(' ').collect::<Vec<_>>(), None).unwrap_or_else(|e| panic!("{e:#}"));
        };
        let link = |a: &Netns, a_addr: &str, b: &Netns, b_addr: &str| {
            ip(
                a,
                &format!("link add eth-{} type veth peer name eth-{} netns {}", tail(b), tail(a), b.name()),
            );
            ip(a, &format!("addr add {a_addr}/24 dev eth-{}", tail(b)));
            ip(b, &format!("addr add {b_addr}/24 dev eth-{}", tail(a)));
            ip(a, &format!("link set eth-{} up", tail(b)));
            ip(b, &format!("link set eth-{} up", tail(a)));
        };
        link(client, CLIENT, x, "10.81.1.1");
        link(x, X_TO_Y, y, "10.81.0.2");
        link(y, "10.81.2.1", backend, BACKEND);
        ip(client, "route add default via 10.81.1.1");
        ip(x, "route add default via 10.81.0.2");
        ip(y, "route add 10.81.1.0/24 via 10.81.0.1");
        ip(backend, "route add default via 10.81.2.1");
        for router in [x, y] {
            // Written from a thread inside the namespace, as the topology does.
            let forward = router.run(|| std::fs::write("/proc/sys/net/ipv4/ip_forward", "1"));
            forward.unwrap().expect("forwarding");
        }
        let nft = |ns: &Netns, rules: String| {
            ns.exec("nft", &["-f", "-"], Some(rules.as_bytes())).unwrap_or_else(|e| panic!("{e:#}"));
        };
        nft(
            x,
            format!(
                "table ip pp-clash {{\n\
                 chain pre {{\n type nat hook prerouting priority -100;\n ip daddr {VIP} tcp dport 80 dnat to {BACKEND}:8080\n }}\n\
                 chain post {{\n type nat hook postrouting priority 100;\n oifname \"eth-y\" masquerade\n }}\n}}\n"
            ),
        );
        // A NAT chain: Y gives every new flow its null binding, as a node with a proxy's NAT
        // table does. Its one rule needs conntrack, which a namespace starts only for a rule
        // that needs it.
        nft(y, "table ip pp-clash {\n chain post {\n type nat hook postrouting priority 100;\n ct state new counter\n }\n}\n".into());
        chain
    }
}

/// The last letter of a namespace's name (`…clash-x` → `x`), for its interface names.
fn tail(ns: &Netns) -> &str {
    &ns.name()[ns.name().len() - 1..]
}

impl Drop for Chain {
    fn drop(&mut self) {
        for ns in &self.0 {
            if let Err(e) = ns.remove() {
                eprintln!("{e:#}");
            }
        }
    }
}

#[test]
fn a_port_remapped_by_a_clash_on_another_node_is_the_same_flow() {
    if !packetproof::privileges::scenarios_can_run() {
        return;
    }
    let chain = Chain::new();
    let [client, x, y, backend_ns] = [&chain.0[0], &chain.0[1], &chain.0[2], &chain.0[3]];
    // The clash: an entry on Y already answers from the backend to X's masqueraded address
    // and port, for a flow from elsewhere.
    let elsewhere: SocketAddr = format!("10.81.9.9:{SOURCE_PORT}").parse().unwrap();
    let backend: SocketAddr = format!("{BACKEND}:8080").parse().unwrap();
    let masqueraded: SocketAddr = format!("{X_TO_Y}:{SOURCE_PORT}").parse().unwrap();
    insert_entry(y, (elsewhere, backend), (backend, masqueraded), "ESTABLISHED");

    let listen: SocketAddr = format!("{BACKEND}:8080").parse().unwrap();
    let listener = backend_ns.run(move || TcpListener::bind(listen)).unwrap().expect("the backend listens");
    let capture = Capture::start(backend_ns, "eth-y").expect("capturing at the backend");
    let vip: SocketAddr = format!("{VIP}:80").parse().unwrap();
    let connected = connect(client, SocketAddr::new(CLIENT.parse().unwrap(), SOURCE_PORT), vip);
    let (_accepted, seen) = listener.accept().expect("the backend accepts");
    assert_eq!(seen.ip(), X_TO_Y.parse::<IpAddr>().unwrap(), "masqueraded by X");
    assert_ne!(seen.port(), SOURCE_PORT, "Y remapped the port: the clash did not happen");
    drop(connected);

    let tables = [("node-x", conntrack::dump(x)), ("node-y", conntrack::dump(y))];
    let tables: Vec<(String, Vec<_>)> =
        tables.into_iter().map(|(n, t)| (n.to_string(), t.expect("reading conntrack"))).collect();
    let frames = capture.stop().expect("the backend's capture");
    let cluster = cluster();
    let probe = Probe {
        name: "clash".into(),
        from: Source::Pod("client".into()),
        to: Target::ClusterIp { service: "web".into(), port: "http".into() },
        protocol: Protocol::Tcp,
        count: 1,
        interval: None,
        family: None,
        source_port: Some(SOURCE_PORT),
        expect: None,
        life: Life::OneShot,
        clients: None,
    };
    let outcome = Outcome::Answered {
        backends: [(
            "backend".to_string(),
            SeenSource::Masqueraded { node: "node-x".into(), addrs: vec![X_TO_Y.parse().unwrap()] },
        )]
        .into(),
        spread: Spread::Uniform,
        translated_by: Some("node-x".into()),
    };
    let sent = [Sent {
        source_port: SOURCE_PORT,
        request: None,
        attempt: Attempt::Answered { pod: "backend".into(), seen },
    }];
    let judge = |conntrack: Vec<(String, Vec<_>)>| {
        let e = Evidence {
            frames: [("pod/backend".to_string(), frames.clone())].into(),
            conntrack: conntrack.into_iter().collect(),
        };
        evidence::check(&cluster, &probe, vip, &outcome, &sent, &e)
    };
    let only_x = judge(tables[..1].to_vec());
    assert!(
        only_x.len() == 1 && only_x[0].message.starts_with("conntrack on node-x: expected reply tuple"),
        "X's entry alone cannot vouch for the port the backend saw: {only_x:?}"
    );
    assert_eq!(judge(tables), [], "with Y's entry, the remap is proven");
}

/// Inserts into `ns`'s conntrack table a TCP entry with the `original` and `reply` tuples
/// (source, destination): the clash is made, not waited for.
fn insert_entry(
    ns: &Netns,
    original: (SocketAddr, SocketAddr),
    reply: (SocketAddr, SocketAddr),
    state: &str,
) {
    let [src, dst, rsrc, rdst] = [original.0, original.1, reply.0, reply.1];
    let (sport, dport, rsport, rdport) =
        (src.port().to_string(), dst.port().to_string(), rsrc.port().to_string(), rdst.port().to_string());
    let (src, dst, rsrc, rdst) =
        (src.ip().to_string(), dst.ip().to_string(), rsrc.ip().to_string(), rdst.ip().to_string());
    let args = [
        "-I",
        "-p",
        "tcp",
        "-s",
        &src,
        "-d",
        &dst,
        "--sport",
        &sport,
        "--dport",
        &dport,
        "-r",
        &rsrc,
        "-q",
        &rdst,
        "--reply-port-src",
        &rsport,
        "--reply-port-dst",
        &rdport,
        "--state",
        state,
        "-t",
        "120",
    ];
    ns.exec("conntrack", &args, None).unwrap_or_else(|e| panic!("inserting the clashing entry: {e:#}"));
}

/// A TCP connection from `from` (bound to its port) to `to`, made inside `ns`.
fn connect(ns: &Netns, from: SocketAddr, to: SocketAddr) -> TcpStream {
    ns.run(move || {
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
        socket.bind(&from.into())?;
        socket.connect_timeout(&to.into(), Duration::from_secs(5))?;
        Ok::<TcpStream, std::io::Error>(socket.into())
    })
    .unwrap()
    .unwrap_or_else(|e| panic!("connecting from {from} to {to}: {e}"))
}

/// The cluster the verdict reads: Service `web` whose one endpoint is the backend pod.
fn cluster() -> Cluster {
    let pod = |name: &str, ip: &str| Pod {
        namespace: "default".into(),
        name: name.into(),
        node: "node-y".into(),
        ips: PerFamily::single(ip.parse().unwrap()),
        labels: Default::default(),
        ports: vec![],
    };
    let endpoint = Endpoint {
        ip: BACKEND.parse().unwrap(),
        port: 8080,
        ready: true,
        serving: true,
        terminating: false,
        node: Some("node-y".into()),
        pod: "backend".into(),
        zone_hints: vec![],
    };
    let web = Service {
        ports: vec![ServicePort {
            name: "http".into(),
            protocol: Protocol::Tcp,
            port: 80,
            node_port: None,
            endpoints: vec![endpoint],
        }],
        ..Service::new("default", "web", VIP.parse().unwrap())
    };
    Cluster {
        pod_cidr: "10.81.0.0/16".parse().unwrap(),
        service_cidr: "10.96.0.0/12".parse().unwrap(),
        node_network: "192.168.81.0/24".parse().unwrap(),
        nodes: vec![],
        external_hosts: vec![],
        pods: vec![pod("client", CLIENT), pod("backend", BACKEND)],
        services: vec![web],
        proxy: Default::default(),
        second_family: None,
    }
}

/// The same resolution on the node that is itself the endpoint (host network) and translates
/// its own node port: the DNAT to its own address finds the reply tuple taken, so the node
/// gives the flow another source port after its interface's capture saw it arrive. The frame
/// on the wire carries the client's port, the backend sees another; the node's entry pairs
/// them. Found by `packetproof explore --seed 11` (case 101) as "no packet … reached node-b's
/// interface": another flow's masquerade had picked the port a node's client used next.
#[test]
fn a_port_remapped_by_the_host_network_endpoints_own_node_is_the_same_flow() {
    if !packetproof::privileges::scenarios_can_run() {
        return;
    }
    const NODE_A: &str = "192.168.50.11";
    const NODE_B: &str = "192.168.50.12";
    const PORT: u16 = 24681;
    let mut made = Vec::new();
    for side in ["a", "b"] {
        made.push(
            Netns::create(&format!("{}clash-own-{side}", netns::process_prefix())).expect("a namespace"),
        );
    }
    let chain = Chain(made);
    let [node_a, node_b] = [&chain.0[0], &chain.0[1]];
    let ip = |ns: &Netns, args: &str| {
        ns.exec("ip", &args.split(' ').collect::<Vec<_>>(), None).unwrap_or_else(|e| panic!("{e:#}"));
    };
    ip(node_a, &format!("link add eth0 type veth peer name eth0 netns {}", node_b.name()));
    ip(node_a, &format!("addr add {NODE_A}/24 dev eth0"));
    ip(node_b, &format!("addr add {NODE_B}/24 dev eth0"));
    ip(node_a, "link set eth0 up");
    ip(node_b, "link set eth0 up");
    // node-a's node port 30443 is its own host-network endpoint, 6443.
    let rules = format!(
        "table ip pp-clash {{\n chain pre {{\n type nat hook prerouting priority -100;\n \
         ip daddr {NODE_A} tcp dport 30443 dnat to {NODE_A}:6443\n }}\n}}\n"
    );
    node_a.exec("nft", &["-f", "-"], Some(rules.as_bytes())).unwrap_or_else(|e| panic!("{e:#}"));
    // The clash: a flow from node-b's very port straight to the endpoint (another flow's
    // masquerade picked it) still holds the reply tuple the node port's flow needs.
    let client: SocketAddr = format!("{NODE_B}:{PORT}").parse().unwrap();
    let endpoint: SocketAddr = format!("{NODE_A}:6443").parse().unwrap();
    insert_entry(node_a, (client, endpoint), (endpoint, client), "TIME_WAIT");

    let listen: SocketAddr = format!("{NODE_A}:6443").parse().unwrap();
    let listener = node_a.run(move || TcpListener::bind(listen)).unwrap().expect("the endpoint listens");
    let capture = Capture::start(node_a, "eth0").expect("capturing at node-a");
    let node_port: SocketAddr = format!("{NODE_A}:30443").parse().unwrap();
    let connected = connect(node_b, client, node_port);
    let (_accepted, seen) = listener.accept().expect("the endpoint accepts");
    assert_eq!(seen.ip(), NODE_B.parse::<IpAddr>().unwrap(), "not masqueraded: delivered to node-a itself");
    assert_ne!(seen.port(), PORT, "node-a remapped the port: the clash did not happen");
    drop(connected);
    let table = conntrack::dump(node_a).expect("reading node-a's conntrack");
    let frames = capture.stop().expect("node-a's capture");

    let text = include_str!("../../scenarios/host-network-endpoint-on-the-translating-node.yaml");
    let scenario = packetproof::admission::load_str(text, std::path::Path::new("own-node.yaml")).unwrap();
    let cluster = scenario.cluster;
    let probe = Probe {
        name: "own-node".into(),
        from: Source::Node("node-b".into()),
        to: Target::NodePort {
            service: "api".into(),
            port: "https".into(),
            node: "node-a".into(),
            address: None,
        },
        protocol: Protocol::Tcp,
        count: 1,
        interval: None,
        family: None,
        source_port: Some(PORT),
        expect: None,
        life: Life::OneShot,
        clients: None,
    };
    let expected = packetproof::oracle::expect(&cluster, &probe).expect("the oracle judges it");
    let sent = [Sent {
        source_port: PORT,
        request: None,
        attempt: Attempt::Answered { pod: "node-a".into(), seen },
    }];
    let e = Evidence {
        frames: [("node/node-a".to_string(), frames)].into(),
        conntrack: [("node-a".to_string(), table)].into(),
    };
    assert_eq!(evidence::check(&cluster, &probe, node_port, &expected.outcome, &sent, &e), []);
}
