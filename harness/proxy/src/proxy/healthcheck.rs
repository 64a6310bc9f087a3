//! kube-proxy's service health server (pkg/proxy/healthcheck/service_health.go): for every
//! LoadBalancer Service with `externalTrafficPolicy: Local`, an HTTP server on its
//! `healthCheckNodePort` that tells a cloud load balancer whether this node has ready
//! endpoints of the Service (`200`) or not (`503`).
//!
//! Proxy-independent: what to serve comes from the model ([`node_services`]), serving is
//! [`serve`]. Servers are tokio tasks on the runtime the caller has entered, listening on
//! sockets bound inside the node's namespace; a node's [`Servers`] belong to the running
//! proxy that started them and stop when it drops them (or when the runtime goes).
//! Re-serving updates the running servers, as kube-proxy's `SyncServices` and
//! `SyncEndpoints` do on every sync, so a node can be reprogrammed.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::node_ports::NodePortAddresses;
use crate::model::{Cluster, IpFamily, ServiceType, TrafficPolicy};
use crate::topology::{Netns, NodeHandle};

/// One health check server a node runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthService {
    pub namespace: String,
    pub name: String,
    pub port: u16,
    /// Distinct addresses of this node's ready endpoints over all ports of the Service
    /// (`LocalReadyEndpoints`: serving-terminating ones do not count).
    pub local_endpoints: usize,
}

/// The health check servers kube-proxy runs on `node`: one per Service that
/// `NeedsHealthCheck` (type LoadBalancer, external policy Local) and has a port, Services of
/// the cluster's family only (as kube-proxy's proxier of that family). A port claimed twice is served for the first Service (kube-proxy fails to
/// bind the second and logs it).
pub(crate) fn node_services(cluster: &Cluster, node: &str) -> Vec<HealthService> {
    let family = cluster.ip_family();
    let mut out: Vec<HealthService> = Vec::new();
    for svc in cluster.services.iter().filter(|s| IpFamily::of(s.cluster_ip()) == family) {
        let needs = svc.service_type == ServiceType::LoadBalancer
            && svc.external_traffic_policy == TrafficPolicy::Local;
        let Some(port) = svc.health_check_node_port.filter(|_| needs) else { continue };
        if out.iter().any(|s| s.port == port) {
            continue;
        }
        let ready_here: BTreeSet<IpAddr> = svc
            .ports
            .iter()
            .flat_map(|p| &p.endpoints)
            .filter(|ep| ep.ready && ep.node.as_deref() == Some(node) && IpFamily::of(ep.ip) == family)
            .map(|ep| ep.ip)
            .collect();
        out.push(HealthService {
            namespace: svc.namespace.clone(),
            name: svc.name.clone(),
            port,
            local_endpoints: ready_here.len(),
        });
    }
    out
}

/// Where health check servers listen on `node`: `0.0.0.0` (`[::]` in an IPv6 cluster), or
/// each node address inside `--nodeport-addresses` when it is set (`newServiceHealthServer`).
pub(crate) fn bind_addresses(cluster: &Cluster, node: &str) -> Vec<IpAddr> {
    let family = cluster.ip_family();
    let npa = NodePortAddresses::new(&cluster.proxy, family);
    if npa.match_all() { vec![family.unspecified()] } else { npa.node_ips(cluster.node(node)) }
}

/// Makes `node` serve the health checks of every family view of the cluster (`views`, one
/// per proxier), as [`serve`] does: a dual-stack Service's check is one server per family, on
/// one port. Servers of a family no view is of are left alone (that family's proxier owns
/// them: the reference proxy programs each family on its own).
pub(crate) fn serve_node(
    node: &NodeHandle,
    servers: &mut Servers,
    views: &[Cluster],
    bug: Option<Bug>,
) -> Result<()> {
    let mut services: Vec<HealthService> = Vec::new();
    let mut addresses = Vec::new();
    for view in views {
        for svc in node_services(view, &node.name) {
            if !services.iter().any(|s| s.port == svc.port) {
                services.push(svc);
            }
        }
        addresses.extend(bind_addresses(view, &node.name));
    }
    let families: Vec<IpFamily> = views.iter().map(Cluster::ip_family).collect();
    serve(&node.netns, servers, &services, &addresses, &families, bug)
        .with_context(|| format!("serving health checks on node {}", node.name))
}

/// How a broken health check server answers wrong (mutants).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bug {
    /// `200` even without local endpoints.
    AlwaysOk,
    /// The last answer stays when the count of local endpoints drops to zero (the count of a
    /// Service with none left is never refreshed: kubernetes/kubernetes#44311).
    KeptWhenEndpointsGo,
    /// The servers listen on every address (`0.0.0.0`, `[::]`) whatever
    /// `--nodeport-addresses` says (kubernetes/kubernetes#82163).
    OnAllAddresses,
}

/// What a server answers with.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Answer {
    namespace: String,
    name: String,
    local_endpoints: usize,
    /// A broken server (mutant): `200` even without local endpoints.
    always_ok: bool,
}

/// kube-proxy's reply (`hcHandler.ServeHTTP`, kube-proxy itself healthy), to any request:
/// its headers, its tab-indented JSON, and a close, since this server answers once per
/// connection. Go's `Date` header is left out.
fn response(answer: &Answer) -> Vec<u8> {
    let count = answer.local_endpoints;
    let status = if count != 0 || answer.always_ok { "200 OK" } else { "503 Service Unavailable" };
    let quote = |s: &str| serde_json::to_string(s).expect("a string serializes");
    let body = format!(
        "{{\n\t\"service\": {{\n\t\t\"namespace\": {},\n\t\t\"name\": {}\n\t}},\n\t\"localEndpoints\": {count},\n\t\"serviceProxyHealthy\": true\n}}",
        quote(&answer.namespace),
        quote(&answer.name),
    );
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nX-Content-Type-Options: nosniff\r\n\
         X-Load-Balancing-Endpoint-Weight: {count}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// A running server: the answer it gives (updated in place), its listening socket and its
/// accept loop.
struct Running {
    answer: Arc<Mutex<Answer>>,
    /// Shared with the accept loop, so that stopping can shut the socket down: closing the
    /// descriptor alone leaves it listening while a child forked by another thread (an
    /// `iptables-restore` between fork and exec) holds a copy, and a stopped server then still
    /// accepts connections (seen once under load in `.ci/run`).
    listener: Arc<tokio::net::TcpListener>,
    task: tokio::task::JoinHandle<()>,
}

/// The health check servers one node runs, by listening address. Dropping it stops them
/// (and waits a little for their listeners to close), so a proxy started again binds anew.
#[derive(Default)]
pub struct Servers {
    running: BTreeMap<SocketAddr, Running>,
}

impl Servers {
    /// Stops the servers `stop` picks, and waits (a little) until their listeners closed.
    fn stop_where(&mut self, stop: impl Fn(&SocketAddr) -> bool) -> bool {
        let mut stopped = Vec::new();
        self.running.retain(|addr, r| {
            if stop(addr) {
                // Ends the LISTEN state of the socket itself, whoever holds its descriptor.
                let _ = socket2::SockRef::from(r.listener.as_ref()).shutdown(std::net::Shutdown::Both);
                r.task.abort();
                stopped.push(r.task.abort_handle());
            }
            !stop(addr)
        });
        // An aborted task closes its listener when the runtime next polls it; wait for that so
        // that a stopped server no longer answers, and its port can be bound again, once this
        // returns. On a loaded machine that took over a second; the bound only guards against
        // a runtime that no longer runs.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while stopped.iter().any(|t| !t.is_finished()) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        !stopped.is_empty()
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        self.stop_where(|_| true);
    }
}

/// Makes `netns` serve exactly `services` on `addresses` among its servers of `families`:
/// new ports are bound inside the namespace and served on the current tokio runtime, kept
/// ones get their new answer, dropped ones stop; servers of other families stay as they are.
/// `bug` breaks the answers the way it says (a mutant).
pub fn serve(
    netns: &Netns,
    servers: &mut Servers,
    services: &[HealthService],
    addresses: &[IpAddr],
    families: &[IpFamily],
    bug: Option<Bug>,
) -> Result<()> {
    let everywhere: Vec<IpAddr> = families.iter().map(|f| f.unspecified()).collect();
    let addresses = if bug == Some(Bug::OnAllAddresses) { &everywhere[..] } else { addresses };
    let mut wanted: BTreeMap<SocketAddr, Answer> = BTreeMap::new();
    for svc in services {
        for ip in addresses {
            let answer = Answer {
                namespace: svc.namespace.clone(),
                name: svc.name.clone(),
                local_endpoints: svc.local_endpoints,
                always_ok: bug == Some(Bug::AlwaysOk),
            };
            wanted.insert(SocketAddr::new(*ip, svc.port), answer);
        }
    }
    // Servers of a runtime that was dropped are gone already.
    servers.running.retain(|_, r| !r.task.is_finished());
    let stopped =
        servers.stop_where(|addr| !wanted.contains_key(addr) && families.contains(&IpFamily::of(addr.ip())));
    let running = &mut servers.running;
    for (addr, answer) in wanted {
        if let Some(r) = running.get(&addr) {
            let kept = bug == Some(Bug::KeptWhenEndpointsGo) && answer.local_endpoints == 0;
            if !kept {
                *r.answer.lock().unwrap_or_else(|e| e.into_inner()) = answer;
            }
            continue;
        }
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            anyhow!("serving health check node port {addr} needs a tokio runtime entered on this thread")
        })?;
        let listener = Arc::new(bind(netns, addr, stopped)?);
        let answer = Arc::new(Mutex::new(answer));
        let task = runtime.spawn(accept_loop(Arc::clone(&listener), Arc::clone(&answer)));
        running.insert(addr, Running { answer, listener, task });
    }
    Ok(())
}

/// A listener on `addr` inside `netns`, registered with the current runtime. After stopping
/// servers, the aborted tasks may hold their sockets a moment longer: retry briefly then.
fn bind(netns: &Netns, addr: SocketAddr, just_stopped: bool) -> Result<tokio::net::TcpListener> {
    let what = || format!("listening on health check node port {addr} in namespace {}", netns.name());
    let attempts = if just_stopped { 50 } else { 1 };
    let mut tried = 0;
    let std_listener = loop {
        tried += 1;
        let bound = netns
            .run(|| {
                let l = listener(addr)?;
                l.set_nonblocking(true)?;
                Ok::<_, std::io::Error>(l)
            })
            .with_context(what)?;
        match bound {
            Ok(l) => break l,
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && tried < attempts => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(e).with_context(what),
        }
    };
    tokio::net::TcpListener::from_std(std_listener).with_context(what)
}

/// A TCP listener on `addr`, as `std::net::TcpListener::bind` makes one (address reuse, a
/// backlog of 128), but IPv6-only on an IPv6 address: a dual-stack node has a server of each
/// family on the health check port, and `[::]` would otherwise take the IPv4 port as well.
fn listener(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let socket = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(128)?;
    Ok(socket.into())
}

async fn accept_loop(listener: Arc<tokio::net::TcpListener>, answer: Arc<Mutex<Answer>>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let reply = response(&answer.lock().unwrap_or_else(|e| e.into_inner()));
                tokio::spawn(answer_once(stream, reply));
            }
            // Out of descriptors and the like: wait rather than spin.
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Reads the request head (or whatever arrives within a few seconds), writes the reply, closes.
async fn answer_once(mut stream: tokio::net::TcpStream, reply: Vec<u8>) {
    let read_head = async {
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        while head.len() < 8192 && !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), read_head).await;
    let _ = stream.write_all(&reply).await;
    let _ = stream.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Endpoint, Protocol, Service, ServicePort};

    fn ep(ip: &str, node: &str, ready: bool) -> Endpoint {
        Endpoint {
            ip: ip.parse().unwrap(),
            port: 80,
            ready,
            serving: true,
            terminating: !ready,
            node: Some(node.into()),
            pod: format!("pod-{ip}"),
            zone_hints: Vec::new(),
        }
    }

    fn lb(name: &str, etp: TrafficPolicy, hc: Option<u16>, ports: Vec<Vec<Endpoint>>) -> Service {
        Service {
            service_type: ServiceType::LoadBalancer,
            external_traffic_policy: etp,
            ports: ports
                .into_iter()
                .enumerate()
                .map(|(i, endpoints)| ServicePort {
                    name: format!("p{i}"),
                    protocol: Protocol::Tcp,
                    port: 80 + i as u16,
                    node_port: Some(30080 + i as u16),
                    endpoints,
                })
                .collect(),
            load_balancer_ips: vec!["203.0.113.10".parse().unwrap()],
            health_check_node_port: hc,
            ..Service::new("default", name, "10.96.0.80".parse().unwrap())
        }
    }

    /// node-a of [`Cluster::example`] alone.
    fn cluster(services: Vec<Service>) -> Cluster {
        Cluster::example(services).with_nodes(&[("node-a", "192.168.50.2", "10.244.0.0/24")])
    }

    #[test]
    fn counts_distinct_ready_local_addresses_over_all_ports() {
        // The same pod backs both ports: one endpoint, as LocalReadyEndpoints squashes by IP.
        let both = vec![ep("10.244.0.5", "node-a", true), ep("10.244.0.6", "node-a", false)];
        let svc = lb("web", TrafficPolicy::Local, Some(32000), vec![both.clone(), both]);
        let c = cluster(vec![svc, lb("other", TrafficPolicy::Cluster, Some(32001), vec![vec![]])]);
        let on_a = node_services(&c, "node-a");
        assert_eq!(
            on_a,
            [HealthService {
                namespace: "default".into(),
                name: "web".into(),
                port: 32000,
                local_endpoints: 1
            }]
        );
        assert_eq!(node_services(&c, "node-b")[0].local_endpoints, 0);
    }

    #[test]
    fn node_port_services_and_missing_ports_get_no_server() {
        let mut np = lb("np", TrafficPolicy::Local, Some(32002), vec![vec![]]);
        np.service_type = ServiceType::NodePort;
        let c = cluster(vec![np, lb("none", TrafficPolicy::Local, None, vec![vec![]])]);
        assert!(node_services(&c, "node-a").is_empty());
    }

    #[test]
    fn binds_everywhere_or_where_node_ports_answer() {
        let mut c = cluster(vec![]);
        assert_eq!(bind_addresses(&c, "node-a"), [IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)]);
        c.proxy.node_port_addresses =
            vec!["192.168.50.0/24".parse().unwrap(), "127.0.0.0/8".parse().unwrap()];
        let ips: Vec<String> = bind_addresses(&c, "node-a").iter().map(|i| i.to_string()).collect();
        assert_eq!(ips, ["192.168.50.2", "127.0.0.1"]);
    }

    /// The cluster of [`cluster`], moved to IPv6.
    fn v6_cluster(services: Vec<Service>) -> Cluster {
        let mut c = cluster(services);
        c.pod_cidr = "fd00:10:244::/56".parse().unwrap();
        c.service_cidr = "fd00:10:96::/112".parse().unwrap();
        c.node_network = "fd00:192:168:50::/64".parse().unwrap();
        c.nodes[0].ips = crate::model::PerFamily::single("fd00:192:168:50::2".parse().unwrap());
        c.nodes[0].pod_cidrs = crate::model::PerFamily::single("fd00:10:244::/64".parse().unwrap());
        c
    }

    #[test]
    fn ipv6_clusters_serve_their_services_on_ipv6_addresses() {
        let mut svc =
            lb("web", TrafficPolicy::Local, Some(32000), vec![vec![ep("fd00:10:244::5", "node-a", true)]]);
        svc.cluster_ips = crate::model::PerFamily::single("fd00:10:96::80".parse().unwrap());
        svc.load_balancer_ips = vec!["fd00:203:0:113::10".parse().unwrap()];
        let mut c = v6_cluster(vec![svc]);
        assert_eq!(node_services(&c, "node-a")[0].local_endpoints, 1);
        assert_eq!(bind_addresses(&c, "node-a"), [IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)]);
        // The IPv4 CIDR is the other proxier's; ::1 is on lo like 127.0.0.1.
        c.proxy.node_port_addresses = vec![
            "fd00:192:168:50::/64".parse().unwrap(),
            "10.0.0.0/8".parse().unwrap(),
            "::1/128".parse().unwrap(),
        ];
        let ips: Vec<String> = bind_addresses(&c, "node-a").iter().map(|i| i.to_string()).collect();
        assert_eq!(ips, ["fd00:192:168:50::2", "::1"]);
    }

    #[test]
    fn answers_like_kube_proxy() {
        let answer =
            Answer { namespace: "ns".into(), name: "svc".into(), local_endpoints: 2, always_ok: false };
        let text = String::from_utf8(response(&answer)).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert_eq!(
            head,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Content-Type-Options: nosniff\r\n\
             X-Load-Balancing-Endpoint-Weight: 2\r\nContent-Length: 109\r\nConnection: close"
        );
        // service_health.go's dedented template, byte for byte.
        assert_eq!(
            body,
            "{\n\t\"service\": {\n\t\t\"namespace\": \"ns\",\n\t\t\"name\": \"svc\"\n\t},\n\t\"localEndpoints\": 2,\n\t\"serviceProxyHealthy\": true\n}"
        );
        assert_eq!(body.len(), 109);
        let parsed: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(parsed["service"]["name"], "svc");

        let none = Answer { local_endpoints: 0, ..answer.clone() };
        let text = String::from_utf8(response(&none)).unwrap();
        assert!(text.starts_with("HTTP/1.1 503 Service Unavailable\r\n"), "{text}");
        assert!(text.contains("X-Load-Balancing-Endpoint-Weight: 0\r\n"));
        assert!(text.contains("\"localEndpoints\": 0,"));

        let broken = Answer { always_ok: true, ..none };
        assert!(String::from_utf8(response(&broken)).unwrap().starts_with("HTTP/1.1 200 OK\r\n"));
    }
}
