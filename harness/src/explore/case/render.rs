//! A case written as a scenario file: the scenario document, then its Services, EndpointSlices
//! and pods as Kubernetes objects, each step's changes and probes.

use std::fmt::Write;

use super::*;

impl Case {
    /// The case's families as written (the primary first): `false` IPv4, `true` IPv6.
    fn families(&self) -> &'static [bool] {
        net::families(self.family)
    }

    /// The Service families a Service writes, as `(v6, …)` in its order.
    pub(super) fn service_families(&self, s: &ServiceSpec) -> Vec<bool> {
        match (self.family, s.families) {
            (Family::V4, _) => vec![false],
            (Family::V6, _) => vec![true],
            (Family::Dual, ServiceFamilies::Primary) => vec![false],
            (Family::Dual, ServiceFamilies::Second) => vec![true],
            (Family::Dual, ServiceFamilies::Both) => vec![false, true],
        }
    }

    /// The scenario file: a comment saying where it came from, then its documents.
    pub fn render(&self, header: &str) -> String {
        let mut out = String::new();
        for line in header.lines() {
            let _ = writeln!(out, "# {line}");
        }
        self.render_scenario(&mut out);
        for service in &self.services {
            self.render_service(service, &mut out);
        }
        for pod in &self.pods {
            self.render_pod(pod, &mut out);
        }
        for step in &self.steps {
            self.render_step(step, &mut out);
        }
        out
    }

    fn render_scenario(&self, out: &mut String) {
        let fams = self.families();
        let list = |f: &dyn Fn(bool) -> String| -> String {
            if fams.len() == 1 {
                f(fams[0])
            } else {
                format!("[{}]", fams.iter().map(|&v6| f(v6)).collect::<Vec<_>>().join(", "))
            }
        };
        let _ = writeln!(
            out,
            "apiVersion: packetproof.dev/v1alpha1\nkind: Scenario\nmetadata: {{name: {}}}\nspec:",
            q(&self.name)
        );
        let _ = writeln!(
            out,
            "  cluster: {{podCIDR: {}, serviceCIDR: {}, nodeNetwork: {}}}",
            list(&|v6| q(net::pod_cidr(v6))),
            list(&|v6| q(net::service_cidr(v6))),
            list(&|v6| q(net::node_network(v6)))
        );
        self.render_proxy_config(out);
        self.render_nodes(out);
        let streams = self.streams_in(0);
        let expiries = self.live_expiries();
        let added = self.added_probes();
        match &self.probes {
            None => {
                let _ = writeln!(out, "  flows: {{all: true, count: {}}}", self.count);
                if !streams.is_empty() || !expiries.is_empty() || !added.is_empty() {
                    let _ = writeln!(out, "  probes:");
                }
            }
            Some(probes) => {
                let _ = writeln!(out, "  probes:");
                for p in probes {
                    self.render_probe(p, out);
                }
            }
        }
        for (stream, target) in streams {
            render_stream(stream, target, true, out);
        }
        for expiry in expiries {
            render_expiry(expiry, out);
        }
        for probe in &added {
            self.render_probe(probe, out);
        }
    }

    /// Probes `flows: all` leaves out, added to it: those of the second node addresses, and a
    /// martian 127.0.0.1 frame from the external host.
    pub fn added_probes(&self) -> Vec<ProbeText> {
        let mut probes = self.secondary_probes();
        let node = self.nodes.first();
        if let (true, Some(_), Some(node), false) =
            (self.martian, &self.external, node, self.family == Family::V6)
        {
            probes.push(ProbeText {
                name: MARTIAN.into(),
                flow: format!("external outside -> 127.0.0.1:{MARTIAN_PORT} via {}", node.name),
                from: "{external: \"outside\"}".into(),
                to: format!("{{address: \"127.0.0.1\", port: {MARTIAN_PORT}, via: {}}}", q(&node.name)),
                udp: false,
            });
        }
        probes
    }

    /// Probes of the first node's second address: a node port (answered where
    /// `nodePortAddresses` is unset, refused where it lists the primary addresses alone), and
    /// with that setting every health-check node port (refused: the health-check servers
    /// listen where node ports do). From the external host, or else from another node.
    fn secondary_probes(&self) -> Vec<ProbeText> {
        let (Some(node), true) = (self.nodes.first(), self.secondary_ips) else { return Vec::new() };
        let (from, sender) = match (&self.external, self.nodes.get(1)) {
            (Some(_), _) => ("{external: \"outside\"}".to_string(), "external outside".to_string()),
            (None, Some(other)) => (format!("{{node: {}}}", q(&other.name)), format!("node {}", other.name)),
            (None, None) => return Vec::new(),
        };
        let address = net::node_secondary_ip(self.families()[0], node.slot);
        let mut probes = Vec::new();
        // Services of the second address's family: a dual-stack cluster's IPv6-only Service has
        // no node port on an IPv4 address.
        let of_its_family = |s: &&ServiceSpec| self.service_families(s).contains(&self.families()[0]);
        // Not a node port that is also a port of a load balancer whose VIP is this address:
        // the Service IP wins there (found by seed 92).
        let shadowed = |s: &ServiceSpec| {
            let (node_port, udp) = (port_numbers(s.slot, 0).2, s.ports[0].udp);
            self.services.iter().any(|t| {
                t.lb_ips_on_nodes
                    && t.kind == ServiceType::LoadBalancer
                    && t.ports.iter().enumerate().any(|(i, p)| t.port_number(i) == node_port && p.udp == udp)
            })
        };
        let node_ports =
            self.services.iter().filter(of_its_family).find(|s| s.has_node_ports() && !shadowed(s));
        if let Some(s) = node_ports {
            let port = &s.ports[0];
            probes.push(ProbeText {
                name: SECONDARY_NODE_PORT.into(),
                flow: format!(
                    "{sender} -> {}:{} nodePort@{} on its second address",
                    s.name, port.name, node.name
                ),
                from: from.clone(),
                to: format!(
                    "{{service: {}, port: {}, nodePort: {}, address: {}}}",
                    q(&s.name),
                    q(&port.name),
                    q(&node.name),
                    q(&address)
                ),
                udp: port.udp,
            });
        }
        if self.proxy.node_port_addresses {
            let checked = self.services.iter().filter(of_its_family);
            for s in checked.filter(|s| s.kind == ServiceType::LoadBalancer && s.etp_local) {
                probes.push(ProbeText {
                    name: format!("{SECONDARY_HEALTH_CHECK}{}", s.name),
                    flow: format!("{sender} -> {} healthCheck@{} on its second address", s.name, node.name),
                    from: from.clone(),
                    to: format!("{{address: {}, port: {}}}", q(&address), health_check_port(s.slot)),
                    udp: false,
                });
            }
        }
        probes
    }

    /// The expiry probes whose Service, port and (at least two) clients the case still has:
    /// shrinking may have removed them.
    fn live_expiries(&self) -> Vec<&ExpirySpec> {
        let pod = |name: &String| self.pods.iter().any(|p| &p.name == name);
        self.expiries
            .iter()
            .filter(|e| {
                e.clients.len() >= 2
                    && e.clients.iter().all(pod)
                    && self
                        .services
                        .iter()
                        .any(|s| s.name == e.service && s.ports.iter().any(|p| p.name == e.port))
            })
            .collect()
    }

    /// `proxyConfig`: only what differs from kube-proxy's defaults.
    fn render_proxy_config(&self, out: &mut String) {
        let fams = self.families();
        let p = &self.proxy;
        let mut config = Vec::new();
        if p.masquerade_all {
            config.push("masqueradeAll: true".to_string());
        }
        match p.detect_local {
            DetectMode::ClusterCidr => {}
            DetectMode::NodeCidr => config.push("detectLocalMode: NodeCIDR".into()),
            DetectMode::BridgeInterface => {
                config.push("detectLocalMode: BridgeInterface".into());
                config.push(format!("detectLocal: {{bridgeInterface: {}}}", crate::model::POD_BRIDGE));
            }
            DetectMode::InterfaceNamePrefix => {
                config.push("detectLocalMode: InterfaceNamePrefix".into());
                config.push("detectLocal: {interfaceNamePrefix: veth}".into());
            }
        }
        if p.node_port_addresses && self.secondary_ips {
            // The primary addresses alone, so that the second ones are outside the setting.
            let hosts: Vec<String> = fams
                .iter()
                .flat_map(|&v6| {
                    let bits = if v6 { 128 } else { 32 };
                    self.nodes.iter().map(move |n| q(&format!("{}/{bits}", net::node_ip(v6, n.slot))))
                })
                .collect();
            config.push(format!("nodePortAddresses: [{}]", hosts.join(", ")));
        } else if p.node_port_addresses {
            config.push(format!(
                "nodePortAddresses: [{}]",
                fams.iter().map(|&v6| q(net::node_network(v6))).collect::<Vec<_>>().join(", ")
            ));
        }
        if p.localhost_node_ports_off {
            config.push("localhostNodePorts: false".into());
        }
        if p.traffic_distribution_gate {
            config.push("featureGates: {ServiceTrafficDistribution: true}".into());
        }
        if !config.is_empty() {
            let _ = writeln!(out, "  proxyConfig:");
            for line in config {
                let _ = writeln!(out, "    {line}");
            }
        }
    }

    /// `nodes` and the external host, each address in every family of the case.
    fn render_nodes(&self, out: &mut String) {
        let fams = self.families();
        let _ = writeln!(out, "  nodes:");
        for n in &self.nodes {
            let zone = n.zone.as_ref().map(|z| format!(", zone: {}", q(z))).unwrap_or_default();
            let second = if self.secondary_ips {
                format!(", secondaryIPs: [{}]", q(&net::node_secondary_ip(fams[0], n.slot)))
            } else {
                String::new()
            };
            let zone = format!("{second}{zone}");
            if fams.len() == 1 {
                let v6 = fams[0];
                let _ = writeln!(
                    out,
                    "    - {{name: {}, ip: {}, podCIDR: {}{zone}}}",
                    q(&n.name),
                    q(&net::node_ip(v6, n.slot)),
                    q(&net::node_pod_cidr(v6, n.slot))
                );
            } else {
                let ips: Vec<String> = fams.iter().map(|&v6| q(&net::node_ip(v6, n.slot))).collect();
                let cidrs: Vec<String> = fams.iter().map(|&v6| q(&net::node_pod_cidr(v6, n.slot))).collect();
                let _ = writeln!(
                    out,
                    "    - {{name: {}, ips: [{}], podCIDRs: [{}]{zone}}}",
                    q(&n.name),
                    ips.join(", "),
                    cidrs.join(", ")
                );
            }
        }
        if let Some(host) = &self.external {
            let address = if fams.len() == 1 {
                format!("ip: {}", q(&net::external_host(fams[0])))
            } else {
                format!(
                    "ips: [{}]",
                    fams.iter().map(|&v6| q(&net::external_host(v6))).collect::<Vec<_>>().join(", ")
                )
            };
            let routes = match &host.routed_via {
                Some(via) => {
                    let r: Vec<String> = fams
                        .iter()
                        .map(|&v6| format!("{{to: {}, via: {}}}", q(net::service_cidr(v6)), q(via)))
                        .collect();
                    format!(", routes: [{}]", r.join(", "))
                }
                None => String::new(),
            };
            let _ = writeln!(out, "  externalHosts:\n    - {{name: outside, {address}{routes}}}");
        }
    }

    fn render_probe(&self, p: &ProbeText, out: &mut String) {
        let _ = writeln!(out, "    # {}", p.flow);
        let _ = writeln!(out, "    - name: {}", q(&p.name));
        let _ = writeln!(out, "      from: {}", p.from);
        let _ = writeln!(out, "      to: {}", p.to);
        if p.udp {
            let _ = writeln!(out, "      protocol: UDP");
        }
        let _ = writeln!(out, "      count: {}", self.count);
    }

    fn render_service(&self, s: &ServiceSpec, out: &mut String) {
        let fams = self.service_families(s);
        let _ = writeln!(
            out,
            "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: {}\n  namespace: default",
            q(&s.name)
        );
        if s.topology == Topology::Annotation {
            let _ = writeln!(out, "  annotations: {{service.kubernetes.io/topology-mode: Auto}}");
        }
        let _ = writeln!(out, "spec:");
        let kind = match s.kind {
            ServiceType::ClusterIp => "ClusterIP",
            ServiceType::NodePort => "NodePort",
            ServiceType::LoadBalancer => "LoadBalancer",
        };
        let _ = writeln!(out, "  type: {kind}");
        let ips: Vec<String> = fams.iter().map(|&v6| net::cluster_ip(v6, s.slot)).collect();
        let _ = writeln!(out, "  clusterIP: {}", q(&ips[0]));
        let _ = writeln!(out, "  clusterIPs: [{}]", ips.iter().map(|i| q(i)).collect::<Vec<_>>().join(", "));
        let names: Vec<&str> = fams.iter().map(|&v6| if v6 { "IPv6" } else { "IPv4" }).collect();
        let _ = writeln!(out, "  ipFamilies: [{}]", names.join(", "));
        let policy = if fams.len() == 2 { "PreferDualStack" } else { "SingleStack" };
        let _ = writeln!(out, "  ipFamilyPolicy: {policy}");
        if s.slice.is_none() {
            let _ = writeln!(out, "  selector: {{app: {}}}", q(&s.name));
        }
        if s.publish_not_ready {
            let _ = writeln!(out, "  publishNotReadyAddresses: true");
        }
        render_policies(s, out);
        let primary_v6 = fams[0];
        let on_node = s.external_ip_on_node.as_ref().and_then(|n| self.node(n));
        if !s.external_ips.is_empty() || on_node.is_some() {
            let mut list: Vec<String> =
                s.external_ips.iter().map(|&h| q(&net::external_ip(primary_v6, h))).collect();
            list.extend(on_node.map(|n| q(&net::node_ip(primary_v6, n.slot))));
            let _ = writeln!(out, "  externalIPs: [{}]", list.join(", "));
        }
        let lb = s.kind == ServiceType::LoadBalancer;
        if lb {
            self.render_load_balancer(s, primary_v6, out);
        }
        let _ = writeln!(out, "  ports:");
        let node_ports = s.has_node_ports();
        for (i, p) in s.ports.iter().enumerate() {
            let (_, target, node_port) = port_numbers(s.slot, i);
            let port = s.port_number(i);
            let target = if p.named_target && s.slice.is_none() { q(&p.name) } else { target.to_string() };
            let np = if node_ports { format!(", nodePort: {node_port}") } else { String::new() };
            let _ = writeln!(
                out,
                "    - {{name: {}, port: {port}, protocol: {}, targetPort: {target}{np}}}",
                q(&p.name),
                if p.udp { "UDP" } else { "TCP" }
            );
        }
        let mut ingress: Vec<(String, bool)> =
            s.lb_ingress.iter().map(|&(h, proxy)| (net::lb_ip(primary_v6, h), proxy)).collect();
        if s.lb_ips_on_nodes && self.secondary_ips && net::families(self.family)[0] == primary_v6 {
            ingress.extend(self.nodes.iter().map(|n| (net::node_secondary_ip(primary_v6, n.slot), false)));
        }
        if lb && !ingress.is_empty() {
            let _ = writeln!(out, "status:\n  loadBalancer:\n    ingress:");
            for (ip, proxy) in ingress {
                let mode = if proxy { ", ipMode: Proxy" } else { "" };
                let _ = writeln!(out, "      - {{ip: {}{mode}}}", q(&ip));
            }
        }
        if let Some(endpoints) = &s.slice {
            for &v6 in &fams {
                self.render_slice(s, endpoints, v6, out);
            }
        }
    }

    /// A load balancer's fields: node ports allocated or not, its health check, source ranges.
    fn render_load_balancer(&self, s: &ServiceSpec, primary_v6: bool, out: &mut String) {
        let _ = writeln!(out, "  allocateLoadBalancerNodePorts: {}", s.allocate_node_ports);
        if s.etp_local {
            let _ = writeln!(out, "  healthCheckNodePort: {}", health_check_port(s.slot));
        }
        if s.source_ranges.is_empty() {
            return;
        }
        let host = |ip: String| q(&format!("{ip}/{}", if primary_v6 { 128 } else { 32 }));
        let ranges: Vec<String> = s
            .source_ranges
            .iter()
            .flat_map(|r| match r {
                SourceRange::ExternalHost => vec![host(net::external_host(primary_v6))],
                SourceRange::NodeNetwork => vec![q(net::node_network(primary_v6))],
                SourceRange::Elsewhere => vec![q(net::elsewhere(primary_v6))],
                SourceRange::NodeAddresses => {
                    self.nodes.iter().map(|n| host(net::node_ip(primary_v6, n.slot))).collect()
                }
            })
            .collect();
        let _ = writeln!(out, "  loadBalancerSourceRanges: [{}]", ranges.join(", "));
    }

    fn render_slice(&self, s: &ServiceSpec, endpoints: &[EndpointSpec], v6: bool, out: &mut String) {
        let suffix = if v6 { "v6" } else { "v4" };
        let _ = writeln!(
            out,
            "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: {}\n  namespace: default\n  labels: {{kubernetes.io/service-name: {}}}\naddressType: {}",
            q(&format!("{}-{suffix}", s.name)),
            q(&s.name),
            if v6 { "IPv6" } else { "IPv4" }
        );
        let _ = writeln!(out, "ports:");
        for (i, p) in s.ports.iter().enumerate() {
            let (_, target, _) = port_numbers(s.slot, i);
            let _ = writeln!(
                out,
                "  - {{name: {}, port: {target}, protocol: {}}}",
                q(&p.name),
                if p.udp { "UDP" } else { "TCP" }
            );
        }
        let written: Vec<String> = endpoints.iter().filter_map(|e| self.render_endpoint(e, v6)).collect();
        if written.is_empty() {
            let _ = writeln!(out, "endpoints: []");
        } else {
            let _ = writeln!(out, "endpoints:");
            for e in written {
                out.push_str(&e);
            }
        }
    }

    fn render_endpoint(&self, e: &EndpointSpec, v6: bool) -> Option<String> {
        let (address, node, target) = match &e.target {
            EndpointTarget::Pod(name) => {
                let pod = self.pods.iter().find(|p| &p.name == name)?;
                let node = self.node(&pod.node)?;
                (net::pod_ip(v6, node.slot, pod.host), Some(node), Some(name))
            }
            EndpointTarget::Node { node, node_name } => {
                let n = self.node(node)?;
                (net::node_ip(v6, n.slot), node_name.then_some(n), None)
            }
        };
        let mut text = format!(
            "  - addresses: [{}]\n    conditions: {{ready: {}, serving: {}, terminating: {}}}\n",
            q(&address),
            e.ready,
            e.serving,
            e.terminating
        );
        if let Some(node) = node {
            let _ = writeln!(text, "    nodeName: {}", q(&node.name));
            if let Some(zone) = &node.zone {
                let _ = writeln!(text, "    zone: {}", q(zone));
            }
        }
        if let Some(pod) = target {
            let _ = writeln!(text, "    targetRef: {{kind: Pod, name: {}, namespace: default}}", q(pod));
        }
        if let Some(zone) = &e.hint {
            let _ = writeln!(text, "    hints: {{forZones: [{{name: {}}}]}}", q(zone));
        }
        Some(text)
    }

    fn render_pod(&self, p: &PodSpec, out: &mut String) {
        let Some(node) = self.node(&p.node) else { return };
        let _ = writeln!(
            out,
            "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: {}\n  namespace: default",
            q(&p.name)
        );
        if let Some(app) = &p.app {
            let _ = writeln!(out, "  labels: {{app: {}}}", q(app));
        }
        if p.terminating {
            let _ = writeln!(out, "  deletionTimestamp: \"2024-05-14T09:21:07Z\"");
        }
        let _ = writeln!(out, "spec:\n  nodeName: {}\n  containers:\n    - name: main", q(&p.node));
        // Container ports for every port of the Service that selects the pod (named targets
        // resolve through them).
        if let Some(s) = p.app.as_ref().and_then(|a| self.services.iter().find(|s| &s.name == a)) {
            let _ = writeln!(out, "      ports:");
            for (i, port) in s.ports.iter().enumerate() {
                let (_, target, _) = port_numbers(s.slot, i);
                let _ = writeln!(
                    out,
                    "        - {{name: {}, containerPort: {target}, protocol: {}}}",
                    q(&port.name),
                    if port.udp { "UDP" } else { "TCP" }
                );
            }
        }
        let fams = self.families();
        let _ = writeln!(
            out,
            "status:\n  phase: Running\n  podIP: {}",
            q(&net::pod_ip(fams[0], node.slot, p.host))
        );
        if fams.len() == 2 {
            let ips: Vec<String> = fams
                .iter()
                .map(|&v6| format!("{{ip: {}}}", q(&net::pod_ip(v6, node.slot, p.host))))
                .collect();
            let _ = writeln!(out, "  podIPs: [{}]", ips.join(", "));
        }
        let _ = writeln!(
            out,
            "  conditions: [{{type: Ready, status: \"{}\"}}]",
            if p.ready { "True" } else { "False" }
        );
    }

    fn render_step(&self, step: &StepSpec, out: &mut String) {
        let _ = writeln!(
            out,
            "---\napiVersion: packetproof.dev/v1alpha1\nkind: Step\nmetadata: {{name: {}}}\nspec:",
            q(&step.name)
        );
        if step.change == Change::RestartProxy || step.restart {
            let _ = writeln!(out, "  restartProxy: true");
        }
        match &step.change {
            Change::RestartProxy => {}
            Change::DeleteService(name) => {
                let _ = writeln!(
                    out,
                    "  delete:\n    - {{kind: Service, namespace: default, name: {}}}",
                    q(name)
                );
                if let Some(s) = self.services.iter().find(|s| &s.name == name)
                    && s.slice.is_some()
                {
                    for &v6 in &self.service_families(s) {
                        let suffix = if v6 { "v6" } else { "v4" };
                        let _ = writeln!(
                            out,
                            "    - {{kind: EndpointSlice, namespace: default, name: {}}}",
                            q(&format!("{name}-{suffix}"))
                        );
                    }
                }
            }
            Change::ReplaceService(_) => {}
        }
        let _ = writeln!(out, "  probes:");
        for p in &step.probes {
            self.render_probe(p, out);
        }
        let k = self.steps.iter().position(|s| s.name == step.name).map_or(0, |i| i + 1);
        for (stream, target) in self.streams_in(k) {
            render_stream(stream, target, false, out);
        }
        if let Change::ReplaceService(s) = &step.change {
            self.render_service(s, out);
        }
    }
}

/// A Service's traffic policies, session affinity and traffic distribution.
fn render_policies(s: &ServiceSpec, out: &mut String) {
    let external = s.kind != ServiceType::ClusterIp;
    if external {
        let _ = writeln!(out, "  externalTrafficPolicy: {}", if s.etp_local { "Local" } else { "Cluster" });
    }
    let _ = writeln!(out, "  internalTrafficPolicy: {}", if s.itp_local { "Local" } else { "Cluster" });
    match s.affinity {
        None => {
            let _ = writeln!(out, "  sessionAffinity: None");
        }
        Some(None) => {
            let _ = writeln!(out, "  sessionAffinity: ClientIP");
        }
        Some(Some(t)) => {
            let _ = writeln!(
                out,
                "  sessionAffinity: ClientIP\n  sessionAffinityConfig: {{clientIP: {{timeoutSeconds: {t}}}}}"
            );
        }
    }
    if s.topology == Topology::PreferClose {
        let _ = writeln!(out, "  trafficDistribution: PreferClose");
    }
}

/// A stream's probe in one phase: its opener in the first, its check in the later ones (a UDP
/// stream's is the same probe again: its source port ties the phases together; after its
/// Service's deletion, to the address the Service had).
fn render_stream(st: &StreamSpec, target: StreamTarget, first: bool, out: &mut String) {
    match st.source_port {
        Some(port) => {
            let _ = writeln!(out, "    # a UDP stream, kept across the steps");
            let _ = writeln!(out, "    - name: {}", q(&st.name));
            let _ = writeln!(out, "      from: {{pod: {}}}", q(&st.client));
            match target {
                StreamTarget::Service => {
                    let _ = writeln!(out, "      to: {{service: {}, port: {}}}", q(&st.service), q(&st.port));
                }
                StreamTarget::Deleted(address) => {
                    let _ = writeln!(out, "      # {} was deleted: its old address", st.service);
                    let _ = writeln!(
                        out,
                        "      to: {{address: {}, port: {}}}",
                        q(&address.ip().to_string()),
                        address.port()
                    );
                }
            }
            let _ =
                writeln!(out, "      protocol: UDP\n      sourcePort: {port}\n      count: {STREAM_COUNT}");
        }
        None if first => {
            let _ = writeln!(out, "    # a TCP connection, held across the steps");
            let _ = writeln!(out, "    - name: {}", q(&st.name));
            let _ = writeln!(out, "      from: {{pod: {}}}", q(&st.client));
            let _ = writeln!(out, "      to: {{service: {}, port: {}}}", q(&st.service), q(&st.port));
            let _ = writeln!(out, "      hold: true");
        }
        None => {
            let window = if st.out_of_window { ", outOfWindow: true" } else { "" };
            let _ = writeln!(
                out,
                "    - {{name: {}, held: {}{window}}}",
                q(&format!("{}-check", st.name)),
                q(&st.name)
            );
        }
    }
}

fn render_expiry(e: &ExpirySpec, out: &mut String) {
    let clients: Vec<String> = e.clients.iter().map(|c| q(c)).collect();
    let _ = writeln!(out, "    # attempts spaced past the Service's affinity timeout");
    let _ = writeln!(out, "    - name: {}", q(&e.name));
    let _ = writeln!(out, "      from: {{pods: [{}]}}", clients.join(", "));
    let _ = writeln!(out, "      to: {{service: {}, port: {}}}", q(&e.service), q(&e.port));
    if e.udp {
        let _ = writeln!(out, "      protocol: UDP");
    }
    let _ = writeln!(out, "      count: {}\n      interval: {EXPIRY_INTERVAL_MS}ms", e.count);
}

/// The names of the probes added to `flows: all`: the case's own, kept or cut whole.
pub const SECONDARY_NODE_PORT: &str = "secondary-node-port";
pub const SECONDARY_HEALTH_CHECK: &str = "secondary-health-check-";
pub const MARTIAN: &str = "localhost-from-outside";
/// Where a node-local service listens on 127.0.0.1 (a kubelet's healthz): the harness listens
/// there for a martian probe, which must never reach it.
const MARTIAN_PORT: u16 = 10248;

/// Attempts of a UDP stream in each phase.
const STREAM_COUNT: u32 = 3;

/// A string as a YAML (and JSON) double-quoted scalar.
pub fn q(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_default()
}
