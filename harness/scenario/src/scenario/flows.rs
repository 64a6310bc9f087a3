//! `spec.flows: {all: true, count: N}`: a probe for every path a packet can take to a Service,
//! so a scenario proves the whole contract without listing it. Generated probes state no
//! expectation: the oracle supplies one, as for every probe.
//!
//! Sources are every pod, every node (its host network) and every external host. Frontends,
//! for each Service port:
//! - the cluster IP, from pods and nodes, and from external hosts whose routes send it
//!   through a node (`externalHosts[].routes`; the others have no route to cluster IPs);
//! - the node port on every node (NodePort and LoadBalancer Services), from every source;
//! - every external IP and load-balancer ingress IP: from pods and nodes as is, from external
//!   hosts once per node the router may send the traffic to (`via`);
//!
//! and for each Service, its healthCheckNodePort on every node, from nodes and external hosts
//! (TCP). Names read like a flow table: `flow: pod client -> web:http clusterIP`.

use std::collections::HashSet;

use crate::model::{ExternalHost, Node, Probe, Protocol, Service, ServicePort, Source, Target};

use super::de::typed;
use super::error::{Diagnostics, Site};
use super::probes::{DEFAULT_COUNT, check_count};
use super::referents::Names;
use super::spec::{FlowsSpec, ProbeSpec};
use super::targets::port_ref;
use super::yaml::FieldPath;

/// `spec.flows` with `all: true`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Flows {
    /// Attempts per generated probe.
    pub count: u32,
}

/// `None` when there is no `spec.flows`, or it says `all: false`.
pub(crate) fn read(site: &Site<'_>, diag: &mut Diagnostics) -> Option<Flows> {
    let path = FieldPath::parse("spec.flows");
    let spec = typed::<Option<FlowsSpec>>(site, &path, diag).flatten()?;
    let count = spec.count.unwrap_or(DEFAULT_COUNT);
    check_count(site, &path.key("count"), count, diag);
    spec.all.then_some(Flows { count })
}

/// Every flow, Service by Service, port by port, frontend by frontend, source by source.
pub(crate) fn generate(flows: &Flows, names: &Names<'_, '_>) -> Vec<Probe> {
    let nodes: Vec<&Node> = names.nodes.values().collect();
    let node_sources: Vec<Source> = nodes.iter().map(|n| Source::Node(n.name.clone())).collect();
    let paths = Paths {
        count: flows.count,
        inside: names
            .pods
            .values()
            .map(|p| Source::Pod(p.pod.name.clone()))
            .chain(node_sources.clone())
            .collect(),
        node_sources,
        externals: names.external_hosts.values().map(|h| Source::External(h.name.clone())).collect(),
        external_hosts: names.external_hosts.values().collect(),
        nodes,
    };
    let mut out = Vec::new();
    for entry in names.services.values() {
        for port in &entry.service.ports {
            paths.service_port(&entry.service, port, &mut out);
        }
        paths.health_checks(&entry.service, &mut out);
    }
    out
}

/// Reports given probes that take a generated flow's name.
pub(crate) fn check_names(
    site: &Site<'_>,
    given: &[(usize, FieldPath, ProbeSpec)],
    generated: &[Probe],
    diag: &mut Diagnostics,
) {
    let names: HashSet<&str> = generated.iter().map(|p| p.name.as_str()).collect();
    for (_, path, spec) in given {
        if let Some(name) = spec.name.as_deref().filter(|n| names.contains(n)) {
            diag.value(
                site,
                &path.key("name"),
                format!(
                    "probe name {name:?} is also the name of a generated flow (spec.flows): rename the probe"
                ),
            );
        }
    }
}

/// The sources and nodes every Service is probed from and through.
struct Paths<'n> {
    count: u32,
    /// Pods, then nodes: what reaches cluster IPs, and external IPs without `via`.
    inside: Vec<Source>,
    node_sources: Vec<Source>,
    externals: Vec<Source>,
    external_hosts: Vec<&'n ExternalHost>,
    nodes: Vec<&'n Node>,
}

/// One Service port (or, for health checks, one Service) as flow names and probes show it.
struct Destination {
    /// `web:http`, or `web` for a health check.
    name: String,
    protocol: Protocol,
}

impl Paths<'_> {
    fn service_port(&self, service: &Service, port: &ServicePort, out: &mut Vec<Probe>) {
        let (name, port_name) = (service.name.clone(), port_ref(port));
        let dest = Destination { name: format!("{name}:{port_name}"), protocol: port.protocol };
        let cluster_ip = Target::ClusterIp { service: name.clone(), port: port_name.clone() };
        self.push(&self.inside, &dest, "clusterIP", &cluster_ip, out);
        let routed: Vec<Source> = (self.external_hosts.iter())
            .filter(|h| h.route_to(service.cluster_ip()).is_some())
            .map(|h| Source::External(h.name.clone()))
            .collect();
        self.push(&routed, &dest, "clusterIP", &cluster_ip, out);
        if port.node_port.is_some() {
            for node in &self.nodes {
                let target = Target::NodePort {
                    service: name.clone(),
                    port: port_name.clone(),
                    node: node.name.clone(),
                    address: None,
                };
                let frontend = format!("nodePort@{}", node.name);
                self.push(&self.inside, &dest, &frontend, &target, out);
                self.push(&self.externals, &dest, &frontend, &target, out);
            }
        }
        for &ip in &service.external_ips {
            let target = |via| Target::ExternalIp { service: name.clone(), port: port_name.clone(), ip, via };
            self.external(&dest, &format!("externalIP {ip}"), target, out);
        }
        for &ip in service.load_balancer_ips.iter().chain(&service.proxied_load_balancer_ips) {
            let target =
                |via| Target::LoadBalancer { service: name.clone(), port: port_name.clone(), ip, via };
            self.external(&dest, &format!("loadBalancer {ip}"), target, out);
        }
    }

    /// An external or load-balancer IP: directly from pods and nodes, through each node from
    /// external hosts.
    fn external(
        &self,
        dest: &Destination,
        frontend: &str,
        target: impl Fn(Option<String>) -> Target,
        out: &mut Vec<Probe>,
    ) {
        self.push(&self.inside, dest, frontend, &target(None), out);
        for node in &self.nodes {
            let via = format!("{frontend} via {}", node.name);
            self.push(&self.externals, dest, &via, &target(Some(node.name.clone())), out);
        }
    }

    fn health_checks(&self, service: &Service, out: &mut Vec<Probe>) {
        if service.health_check_node_port.is_none() {
            return;
        }
        let dest = Destination { name: service.name.clone(), protocol: Protocol::Tcp };
        for node in &self.nodes {
            let target = Target::HealthCheck { service: service.name.clone(), node: node.name.clone() };
            let frontend = format!("healthCheck@{}", node.name);
            self.push(&self.node_sources, &dest, &frontend, &target, out);
            self.push(&self.externals, &dest, &frontend, &target, out);
        }
    }

    /// One probe from each of `sources`.
    fn push(
        &self,
        sources: &[Source],
        dest: &Destination,
        frontend: &str,
        to: &Target,
        out: &mut Vec<Probe>,
    ) {
        out.extend(sources.iter().map(|from| Probe {
            family: None,
            name: format!("flow: {from} -> {} {frontend}", dest.name),
            from: from.clone(),
            to: to.clone(),
            protocol: dest.protocol,
            count: self.count,
            interval: None,
            source_port: None,
            expect: None,
            life: crate::model::Life::OneShot,
            clients: None,
        }));
    }
}
