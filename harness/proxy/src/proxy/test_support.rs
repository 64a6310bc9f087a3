//! What the built-in proxies' tests share: builders of Services and endpoints, a line diff
//! of two renderings, and for kernel tests a scratch namespace that goes away however the
//! test ends.

use std::net::IpAddr;

use crate::model::{Endpoint, IpFamily, Protocol, Service, ServicePort, ServiceType};
use crate::topology::{Netns, netns};

/// A ready endpoint of pod `pod-<ip>` on `node` (`None`: no `nodeName`, never local).
pub(crate) fn ep(ip: &str, port: u16, node: Option<&str>) -> Endpoint {
    Endpoint::example(ip, port, node)
}

pub fn port(
    name: &str,
    protocol: Protocol,
    port: u16,
    node_port: Option<u16>,
    endpoints: Vec<Endpoint>,
) -> ServicePort {
    ServicePort { name: name.to_string(), protocol, port, node_port, endpoints }
}

pub fn service(
    namespace: &str,
    name: &str,
    service_type: ServiceType,
    cluster_ip: &str,
    ports: Vec<ServicePort>,
) -> Service {
    Service { service_type, ports, ..Service::new(namespace, name, cluster_ip.parse().unwrap()) }
}

/// ClusterIP Service `default/NAME` with one TCP port 80 → 8080 whose ready endpoints are on
/// node-a: what the partial-sync tests change between syncs.
pub(crate) fn web_service(name: &str, cluster_ip: &str, endpoints: &[&str]) -> Service {
    let endpoints = endpoints.iter().map(|ip| ep(ip, 8080, Some("node-a"))).collect();
    service(
        "default",
        name,
        ServiceType::ClusterIp,
        cluster_ip,
        vec![port("http", Protocol::Tcp, 80, None, endpoints)],
    )
}

/// Lines in `before` but not in `after`, and the other way round.
pub(crate) fn diff_lines(before: &str, after: &str) -> (Vec<String>, Vec<String>) {
    let gone = before.lines().filter(|l| !after.lines().any(|x| x == *l)).map(String::from).collect();
    let new = after.lines().filter(|l| !before.lines().any(|x| x == *l)).map(String::from).collect();
    (gone, new)
}

/// Kernel tests run wherever scenarios can; elsewhere they say why and pass nothing off as run.
pub fn privileged() -> bool {
    crate::privileges::scenarios_can_run()
}

/// A namespace of this process for one kernel test, removed however the test ends.
pub struct Scratch(pub Netns);

impl Scratch {
    /// `pp-<pid>-<label>`, with loopback up.
    pub fn new(label: &str) -> Scratch {
        let name = format!("{}{label}", netns::process_prefix());
        let scratch = Scratch(Netns::create(&name).expect("creating a scratch namespace"));
        scratch.0.exec("ip", &["link", "set", "lo", "up"], None).expect("loopback up");
        scratch
    }

    /// Puts `ip` on loopback as a host address, so that health check servers can bind a
    /// node's address (`replace`: putting one there twice is fine).
    pub(crate) fn add_host_address(&self, ip: IpAddr) {
        let host = format!("{ip}/{}", IpFamily::of(ip).host_prefix());
        self.0.exec("ip", &["address", "replace", &host, "dev", "lo", "nodad"], None).expect("address on lo");
    }

    /// [`Scratch::add_host_address`] for each of `ips`.
    pub(crate) fn with_host_addresses(self, ips: &[&str]) -> Scratch {
        for ip in ips {
            self.add_host_address(ip.parse().unwrap());
        }
        self
    }

    /// The namespace's `net.ipv4.conf.all.route_localnet` (`0` or `1`).
    pub(crate) fn route_localnet(&self) -> String {
        let read = self.0.run(|| std::fs::read_to_string("/proc/sys/net/ipv4/conf/all/route_localnet"));
        read.expect("a thread in the scratch namespace").expect("reading route_localnet").trim().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = self.0.remove();
    }
}

/// A runtime for the health check servers a proxy starts; enter it before programming a
/// node, and create it after the [`Scratch`] so that it (and its servers) go first.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap()
}

/// A second load-balancer IP (203.0.113.12) on the fixture's `lb` Service: the node's own
/// traffic must be admitted on each VIP (kubernetes PR #109826).
pub(crate) fn add_second_lb_ip(cluster: &mut crate::model::Cluster) {
    let lb = cluster.services.iter_mut().find(|s| s.name == "lb").expect("the fixture's lb Service");
    lb.load_balancer_ips.push("203.0.113.12".parse().unwrap());
}

/// Puts node-a in zone-a and node-b in zone-b, and adds two Services with the topology
/// annotation: `zoned`, one endpoint on each node hinted for its node's zone, and
/// `zoned-partial`, the same with node-b's endpoint unhinted (so kube-proxy ignores hints).
pub(crate) fn add_zoned_services(cluster: &mut crate::model::Cluster) {
    for (node, zone) in [("node-a", "zone-a"), ("node-b", "zone-b")] {
        if let Some(n) = cluster.nodes.iter_mut().find(|n| n.name == node) {
            n.zone = Some(zone.into());
        }
    }
    let hinted = |ip: &str, node: &str, zone: Option<&str>| Endpoint {
        zone_hints: zone.into_iter().map(String::from).collect(),
        ..ep(ip, 80, Some(node))
    };
    for (name, vip, last, b_zone) in
        [("zoned", "10.96.0.90", 90, Some("zone-b")), ("zoned-partial", "10.96.0.91", 91, None)]
    {
        let eps = vec![
            hinted(&format!("10.244.0.{last}"), "node-a", Some("zone-a")),
            hinted(&format!("10.244.1.{last}"), "node-b", b_zone),
        ];
        let mut svc = service(
            "default",
            name,
            ServiceType::ClusterIp,
            vip,
            vec![port("", Protocol::Tcp, 80, None, eps)],
        );
        svc.hints_annotation = Some("Auto".into());
        cluster.services.push(svc);
    }
}

/// The shapes the endpoint-filtering bugs of older kube-proxies need, all with endpoints on
/// node-b only (zones as [`add_zoned_services`] sets them): `both-local` (internal and
/// external Local policy), `zoned-unready` (zone-a's only hinted endpoint unready) and
/// `sticky-local` (external Local policy with ClientIP affinity, two endpoints).
pub(crate) fn add_policy_crossings(cluster: &mut crate::model::Cluster) {
    use crate::model::{SessionAffinity, TrafficPolicy};
    let mut both_local = service(
        "default",
        "both-local",
        ServiceType::NodePort,
        "10.96.0.92",
        vec![port("", Protocol::Tcp, 80, Some(30092), vec![ep("10.244.1.92", 80, Some("node-b"))])],
    );
    both_local.external_traffic_policy = TrafficPolicy::Local;
    both_local.internal_traffic_policy = TrafficPolicy::Local;
    let hinted = |ip: &str, node: &str, zone: &str, ready: bool| Endpoint {
        zone_hints: vec![zone.into()],
        ready,
        serving: ready,
        ..ep(ip, 80, Some(node))
    };
    let mut zoned_unready = service(
        "default",
        "zoned-unready",
        ServiceType::ClusterIp,
        "10.96.0.93",
        vec![port(
            "",
            Protocol::Tcp,
            80,
            None,
            vec![
                hinted("10.244.0.93", "node-a", "zone-a", false),
                hinted("10.244.1.93", "node-b", "zone-b", true),
            ],
        )],
    );
    zoned_unready.hints_annotation = Some("Auto".into());
    let mut sticky_local = service(
        "default",
        "sticky-local",
        ServiceType::NodePort,
        "10.96.0.94",
        vec![port(
            "",
            Protocol::Tcp,
            80,
            Some(30094),
            vec![ep("10.244.1.94", 80, Some("node-b")), ep("10.244.1.95", 80, Some("node-b"))],
        )],
    );
    sticky_local.external_traffic_policy = TrafficPolicy::Local;
    sticky_local.session_affinity = SessionAffinity::ClientIp { timeout_seconds: 600 };
    cluster.services.extend([both_local, zoned_unready, sticky_local]);
}
