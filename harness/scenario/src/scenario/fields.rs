//! Which fields of a Service, an EndpointSlice, a Pod and a Node change what a service proxy does, and
//! the refusal of those the model does not hold: a proxy that honours such a field would be
//! failed, and one that ignores it would pass, so `check` says "not modelled" instead.
//!
//! The authority is kube-proxy v1.30's source (`pkg/proxy/`: `serviceport.go`
//! newBaseServiceInfo, `servicechangetracker.go`, `endpointslicecache.go`, `topology.go`,
//! `util/utils.go`, the iptables and nftables proxiers, and `cmd/kube-proxy/app/server.go`'s
//! informer label selector), plus the EndpointSlice controller for the fields from which the
//! harness derives slices (kube-proxy reads no Pod). Fields not listed (metadata such as
//! `uid`, `resourceVersion`, `creationTimestamp`, `managedFields`, `ownerReferences`,
//! `generation`, annotations other than those below; Pod status other than its IPs,
//! conditions and phase; container images, commands, probes, resources) change nothing a
//! proxy does and are accepted.
//!
//! ## Service
//! | field | outcome | read by |
//! |---|---|---|
//! | `metadata.name`, `metadata.namespace` | modelled | servicechangetracker serviceToServiceMap |
//! | `metadata.labels["service.kubernetes.io/service-proxy-name"]` | **refused** | server.go: the informer skips the Service |
//! | `metadata.labels["service.kubernetes.io/headless"]` | **refused** | server.go: the informer skips the Service |
//! | `metadata.annotations["service.kubernetes.io/topology-mode"]`, `…/topology-aware-hints` | modelled (`hints.rs`; derived slices of an annotated Service refused) | serviceport.go hintsAnnotation, topology.go canUseTopology |
//! | `spec.type` | modelled (an ExternalName Service is skipped, as kube-proxy skips it) | utils.go ShouldSkipService, ExternallyAccessible |
//! | `spec.clusterIP`, `spec.clusterIPs`, `spec.ipFamilies` | modelled (None refused) | utils.go GetClusterIPByFamily |
//! | `spec.ipFamilyPolicy` | modelled (checked against clusterIPs) | — (the API server's allocation) |
//! | `spec.ports[].name`, `.protocol`, `.port`, `.nodePort` | modelled | serviceport.go |
//! | `spec.ports[].targetPort`, `spec.selector`, `spec.publishNotReadyAddresses` | modelled (derived slices) | EndpointSlice controller |
//! | `spec.ports[].appProtocol` | irrelevant | — |
//! | `spec.externalIPs` | modelled | serviceport.go |
//! | `spec.externalTrafficPolicy`, `spec.internalTrafficPolicy` | modelled | apiservice ExternalPolicyLocal, InternalPolicyLocal |
//! | `spec.healthCheckNodePort` | modelled | serviceport.go (NeedsHealthCheck) |
//! | `spec.sessionAffinity`, `spec.sessionAffinityConfig` | modelled | serviceport.go |
//! | `spec.loadBalancerSourceRanges` | modelled | serviceport.go |
//! | `spec.allocateLoadBalancerNodePorts` | modelled: false lets a LoadBalancer port go without `nodePort` (`services.rs`) | — (the API server's allocation) |
//! | `spec.trafficDistribution` | modelled: `PreferClose` hints derived slices (`hints.rs`); `PreferSameZone`, `PreferSameNode` (v1.33+) **refused** | EndpointSlice controller (trafficdist) |
//! | `spec.loadBalancerClass`, `spec.loadBalancerIP` | irrelevant: they choose the load balancer, whose result is `status` | — |
//! | `spec.externalName` | skipped with its Service | utils.go ShouldSkipService |
//! | `status.loadBalancer.ingress[].ip` | modelled | serviceport.go |
//! | `status.loadBalancer.ingress[].ipMode` | modelled (`external.rs`: Proxy IPs are left to the balancer) | serviceport.go IsVIPMode |
//! | `status.loadBalancer.ingress[].hostname` | refused without `ip` (`external.rs`) | serviceport.go (skips entries without ip) |
//! | `status.loadBalancer.ingress[].ports`, `status.conditions` | irrelevant | — |
//!
//! ## EndpointSlice
//! | field | outcome | read by |
//! |---|---|---|
//! | `metadata.labels["kubernetes.io/service-name"]`, `metadata.namespace` | modelled | endpointslicecache.go ServiceNameForEndpointSlice |
//! | `metadata.labels["service.kubernetes.io/service-proxy-name"]`, `…/headless` | **refused** | server.go: the informer skips the slice |
//! | `addressType` | modelled (FQDN refused) | the EndpointSlice informer, endpointslicecache.go |
//! | `ports[].name`, `.protocol`, `.port` | modelled | endpointslicecache.go |
//! | `ports[].appProtocol` | irrelevant | — |
//! | `endpoints[].addresses` | modelled (one each: a pod's, an external host's or a node's (host network); nobody's refused) | endpointslicecache.go addEndpoints (the first) |
//! | `endpoints[].conditions` | modelled | endpointslicecache.go newEndpointSliceInfo |
//! | `endpoints[].nodeName` | modelled: locality is it alone (absent: local nowhere) | endpointslicecache.go (isLocal) |
//! | `endpoints[].hints.forZones` | modelled (`kubernetes::topology`) | endpointslicecache.go ZoneHints, topology.go |
//! | `endpoints[].hints.forNodes` | **refused** (v1.33+ PreferSameNode; v1.30 reads none) | newer topology.go |
//! | `endpoints[].zone` | irrelevant: copied into the cache, never used (only hints route) | endpointslicecache.go |
//! | `endpoints[].hostname`, `.targetRef`, `.deprecatedTopology` | irrelevant | — |
//!
//! ## Pod (read by the EndpointSlice controller, for derived slices, and by the harness to place servers)
//! | field | outcome | read by |
//! |---|---|---|
//! | `metadata.labels`, `metadata.deletionTimestamp` | modelled | EndpointSlice controller |
//! | `spec.nodeName`, `status.podIP`, `status.podIPs` | modelled; a pod without an address whose phase is Pending, Succeeded or Failed (a cluster dump's unscheduled or finished pod) is not built and serves nothing (`pods.rs` `without_address`) | EndpointSlice controller (ShouldPodBeInEndpoints) |
//! | `spec.containers[].ports` | modelled | FindPort (pkg/api/v1/pod; v1.30 reads no init container) |
//! | `spec.hostNetwork` | modelled: the pod is its node (no pod built; its addresses must be the node's; derived slices over it and probes from it refused) (`host_network.rs`) | — (the endpoint is the node's address) |
//! | `status.conditions[type=Ready]`, `status.phase` | modelled | EndpointSlice controller |
//! | `spec.hostname`, `spec.subdomain` | irrelevant (endpoint hostname) | — |
//!
//! ## Node (read by kube-proxy about its own node, and by the harness to build the nodes: `node_objects.rs`)
//! | field | outcome | read by |
//! |---|---|---|
//! | `metadata.name` | modelled | server.go (`--hostname-override`), endpointslicecache.go (isLocal) |
//! | `status.addresses[type=InternalIP]`, then `[type=ExternalIP]` | modelled: the first of each family is the node IP; further InternalIPs are secondary addresses | server.go getNodeIPs, pkg/util/node GetNodeHostIPs |
//! | `status.addresses[type=ExternalIP]` besides the node IP | irrelevant: a cloud's NAT address, not on the node | — |
//! | `spec.podCIDR`, `spec.podCIDRs` | modelled (the node's pod bridge; `--detect-local-mode=NodeCIDR`) | server_linux.go waitForPodCIDR, node.go NodePodCIDRHandler |
//! | `metadata.labels["topology.kubernetes.io/zone"]` | modelled (`Node::zone`) | topology.go (the proxier's nodeLabels) |
//! | other `metadata.labels` (e.g. `node.kubernetes.io/exclude-from-external-load-balancers`) | irrelevant: v1.30's proxy reads no other label (that one is the cloud service controller's, whose result is the load balancer) | — |
//! | `metadata.deletionTimestamp` | **refused** | healthcheck/proxier_health.go SyncNode (the node turns ineligible: `/healthz` 503) |
//! | `spec.taints[key=ToBeDeletedByClusterAutoscaler]` | **refused** | healthcheck/proxier_health.go SyncNode |
//! | other `spec.taints`, `spec.unschedulable`, `status` other than addresses | irrelevant | — |

use serde_json::Value;

use super::error::{Diagnostics, Site};
use super::kind::Kind;
use super::yaml::FieldPath;

/// kube-proxy watches only objects without this label (another proxy serves them).
const SERVICE_PROXY_NAME: &str = "service.kubernetes.io/service-proxy-name";
/// kube-proxy watches only objects without this label (the controller marks headless ones).
const HEADLESS: &str = "service.kubernetes.io/headless";
/// The cluster autoscaler's taint on a node it is removing (healthcheck/proxier_health.go).
const TO_BE_DELETED_TAINT: &str = "ToBeDeletedByClusterAutoscaler";

/// Reports every field of the object that a proxy acts on and the model does not hold.
pub(crate) fn refuse_unmodelled(kind: Kind, site: &Site<'_>, diag: &mut Diagnostics) {
    let value = &site.doc.value;
    match kind {
        Kind::Service => {
            skip_labels(site, diag);
            // Looked up directly, its path made only to report it: a file's Services are many.
            let distribution = value.get("spec").and_then(|s| s.get("trafficDistribution"));
            let distribution = distribution.and_then(Value::as_str).unwrap_or("");
            if !matches!(distribution, "" | "PreferClose") {
                diag.value(
                    site,
                    &FieldPath::parse("spec.trafficDistribution"),
                    format!(
                        "trafficDistribution {distribution:?} is not modelled: the model follows kube-proxy \
                         v1.30's rules, which know PreferClose only (PreferSameZone and PreferSameNode are v1.33+)"
                    ),
                );
            }
        }
        Kind::EndpointSlice => {
            skip_labels(site, diag);
            let endpoints = value.get("endpoints").and_then(Value::as_array).map_or(0, Vec::len);
            for i in 0..endpoints {
                let hints = FieldPath::parse("endpoints").index(i).key("hints");
                let path = hints.key("forNodes");
                if set(path.lookup(value)) {
                    diag.key(
                        site,
                        &path,
                        "node hints are not modelled: the model follows kube-proxy v1.30's rules, which read \
                         forZones only (forNodes is v1.33+'s PreferSameNode; remove it)",
                    );
                }
            }
        }
        Kind::Node => refuse_node_fields(site, diag),
        Kind::Pod | Kind::Scenario => {}
    }
}

/// What makes kube-proxy's health server call its node ineligible (proxier_health.go SyncNode),
/// so `/healthz` answers 503 and load balancers drain the node.
fn refuse_node_fields(site: &Site<'_>, diag: &mut Diagnostics) {
    let value = &site.doc.value;
    let deletion = FieldPath::parse("metadata.deletionTimestamp");
    if set(deletion.lookup(value)) {
        diag.key(
            site,
            &deletion,
            "a Node being deleted is not modelled: kube-proxy's /healthz then answers 503 so load balancers \
             drain the node (remove deletionTimestamp)",
        );
    }
    let taints = value.pointer("/spec/taints").and_then(Value::as_array).map_or(0, Vec::len);
    for i in 0..taints {
        let key = FieldPath::parse("spec.taints").index(i).key("key");
        if key.lookup(value).and_then(Value::as_str) == Some(TO_BE_DELETED_TAINT) {
            diag.value(
                site,
                &key,
                format!(
                    "the taint {TO_BE_DELETED_TAINT} is not modelled: kube-proxy's /healthz then answers 503 \
                     so load balancers drain the node (remove it)"
                ),
            );
        }
    }
}

/// kube-proxy's informers select objects without either label (cmd/kube-proxy/app/server.go).
fn skip_labels(site: &Site<'_>, diag: &mut Diagnostics) {
    // Looked up directly, paths made only to report: every Service and slice passes here.
    let Some(labels) = site.doc.value.get("metadata").and_then(|m| m.get("labels")) else { return };
    for (label, why) in [
        (SERVICE_PROXY_NAME, "kube-proxy leaves the object to the proxy it names"),
        (HEADLESS, "kube-proxy ignores objects of headless Services"),
    ] {
        if labels.get(label).is_some() {
            let path = FieldPath::parse("metadata.labels").key(label);
            diag.key(site, &path, format!("the label {label} is not modelled: {why} (remove it)"));
        }
    }
}

/// Set to something (an empty list or mapping counts as unset, as Go's `len() == 0`).
fn set(value: Option<&Value>) -> bool {
    match value {
        None | Some(Value::Null) => false,
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
        Some(Value::String(s)) => !s.is_empty(),
        Some(_) => true,
    }
}
