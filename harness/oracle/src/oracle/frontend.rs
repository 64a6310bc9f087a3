//! What a destination is, in Kubernetes terms: a cluster IP, an external destination (node
//! port, external IP, load-balancer IP) handled by some node, a health-check port, a pod, a
//! node's own closed port, or an unallocated service address.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::model::{
    Cluster, Implementation, IpFamily, Node, Pod, Probe, Profile, Protocol, ProxyConfig, Service,
    ServicePort, Source, Target, TrafficPolicy, bridge_address,
};

use super::profile::UNALLOCATED_SERVICE_IPS_DROPPED;

#[derive(Clone)]
pub(super) enum Frontend<'a> {
    ClusterIp {
        svc: &'a Service,
        port: &'a ServicePort,
    },
    /// Handled by the proxy on `node` (the node that translates it).
    External {
        svc: &'a Service,
        port: &'a ServicePort,
        kind: ExternalKind,
        node: &'a Node,
    },
    HealthCheck {
        svc: &'a Service,
        node: &'a Node,
    },
    /// An address of `node` where no Service listens: the node's own stack refuses.
    NodeItself {
        node: &'a Node,
        why: String,
    },
    /// Traffic a rule on the client's node rejects, though no Service port claims it.
    RejectedByRule {
        why: String,
    },
    /// Traffic that a rule drops: it goes nowhere and no one answers.
    Nowhere {
        why: String,
    },
    /// Traffic no rule claims: the node forwards it as addressed, un-translated, toward its
    /// routes, and nothing answers in this topology.
    PassesThrough {
        why: String,
    },
    Pod(&'a Pod),
    /// 127.0.0.1 of `node`, arriving from outside it.
    Martian {
        node: &'a Node,
    },
    /// A destination whose outcome Kubernetes leaves to the implementation: what profile `by`
    /// makes of it.
    Chosen {
        frontend: Box<Frontend<'a>>,
        by: Profile,
    },
}

/// Why a probe cannot be judged under the profile: Kubernetes leaves its outcome open.
pub(super) struct Open(pub String);

/// What classifying a destination can end in besides a frontend.
pub(super) enum NotAFrontend {
    /// The scenario asks for something that is not there (a scenario error).
    Invalid(String),
    /// Kubernetes leaves the outcome open, and the profile is `kubernetes`.
    Open(Open),
}

impl From<String> for NotAFrontend {
    fn from(reason: String) -> Self {
        NotAFrontend::Invalid(reason)
    }
}

/// What `profile` makes of a destination where Kubernetes leaves it open: `iptables` in
/// kube-proxy's iptables mode, `nftables` in its nftables mode, `ipvs` in its IPVS mode;
/// `kubernetes` chooses nothing (`open` says what is open).
fn chosen<'a>(
    profile: Profile,
    iptables: Frontend<'a>,
    nftables: Frontend<'a>,
    ipvs: Frontend<'a>,
    open: &str,
) -> Result<Frontend<'a>, NotAFrontend> {
    let frontend = match profile.implementation {
        Implementation::Kubernetes => return Err(NotAFrontend::Open(Open(open.to_string()))),
        Implementation::KubeProxyIptables => iptables,
        Implementation::KubeProxyNftables => nftables,
        Implementation::KubeProxyIpvs => ipvs,
    };
    Ok(Frontend::Chosen { frontend: Box::new(frontend), by: profile })
}

fn refused<'a>(node: &'a Node, why: &str) -> Frontend<'a> {
    Frontend::NodeItself { node, why: why.to_string() }
}

fn nowhere<'a>(why: &str) -> Frontend<'a> {
    Frontend::Nowhere { why: why.to_string() }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ExternalKind {
    NodePort,
    ExternalIp,
    LoadBalancer,
}

impl ExternalKind {
    pub(super) fn describe(self) -> &'static str {
        match self {
            ExternalKind::NodePort => "node port",
            ExternalKind::ExternalIp => "external IP",
            ExternalKind::LoadBalancer => "load-balancer IP",
        }
    }
}

pub(super) fn classify<'a>(
    cluster: &'a Cluster,
    probe: &Probe,
    dst: SocketAddr,
    profile: Profile,
) -> Result<Frontend<'a>, NotAFrontend> {
    let port_of = |service: &str, port: &str| {
        cluster.service_port(service, port).ok_or_else(|| format!("no port {port:?} on Service {service}"))
    };
    let node_named = |name: &str| cluster.node(name).ok_or_else(|| format!("no node {name}"));
    match &probe.to {
        Target::ClusterIp { service, port } => {
            let (svc, port) = port_of(service, port)?;
            Ok(Frontend::ClusterIp { svc, port })
        }
        Target::NodePort { service, port, node, .. } => {
            let (svc, port) = port_of(service, port)?;
            if let Some(owner) = service_ip_owner(cluster, dst, probe.protocol) {
                return Err(NotAFrontend::Invalid(format!(
                    "{dst} is also an external IP of Service {owner}, and Service IPs win over node ports \
                     (KUBE-NODEPORTS comes last): probe it with `externalIP:` instead"
                )));
            }
            node_port(cluster, svc, port, node_named(node)?, dst.ip(), profile)
        }
        Target::ExternalIp { service, port, .. } | Target::LoadBalancer { service, port, .. } => {
            let (svc, port) = port_of(service, port)?;
            if svc.proxied_load_balancer_ips.contains(&dst.ip()) {
                return Ok(proxied_load_balancer(dst.ip()));
            }
            let kind = match probe.to {
                Target::ExternalIp { .. } => ExternalKind::ExternalIp,
                _ => ExternalKind::LoadBalancer,
            };
            let node = translating_node(cluster, probe)?;
            // Without endpoints for this traffic, kube-proxy's nat rules for the Service IP end
            // without a DNAT (none is written without any endpoint; a Local policy's chain
            // without a local one is empty and returns), and its drop or reject is a filter
            // rule, which the node port's DNAT, met next, leaves behind. Held to the Local
            // policy is what the node counts neither as its own nor as pod traffic
            // (`paths::external_by_contract`).
            let held_local = svc.external_traffic_policy == TrafficPolicy::Local
                && !super::local::is_local(cluster, &probe.from, node)
                && !matches!(&probe.from, Source::Node(n) if *n == node.name);
            let external_local = held_local && super::endpoints::local_to(port, &node.name).is_empty();
            if let Some(owner) = node_port_owner(cluster, dst, probe.protocol)
                && (super::endpoints::cluster_wide(port).is_empty() || external_local)
            {
                return Err(NotAFrontend::Invalid(format!(
                    "{dst} is a node's own address and Service {owner}'s node port, and {} has no endpoints \
                     for this traffic here: kube-proxy then writes no DNAT for the Service IP (its drop or \
                     reject is a filter rule), so the node port may take the packet first; which one wins \
                     is the proxy's hook order, not a Kubernetes rule",
                    svc.namespaced_name()
                )));
            }
            Ok(Frontend::External { svc, port, kind, node })
        }
        Target::HealthCheck { service, node } => {
            let svc = cluster.service(service).ok_or_else(|| format!("no Service {service}"))?;
            Ok(health_check(cluster, svc, node_named(node)?, dst.ip()))
        }
        Target::Address(_) => raw_address(cluster, probe, dst, profile),
        Target::Localhost { node, .. } => Ok(Frontend::Martian { node: node_named(node)? }),
    }
}

/// A load-balancer IP with `ipMode: Proxy`: the balancer proxies, so no node intercepts it and
/// traffic to it leaves for the balancer as addressed (pkg/proxy/serviceport.go skips it when
/// IsVIPMode is false; KEP-1860).
fn proxied_load_balancer<'a>(ip: IpAddr) -> Frontend<'a> {
    Frontend::PassesThrough {
        why: format!(
            "{ip} is a load-balancer IP with ipMode Proxy: no node intercepts it, so the node forwards it \
             un-translated toward the load balancer"
        ),
    }
}

/// Where the proxy sees traffic to an external IP or load-balancer IP: the client's own node
/// for pods and nodes (their node intercepts it), the node the router picked for outsiders.
fn translating_node<'a>(cluster: &'a Cluster, probe: &Probe) -> Result<&'a Node, String> {
    match (&probe.from, cluster.entry_node(&probe.to)) {
        (Source::External(_), Some(via)) => Ok(via),
        (Source::External(host), None) => {
            Err(format!("external host {host} needs `via: NODE` to say which node receives the traffic"))
        }
        (from, _) => cluster.source_node(from).ok_or_else(|| format!("{from} is on no node")),
    }
}

/// A node port on `addr` of `node`: a node port only where nodePortAddresses (and, for
/// 127.0.0.1, localhost node ports) allow it, never on ::1; elsewhere the node's own closed
/// port. Without nodePortAddresses, which of a node's addresses serve node ports is the
/// implementation's choice: all of them in kube-proxy's iptables mode, the primary node IP
/// in its nftables mode; so is 127.0.0.1, which only iptables mode serves.
fn node_port<'a>(
    cluster: &'a Cluster,
    svc: &'a Service,
    port: &'a ServicePort,
    node: &'a Node,
    addr: IpAddr,
    profile: Profile,
) -> Result<Frontend<'a>, NotAFrontend> {
    let config = &cluster.proxy;
    let served = Frontend::External { svc, port, kind: ExternalKind::NodePort, node };
    if addr == IpAddr::V6(Ipv6Addr::LOCALHOST) {
        return Ok(refused(node, "kube-proxy serves no node ports on ::1"));
    }
    let cidrs_given = node_port_cidrs_given(config, addr);
    if cidrs_given && outside_node_port_addresses(config, addr) {
        let not_served = refused(
            node,
            &format!("{addr} is outside nodePortAddresses, so node {} serves no node port there", node.name),
        );
        return match filtered_on_every_address(svc, port, node) {
            None => Ok(not_served),
            Some(filtered) => chosen(
                profile,
                filtered,
                not_served.clone(),
                not_served,
                "a node port without endpoints for outside traffic, on an address outside nodePortAddresses: \
                 kube-proxy's modes differ",
            ),
        };
    }
    if addr.is_loopback() {
        if !config.localhost_node_ports {
            return Ok(refused(node, "localhost node ports are off on this proxy"));
        }
        return chosen(
            profile,
            served.clone(),
            refused(node, "kube-proxy's nftables mode serves no node ports on 127.0.0.1"),
            // Loopback addresses get no virtual server (`isValidForSet`, pkg/proxy/ipvs/netlink_linux.go).
            refused(node, "kube-proxy's IPVS mode makes no virtual server on 127.0.0.1"),
            "node ports on 127.0.0.1 are kube-proxy iptables mode's extension (localhostNodePorts)",
        );
    }
    if cidrs_given || node.ip() == addr {
        return Ok(served);
    }
    chosen(
        profile,
        served.clone(),
        refused(
            node,
            "kube-proxy's nftables mode serves node ports on the primary node IP only (--nodeport-addresses primary)",
        ),
        // IPVS mode makes a virtual server on every address of the node (`syncProxyRules`).
        served,
        "without nodePortAddresses, whether a node's other addresses serve node ports is the implementation's choice",
    )
}

/// kube-proxy's iptables mode filters a node port with no endpoints for outside traffic on
/// every local address, nodePortAddresses or not (`-m addrtype --dst-type LOCAL` in
/// KUBE-EXTERNAL-SERVICES, pkg/proxy/iptables/proxier.go): REJECT without any endpoint, DROP
/// under externalTrafficPolicy Local without one on the node. Its nftables mode matches only
/// the node-port addresses there (`nodeport-endpoints-check` on `@nodeport-ips`).
fn filtered_on_every_address<'a>(svc: &Service, port: &ServicePort, node: &Node) -> Option<Frontend<'a>> {
    let name = format!("node port {} of {}/{}", port.node_port?, svc.namespace, svc.name);
    if super::endpoints::cluster_wide(port).is_empty() {
        return Some(Frontend::RejectedByRule {
            why: format!(
                "{name} has no endpoints: kube-proxy's iptables mode rejects it on every address of the \
                 node, outside nodePortAddresses too"
            ),
        });
    }
    let local = svc.external_traffic_policy == TrafficPolicy::Local;
    (local && super::endpoints::local_to(port, &node.name).is_empty()).then(|| Frontend::Nowhere {
        why: format!(
            "{name}, externalTrafficPolicy Local, no endpoint on {}: kube-proxy's iptables mode drops it on \
             every address of the node, outside nodePortAddresses too",
            node.name
        ),
    })
}

/// Whether nodePortAddresses lists CIDRs of `addr`'s family (those of the other family are
/// the other proxier's; none of this family means every address).
fn node_port_cidrs_given(config: &ProxyConfig, addr: IpAddr) -> bool {
    let family = IpFamily::of(addr);
    config.node_port_addresses.iter().any(|cidr| IpFamily::of_net(cidr) == family)
}

/// Whether nodePortAddresses leaves `addr` out: CIDRs of its family are given and none holds it.
fn outside_node_port_addresses(config: &ProxyConfig, addr: IpAddr) -> bool {
    let family = IpFamily::of(addr);
    node_port_cidrs_given(config, addr)
        && !config
            .node_port_addresses
            .iter()
            .any(|cidr| IpFamily::of_net(cidr) == family && cidr.contains(&addr))
}

/// The health-check node port of `svc` on `addr` of `node`. kube-proxy's health-check server
/// listens on every address when nodePortAddresses selects all of them, and otherwise only on
/// the node addresses it selects (`newServiceHealthServer`, pkg/proxy/healthcheck/
/// service_health.go); elsewhere the node's own stack refuses.
fn health_check<'a>(cluster: &Cluster, svc: &'a Service, node: &'a Node, addr: IpAddr) -> Frontend<'a> {
    if outside_node_port_addresses(&cluster.proxy, addr) {
        return Frontend::NodeItself {
            node,
            why: format!(
                "{addr} is outside nodePortAddresses, so node {}'s health-check server does not listen there",
                node.name
            ),
        };
    }
    Frontend::HealthCheck { svc, node }
}

/// The Service whose external IP or load-balancer IP and port `dst` is, if any.
fn service_ip_owner(cluster: &Cluster, dst: SocketAddr, protocol: Protocol) -> Option<String> {
    cluster.services.iter().find_map(|s| {
        let ip_is_theirs = s.external_ips.contains(&dst.ip()) || s.load_balancer_ips.contains(&dst.ip());
        let port_is_theirs = s.ports.iter().any(|p| p.port == dst.port() && p.protocol == protocol);
        (ip_is_theirs && port_is_theirs).then(|| s.namespaced_name())
    })
}

/// The Service whose node port `dst` is, where `dst`'s address is some node's own.
fn node_port_owner(cluster: &Cluster, dst: SocketAddr, protocol: Protocol) -> Option<String> {
    if !cluster.nodes.iter().any(|n| n.all_ips().any(|ip| ip == dst.ip())) {
        return None;
    }
    cluster.services.iter().find_map(|s| {
        let listens = s.ports.iter().any(|p| p.node_port == Some(dst.port()) && p.protocol == protocol);
        listens.then(|| s.namespaced_name())
    })
}

fn raw_address<'a>(
    cluster: &'a Cluster,
    probe: &Probe,
    dst: SocketAddr,
    profile: Profile,
) -> Result<Frontend<'a>, NotAFrontend> {
    let matches = |sp: &ServicePort, port: u16| sp.protocol == probe.protocol && sp.port == port;
    for svc in &cluster.services {
        for sp in &svc.ports {
            if svc.cluster_ip() == dst.ip() && matches(sp, dst.port()) {
                return Ok(Frontend::ClusterIp { svc, port: sp });
            }
            let external = svc.external_ips.contains(&dst.ip()) || svc.load_balancer_ips.contains(&dst.ip());
            if external && matches(sp, dst.port()) {
                return Err(NotAFrontend::Invalid(format!(
                    "{dst} is an external or load-balancer IP of {}: use the `externalIP:` or `loadBalancer:` form",
                    svc.name
                )));
            }
        }
    }
    if cluster.services.iter().any(|s| s.proxied_load_balancer_ips.contains(&dst.ip())) {
        return Ok(proxied_load_balancer(dst.ip()));
    }
    if let Some(node) = node_owning(cluster, &probe.from, dst.ip()) {
        for svc in &cluster.services {
            if let Some(sp) =
                svc.ports.iter().find(|sp| sp.protocol == probe.protocol && sp.node_port == Some(dst.port()))
            {
                return node_port(cluster, svc, sp, node, dst.ip(), profile);
            }
            if probe.protocol == Protocol::Tcp && svc.health_check_node_port == Some(dst.port()) {
                return Ok(health_check(cluster, svc, node, dst.ip()));
            }
        }
        return Ok(Frontend::NodeItself {
            node,
            why: format!("nothing listens on node {} port {}", node.name, dst.port()),
        });
    }
    if let Some(pod) = cluster.pod_by_ip(dst.ip()) {
        return Ok(Frontend::Pod(pod));
    }
    // No proxy rule catches it: iptables mode lets it through to the routes un-translated (the
    // node forwards it toward the service CIDR's route, and nothing answers in this topology);
    // nftables mode rejects a cluster IP's other ports and, from v1.33, drops the rest of the
    // service CIDR (a release change: `UNALLOCATED_SERVICE_IPS_DROPPED`).
    let passes = || Frontend::PassesThrough {
        why: "iptables mode has no rule for it: the node forwards it un-translated to its routes, \
              and nothing answers there"
            .into(),
    };
    if let Some(svc) = cluster.services.iter().find(|s| s.cluster_ip() == dst.ip()) {
        return chosen(
            profile,
            passes(),
            Frontend::RejectedByRule {
                why: "nftables mode rejects a cluster IP's ports that no Service port uses".into(),
            },
            Frontend::RejectedByRule {
                why: "IPVS mode rejects new connections to a service address's ports that no virtual server \
                      has (KUBE-IPVS-FILTER, kubernetes/kubernetes#72236)"
                    .into(),
            },
            &format!("{dst} is a cluster IP of {} on a port it does not serve", svc.namespaced_name()),
        );
    }
    if cluster.service_cidr.contains(&dst.ip()) {
        let change = &UNALLOCATED_SERVICE_IPS_DROPPED;
        let why = change.why(profile);
        let nftables = if change.made_by(profile) { nowhere(&why) } else { Frontend::PassesThrough { why } };
        return chosen(
            profile,
            passes(),
            nftables,
            passes(),
            "an address of the service CIDR that no Service has",
        );
    }
    Err(NotAFrontend::Invalid(format!(
        "no Service port, node port, node or pod answers to {dst}/{}",
        probe.protocol
    )))
}

/// The node an address belongs to; 127.0.0.1 and ::1 belong to the sending node.
fn node_owning<'a>(cluster: &'a Cluster, from: &Source, ip: IpAddr) -> Option<&'a Node> {
    if ip == IpAddr::V4(Ipv4Addr::LOCALHOST) || ip == IpAddr::V6(Ipv6Addr::LOCALHOST) {
        return match from {
            Source::Node(n) => cluster.node(n),
            _ => None,
        };
    }
    cluster
        .nodes
        .iter()
        .find(|n| n.node_network_ips().any(|a| a == ip) || bridge_address(&n.pod_cidr()) == ip)
}
