//! The scale scenario of `bench --scale`: two nodes, a pod on each serving TCP 8080 (`web-a`,
//! `web-b`), a client pod beside `web-a`, and N generated ClusterIP Services backed by both
//! (`spec.generate`, so 2 endpoints each on 2 nodes). Four written Services are the subjects
//! of the four timed API changes, one step each, at addresses no generated Service takes.
//! The probes are the reader's (a step needs one); `bench` sends its own.

use std::net::{IpAddr, Ipv4Addr};

use serde::{Deserialize, Serialize};

pub const CLIENT: &str = "client";
pub const WEB_KEPT: &str = "web-a";
pub const WEB_REMOVED: &str = "web-b";
/// Every Service's port.
pub const PORT: u16 = 80;

/// The API changes whose network programming latency is measured, in the order of the steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Change {
    /// Service `added` (selecting both pods) is created.
    AddService,
    /// `web-b` leaves the EndpointSlice of Service `shrinking`.
    RemoveEndpoint,
    /// Service `scaling`'s EndpointSlice goes from no endpoint to `web-b`.
    ScaleUp,
    /// Service `deleted` is deleted.
    DeleteService,
}

impl Change {
    pub const ALL: [Change; 4] =
        [Change::AddService, Change::RemoveEndpoint, Change::ScaleUp, Change::DeleteService];

    /// The cluster IP of the Service it changes (written in [`TEXT`]).
    pub fn address(self) -> IpAddr {
        let last = match self {
            Change::AddService => 1,
            Change::RemoveEndpoint => 2,
            Change::ScaleUp => 3,
            Change::DeleteService => 4,
        };
        IpAddr::V4(Ipv4Addr::new(10, 110, 0, last))
    }

    pub fn title(self) -> &'static str {
        match self {
            Change::AddService => "add a Service",
            Change::RemoveEndpoint => "remove an endpoint",
            Change::ScaleUp => "scale a Service 0 → 1",
            Change::DeleteService => "delete a Service",
        }
    }
}

/// The name of generated Service `i` of `services` (as `spec.generate` names them).
pub fn generated(services: usize, i: usize) -> String {
    let width = services.saturating_sub(1).to_string().len();
    format!("gen-{i:0width$}")
}

/// The scenario file with `services` generated Services (at least one).
pub fn text(services: usize) -> String {
    TEXT.replace("SERVICES", &services.to_string()).replace("FIRST", &generated(services, 0))
}

const TEXT: &str = r#"apiVersion: packetproof.dev/v1alpha1
kind: Scenario
metadata: {name: scale-SERVICES}
spec:
  cluster: {podCIDR: 10.244.0.0/16, serviceCIDR: 10.96.0.0/12, nodeNetwork: 192.168.50.0/24}
  nodes:
    - {name: node-a, ip: 192.168.50.11, podCIDR: 10.244.1.0/24}
    - {name: node-b, ip: 192.168.50.12, podCIDR: 10.244.2.0/24}
  generate:
    - {services: SERVICES, name: gen, selector: {app: web}, ports: [{name: http, port: 80, targetPort: 8080}]}
  probes:
    - {name: first, from: {pod: client}, to: {service: FIRST, port: http}, expect: {verdict: answered, backends: [web-a, web-b]}}
---
apiVersion: v1
kind: Pod
metadata: {name: web-a, namespace: default, labels: {app: web}}
spec:
  nodeName: node-a
  containers: [{name: web, image: nginx, ports: [{containerPort: 8080}]}]
status: {podIP: 10.244.1.10}
---
apiVersion: v1
kind: Pod
metadata: {name: web-b, namespace: default, labels: {app: web}}
spec:
  nodeName: node-b
  containers: [{name: web, image: nginx, ports: [{containerPort: 8080}]}]
status: {podIP: 10.244.2.10}
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: default}
spec:
  nodeName: node-a
  containers: [{name: client, image: busybox}]
status: {podIP: 10.244.1.20}
---
apiVersion: v1
kind: Service
metadata: {name: shrinking, namespace: default}
spec:
  clusterIP: 10.110.0.2
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: shrinking-x, namespace: default, labels: {kubernetes.io/service-name: shrinking}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
  - {addresses: [10.244.1.10], conditions: {ready: true}, nodeName: node-a, targetRef: {kind: Pod, name: web-a, namespace: default}}
  - {addresses: [10.244.2.10], conditions: {ready: true}, nodeName: node-b, targetRef: {kind: Pod, name: web-b, namespace: default}}
---
apiVersion: v1
kind: Service
metadata: {name: scaling, namespace: default}
spec:
  clusterIP: 10.110.0.3
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: scaling-x, namespace: default, labels: {kubernetes.io/service-name: scaling}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints: []
---
apiVersion: v1
kind: Service
metadata: {name: deleted, namespace: default}
spec:
  clusterIP: 10.110.0.4
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: packetproof.dev/v1alpha1
kind: Step
metadata: {name: add-a-service}
spec:
  probes:
    - {name: added, from: {pod: client}, to: {service: added, port: http}, expect: {verdict: answered, backends: [web-a, web-b]}}
---
apiVersion: v1
kind: Service
metadata: {name: added, namespace: default}
spec:
  clusterIP: 10.110.0.1
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: packetproof.dev/v1alpha1
kind: Step
metadata: {name: remove-an-endpoint}
spec:
  probes:
    - {name: kept, from: {pod: client}, to: {service: shrinking, port: http}, expect: {verdict: answered, backends: [web-a]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: shrinking-x, namespace: default, labels: {kubernetes.io/service-name: shrinking}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
  - {addresses: [10.244.1.10], conditions: {ready: true}, nodeName: node-a, targetRef: {kind: Pod, name: web-a, namespace: default}}
---
apiVersion: packetproof.dev/v1alpha1
kind: Step
metadata: {name: scale-0-to-1}
spec:
  probes:
    - {name: scaled, from: {pod: client}, to: {service: scaling, port: http}, expect: {verdict: answered, backends: [web-b]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: scaling-x, namespace: default, labels: {kubernetes.io/service-name: scaling}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
  - {addresses: [10.244.2.10], conditions: {ready: true}, nodeName: node-b, targetRef: {kind: Pod, name: web-b, namespace: default}}
---
apiVersion: packetproof.dev/v1alpha1
kind: Step
metadata: {name: delete-a-service}
spec:
  delete: [{kind: Service, name: deleted}]
  probes:
    - {name: others-kept, from: {pod: client}, to: {service: added, port: http}, expect: {verdict: answered, backends: [web-a, web-b]}}
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scenario_reads_with_one_step_per_change() {
        let dir = std::env::temp_dir().join(format!("packetproof-scale-text-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("scale.yaml");
        std::fs::write(&file, text(12)).unwrap();
        let loaded = crate::commands::load_all(&[file]).unwrap().expect("valid");
        std::fs::remove_dir_all(&dir).unwrap();
        let s = &loaded[0];
        assert_eq!(s.phases().len(), 1 + Change::ALL.len());
        assert!(
            s.cluster.service(&generated(12, 0)).is_some() && s.cluster.service(&generated(12, 11)).is_some()
        );
        for change in Change::ALL {
            let at_start = s.cluster.services.iter().any(|svc| svc.cluster_ip() == change.address());
            assert_eq!(at_start, change != Change::AddService, "{change:?}");
        }
        assert_eq!(generated(10_000, 9_999), "gen-9999");
        assert_eq!(generated(1, 0), "gen-0");
    }
}
