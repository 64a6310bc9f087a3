//! Kubernetes objects: pasted `kubectl` output, unknown fields, and Service rules.

use super::*;

const KUBECTL: &str = include_str!("kubectl.yaml");

#[test]
fn pasted_kubectl_output_is_accepted() {
    let s = load(KUBECTL);
    let (_, http) = s.cluster.service_port("web", "http").unwrap();
    let endpoints: Vec<(String, &str)> =
        http.endpoints.iter().map(|e| (e.address().to_string(), e.pod.as_str())).collect();
    assert_eq!(endpoints, [("10.244.1.10:80".to_string(), "web-7d4b9c8f6d-abcde")]);
    // The given slice is used as is; nothing is derived.
    assert_eq!(s.objects.endpoint_slices.len(), 1);
    assert_eq!(s.objects.endpoint_slices[0].metadata.name.as_deref(), Some("web-x9k2q"));
    assert_eq!(s.cluster.pods[1].labels["run"], "client");
}

#[test]
fn unknown_fields_in_kubernetes_objects_are_errors() {
    let text = edit(
        KUBECTL,
        "  sessionAffinity: None\n",
        "  sessionAffinity: None\n  externalTrafficPolicyy: Local\n",
    );
    assert_only(
        &errors(&text),
        at(&text, "externalTrafficPolicyy"),
        "Service default/web: spec.externalTrafficPolicyy",
        "unknown field `externalTrafficPolicyy`: not in the Kubernetes 1.33 API packetproof reads \
         (check the spelling; remove it if it comes from a newer cluster)",
    );
    // Deep inside a list, too.
    let text = edit(KUBECTL, "    - containerPort: 80\n", "    - containerPort: 80\n      hostPrt: 8080\n");
    let errs = errors(&text);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].field, "Pod default/web-7d4b9c8f6d-abcde: spec.containers[0].ports[0].hostPrt");
    assert_eq!((errs[0].line, errs[0].column), at(&text, "hostPrt"));
}

#[test]
fn wrong_types_in_kubernetes_objects() {
    let text =
        edit(KUBE_DNS, "      port: 53\n      protocol: UDP", "      port: \"53\"\n      protocol: UDP");
    assert_only(
        &errors(&text),
        at(&text, "\"53\""),
        "Service kube-system/kube-dns: spec.ports[0].port",
        "invalid type: string \"53\", expected i32",
    );
}

#[test]
fn object_names_are_required() {
    let text = edit(
        KUBE_DNS,
        "metadata:\n  name: client\n  namespace: default\n",
        "metadata:\n  namespace: default\n",
    );
    let errs = errors(&text);
    assert_has(
        &errs,
        at(&text, "namespace: default"),
        "Pod <no name>: metadata.name",
        "required field `name` is missing",
    );
    assert_eq!(errs.len(), 1, "the probe from `client` is not reported too: {errs:?}");
}

#[test]
fn cluster_ip_missing_headless_or_outside_the_service_cidr() {
    let text = edit(KUBE_DNS, "  clusterIP: 10.96.0.10\n", "");
    let pos = at(&text, "selector:\n    k8s-app");
    assert_only(
        &errors(&text),
        (pos.0, pos.1),
        "Service kube-system/kube-dns: spec.clusterIP",
        "required field `clusterIP` is missing: the harness does not allocate cluster IPs; give one inside serviceCIDR 10.96.0.0/12",
    );
    let text = edit(KUBE_DNS, "clusterIP: 10.96.0.10", "clusterIP: None");
    assert_only(
        &errors(&text),
        at(&text, "None"),
        "Service kube-system/kube-dns: spec.clusterIP",
        "headless Services (clusterIP: None) are not supported: there is no cluster IP to proxy",
    );
    let text = edit(KUBE_DNS, "clusterIP: 10.96.0.10", "clusterIP: 10.112.0.10");
    assert_only(
        &errors(&text),
        at(&text, "10.112.0.10"),
        "Service kube-system/kube-dns: spec.clusterIP",
        "10.112.0.10 is not inside serviceCIDR 10.96.0.0/12",
    );
    let text = edit(KUBE_DNS, "clusterIP: 10.96.0.10", "clusterIP: fd00::10");
    assert_only(
        &errors(&text),
        at(&text, "fd00::10"),
        "Service kube-system/kube-dns: spec.clusterIP",
        &mixed(&text, "fd00::10 is"),
    );
}

#[test]
fn node_port_services_need_explicit_node_ports() {
    let text = edit(
        WEB,
        "- {name: http, port: 80, targetPort: http, nodePort: 30080}",
        "- {name: http, port: 80, targetPort: http}",
    );
    let errs = errors(&text);
    assert_only(
        &errs,
        at(&text, "{name: http, port: 80"),
        "Service default/web: spec.ports[0].nodePort",
        "required for type NodePort: the harness does not allocate node ports",
    );
    let text = edit(WEB, "  type: NodePort\n", "  type: LoadBalancer\n");
    assert_eq!(load(&text).cluster.services[0].service_type, crate::model::ServiceType::LoadBalancer);
    // kube-proxy skips an ExternalName Service: a probe naming one is told so.
    let text = edit(WEB, "  type: NodePort\n", "  type: ExternalName\n");
    let errs = errors(&text);
    assert!(
        errs.iter()
            .any(|e| e.message.contains("is an ExternalName Service, which kube-proxy does not proxy")),
        "{errs:?}"
    );
}

/// A pasted cluster's ExternalName Service is skipped, as kube-proxy skips it, not refused.
#[test]
fn an_external_name_service_is_skipped() {
    let text = format!(
        "{WEB}---\napiVersion: v1\nkind: Service\nmetadata: {{name: db}}\nspec: {{type: ExternalName, externalName: db.example.com}}\n"
    );
    let s = load(&text);
    assert!(s.cluster.services.iter().all(|svc| svc.name != "db"));
    assert!(s.objects.services.iter().any(|svc| svc.metadata.name.as_deref() == Some("db")), "still served");
}

/// Node ports lie in kube-apiserver's range: 30000-32767 by default, or the cluster's own.
#[test]
fn node_ports_lie_in_the_clusters_range() {
    let text = edit(WEB, "nodePort: 30080}", "nodePort: 80}");
    let errs = errors(&text);
    assert!(
        errs.iter().any(|e| e.message.contains("80: provided port is not in the valid range")),
        "{errs:?}"
    );
    let text = edit(
        &text,
        "    podCIDR: 10.244.0.0/16\n",
        "    podCIDR: 10.244.0.0/16\n    serviceNodePortRange: 80-32767\n",
    );
    assert!(load(&text).cluster.services[0].ports[0].node_port == Some(80));
    let text = edit(
        WEB,
        "    podCIDR: 10.244.0.0/16\n",
        "    podCIDR: 10.244.0.0/16\n    serviceNodePortRange: 9-1\n",
    );
    let errs = errors(&text);
    assert!(errs.iter().any(|e| e.message.contains("is not a port range")), "{errs:?}");
}

#[test]
fn service_port_rules() {
    let text = edit(KUBE_DNS, "    - name: dns-tcp\n", "    - name: \"\"\n");
    assert_has(
        &errors(&text),
        at(&text, "\"\"\n"),
        "Service kube-system/kube-dns: spec.ports[1].name",
        "a Service with several ports must name each of them",
    );
    let text = edit(
        KUBE_DNS,
        "      protocol: TCP\n      targetPort: 53",
        "      protocol: tcp\n      targetPort: 53",
    );
    assert_only(
        &errors(&text),
        at_in(&text, "protocol: tcp", "tcp"),
        "Service kube-system/kube-dns: spec.ports[1].protocol",
        "unknown protocol \"tcp\" (expected TCP, UDP or SCTP)",
    );
    let text = edit(
        KUBE_DNS,
        "      protocol: TCP\n      targetPort: 53",
        "      protocol: TCP\n      targetPort: \"53\"",
    );
    assert_only(
        &errors(&text),
        at(&text, "\"53\""),
        "Service kube-system/kube-dns: spec.ports[1].targetPort",
        "targetPort \"53\" is a string; write 53 without quotes for a port number",
    );
}

#[test]
fn behaviour_the_model_cannot_express_is_rejected() {
    let text = edit(
        KUBE_DNS,
        "  clusterIP: 10.96.0.10\n",
        "  clusterIP: 10.96.0.10\n  ipFamilyPolicy: RequireDualStack\n",
    );
    assert_only(
        &errors(&text),
        at(&text, "RequireDualStack"),
        "Service kube-system/kube-dns: spec.ipFamilyPolicy",
        &format!("{} (RequireDualStack asks for two)", crate::scenario::families::DUAL_STACK),
    );
    let text =
        edit(KUBE_DNS, "  clusterIP: 10.96.0.10\n", "  clusterIP: 10.96.0.10\n  ipFamilies: [IPv4, IPv6]\n");
    assert_only(
        &errors(&text),
        at(&text, "IPv6"),
        "Service kube-system/kube-dns: spec.ipFamilies[1]",
        &mixed(&text, "this is"),
    );
}

#[test]
fn pods_declare_each_port_once() {
    let text = edit(
        KUBECTL,
        "    - containerPort: 80\n      name: http\n      protocol: TCP\n",
        "    - containerPort: 80\n      name: http\n      protocol: TCP\n    - containerPort: 80\n      name: http2\n",
    );
    assert_only(
        &errors(&text),
        at(&text, "80\n      name: http2"),
        "Pod default/web-7d4b9c8f6d-abcde: spec.containers[0].ports[1].containerPort",
        "80/TCP is already declared at spec.containers[0].ports[0]",
    );
}
