//! EndpointSlices for a Service with a selector and no slices in the file, derived as the
//! EndpointSlice controller would (pkg/controller/endpointslice): the selected pods of the
//! Service's namespace, each port's `targetPort` resolved in each pod, one slice per distinct
//! set of resolved ports.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::model::{IpFamily, Node};

use super::endpoints::{SERVICE_NAME_LABEL, SliceData, SliceEndpoint, SlicePort, undeclared_port};
use super::error::Diagnostics;
use super::hints;
use super::pods::PodEntry;
use super::registry::Registry;
use super::selectors::ByLabel;
use super::services::{ServiceEntry, TargetPort};
use super::yaml::FieldPath;

/// The derived slices of one Service, as data for the model and as objects for real proxies.
pub(crate) fn derive(
    entry: &ServiceEntry<'_>,
    pods: &ByLabel<'_, PodEntry>,
    nodes: &Registry<Node>,
    diag: &mut Diagnostics,
) -> Vec<(SliceData, EndpointSlice)> {
    let Some(selector) = &entry.selector else { return Vec::new() };
    if hints::refuse_annotated(entry, diag) {
        return Vec::new();
    }
    let service = &entry.service;
    // Slices group pods by the ports they resolve to, in pod (file) order.
    let mut groups: Vec<(Vec<SlicePort>, Vec<&PodEntry>)> = Vec::new();
    // Selected: same namespace, labels match, and not finished (terminating pods stay, marked
    // terminating).
    for pod in pods.selected(&service.namespace, selector).filter(|p| !p.finished) {
        let ports = resolve_ports(entry, pod, diag);
        match groups.iter_mut().find(|(p, _)| *p == ports) {
            Some((_, members)) => members.push(pod),
            None => groups.push((ports, vec![pod])),
        }
    }
    let many = groups.len() > 1;
    // The controller makes slices per family of the Service: one set for a single-stack one.
    let families: Vec<IpFamily> = service.cluster_ips.copied().map(IpFamily::of).collect();
    let mut out = Vec::new();
    for &family in &families {
        for (i, (ports, members)) in groups.iter().enumerate() {
            let members: Vec<&PodEntry> =
                members.iter().copied().filter(|p| address_of(p, family).is_some()).collect();
            // One per member (each has an address of the family), room made for no more.
            let mut endpoints: Vec<SliceEndpoint> = Vec::with_capacity(members.len());
            endpoints.extend(members.iter().filter_map(|p| endpoint(entry, p, family)));
            hints::add(entry, &mut endpoints, nodes);
            let data = SliceData { service: service.name.clone(), ports: ports.clone(), endpoints };
            let mut name = if many {
                format!("{}-derived-{}", service.name, i + 1)
            } else {
                format!("{}-derived", service.name)
            };
            if families.len() > 1 {
                name = format!("{name}-{}", family.as_k8s().to_lowercase());
            }
            let object = to_k8s(&data, &name, &service.namespace, &members, family);
            out.push((data, object));
        }
    }
    out
}

/// The pod's address of `family`, if it has one.
fn address_of(pod: &PodEntry, family: IpFamily) -> Option<std::net::IpAddr> {
    pod.pod.ips.get(family).copied()
}

/// The ports of `pod` each service port resolves to; a named `targetPort` the pod lacks leaves
/// the pod out of that port, as the controller does.
fn resolve_ports(entry: &ServiceEntry<'_>, pod: &PodEntry, diag: &mut Diagnostics) -> Vec<SlicePort> {
    let mut out = Vec::new();
    for (j, (sp, target)) in entry.service.ports.iter().zip(&entry.target_ports).enumerate() {
        let port = match target {
            TargetPort::Number(n) => {
                if !pod.pod.ports.iter().any(|c| c.port == *n && c.protocol == sp.protocol) {
                    let path = FieldPath::parse("spec.ports").index(j).key("targetPort");
                    diag.value(
                        &entry.site,
                        &path,
                        format!("selects {}", undeclared_port(&pod.pod.name, *n, sp.protocol)),
                    );
                }
                *n
            }
            TargetPort::Name(name) => {
                let found = pod
                    .pod
                    .ports
                    .iter()
                    .find(|c| c.name.as_deref() == Some(name) && c.protocol == sp.protocol);
                match found {
                    Some(c) => c.port,
                    None => continue,
                }
            }
        };
        out.push(SlicePort { name: sp.name.clone(), port, protocol: sp.protocol });
    }
    out
}

/// Conditions as the controller's `podToEndpoint` sets them.
fn endpoint(entry: &ServiceEntry<'_>, pod: &PodEntry, family: IpFamily) -> Option<SliceEndpoint> {
    let serving = pod.ready;
    let terminating = pod.terminating;
    Some(SliceEndpoint {
        ip: address_of(pod, family)?,
        // A terminating pod is never ready, unless the Service publishes not-ready addresses.
        ready: entry.publish_not_ready || (serving && !terminating),
        serving,
        terminating,
        node: Some(pod.pod.node.clone()),
        pod: pod.pod.name.clone(),
        zone_hints: Vec::new(),
    })
}

fn to_k8s(
    data: &SliceData,
    name: &str,
    namespace: &str,
    members: &[&PodEntry],
    family: IpFamily,
) -> EndpointSlice {
    let labels = BTreeMap::from([
        (SERVICE_NAME_LABEL.to_string(), data.service.clone()),
        ("endpointslice.kubernetes.io/managed-by".to_string(), "packetproof".to_string()),
    ]);
    let endpoints = data
        .endpoints
        .iter()
        .zip(members)
        .map(|(ep, pod)| Endpoint {
            addresses: vec![ep.ip.to_string()],
            conditions: Some(EndpointConditions {
                ready: Some(ep.ready),
                serving: Some(ep.serving),
                terminating: Some(ep.terminating),
            }),
            node_name: ep.node.clone(),
            hints: hints::object(&ep.zone_hints),
            target_ref: Some(ObjectReference {
                kind: Some("Pod".to_string()),
                namespace: Some(pod.pod.namespace.clone()),
                name: Some(pod.pod.name.clone()),
                uid: pod.uid.clone(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .collect();
    let ports = data
        .ports
        .iter()
        .map(|p| EndpointPort {
            name: Some(p.name.clone()),
            port: Some(i32::from(p.port)),
            protocol: Some(p.protocol.as_k8s().to_string()),
            ..Default::default()
        })
        .collect();
    EndpointSlice {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            labels: Some(labels),
            ..Default::default()
        },
        address_type: family.as_k8s().to_string(),
        endpoints,
        ports: Some(ports),
    }
}
