//! The grammar: a case drawn from a seeded stream, over the fields the scenario reader models.
//! Weights favour small clusters (two nodes, one or two Services), where every flow is cheap and
//! a failure is already nearly minimal, and give every field a fair chance of its unusual values.

use super::case::*;
use super::rng::Rng;

/// One case drawn from `rng`, named `name`.
pub fn case(rng: &mut Rng, name: &str) -> Case {
    let family = [Family::V4, Family::V6, Family::Dual][rng.weighted(&[70, 15, 15])];
    let node_count = 1 + rng.weighted(&[20, 60, 20]);
    let zoned = rng.chance(30);
    let nodes: Vec<NodeSpec> = (0..node_count)
        .map(|i| NodeSpec {
            name: format!("node-{}", (b'a' + i as u8) as char),
            slot: i as u8,
            zone: (zoned && rng.chance(85)).then(|| ["zone-a", "zone-b"][rng.below(2)].to_string()),
        })
        .collect();
    let proxy = ProxySpec {
        masquerade_all: rng.chance(10),
        detect_local: [
            DetectMode::ClusterCidr,
            DetectMode::NodeCidr,
            DetectMode::BridgeInterface,
            DetectMode::InterfaceNamePrefix,
        ][rng.weighted(&[70, 10, 10, 10])],
        node_port_addresses: rng.chance(10),
        localhost_node_ports_off: rng.chance(10),
        traffic_distribution_gate: rng.chance(30),
    };
    let external = rng
        .chance(80)
        .then(|| ExternalSpec { routed_via: rng.chance(25).then(|| rng.pick(&nodes).name.clone()) });
    let mut case = Case {
        name: name.to_string(),
        family,
        nodes,
        proxy,
        secondary_ips: false,
        martian: false,
        external,
        pods: Vec::new(),
        services: Vec::new(),
        // Forty attempts see a backend a proxy never chooses among two or three.
        count: [3, 6, 20, 40][rng.weighted(&[57, 25, 13, 5])],
        probes: None,
        streams: Vec::new(),
        expiries: Vec::new(),
        steps: Vec::new(),
    };
    let services = 1 + rng.weighted(&[40, 40, 20]);
    for slot in 0..services {
        let service = service(rng, &mut case, slot as u8);
        case.services.push(service);
    }
    for _ in 0..rng.between(1, 2) {
        let node = rng.pick(&case.nodes).name.clone();
        let name = format!("client-{}", case.pods.len());
        push_pod(&mut case, name, node, None, true, false);
    }
    if rng.chance(40) {
        for i in 0..rng.between(1, 2) {
            let stream = stream(rng, &case, i as u16);
            case.streams.push(stream);
        }
    }
    rarer_shapes(rng, &mut case);
    for k in 0..[0, 1, 2][rng.weighted(&[55, 33, 12])] {
        if let Some(change) = change(rng, &case) {
            // A change made while the proxy was down: its first sync after the start finds it.
            let restart = change != Change::RestartProxy && rng.chance(20);
            case.steps.push(StepSpec {
                name: format!("step-{}", k + 1),
                change,
                restart,
                probes: Vec::new(),
            });
        }
    }
    if case.steps.len() < 2 && rng.chance(40) {
        if rng.chance(50) {
            delete_under_a_stream(&mut case);
        } else {
            drain_under_a_stream(rng, &mut case);
        }
    }
    case
}

/// One more step, deleting the Service of a UDP stream, where the state before it has another
/// Service left to probe: the proxy must clear the stream's conntrack entries, so that its next
/// datagram to the old address no longer reaches the old backend.
fn delete_under_a_stream(case: &mut Case) {
    let state = case.state_after(case.steps.len());
    if state.services.len() < 2 {
        return;
    }
    let Some(st) = case
        .streams
        .iter()
        .find(|st| st.source_port.is_some() && state.services.iter().any(|s| s.name == st.service))
    else {
        return;
    };
    let name = format!("step-{}", case.steps.len() + 1);
    let change = Change::DeleteService(st.service.clone());
    case.steps.push(StepSpec { name, change, restart: false, probes: Vec::new() });
}

/// One more step, a rolling update's moment under a UDP stream: every serving endpoint of
/// its Service turns terminating (still serving) while a new replica becomes ready, half the
/// time while the proxy restarts. Wherever the stream sits, its endpoint still serves, so the
/// stream must stay; a proxy that clears it (the endpoint is no longer ready, or a restart
/// flushes every UDP entry) moves it to the new replica, the only one new flows may take.
fn drain_under_a_stream(rng: &mut Rng, case: &mut Case) {
    let state = case.state_after(case.steps.len());
    // Without topology or a Local internal policy, so that nothing else narrows the endpoints.
    let drained = case.streams.iter().filter(|st| st.source_port.is_some()).find_map(|st| {
        let s = state.services.iter().find(|s| s.name == st.service)?;
        let endpoints = s.slice.as_ref()?;
        let plain = s.topology == Topology::None && !s.itp_local;
        (plain && endpoints.iter().any(|e| e.ready && e.serving)).then(|| s.clone())
    });
    let Some(mut s) = drained else { return };
    let endpoints = s.slice.as_mut().expect("a sliced Service");
    for e in endpoints.iter_mut().filter(|e| e.serving) {
        (e.ready, e.serving, e.terminating) = (false, true, true);
    }
    let added = match spare_replica(case, &s.name, endpoints) {
        Some(added) => added,
        None => {
            let taken = |name: &str| case.pods.iter().any(|p| p.name == name);
            let name = (0..).map(|k| format!("{}-{k}", s.name)).find(|n| !taken(n)).expect("a free name");
            let node = rng.pick(&case.nodes).name.clone();
            push_pod(case, name.clone(), node, Some(s.name.clone()), true, false);
            ready_endpoint(name)
        }
    };
    s.slice.as_mut().expect("a sliced Service").push(added);
    let name = format!("step-{}", case.steps.len() + 1);
    let restart = rng.chance(50);
    case.steps.push(StepSpec { name, change: Change::ReplaceService(s), restart, probes: Vec::new() });
}

/// A case made from `parent` (one that reached new rules) by one to three changes: a
/// Service's policies or endpoints, a proxy setting, one more step, the number of attempts,
/// or a rarer shape. Its steps' probes are filled again when it is prepared.
pub fn mutated(rng: &mut Rng, parent: &Case, name: &str) -> Case {
    let mut case = Case { name: name.to_string(), probes: None, ..parent.clone() };
    for _ in 0..rng.between(1, 3) {
        match rng.below(5) {
            0 => {
                // Only a Service no step writes again: a step written for the parent's first
                // state may add an endpoint back, and a host-network endpoint that only a step
                // adds has no server (the harness starts them for the first state's).
                let free: Vec<usize> = (0..case.services.len())
                    .filter(|&k| {
                        !case.steps.iter().any(|st| st.change.service() == Some(&case.services[k].name))
                    })
                    .collect();
                if !free.is_empty() {
                    let k = *rng.pick(&free);
                    let mut s = case.services[k].clone();
                    mutate(rng, &case, &mut s);
                    case.services[k] = s;
                }
            }
            1 => {
                let p = &mut case.proxy;
                match rng.below(4) {
                    0 => p.masquerade_all = !p.masquerade_all,
                    1 => p.node_port_addresses = !p.node_port_addresses,
                    2 => p.localhost_node_ports_off = !p.localhost_node_ports_off,
                    _ => {
                        p.detect_local = *rng.pick(&[
                            DetectMode::ClusterCidr,
                            DetectMode::NodeCidr,
                            DetectMode::BridgeInterface,
                            DetectMode::InterfaceNamePrefix,
                        ])
                    }
                }
            }
            2 if case.steps.len() < 2 => {
                if let Some(change) = change(rng, &case) {
                    let restart = change != Change::RestartProxy && rng.chance(20);
                    let name = format!("step-{}", case.steps.len() + 1);
                    case.steps.push(StepSpec { name, change, restart, probes: Vec::new() });
                }
            }
            3 => case.count = *rng.pick(&[3, 6, 20, 40]),
            _ => rarer_shapes(rng, &mut case),
        }
    }
    case
}

/// Shapes the draws above give too rarely or never, drawn after the Services and kept flows
/// so that those draws stay as they were: a Service exposed on a node's own address (half the
/// time on another Service's node port), several load-balancer IPs behind a source range of
/// the node network, a short affinity timeout waited out, a second address on every node
/// (sometimes a load balancer's VIP, behind ranges that hold the nodes' primary addresses
/// only), a martian frame for 127.0.0.1.
fn rarer_shapes(rng: &mut Rng, case: &mut Case) {
    if rng.chance(8) {
        let node = rng.pick(&case.nodes).name.clone();
        let k = rng.below(case.services.len());
        case.services[k].external_ip_on_node = Some(node);
        let others: Vec<usize> =
            (0..case.services.len()).filter(|&o| o != k && case.services[o].has_node_ports()).collect();
        if !others.is_empty() && rng.chance(50) {
            let o = *rng.pick(&others);
            case.services[k].port_on_node_port_of = Some(case.services[o].slot);
            // Node ports are matched per protocol: the clash needs the same one.
            case.services[k].ports[0].udp = case.services[o].ports[0].udp;
        }
    }
    let balanced: Vec<usize> =
        (0..case.services.len()).filter(|&k| case.services[k].kind == ServiceType::LoadBalancer).collect();
    if !balanced.is_empty() && rng.chance(10) {
        let s = &mut case.services[*rng.pick(&balanced)];
        s.lb_ingress = vec![(10 + s.slot * 4, false), (11 + s.slot * 4, rng.chance(15))];
        if !s.source_ranges.contains(&SourceRange::NodeNetwork) {
            s.source_ranges.push(SourceRange::NodeNetwork);
        }
    }
    if rng.chance(4) {
        affinity_expiry(rng, case);
    }
    if rng.chance(8) {
        case.secondary_ips = true;
        case.proxy.node_port_addresses = rng.chance(70);
    }
    if case.secondary_ips && !balanced.is_empty() && rng.chance(40) {
        let s = &mut case.services[*rng.pick(&balanced)];
        s.lb_ips_on_nodes = true;
        // The VIPs lie outside the ranges, the nodes' own addresses inside.
        s.source_ranges.retain(|r| *r != SourceRange::NodeNetwork);
        if !s.source_ranges.contains(&SourceRange::NodeAddresses) {
            s.source_ranges.push(SourceRange::NodeAddresses);
        }
    }
    if rng.chance(8) {
        case.martian = true;
    }
    if rng.chance(50) {
        partial_hints(rng, case);
    }
}

/// Hints that cover every ready endpoint but one, on a Service whose hints would otherwise
/// apply, probed with enough attempts to see the unhinted endpoint never chosen: hints must
/// then be ignored (kube-proxy's `topology.go`: every ready endpoint needs hints).
fn partial_hints(rng: &mut Rng, case: &mut Case) {
    let gate = case.proxy.traffic_distribution_gate;
    let zones: Vec<(String, String)> =
        case.nodes.iter().filter_map(|n| Some((n.name.clone(), n.zone.clone()?))).collect();
    let candidates: Vec<usize> = (0..case.services.len())
        .filter(|&k| {
            let s = &case.services[k];
            let hinted = s.topology == Topology::Annotation || (s.topology == Topology::PreferClose && gate);
            let ready = s.slice.as_ref().map_or(0, |e| e.iter().filter(|e| e.ready).count());
            // Without affinity, so that attempts are spread and an endpoint never chosen shows.
            hinted && ready >= 2 && s.affinity.is_none()
        })
        .collect();
    if candidates.is_empty() || zones.is_empty() {
        return;
    }
    let k = *rng.pick(&candidates);
    let node_of: Vec<Option<String>> =
        case.services[k].slice.iter().flatten().map(|e| case.endpoint_node(e)).collect();
    let endpoints = case.services[k].slice.as_mut().expect("a sliced Service");
    for (e, node) in endpoints.iter_mut().zip(node_of) {
        e.hint = node.and_then(|n| zones.iter().find(|(name, _)| *name == n).map(|(_, z)| z.clone()));
    }
    let ready: Vec<usize> = (0..endpoints.len()).filter(|&i| endpoints[i].ready).collect();
    endpoints[*rng.pick(&ready)].hint = None;
    // Forty attempts: a backend never chosen among three is a failure within the verdict's
    // false-failure bound (20 are enough for two only).
    case.count = 40;
}

/// Gives a Service of the primary family a one-second affinity timeout and probes it from
/// up to six pods at once (serving pods of other Services and the clients), each attempt
/// 1.6 s after the last.
fn affinity_expiry(rng: &mut Rng, case: &mut Case) {
    // One per case: a mutated case may already have one.
    if !case.expiries.is_empty() {
        return;
    }
    let primary: Vec<usize> = (0..case.services.len())
        .filter(|&k| case.services[k].families != ServiceFamilies::Second || case.family != Family::Dual)
        .collect();
    if primary.is_empty() {
        return;
    }
    let k = *rng.pick(&primary);
    let service = case.services[k].name.clone();
    let clients: Vec<String> = case
        .pods
        .iter()
        .filter(|p| p.app.as_deref() != Some(&service) && p.ready && !p.terminating)
        .map(|p| p.name.clone())
        .take(6)
        .collect();
    // Two clients would need eleven attempts each (16 s): too slow a case for its batch.
    if clients.len() < 3 {
        return;
    }
    let s = &mut case.services[k];
    s.affinity = Some(Some(SHORT_AFFINITY_SECONDS));
    // Every client answered: a Local internal policy would drop those on nodes without an
    // endpoint, and leave too few chances to move for the check to tell.
    s.itp_local = false;
    let port = rng.pick(&s.ports).clone();
    // In every phase: a step that lengthened the timeout would revive, in iptables mode, the
    // entries the short one let lapse (`-m recent` reads the new rule's seconds), and not in
    // nftables mode (a set element keeps the timeout it was added with). Kubernetes leaves that
    // open, and the oracle would carry stickiness across it.
    for step in &mut case.steps {
        if let Change::ReplaceService(replaced) = &mut step.change
            && replaced.name == service
            && replaced.affinity.is_some()
        {
            replaced.affinity = Some(Some(SHORT_AFFINITY_SECONDS));
        }
    }
    // Two backends need 20 expiries in all (2^-20 < 1e-6), shared by the clients.
    let count = 20u32.div_ceil(clients.len() as u32) + 1;
    case.expiries.push(ExpirySpec {
        name: "affinity-expiry".into(),
        clients,
        service,
        port: port.name,
        udp: port.udp,
        count,
    });
}

/// A flow kept across the steps, from a client pod to one of the Services' ports: a UDP
/// stream for a UDP port, a held connection for a TCP one. Kept only where the oracle says the
/// first state answers it (`explore::probes::keep_streams`).
fn stream(rng: &mut Rng, case: &Case, i: u16) -> StreamSpec {
    let clients: Vec<&PodSpec> = case.pods.iter().filter(|p| p.app.is_none()).collect();
    let client = rng.pick(&clients).name.clone();
    let service = rng.pick(&case.services);
    let port = rng.pick(&service.ports);
    StreamSpec {
        name: format!("stream-{i}"),
        client,
        service: service.name.clone(),
        port: port.name.clone(),
        source_port: port.udp.then_some(15000 + i),
        // The hand-made out-of-window segment is IPv4 only.
        out_of_window: !port.udp && case.family != Family::V6 && rng.chance(15),
    }
}

fn push_pod(
    case: &mut Case,
    name: String,
    node: String,
    app: Option<String>,
    ready: bool,
    terminating: bool,
) {
    let host = 10 + case.pods.len() as u8;
    case.pods.push(PodSpec { name, node, host, app, ready, terminating });
}

fn service(rng: &mut Rng, case: &mut Case, slot: u8) -> ServiceSpec {
    let name = format!("svc-{}", (b'a' + slot) as char);
    let kind = [ServiceType::ClusterIp, ServiceType::NodePort, ServiceType::LoadBalancer]
        [rng.weighted(&[35, 35, 30])];
    let external = kind != ServiceType::ClusterIp;
    let lb = kind == ServiceType::LoadBalancer;
    let ports = (0..1 + rng.weighted(&[70, 30]))
        .map(|i| PortSpec { name: format!("p{i}"), udp: rng.chance(30), named_target: rng.chance(15) })
        .collect();
    let topology = [Topology::None, Topology::Annotation, Topology::PreferClose][rng.weighted(&[80, 10, 10])];
    let sliced = topology == Topology::Annotation || rng.chance(45);
    let mut spec = ServiceSpec {
        name: name.clone(),
        slot,
        kind,
        families: [ServiceFamilies::Primary, ServiceFamilies::Second, ServiceFamilies::Both]
            [rng.weighted(&[40, 20, 40])],
        ports,
        etp_local: external && rng.chance(40),
        itp_local: rng.chance(20),
        affinity: rng.chance(20).then(|| rng.chance(50).then(|| [60, 600, 3600][rng.below(3)])),
        external_ips: if rng.chance(20) { vec![10 + slot * 4] } else { Vec::new() },
        external_ip_on_node: None,
        port_on_node_port_of: None,
        lb_ips_on_nodes: false,
        lb_ingress: if lb {
            (0..rng.weighted(&[10, 80, 10])).map(|k| (10 + slot * 4 + k as u8, rng.chance(15))).collect()
        } else {
            Vec::new()
        },
        source_ranges: Vec::new(),
        allocate_node_ports: !lb || rng.chance(85),
        topology,
        publish_not_ready: rng.chance(10),
        slice: None,
    };
    if lb && rng.chance(25) {
        let all = [SourceRange::ExternalHost, SourceRange::NodeNetwork, SourceRange::Elsewhere];
        spec.source_ranges.push(*rng.pick(&all));
        if rng.chance(30) {
            let other = *rng.pick(&all);
            if !spec.source_ranges.contains(&other) {
                spec.source_ranges.push(other);
            }
        }
    }
    let backends = rng.weighted(&[10, 30, 40, 20]);
    let mut endpoints = Vec::new();
    for k in 0..backends {
        let node = rng.pick(&case.nodes).name.clone();
        let pod = format!("{name}-{k}");
        let (ready, terminating) = if sliced { (true, false) } else { (!rng.chance(12), rng.chance(10)) };
        push_pod(case, pod.clone(), node.clone(), Some(name.clone()), ready, terminating);
        if sliced {
            endpoints.push(endpoint(rng, case, EndpointTarget::Pod(pod), &node, topology));
        }
    }
    if sliced && rng.chance(12) {
        let node = rng.pick(&case.nodes).name.clone();
        let target = EndpointTarget::Node { node: node.clone(), node_name: rng.chance(50) };
        endpoints.push(endpoint(rng, case, target, &node, topology));
    }
    if sliced && rng.chance(30) {
        // A replica not yet in the slice, for a step's rollout to add.
        let node = rng.pick(&case.nodes).name.clone();
        push_pod(case, format!("{name}-{backends}"), node, Some(name.clone()), true, false);
    }
    if sliced {
        spec.slice = Some(endpoints);
    }
    spec
}

fn endpoint(
    rng: &mut Rng,
    case: &Case,
    target: EndpointTarget,
    node: &str,
    topology: Topology,
) -> EndpointSpec {
    // ready+serving, terminating and serving, terminating not serving, not ready.
    let (ready, serving, terminating) =
        [(true, true, false), (false, true, true), (false, false, true), (false, false, false)]
            [rng.weighted(&[70, 12, 8, 10])];
    let zone = case.node(node).and_then(|n| n.zone.clone());
    let hint = match topology {
        Topology::None => None,
        _ if rng.chance(15) => None,
        _ if rng.chance(20) => Some(["zone-a", "zone-b"][rng.below(2)].to_string()),
        _ => zone,
    };
    EndpointSpec { target, ready, serving, terminating, hint }
}

/// A change for a step: restart the proxy, change a Service's policies or endpoints, or delete
/// it. Replacements keep the Service's slot, type of endpoints and families, so that its
/// addresses and ports stay its own.
fn change(rng: &mut Rng, case: &Case) -> Option<Change> {
    let state = case.state_after(case.steps.len());
    if state.services.is_empty() {
        return Some(Change::RestartProxy);
    }
    // A deletion keeps one Service: a state with none has no flow to probe after it.
    let deletable = if state.services.len() > 1 { 20 } else { 0 };
    Some(match rng.weighted(&[30, 50, deletable]) {
        0 => Change::RestartProxy,
        1 => {
            let mut s = rng.pick(&state.services).clone();
            for _ in 0..rng.between(1, 2) {
                mutate(rng, case, &mut s);
            }
            Change::ReplaceService(s)
        }
        _ => Change::DeleteService(rng.pick(&state.services).name.clone()),
    })
}

fn mutate(rng: &mut Rng, case: &Case, s: &mut ServiceSpec) {
    let external = s.kind != ServiceType::ClusterIp;
    match rng.below(7) {
        5 => rollout(rng, case, s),
        6 => drain(rng, case, s),
        0 if external => s.etp_local = !s.etp_local,
        1 => s.itp_local = !s.itp_local,
        2 => s.affinity = if s.affinity.is_some() { None } else { Some(None) },
        3 if s.kind == ServiceType::ClusterIp => s.kind = ServiceType::NodePort,
        3 if s.kind == ServiceType::NodePort => {
            s.kind = ServiceType::ClusterIp;
            s.etp_local = false;
        }
        _ => match &mut s.slice {
            Some(endpoints) if !endpoints.is_empty() && rng.chance(50) => {
                let k = rng.below(endpoints.len());
                if rng.chance(50) {
                    endpoints.remove(k);
                } else {
                    let e = &mut endpoints[k];
                    (e.ready, e.serving, e.terminating) =
                        [(true, true, false), (false, true, true), (false, false, true)][rng.below(3)];
                }
            }
            Some(endpoints) => match spare_replica(case, &s.name, endpoints) {
                Some(added) => endpoints.push(added),
                None => endpoints.clear(),
            },
            None => s.publish_not_ready = !s.publish_not_ready,
        },
    }
}

/// A rolling update's moment: one serving endpoint drains (terminating, still serving) or
/// leaves, while another pod of the Service becomes ready: new flows go to the new one, and
/// flows kept across the step must stay or move as the endpoint's fate says.
fn rollout(rng: &mut Rng, case: &Case, s: &mut ServiceSpec) {
    let Some(endpoints) = &mut s.slice else {
        s.publish_not_ready = !s.publish_not_ready;
        return;
    };
    if let Some(k) = endpoints.iter().position(|e| e.serving) {
        if rng.chance(50) {
            endpoints.remove(k);
        } else {
            let e = &mut endpoints[k];
            (e.ready, e.serving, e.terminating) = (false, true, true);
        }
    }
    match spare_replica(case, &s.name, endpoints) {
        Some(added) => endpoints.push(added),
        None => {
            if let Some(e) = endpoints.iter_mut().find(|e| !e.ready && !e.terminating) {
                (e.ready, e.serving) = (true, true);
            }
        }
    }
}

/// A node drained: every endpoint on one node leaves the slice at once, so that the node's
/// health check must turn from its count of local endpoints to none.
fn drain(rng: &mut Rng, case: &Case, s: &mut ServiceSpec) {
    let Some(endpoints) = &mut s.slice else {
        s.publish_not_ready = !s.publish_not_ready;
        return;
    };
    let nodes: Vec<String> = endpoints.iter().filter_map(|e| case.endpoint_node(e)).collect();
    if nodes.is_empty() {
        return;
    }
    let drained = rng.pick(&nodes).clone();
    endpoints.retain(|e| case.endpoint_node(e).as_deref() != Some(drained.as_str()));
}

/// Another pod of the Service's own, not yet listed in its slice, as a ready endpoint.
fn spare_replica(case: &Case, service: &str, endpoints: &[EndpointSpec]) -> Option<EndpointSpec> {
    let listed = |name: &str| endpoints.iter().any(|e| e.target == EndpointTarget::Pod(name.to_string()));
    let pod = case.pods.iter().find(|p| p.app.as_deref() == Some(service) && !listed(&p.name))?;
    Some(ready_endpoint(pod.name.clone()))
}

/// Pod `pod` as a ready, serving endpoint without hints.
fn ready_endpoint(pod: String) -> EndpointSpec {
    EndpointSpec {
        target: EndpointTarget::Pod(pod),
        ready: true,
        serving: true,
        terminating: false,
        hint: None,
    }
}
