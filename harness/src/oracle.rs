//! Kubernetes Service semantics: from the Services, their endpoints and a probe alone, what
//! must happen to the probe's traffic. Never reads rules; never knows which proxy runs.
//!
//! The semantics are those of kube-proxy with `--cluster-cidr` set (the reference every
//! conformant proxy is held to here):
//! - a Service port with no usable endpoints rejects;
//! - usable endpoints are the ready ones, or, when none is ready, the serving terminating ones;
//! - a ClusterIP keeps the client's address, except from outside the pod CIDR (a node's own
//!   processes) and for hairpin traffic (a pod reaching itself), which are masqueraded;
//! - a node port with externalTrafficPolicy Cluster masquerades; with Local, external clients
//!   keep their address and reach only that node's endpoints (none: dropped), while traffic
//!   from pods and from the node itself is sent to any endpoint;
//! - internalTrafficPolicy Local sends cluster-IP traffic only to endpoints on the client's
//!   node (none: dropped).

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};

use crate::model::{
    Cluster, Endpoint, Node, Probe, Protocol, Service, ServicePort, Source, StatedExpectation, StatedSource,
    StatedVerdict, Target, TrafficPolicy, bridge_address,
};

/// What Kubernetes requires of every attempt of a probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expectation {
    pub outcome: Outcome,
    /// One line on why, e.g. `ClusterIP kube-system/kube-dns:dns, 2 ready endpoints`.
    pub because: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Answered by one of `backends`, each seeing the source given for it; with several
    /// backends, each is equally likely.
    Answered { backends: BTreeMap<String, SeenSource> },
    /// Actively refused (ICMP unreachable or TCP RST).
    Rejected,
    /// Dropped: nothing comes back.
    Dropped,
}

/// The source address a backend must see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SeenSource {
    /// The client's own address (one of them, for a node with several).
    Client { addrs: Vec<IpAddr> },
    /// An address of the node that masqueraded the traffic.
    Masqueraded { node: String, addrs: Vec<IpAddr> },
}

impl SeenSource {
    pub fn allows(&self, ip: IpAddr) -> bool {
        match self {
            SeenSource::Client { addrs } | SeenSource::Masqueraded { addrs, .. } => addrs.contains(&ip),
        }
    }
}

impl fmt::Display for SeenSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |addrs: &[IpAddr]| addrs.iter().map(|a| a.to_string()).collect::<Vec<_>>().join("|");
        match self {
            SeenSource::Client { addrs } => write!(f, "client {}", list(addrs)),
            SeenSource::Masqueraded { node, addrs } => write!(f, "masq {node} {}", list(addrs)),
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Rejected => f.write_str("REJECT"),
            Outcome::Dropped => f.write_str("DROP"),
            Outcome::Answered { backends } => {
                let names: Vec<&str> = backends.keys().map(String::as_str).collect();
                write!(f, "{}", names.join("|"))
            }
        }
    }
}

/// The expectation for a probe, or why none can be computed (a scenario error).
pub fn expect(cluster: &Cluster, probe: &Probe) -> Result<Expectation, String> {
    let dst = cluster
        .target_address(&probe.to)
        .ok_or_else(|| "the destination does not resolve to an address".to_string())?;
    match frontend(cluster, &probe.to, dst, probe.protocol)? {
        Frontend::ClusterIp(svc, port) => cluster_ip(cluster, probe, svc, port),
        Frontend::NodePort(svc, port, node) => node_port(cluster, probe, svc, port, node),
        Frontend::Pod(pod) => direct_to_pod(cluster, probe, pod, dst),
        Frontend::Unallocated => Ok(Expectation {
            outcome: Outcome::Dropped,
            because: format!("{dst} is in the service CIDR but no Service port listens there"),
        }),
    }
}

/// Compares what a scenario author wrote under `expect:` with the oracle's expectation.
pub fn check_stated(expectation: &Expectation, stated: &StatedExpectation) -> Result<(), String> {
    let mismatch = |what: String| {
        Err(format!("{what}, but Kubernetes semantics say {} ({})", expectation.outcome, expectation.because))
    };
    let backends = match (&expectation.outcome, stated.verdict) {
        (Outcome::Answered { backends }, StatedVerdict::Answered) => backends,
        (Outcome::Rejected, StatedVerdict::Rejected) | (Outcome::Dropped, StatedVerdict::Dropped) => {
            return Ok(());
        }
        (_, verdict) => return mismatch(format!("the scenario expects {verdict:?}").to_lowercase()),
    };
    if let Some(stated_backends) = &stated.backends {
        let mut stated_sorted = stated_backends.clone();
        stated_sorted.sort();
        let expected: Vec<String> = backends.keys().cloned().collect();
        if stated_sorted != expected {
            return mismatch(format!("the scenario expects backends {}", stated_sorted.join("|")));
        }
    }
    if let Some(stated_source) = stated.source {
        for (pod, seen) in backends {
            let agrees = matches!(
                (stated_source, seen),
                (StatedSource::Client, SeenSource::Client { .. })
                    | (StatedSource::Masqueraded, SeenSource::Masqueraded { .. })
            );
            if !agrees {
                return mismatch(format!(
                    "the scenario expects source {stated_source:?} at {pod}, not {seen}"
                ));
            }
        }
    }
    Ok(())
}

enum Frontend<'a> {
    ClusterIp(&'a Service, &'a ServicePort),
    NodePort(&'a Service, &'a ServicePort, &'a Node),
    Pod(&'a crate::model::Pod),
    Unallocated,
}

/// What a destination address is, in Kubernetes terms.
fn frontend<'a>(
    cluster: &'a Cluster,
    target: &Target,
    dst: SocketAddr,
    protocol: Protocol,
) -> Result<Frontend<'a>, String> {
    let unknown = || format!("no Service port, node port or pod answers to {dst}/{protocol}");
    match target {
        Target::ClusterIp { service, port } => {
            let (svc, sp) = cluster.service_port(service, port).ok_or_else(unknown)?;
            Ok(Frontend::ClusterIp(svc, sp))
        }
        Target::NodePort { service, port, node, .. } => {
            let (svc, sp) = cluster.service_port(service, port).ok_or_else(unknown)?;
            Ok(Frontend::NodePort(svc, sp, cluster.node(node).ok_or_else(unknown)?))
        }
        Target::ExternalIp { .. } | Target::LoadBalancer { .. } | Target::HealthCheck { .. } => {
            Err("external IPs, load balancers and health checks are being written".into())
        }
        Target::Address(_) => {
            for svc in &cluster.services {
                for sp in svc.ports.iter().filter(|p| p.protocol == protocol) {
                    if svc.cluster_ip == dst.ip() && sp.port == dst.port() {
                        return Ok(Frontend::ClusterIp(svc, sp));
                    }
                    if let (Some(np), Some(node)) =
                        (sp.node_port, cluster.nodes.iter().find(|n| n.ip == dst.ip()))
                        && np == dst.port()
                    {
                        return Ok(Frontend::NodePort(svc, sp, node));
                    }
                }
            }
            if let Some(pod) = cluster.pod_by_ip(dst.ip()) {
                return Ok(Frontend::Pod(pod));
            }
            if cluster.service_cidr.contains(&dst.ip()) {
                return Ok(Frontend::Unallocated);
            }
            Err(unknown())
        }
    }
}

/// Endpoints that receive traffic: the ready ones, or when none is ready, serving terminating ones.
fn usable(port: &ServicePort) -> Vec<&Endpoint> {
    let ready: Vec<&Endpoint> = port.endpoints.iter().filter(|e| e.ready).collect();
    if !ready.is_empty() {
        return ready;
    }
    port.endpoints.iter().filter(|e| e.serving && e.terminating).collect()
}

fn endpoint_node<'a>(cluster: &'a Cluster, e: &'a Endpoint) -> Option<&'a str> {
    e.node.as_deref().or_else(|| cluster.pod(&e.pod).map(|p| p.node.as_str()))
}

fn describe(svc: &Service, port: &ServicePort) -> String {
    if port.name.is_empty() {
        svc.namespaced_name()
    } else {
        format!("{}:{}", svc.namespaced_name(), port.name)
    }
}

fn cluster_ip(
    cluster: &Cluster,
    probe: &Probe,
    svc: &Service,
    port: &ServicePort,
) -> Result<Expectation, String> {
    let name = describe(svc, port);
    let Some(client_node) = cluster.source_node(&probe.from) else {
        return Err(format!(
            "{} has no route to cluster IPs: only pods and nodes can reach ClusterIP {name}",
            probe.from
        ));
    };
    let all = usable(port);
    if all.is_empty() {
        return Ok(Expectation {
            outcome: Outcome::Rejected,
            because: format!("ClusterIP {name} has no endpoints"),
        });
    }
    let (chosen, policy) = match svc.internal_traffic_policy {
        TrafficPolicy::Cluster => (all, "".to_string()),
        TrafficPolicy::Local => {
            let local: Vec<&Endpoint> = all
                .into_iter()
                .filter(|e| endpoint_node(cluster, e) == Some(client_node.name.as_str()))
                .collect();
            if local.is_empty() {
                return Ok(Expectation {
                    outcome: Outcome::Dropped,
                    because: format!(
                        "ClusterIP {name}, internalTrafficPolicy Local, no endpoint on {}",
                        client_node.name
                    ),
                });
            }
            (local, ", internalTrafficPolicy Local".to_string())
        }
    };
    let client_ip = cluster.source_ip(&probe.from).expect("validated source");
    let from_pod = cluster.pod_cidr.contains(&client_ip) && matches!(probe.from, Source::Pod(_));
    let backends = chosen
        .iter()
        .map(|e| {
            let hairpin = matches!(&probe.from, Source::Pod(p) if *p == e.pod);
            let seen = if from_pod && !hairpin {
                client_source(cluster, &probe.from)
            } else {
                masqueraded_by(client_node)
            };
            (e.pod.clone(), seen)
        })
        .collect();
    Ok(Expectation {
        outcome: Outcome::Answered { backends },
        because: format!("ClusterIP {name}, {} usable endpoints{policy}", chosen.len()),
    })
}

fn node_port(
    cluster: &Cluster,
    probe: &Probe,
    svc: &Service,
    port: &ServicePort,
    node: &Node,
) -> Result<Expectation, String> {
    let name = describe(svc, port);
    let all = usable(port);
    if all.is_empty() {
        return Ok(Expectation {
            outcome: Outcome::Rejected,
            because: format!("node port of {name} on {} has no endpoints", node.name),
        });
    }
    // With policy Local, only traffic from outside the cluster is kept local: pods and the
    // receiving node's own processes are short-circuited to every endpoint.
    let from_inside = match &probe.from {
        Source::Pod(_) => true,
        Source::Node(n) => *n == node.name,
        Source::External(_) => false,
    };
    if svc.external_traffic_policy == TrafficPolicy::Local && !from_inside {
        let local: Vec<&Endpoint> =
            all.into_iter().filter(|e| endpoint_node(cluster, e) == Some(node.name.as_str())).collect();
        if local.is_empty() {
            return Ok(Expectation {
                outcome: Outcome::Dropped,
                because: format!(
                    "node port of {name}, externalTrafficPolicy Local, no endpoint on {}",
                    node.name
                ),
            });
        }
        let backends = local.iter().map(|e| (e.pod.clone(), client_source(cluster, &probe.from))).collect();
        return Ok(Expectation {
            outcome: Outcome::Answered { backends },
            because: format!(
                "node port of {name} on {}, externalTrafficPolicy Local, {} local endpoints",
                node.name,
                local.len()
            ),
        });
    }
    let local_policy_pod =
        svc.external_traffic_policy == TrafficPolicy::Local && matches!(probe.from, Source::Pod(_));
    let backends = all
        .iter()
        .map(|e| {
            let hairpin = matches!(&probe.from, Source::Pod(p) if *p == e.pod);
            let seen = if local_policy_pod && !hairpin {
                client_source(cluster, &probe.from)
            } else {
                masqueraded_by(node)
            };
            (e.pod.clone(), seen)
        })
        .collect();
    Ok(Expectation {
        outcome: Outcome::Answered { backends },
        because: format!("node port of {name} on {}, {} usable endpoints", node.name, all.len()),
    })
}

fn direct_to_pod(
    cluster: &Cluster,
    probe: &Probe,
    pod: &crate::model::Pod,
    dst: SocketAddr,
) -> Result<Expectation, String> {
    let serves = pod.ports.iter().any(|p| p.port == dst.port() && p.protocol == probe.protocol);
    if !serves {
        return Ok(Expectation {
            outcome: Outcome::Rejected,
            because: format!("pod {} does not listen on {}/{}", pod.name, dst.port(), probe.protocol),
        });
    }
    let backends = BTreeMap::from([(pod.name.clone(), client_source(cluster, &probe.from))]);
    Ok(Expectation {
        outcome: Outcome::Answered { backends },
        because: format!("directly to pod {}", pod.name),
    })
}

/// The client's own addresses: a node may send from its node address or its bridge address,
/// depending on the route to the backend.
fn client_source(cluster: &Cluster, source: &Source) -> SeenSource {
    match source {
        Source::Node(n) => {
            let node = cluster.node(n).expect("validated source");
            SeenSource::Client { addrs: node_addresses(node) }
        }
        other => SeenSource::Client { addrs: vec![cluster.source_ip(other).expect("validated source")] },
    }
}

fn masqueraded_by(node: &Node) -> SeenSource {
    SeenSource::Masqueraded { node: node.name.clone(), addrs: node_addresses(node) }
}

/// A node masquerades to the address of the interface toward the backend: its node-network
/// address, or its pod-bridge gateway for a backend on the same node.
fn node_addresses(node: &Node) -> Vec<IpAddr> {
    vec![node.ip, bridge_address(&node.pod_cidr)]
}

/// Problems with a scenario that only the oracle sees: probes it cannot predict, and stated
/// expectations that disagree with Kubernetes semantics. `(probe index, field, message)`.
pub fn scenario_problems(cluster: &Cluster, probes: &[Probe]) -> Vec<(usize, &'static str, String)> {
    let mut problems = Vec::new();
    for (i, probe) in probes.iter().enumerate() {
        match expect(cluster, probe) {
            Err(message) => problems.push((i, "to", message)),
            Ok(expectation) => {
                if let Some(stated) = &probe.expect
                    && let Err(message) = check_stated(&expectation, stated)
                {
                    problems.push((i, "expect", message));
                }
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::*;

    fn endpoint(pod: &str, ip: &str, node: &str) -> Endpoint {
        Endpoint {
            ip: ip.parse().unwrap(),
            port: 8080,
            ready: true,
            serving: true,
            terminating: false,
            node: Some(node.into()),
            pod: pod.into(),
        }
    }

    fn pod(name: &str, ip: &str, node: &str) -> Pod {
        Pod {
            namespace: "default".into(),
            name: name.into(),
            node: node.into(),
            ip: ip.parse().unwrap(),
            labels: Default::default(),
            ports: vec![ContainerPort { name: None, port: 8080, protocol: Protocol::Tcp }],
        }
    }

    fn cluster(endpoints: Vec<Endpoint>, etp: TrafficPolicy) -> Cluster {
        Cluster {
            pod_cidr: "10.244.0.0/16".parse().unwrap(),
            service_cidr: "10.96.0.0/12".parse().unwrap(),
            node_network: "192.168.50.0/24".parse().unwrap(),
            nodes: vec![
                Node {
                    secondary_ips: vec![],
                    name: "a".into(),
                    ip: "192.168.50.11".parse().unwrap(),
                    pod_cidr: "10.244.1.0/24".parse().unwrap(),
                },
                Node {
                    secondary_ips: vec![],
                    name: "b".into(),
                    ip: "192.168.50.12".parse().unwrap(),
                    pod_cidr: "10.244.2.0/24".parse().unwrap(),
                },
            ],
            external_hosts: vec![ExternalHost { name: "ext".into(), ip: "192.168.50.100".parse().unwrap() }],
            pods: vec![
                pod("web-a", "10.244.1.5", "a"),
                pod("web-b", "10.244.2.5", "b"),
                pod("client", "10.244.1.9", "a"),
            ],
            services: vec![Service {
                namespace: "default".into(),
                name: "web".into(),
                service_type: ServiceType::NodePort,
                cluster_ip: "10.96.0.20".parse().unwrap(),
                external_traffic_policy: etp,
                internal_traffic_policy: TrafficPolicy::Cluster,
                ports: vec![ServicePort {
                    name: "http".into(),
                    protocol: Protocol::Tcp,
                    port: 80,
                    node_port: Some(30080),
                    endpoints,
                }],
                external_ips: vec![],
                load_balancer_ips: vec![],
                load_balancer_source_ranges: vec![],
                health_check_node_port: None,
                session_affinity: SessionAffinity::None,
            }],
            proxy: ProxyConfig::default(),
        }
    }

    fn both() -> Vec<Endpoint> {
        vec![endpoint("web-a", "10.244.1.5", "a"), endpoint("web-b", "10.244.2.5", "b")]
    }

    fn probe(from: Source, to: Target) -> Probe {
        Probe { name: "p".into(), from, to, protocol: Protocol::Tcp, count: 1, interval: None, expect: None }
    }

    fn to_cluster_ip() -> Target {
        Target::ClusterIp { service: "web".into(), port: "http".into() }
    }

    fn to_node_port(node: &str) -> Target {
        Target::NodePort { service: "web".into(), port: "http".into(), node: node.into(), address: None }
    }

    fn backends(e: &Expectation) -> &BTreeMap<String, SeenSource> {
        match &e.outcome {
            Outcome::Answered { backends } => backends,
            other => panic!("expected an answer, got {other}"),
        }
    }

    #[test]
    fn pod_to_cluster_ip_keeps_the_client_address() {
        let c = cluster(both(), TrafficPolicy::Cluster);
        let e = expect(&c, &probe(Source::Pod("client".into()), to_cluster_ip())).unwrap();
        let b = backends(&e);
        assert_eq!(b.len(), 2);
        assert_eq!(b["web-b"], SeenSource::Client { addrs: vec!["10.244.1.9".parse().unwrap()] });
    }

    #[test]
    fn hairpin_is_masqueraded_by_the_pods_node() {
        let c = cluster(both(), TrafficPolicy::Cluster);
        let e = expect(&c, &probe(Source::Pod("web-a".into()), to_cluster_ip())).unwrap();
        let b = backends(&e);
        assert!(matches!(&b["web-a"], SeenSource::Masqueraded { node, .. } if node == "a"));
        assert!(matches!(&b["web-b"], SeenSource::Client { .. }));
    }

    #[test]
    fn node_to_cluster_ip_is_masqueraded() {
        let c = cluster(both(), TrafficPolicy::Cluster);
        let e = expect(&c, &probe(Source::Node("b".into()), to_cluster_ip())).unwrap();
        assert!(
            backends(&e).values().all(|s| matches!(s, SeenSource::Masqueraded { node, .. } if node == "b"))
        );
    }

    #[test]
    fn external_to_node_port_is_masqueraded_by_the_receiving_node() {
        let c = cluster(both(), TrafficPolicy::Cluster);
        let e = expect(&c, &probe(Source::External("ext".into()), to_node_port("a"))).unwrap();
        let b = backends(&e);
        assert_eq!(b.len(), 2);
        assert!(b.values().all(|s| matches!(s, SeenSource::Masqueraded { node, .. } if node == "a")));
    }

    #[test]
    fn no_endpoints_rejects() {
        let c = cluster(vec![], TrafficPolicy::Cluster);
        let e = expect(&c, &probe(Source::Pod("client".into()), to_cluster_ip())).unwrap();
        assert_eq!(e.outcome, Outcome::Rejected);
        let e = expect(&c, &probe(Source::External("ext".into()), to_node_port("b"))).unwrap();
        assert_eq!(e.outcome, Outcome::Rejected);
    }

    #[test]
    fn terminating_endpoints_serve_only_when_none_is_ready() {
        let mut eps = both();
        eps[0].ready = false;
        eps[0].terminating = true;
        let c = cluster(eps.clone(), TrafficPolicy::Cluster);
        let e = expect(&c, &probe(Source::Pod("client".into()), to_cluster_ip())).unwrap();
        assert_eq!(backends(&e).keys().collect::<Vec<_>>(), vec!["web-b"]);
        eps[1].ready = false;
        eps[1].serving = false;
        let c = cluster(eps, TrafficPolicy::Cluster);
        let e = expect(&c, &probe(Source::Pod("client".into()), to_cluster_ip())).unwrap();
        assert_eq!(backends(&e).keys().collect::<Vec<_>>(), vec!["web-a"]);
    }

    #[test]
    fn local_policy_keeps_external_clients_local_and_drops_without_local_endpoints() {
        let c = cluster(vec![endpoint("web-a", "10.244.1.5", "a")], TrafficPolicy::Local);
        let e = expect(&c, &probe(Source::External("ext".into()), to_node_port("a"))).unwrap();
        assert_eq!(
            backends(&e)["web-a"],
            SeenSource::Client { addrs: vec!["192.168.50.100".parse().unwrap()] }
        );
        let e = expect(&c, &probe(Source::External("ext".into()), to_node_port("b"))).unwrap();
        assert_eq!(e.outcome, Outcome::Dropped);
        // Pods are short-circuited to every endpoint, wherever they send.
        let e = expect(&c, &probe(Source::Pod("client".into()), to_node_port("b"))).unwrap();
        assert_eq!(backends(&e).len(), 1);
    }

    #[test]
    fn raw_addresses_are_recognised() {
        let c = cluster(both(), TrafficPolicy::Cluster);
        let to = |a: &str| Target::Address(a.parse().unwrap());
        let from = || Source::Pod("client".into());
        assert_eq!(backends(&expect(&c, &probe(from(), to("10.96.0.20:80"))).unwrap()).len(), 2);
        assert_eq!(backends(&expect(&c, &probe(from(), to("192.168.50.12:30080"))).unwrap()).len(), 2);
        assert_eq!(backends(&expect(&c, &probe(from(), to("10.244.2.5:8080"))).unwrap()).len(), 1);
        assert_eq!(expect(&c, &probe(from(), to("10.244.2.5:9999"))).unwrap().outcome, Outcome::Rejected);
        assert_eq!(expect(&c, &probe(from(), to("10.96.0.99:80"))).unwrap().outcome, Outcome::Dropped);
        assert!(expect(&c, &probe(from(), to("8.8.8.8:53"))).is_err());
    }

    #[test]
    fn external_hosts_cannot_reach_cluster_ips() {
        let c = cluster(both(), TrafficPolicy::Cluster);
        assert!(expect(&c, &probe(Source::External("ext".into()), to_cluster_ip())).is_err());
    }

    #[test]
    fn stated_expectations_are_checked() {
        let c = cluster(both(), TrafficPolicy::Cluster);
        let e = expect(&c, &probe(Source::Pod("web-a".into()), to_cluster_ip())).unwrap();
        let stated = |verdict, backends: Option<Vec<&str>>, source| StatedExpectation {
            verdict,
            backends: backends.map(|b| b.into_iter().map(String::from).collect()),
            source,
            http_status: None,
        };
        assert!(
            check_stated(&e, &stated(StatedVerdict::Answered, Some(vec!["web-b", "web-a"]), None)).is_ok()
        );
        assert!(check_stated(&e, &stated(StatedVerdict::Rejected, None, None)).is_err());
        assert!(check_stated(&e, &stated(StatedVerdict::Answered, Some(vec!["web-a"]), None)).is_err());
        // Hairpin to web-a is masqueraded, so "client" is wrong for the probe as a whole.
        let err =
            check_stated(&e, &stated(StatedVerdict::Answered, None, Some(StatedSource::Client))).unwrap_err();
        assert!(err.contains("web-a"), "{err}");
    }
}
