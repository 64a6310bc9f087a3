//! The objects of a file as kube-apiserver v1.30 would store and serve them: its defaulting
//! (k8s.io/kubernetes pkg/apis/core/v1/defaults.go and zz_generated.defaults.go,
//! pkg/apis/discovery/v1/defaults.go) and the fields its Service registry derives
//! (pkg/registry/core/service/storage: `clusterIPs`, `ipFamilies`, `ipFamilyPolicy`).
//!
//! Only valid objects come here: what the API server would refuse is reported where each
//! field is read (`services`, `endpoints`, `pods`), and what it would allocate (cluster IPs,
//! node ports, health-check node ports) a file must give, so nothing here needs the cluster.
//! Nothing is added that the API server would not add.

use k8s_openapi::api::core::v1::{
    ClientIPConfig, Container, LoadBalancerStatus, Pod, Service, ServiceSpec, ServiceStatus,
    SessionAffinityConfig,
};
use k8s_openapi::api::discovery::v1::{EndpointConditions, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::model::IpFamily;

use super::affinity::DEFAULT_TIMEOUT_SECONDS;
use super::net::parse_ip;

const TCP: &str = "TCP";
const CLUSTER: &str = "Cluster";

/// A Service as stored: defaulted, then its linked cluster-IP fields filled by the registry.
pub(crate) fn service(mut service: Service) -> Service {
    namespace(&mut service.metadata);
    let spec = service.spec.get_or_insert_with(ServiceSpec::default);
    spec_defaults(spec);
    cluster_ips(spec);
    ip_families(spec);
    let load_balancer = spec.type_.as_deref() == Some("LoadBalancer");
    status(service.status.get_or_insert_with(ServiceStatus::default), load_balancer);
    service
}

/// An EndpointSlice as stored.
pub(crate) fn endpoint_slice(mut slice: EndpointSlice) -> EndpointSlice {
    namespace(&mut slice.metadata);
    // pkg/apis/discovery/v1/defaults.go SetDefaults_EndpointPort.
    for port in slice.ports.iter_mut().flatten() {
        port.name.get_or_insert_with(String::new);
        port.protocol.get_or_insert_with(|| TCP.to_string());
    }
    // `conditions` is a struct, not a pointer, in the Go type: it is always there, if empty.
    for endpoint in &mut slice.endpoints {
        endpoint.conditions.get_or_insert_with(EndpointConditions::default);
    }
    slice
}

/// A Pod as stored, in the fields a proxy or the harness reads (its container ports).
pub(crate) fn pod(mut pod: Pod) -> Pod {
    namespace(&mut pod.metadata);
    // zz_generated.defaults.go SetObjectDefaults_Pod: every container's ports[].protocol.
    if let Some(spec) = pod.spec.as_mut() {
        let containers = spec.containers.iter_mut().chain(spec.init_containers.iter_mut().flatten());
        containers.for_each(container_ports);
    }
    pod
}

fn container_ports(container: &mut Container) {
    for port in container.ports.iter_mut().flatten() {
        port.protocol.get_or_insert_with(|| TCP.to_string());
    }
}

/// The request's namespace, `default` for a file's objects (as kubectl sends them), when the
/// object names none: k8s.io/apiserver pkg/registry/rest/meta.go
/// EnsureObjectNamespaceMatchesRequestNamespace, from rest.BeforeCreate.
fn namespace(metadata: &mut ObjectMeta) {
    if metadata.namespace.as_deref().is_none_or(str::is_empty) {
        metadata.namespace = Some("default".to_string());
    }
}

/// pkg/apis/core/v1/defaults.go SetDefaults_Service (ports[].protocol again in
/// zz_generated.defaults.go SetObjectDefaults_Service).
fn spec_defaults(spec: &mut ServiceSpec) {
    let affinity = spec.session_affinity.get_or_insert_with(|| "None".to_string());
    match affinity.as_str() {
        "None" => spec.session_affinity_config = None,
        "ClientIP" => {
            let timeout = spec
                .session_affinity_config
                .as_ref()
                .and_then(|c| c.client_ip.as_ref())
                .and_then(|c| c.timeout_seconds);
            if timeout.is_none() {
                spec.session_affinity_config = Some(SessionAffinityConfig {
                    client_ip: Some(ClientIPConfig { timeout_seconds: Some(DEFAULT_TIMEOUT_SECONDS as i32) }),
                });
            }
        }
        _ => {}
    }
    let service_type = spec.type_.get_or_insert_with(|| "ClusterIP".to_string()).clone();
    for port in spec.ports.iter_mut().flatten() {
        port.protocol.get_or_insert_with(|| TCP.to_string());
        let unset = match &port.target_port {
            None | Some(IntOrString::Int(0)) => true,
            Some(IntOrString::String(name)) => name.is_empty(),
            Some(IntOrString::Int(_)) => false,
        };
        if unset {
            port.target_port = Some(IntOrString::Int(port.port));
        }
    }
    // pkg/api/v1/service/util.go ExternallyAccessible.
    let externally_accessible = matches!(service_type.as_str(), "NodePort" | "LoadBalancer")
        || (service_type == "ClusterIP" && spec.external_ips.as_ref().is_some_and(|ips| !ips.is_empty()));
    if externally_accessible {
        spec.external_traffic_policy.get_or_insert_with(|| CLUSTER.to_string());
    }
    if matches!(service_type.as_str(), "ClusterIP" | "NodePort" | "LoadBalancer") {
        spec.internal_traffic_policy.get_or_insert_with(|| CLUSTER.to_string());
    }
    if service_type == "LoadBalancer" {
        spec.allocate_load_balancer_node_ports.get_or_insert(true);
    }
}

/// `clusterIPs` from `clusterIP` on create: pkg/registry/core/service/storage/storage.go
/// normalizeClusterIPs. (The reverse is not done: a client that writes `clusterIPs` must
/// write `clusterIP`, which the reader requires.)
fn cluster_ips(spec: &mut ServiceSpec) {
    let given = spec.cluster_ips.as_ref().is_some_and(|ips| !ips.is_empty());
    if let Some(ip) = spec.cluster_ip.as_ref().filter(|ip| !ip.is_empty())
        && !given
    {
        spec.cluster_ips = Some(vec![ip.clone()]);
    }
}

/// `ipFamilyPolicy` and `ipFamilies`: pkg/registry/core/service/storage/alloc.go
/// initIPFamilyFields on create. The policy defaults to SingleStack (headless Services, which
/// default otherwise, are refused by the reader); each cluster IP without a listed family
/// adds its own. A dual-stack policy in a dual-stack cluster also adds the other family, whose
/// cluster IP the API server would then allocate: the reader requires that IP to be given
/// (`services::check_family_policy`), so it is in `clusterIPs` and its family added here.
fn ip_families(spec: &mut ServiceSpec) {
    if spec.type_.as_deref() == Some("ExternalName") {
        return;
    }
    spec.ip_family_policy.get_or_insert_with(|| "SingleStack".to_string());
    let ips = spec.cluster_ips.clone().unwrap_or_default();
    let families = spec.ip_families.get_or_insert_with(Vec::new);
    // Served objects are held by the hundred thousand: no room beyond the families added.
    families.reserve_exact(ips.len().saturating_sub(families.len()));
    for ip in ips.iter().skip(families.len()) {
        let Ok(ip) = parse_ip(ip) else { break };
        families.push(IpFamily::of(ip).as_k8s().to_string());
    }
}

/// `status.loadBalancer` is a struct in the Go type, so always served (`loadBalancer: {}`);
/// a load-balancer ingress IP without `ipMode` gets VIP (SetDefaults_Service, feature gate
/// LoadBalancerIPMode, beta and on in v1.30). The file's status stands for what the cloud
/// controller would write after create (which itself clears status: strategy.go PrepareForCreate).
fn status(status: &mut ServiceStatus, load_balancer: bool) {
    let lb = status.load_balancer.get_or_insert_with(LoadBalancerStatus::default);
    if load_balancer {
        for ingress in lb.ingress.iter_mut().flatten() {
            if ingress.ip.as_deref().is_some_and(|ip| !ip.is_empty()) {
                ingress.ip_mode.get_or_insert_with(|| "VIP".to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde::Serialize;
    use serde::de::DeserializeOwned;
    use serde_json::{Value, json};

    use super::*;

    fn through<T: DeserializeOwned + Serialize>(input: Value, default: fn(T) -> T) -> Value {
        let object: T = serde_json::from_value(input).unwrap();
        serde_json::to_value(default(object)).unwrap()
    }

    fn svc(spec: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}, "spec": spec})
    }

    /// The stored form of `svc`'s Service, with this `spec` and `status`.
    fn stored(spec: Value, status: Value) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": spec,
            "status": status,
        })
    }

    #[test]
    fn services_are_defaulted_as_kube_apiserver_stores_them() {
        let lb_status = json!({"loadBalancer": {}});
        let table = [
            (
                "a bare ClusterIP Service",
                svc(
                    json!({"clusterIP": "10.96.0.10", "ports": [{"port": 53, "protocol": "UDP"}, {"port": 80}]}),
                ),
                stored(
                    json!({
                        "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                        "internalTrafficPolicy": "Cluster",
                        "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
                        "ports": [
                            {"port": 53, "protocol": "UDP", "targetPort": 53},
                            {"port": 80, "protocol": "TCP", "targetPort": 80},
                        ],
                        "sessionAffinity": "None", "type": "ClusterIP",
                    }),
                    lb_status.clone(),
                ),
            ),
            (
                "IPv6 families without clusterIPs; targetPort 0 and \"\" are unset",
                svc(json!({
                    "type": "NodePort", "clusterIP": "fd00:10:96::20", "ipFamilies": ["IPv6"],
                    "ports": [
                        {"name": "a", "port": 80, "targetPort": 0, "nodePort": 30080},
                        {"name": "b", "port": 81, "targetPort": "", "nodePort": 30081},
                    ],
                })),
                stored(
                    json!({
                        "type": "NodePort", "clusterIP": "fd00:10:96::20", "clusterIPs": ["fd00:10:96::20"],
                        "externalTrafficPolicy": "Cluster", "internalTrafficPolicy": "Cluster",
                        "ipFamilies": ["IPv6"], "ipFamilyPolicy": "SingleStack",
                        "ports": [
                            {"name": "a", "port": 80, "protocol": "TCP", "targetPort": 80, "nodePort": 30080},
                            {"name": "b", "port": 81, "protocol": "TCP", "targetPort": 81, "nodePort": 30081},
                        ],
                        "sessionAffinity": "None",
                    }),
                    lb_status.clone(),
                ),
            ),
            (
                "a dual-stack LoadBalancer with ClientIP affinity and an ingress IP",
                json!({
                    "apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": "web", "namespace": "shop"},
                    "spec": {
                        "type": "LoadBalancer", "clusterIP": "10.96.0.80",
                        "clusterIPs": ["10.96.0.80", "fd00:10:96::80"], "ipFamilyPolicy": "PreferDualStack",
                        "sessionAffinity": "ClientIP", "externalTrafficPolicy": "Local",
                        "healthCheckNodePort": 32000,
                        "ports": [{"port": 80, "targetPort": "http", "nodePort": 30080}],
                    },
                    "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}},
                }),
                json!({
                    "apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": "web", "namespace": "shop"},
                    "spec": {
                        "type": "LoadBalancer", "clusterIP": "10.96.0.80",
                        "clusterIPs": ["10.96.0.80", "fd00:10:96::80"],
                        "ipFamilies": ["IPv4", "IPv6"], "ipFamilyPolicy": "PreferDualStack",
                        "allocateLoadBalancerNodePorts": true,
                        "sessionAffinity": "ClientIP",
                        "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 10800}},
                        "externalTrafficPolicy": "Local", "internalTrafficPolicy": "Cluster",
                        "healthCheckNodePort": 32000,
                        "ports": [{"port": 80, "protocol": "TCP", "targetPort": "http", "nodePort": 30080}],
                    },
                    "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7", "ipMode": "VIP"}]}},
                }),
            ),
            (
                "a ClusterIP Service with an external IP is externally accessible",
                svc(json!({
                    "clusterIP": "10.96.0.10", "externalIPs": ["203.0.113.10"],
                    "internalTrafficPolicy": "Local", "ipFamilies": ["IPv4"],
                    "sessionAffinity": "ClientIP",
                    "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}},
                    "ports": [{"port": 80, "targetPort": 8080}],
                })),
                stored(
                    json!({
                        "type": "ClusterIP", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                        "externalIPs": ["203.0.113.10"],
                        "externalTrafficPolicy": "Cluster", "internalTrafficPolicy": "Local",
                        "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
                        "sessionAffinity": "ClientIP",
                        "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}},
                        "ports": [{"port": 80, "protocol": "TCP", "targetPort": 8080}],
                    }),
                    lb_status,
                ),
            ),
        ];
        for (name, input, want) in table {
            assert_eq!(through(input, service), want, "{name}");
        }
    }

    #[test]
    fn endpoint_slice_ports_and_conditions_are_defaulted() {
        let input = json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "web-1", "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.244.1.10"]}, {"addresses": ["10.244.1.11"], "conditions": {"ready": false}}],
            "ports": [{"port": 8080}, {"name": "dns", "port": 53, "protocol": "UDP"}],
        });
        let want = json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "web-1", "namespace": "default", "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": ["10.244.1.10"], "conditions": {}},
                {"addresses": ["10.244.1.11"], "conditions": {"ready": false}},
            ],
            "ports": [{"name": "", "port": 8080, "protocol": "TCP"}, {"name": "dns", "port": 53, "protocol": "UDP"}],
        });
        assert_eq!(through(input, endpoint_slice), want);
    }

    #[test]
    fn pod_container_ports_default_to_tcp() {
        let input = json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"containers": [{"name": "web", "ports": [{"containerPort": 80}, {"containerPort": 53, "protocol": "UDP"}]}]},
        });
        let out = through(input, pod);
        assert_eq!(out["metadata"]["namespace"], "shop");
        assert_eq!(out["spec"]["containers"][0]["ports"][0]["protocol"], "TCP");
        assert_eq!(out["spec"]["containers"][0]["ports"][1]["protocol"], "UDP");
    }

    /// Objects as `kubectl get -o yaml` prints them were stored already: defaulting them again
    /// changes nothing. (Objects without a namespace were never stored: `kubectl run
    /// --dry-run=client` output.)
    #[test]
    fn kubectl_output_is_already_defaulted() {
        let docs = crate::scenario::yaml::parse(include_str!("tests/kubectl.yaml")).unwrap();
        let mut kinds = Vec::new();
        for doc in docs.iter().filter(|d| d.value.pointer("/metadata/namespace").is_some()) {
            let kind = doc.value["kind"].as_str().unwrap_or_default().to_string();
            let out = match kind.as_str() {
                "Service" => through(doc.value.clone(), service),
                "EndpointSlice" => through(doc.value.clone(), endpoint_slice),
                "Pod" => through(doc.value.clone(), pod),
                _ => continue,
            };
            let round_trip = match kind.as_str() {
                "Service" => through(doc.value.clone(), |s: Service| s),
                "EndpointSlice" => through(doc.value.clone(), |s: EndpointSlice| s),
                _ => through(doc.value.clone(), |p: Pod| p),
            };
            assert_eq!(out, round_trip, "{kind}");
            kinds.push(kind);
        }
        assert_eq!(kinds, ["Service", "Pod", "EndpointSlice"]);
    }
}
