//! Example scenario files the reader's tests edit, and the tests of the crates above reuse
//! (the feature `test-support`).

/// A frozen copy of it (one probe), which the error tests edit.
pub const KUBE_DNS: &str = include_str!("tests/dns.yaml");
pub const FILE: &str = "scenarios/test.yaml";
/// A LoadBalancer Service with every external frontend (external IP, ingress IP, source
/// ranges, health-check node port), session affinity, a node with a secondary IP, proxy
/// flags, and a probe of every new target form.
pub const EXPOSED: &str = include_str!("tests/exposed.yaml");

/// A NodePort Service with a named targetPort that resolves to different ports in its two
/// pods, an external host and the three kinds of target.
pub const WEB: &str = r#"apiVersion: packetproof.dev/v1alpha1
kind: Scenario
metadata:
  name: web
spec:
  cluster:
    podCIDR: 10.244.0.0/16
    serviceCIDR: 10.96.0.0/12
    nodeNetwork: 192.168.50.0/24
  nodes:
    - {name: node-a, ip: 192.168.50.11, podCIDR: 10.244.1.0/24}
    - {name: node-b, ip: 192.168.50.12, podCIDR: 10.244.2.0/24}
  externalHosts:
    - {name: outside, ip: 192.168.50.100}
  probes:
    - name: pod-to-web
      from: {pod: client}
      to: {service: web, port: http}
      expect: {verdict: answered, source: client}
    - name: outside-to-nodeport
      from: {external: outside}
      to: {service: web, port: http, nodePort: node-b}
    - from: {node: node-a}
      to: {address: 10.96.0.99, port: 80}
      expect: {verdict: forwarded, profile: kube-proxy-iptables}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  type: NodePort
  clusterIP: 10.96.0.20
  selector: {app: web}
  ports:
    - {name: http, port: 80, targetPort: http, nodePort: 30080}
---
apiVersion: v1
kind: Pod
metadata: {name: web-a, labels: {app: web}}
spec:
  nodeName: node-a
  containers:
    - name: web
      ports: [{name: http, containerPort: 8080}]
status: {podIP: 10.244.1.10}
---
apiVersion: v1
kind: Pod
metadata: {name: web-b, labels: {app: web}}
spec:
  nodeName: node-b
  containers:
    - name: web
      ports: [{name: http, containerPort: 9090}]
status: {podIP: 10.244.2.10}
---
apiVersion: v1
kind: Pod
metadata: {name: client}
spec:
  nodeName: node-a
  containers: [{name: client}]
status: {podIP: 10.244.1.20}
"#;
/// What kubectl prints for a Service, its EndpointSlice and its pods (`kubectl get -o yaml`).
pub const KUBECTL: &str = include_str!("tests/kubectl.yaml");
