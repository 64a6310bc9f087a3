//! Grammar parity: every field, value class and step kind of the scenario format, and whether
//! the grammar writes it, or why not. The manual's table (`docs/src/explore.md`) is
//! [`markdown`]'s output, and tests hold the table to the code: every row marked generated is
//! found in the files the grammar writes, and every field the shipped suite, the annotated
//! reference and the reader's field audit (`scenario/fields.rs`) name is some row's.
//!
//! A row is found by reading a generated file's documents back, never the grammar's own data:
//! what counts is what the file says.

use serde_json::Value;

/// One line of the table.
pub struct Row {
    /// The documents it is about: a kind, several separated by `, `, or `any`.
    pub kinds: &'static str,
    /// The field paths (`spec.ports[].nodePort`), several separated by `, `. A path covers the
    /// fields below it.
    pub fields: &'static str,
    /// Which values, or which shape of the cluster.
    pub class: &'static str,
    pub support: Support,
}

pub enum Support {
    /// Written by the grammar: true of a file that shows it.
    Generated(fn(&Documents) -> bool),
    /// Not written, and why.
    Refused(&'static str),
}

/// A generated file's documents, in order.
pub struct Documents {
    pub docs: Vec<Value>,
}

impl Documents {
    /// Reads a scenario file's text; `None` if it is not YAML.
    pub fn read(text: &str) -> Option<Documents> {
        let docs = packetproof_model::yaml::parse(text).ok()?;
        Some(Documents { docs: docs.into_iter().map(|d| d.value).collect() })
    }

    fn of_kind<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.docs.iter().filter(move |d| d.get("kind").and_then(Value::as_str) == Some(kind))
    }

    /// Some document of `kind` has a value at `path` that `test` accepts.
    fn has(&self, kind: &str, path: &str, test: impl Fn(&Value) -> bool) -> bool {
        self.of_kind(kind).any(|d| values_at(d, path).into_iter().any(&test))
    }

    /// Some document of `kind` that `test` accepts as a whole.
    fn any(&self, kind: &str, test: impl Fn(&Value) -> bool) -> bool {
        self.of_kind(kind).any(test)
    }

    /// Documents of `kind` applied by some step (after the first `Step`).
    fn after_a_step<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        let first_step = self.docs.iter().position(|d| d.get("kind").and_then(Value::as_str) == Some("Step"));
        let from = first_step.map_or(self.docs.len(), |i| i + 1);
        self.docs[from..].iter().filter(move |d| d.get("kind").and_then(Value::as_str) == Some(kind))
    }

    /// Some probe, of the Scenario or of a Step, that `test` accepts.
    fn probe(&self, test: impl Fn(&Value) -> bool) -> bool {
        ["Scenario", "Step"].iter().any(|kind| self.has(kind, "spec.probes[]", &test))
    }
}

/// The values at `path` (`a.b[].c`: `[]` stands for every element of a list).
fn values_at<'a>(value: &'a Value, path: &str) -> Vec<&'a Value> {
    let mut here = vec![value];
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let (key, every) = match part.strip_suffix("[]") {
            Some(key) => (key, true),
            None => (part, false),
        };
        here = here
            .into_iter()
            .filter_map(|v| if key.is_empty() { Some(v) } else { v.get(key) })
            .flat_map(|v| match (every, v) {
                (true, Value::Array(items)) => items.iter().collect(),
                (true, _) => Vec::new(),
                (false, v) => vec![v],
            })
            .collect();
    }
    here
}

fn is(text: &'static str) -> impl Fn(&Value) -> bool {
    move |v| v.as_str() == Some(text)
}

fn present(_: &Value) -> bool {
    true
}

fn truthy(v: &Value) -> bool {
    v.as_bool() == Some(true)
}

fn a_list_of_two(v: &Value) -> bool {
    v.as_array().is_some_and(|a| a.len() == 2)
}

fn ipv6_only(v: &Value) -> bool {
    v.as_str().is_some_and(|s| s.contains(':'))
}

/// The probe's target has a key `key`.
fn targets(key: &'static str) -> impl Fn(&Value) -> bool {
    move |p| p.get("to").and_then(|t| t.get(key)).is_some()
}

fn from(key: &'static str) -> impl Fn(&Value) -> bool {
    move |p| p.get("from").and_then(|t| t.get(key)).is_some()
}

/// An endpoint whose conditions are exactly these.
fn conditions(ready: bool, serving: bool, terminating: bool) -> impl Fn(&Value) -> bool {
    move |c| {
        let flag = |k: &str| c.get(k).and_then(Value::as_bool);
        flag("ready") == Some(ready)
            && flag("serving") == Some(serving)
            && flag("terminating") == Some(terminating)
    }
}

/// A Service whose affinity timeout is at most `most` seconds, probed by some probe whose
/// attempts are further apart than that timeout.
fn affinity_waited_out(d: &Documents) -> bool {
    let shortest = d
        .of_kind("Service")
        .flat_map(|s| values_at(s, "spec.sessionAffinityConfig.clientIP.timeoutSeconds"))
        .filter_map(Value::as_u64)
        .min();
    let Some(timeout) = shortest.filter(|t| *t <= 10) else { return false };
    d.probe(|p| {
        let interval = p.get("interval").and_then(Value::as_str).and_then(|i| i.strip_suffix("ms"));
        interval.and_then(|ms| ms.parse::<u64>().ok()).is_some_and(|ms| ms > timeout * 1000)
    })
}

/// A Service with an external IP that is also a node's own address.
fn service_ip_on_a_node(d: &Documents) -> bool {
    let node_ips: Vec<&str> = d
        .of_kind("Scenario")
        .flat_map(|s| {
            let mut ips = values_at(s, "spec.nodes[].ip");
            ips.extend(values_at(s, "spec.nodes[].ips[]"));
            ips
        })
        .filter_map(Value::as_str)
        .collect();
    d.has("Service", "spec.externalIPs[]", |ip| ip.as_str().is_some_and(|ip| node_ips.contains(&ip)))
}

/// A Service exposed on a node's own address on a port that is another Service's node port.
fn service_port_on_a_node_port(d: &Documents) -> bool {
    let node_ports: Vec<u64> = d
        .of_kind("Service")
        .flat_map(|s| values_at(s, "spec.ports[].nodePort"))
        .filter_map(Value::as_u64)
        .collect();
    service_ip_on_a_node(d)
        && d.has("Service", "spec.ports[].port", |p| p.as_u64().is_some_and(|p| node_ports.contains(&p)))
}

/// A load-balancer IP that is a node's second address, behind source ranges that hold a
/// node's primary address alone.
fn lb_ip_on_a_node(d: &Documents) -> bool {
    let addresses = |path: &str| -> Vec<String> {
        d.of_kind("Scenario")
            .flat_map(|s| values_at(s, path))
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect()
    };
    let (primaries, seconds) = (addresses("spec.nodes[].ip"), addresses("spec.nodes[].secondaryIPs[]"));
    d.any("Service", |s| {
        let on_node = values_at(s, "status.loadBalancer.ingress[].ip")
            .iter()
            .any(|ip| ip.as_str().is_some_and(|ip| seconds.iter().any(|x| x == ip)));
        let node_range = values_at(s, "spec.loadBalancerSourceRanges[]").iter().any(|r| {
            r.as_str()
                .and_then(|r| r.split_once('/'))
                .is_some_and(|(ip, _)| primaries.iter().any(|p| p == ip))
        });
        on_node && node_range
    })
}

/// A slice with zone hints on some of its ready endpoints but not on all.
fn partial_hints(slice: &Value) -> bool {
    let ready: Vec<&Value> = values_at(slice, "endpoints[]")
        .into_iter()
        .filter(|e| values_at(e, "conditions.ready").first().is_some_and(|r| truthy(r)))
        .collect();
    let hinted = ready.iter().filter(|e| !values_at(e, "hints.forZones[]").is_empty()).count();
    hinted > 0 && hinted < ready.len()
}

/// A LoadBalancer Service with two ingress IPs and a source range of the node network.
fn several_lb_ips_and_node_range(d: &Documents) -> bool {
    let network: Vec<&str> = d
        .of_kind("Scenario")
        .flat_map(|s| {
            let mut n = values_at(s, "spec.cluster.nodeNetwork");
            n.extend(values_at(s, "spec.cluster.nodeNetwork[]"));
            n
        })
        .filter_map(Value::as_str)
        .collect();
    d.any("Service", |s| {
        values_at(s, "status.loadBalancer.ingress[]").len() >= 2
            && values_at(s, "spec.loadBalancerSourceRanges[]")
                .iter()
                .filter_map(|r| r.as_str())
                .any(|r| network.contains(&r))
    })
}

/// A UDP stream (a probe with a source port) kept across a step that changes its Service's
/// endpoints' readiness, or deletes the Service.
fn udp_stream_across(d: &Documents, deletion: bool) -> bool {
    d.of_kind("Step").any(|step| {
        let deletes = !values_at(step, "spec.delete[]").is_empty();
        // After a deletion, to the deleted Service's old address.
        let keeps_stream = values_at(step, "spec.probes[]").iter().any(|p| {
            p.get("sourcePort").is_some_and(Value::is_u64)
                && (!deletion || p.get("to").and_then(|t| t.get("address")).is_some())
        });
        keeps_stream && deletes == deletion
    }) && (deletion || d.after_a_step("EndpointSlice").next().is_some())
}

/// A UDP stream kept across a step that restarts the proxy while endpoints change.
fn udp_stream_across_a_restart_with_new_endpoints(d: &Documents) -> bool {
    d.of_kind("Step").any(|step| {
        values_at(step, "spec.restartProxy").iter().any(|v| truthy(v))
            && values_at(step, "spec.probes[]").iter().any(|p| p.get("sourcePort").is_some_and(Value::is_u64))
    }) && d.after_a_step("EndpointSlice").next().is_some()
}

/// Every row, in the manual's order.
pub const ROWS: &[Row] = &[
    // The documents themselves.
    Row {
        kinds: "any",
        fields: "apiVersion, kind",
        class: "every kind below",
        support: Support::Generated(|d| !d.docs.is_empty()),
    },
    Row {
        kinds: "any",
        fields: "metadata.managedFields, metadata.uid, metadata.resourceVersion, metadata.creationTimestamp, \
                 metadata.generation, metadata.generateName, metadata.ownerReferences",
        class: "bookkeeping of a cluster dump",
        support: Support::Refused("changes nothing a proxy does (`fields.rs`: irrelevant)"),
    },
    Row {
        kinds: "List, ServiceList, EndpointSliceList, PodList, NodeList",
        fields: "items",
        class: "objects in a list",
        support: Support::Refused("read item by item: a list changes the layout of a file, not what it says"),
    },
    Row {
        kinds: "Service",
        fields: "spec.loadBalancerClass, spec.loadBalancerIP, status.conditions",
        class: "any",
        support: Support::Refused(
            "they choose or report the load balancer, whose result is `status.loadBalancer` (`fields.rs`: irrelevant)",
        ),
    },
    Row {
        kinds: "EndpointSlice, Pod",
        fields: "metadata.annotations, metadata.deletionGracePeriodSeconds",
        class: "any",
        support: Support::Refused("changes nothing a proxy does (`fields.rs`: irrelevant)"),
    },
    Row {
        kinds: "Pod",
        fields: "spec.dnsPolicy, spec.enableServiceLinks, spec.preemptionPolicy, spec.priority, spec.restartPolicy, \
                 spec.schedulerName, spec.serviceAccount, spec.serviceAccountName, spec.terminationGracePeriodSeconds, \
                 spec.tolerations, spec.volumes, status.containerStatuses, status.hostIP, status.hostIPs, \
                 status.qosClass, status.startTime",
        class: "any",
        support: Support::Refused("changes nothing a proxy does (`fields.rs`: irrelevant)"),
    },
    // The Scenario.
    Row {
        kinds: "Scenario",
        fields: "metadata.name",
        class: "a name",
        support: Support::Generated(|d| d.has("Scenario", "metadata.name", present)),
    },
    Row {
        kinds: "Scenario, Step",
        fields: "spec.description",
        class: "free text",
        support: Support::Refused(
            "changes nothing a proxy does; a generated file's header says where it came from",
        ),
    },
    Row {
        kinds: "Scenario",
        fields: "spec.proxy",
        class: "a proxy and its options",
        support: Support::Refused(
            "the proxy under test is `explore --proxy`'s (and `--against`'s): a case names none, so the same case \
             runs on each",
        ),
    },
    Row {
        kinds: "Scenario",
        fields: "spec.proxyConfig.masqueradeAll",
        class: "true",
        support: Support::Generated(|d| d.has("Scenario", "spec.proxyConfig.masqueradeAll", truthy)),
    },
    Row {
        kinds: "Scenario",
        fields: "spec.proxyConfig.detectLocalMode",
        class: "unwritten (ClusterCIDR)",
        support: Support::Generated(|d| !d.has("Scenario", "spec.proxyConfig.detectLocalMode", present)),
    },
    Row {
        kinds: "Scenario",
        fields: "spec.proxyConfig.detectLocalMode",
        class: "NodeCIDR",
        support: Support::Generated(|d| {
            d.has("Scenario", "spec.proxyConfig.detectLocalMode", is("NodeCIDR"))
        }),
    },
    Row {
        kinds: "Scenario",
        fields: "spec.proxyConfig.detectLocalMode, spec.proxyConfig.detectLocal.bridgeInterface",
        class: "BridgeInterface, with its bridge",
        support: Support::Generated(|d| {
            d.has("Scenario", "spec.proxyConfig.detectLocal.bridgeInterface", present)
        }),
    },
    Row {
        kinds: "Scenario",
        fields: "spec.proxyConfig.detectLocalMode, spec.proxyConfig.detectLocal.interfaceNamePrefix",
        class: "InterfaceNamePrefix, with its prefix",
        support: Support::Generated(|d| {
            d.has("Scenario", "spec.proxyConfig.detectLocal.interfaceNamePrefix", present)
        }),
    },
    Row {
        kinds: "Scenario",
        fields: "spec.proxyConfig.clusterCIDR",
        class: "a cluster CIDR other than `spec.cluster.podCIDR`, or none",
        support: Support::Refused(
            "every case's cluster CIDR is its pod CIDR: another, or none, only changes what mode ClusterCIDR \
             detects, which the suite's `no-local-detector*` scenarios judge",
        ),
    },
    Row {
        kinds: "Scenario",
        fields: "spec.proxyConfig.nodePortAddresses",
        class: "the node network's CIDRs",
        support: Support::Generated(|d| d.has("Scenario", "spec.proxyConfig.nodePortAddresses[]", present)),
    },
    Row {
        kinds: "Scenario",
        fields: "spec.proxyConfig.localhostNodePorts",
        class: "false",
        support: Support::Generated(|d| {
            d.has("Scenario", "spec.proxyConfig.localhostNodePorts", |v| v.as_bool() == Some(false))
        }),
    },
    Row {
        kinds: "Scenario",
        fields: "spec.proxyConfig.featureGates",
        class: "ServiceTrafficDistribution",
        support: Support::Generated(|d| {
            d.has("Scenario", "spec.proxyConfig.featureGates.ServiceTrafficDistribution", present)
        }),
    },
    Row {
        kinds: "Scenario",
        fields: "spec.cluster.podCIDR, spec.cluster.serviceCIDR, spec.cluster.nodeNetwork",
        class: "IPv4",
        support: Support::Generated(|d| {
            d.has("Scenario", "spec.cluster.podCIDR", |v| v.as_str().is_some_and(|s| !s.contains(':')))
        }),
    },
    Row {
        kinds: "Scenario",
        fields: "spec.cluster.podCIDR, spec.cluster.serviceCIDR, spec.cluster.nodeNetwork",
        class: "IPv6",
        support: Support::Generated(|d| d.has("Scenario", "spec.cluster.podCIDR", ipv6_only)),
    },
    Row {
        kinds: "Scenario",
        fields: "spec.cluster.podCIDR, spec.cluster.serviceCIDR, spec.cluster.nodeNetwork",
        class: "dual-stack: one per family",
        support: Support::Generated(|d| d.has("Scenario", "spec.cluster.podCIDR", a_list_of_two)),
    },
    Row {
        kinds: "Scenario",
        fields: "spec.cluster.serviceNodePortRange",
        class: "a range other than 30000-32767",
        support: Support::Refused(
            "node ports are drawn inside the default range; the range decides only which node ports the API \
             server refuses, which the reader checks",
        ),
    },
    Row {
        kinds: "Scenario",
        fields: "spec.nodes[].name, spec.nodes[].ip, spec.nodes[].podCIDR",
        class: "one to three nodes",
        support: Support::Generated(|d| d.has("Scenario", "spec.nodes[].ip", present)),
    },
    Row {
        kinds: "Scenario",
        fields: "spec.nodes[].ips, spec.nodes[].podCIDRs",
        class: "dual-stack nodes",
        support: Support::Generated(|d| d.has("Scenario", "spec.nodes[].ips", a_list_of_two)),
    },
    Row {
        kinds: "Scenario",
        fields: "spec.nodes[].zone",
        class: "zones on some nodes",
        support: Support::Generated(|d| d.has("Scenario", "spec.nodes[].zone", present)),
    },
    Row {
        kinds: "Scenario",
        fields: "spec.nodes[].secondaryIPs",
        class: "a second address on every node, its node port and health checks probed, inside or outside \
                `nodePortAddresses`",
        support: Support::Generated(|d| d.has("Scenario", "spec.nodes[].secondaryIPs", present)),
    },
    Row {
        kinds: "Scenario",
        fields: "spec.externalHosts[].name, spec.externalHosts[].ip, spec.externalHosts[].ips",
        class: "one external host, in every family of the case",
        support: Support::Generated(|d| d.has("Scenario", "spec.externalHosts[].name", present)),
    },
    Row {
        kinds: "Scenario",
        fields: "spec.externalHosts[].routes",
        class: "the service CIDR routed through a node",
        support: Support::Generated(|d| d.has("Scenario", "spec.externalHosts[].routes[].via", present)),
    },
    Row {
        kinds: "Scenario",
        fields: "spec.flows.all, spec.flows.count",
        class: "every source × frontend, 3 to 40 attempts",
        support: Support::Generated(|d| d.has("Scenario", "spec.flows.all", truthy)),
    },
    Row {
        kinds: "Scenario",
        fields: "spec.generate",
        class: "many Services in a few lines",
        support: Support::Refused(
            "for scale, which `bench` measures; a generated case stays small so that a failure is nearly minimal \
             when found",
        ),
    },
    Row {
        kinds: "Scenario",
        fields: "spec.minKernel",
        class: "a kernel release",
        support: Support::Refused("a generated case uses only what every kernel the harness supports has"),
    },
    // Probes, of the Scenario and of Steps.
    Row {
        kinds: "Scenario, Step",
        fields: "spec.probes[].name, spec.probes[].from.pod, spec.probes[].to.service, spec.probes[].to.port, \
                 spec.probes[].count",
        class: "a listed flow from a pod to a cluster IP",
        support: Support::Generated(|d| d.probe(from("pod"))),
    },
    Row {
        kinds: "Scenario, Step",
        fields: "spec.probes[].from.node",
        class: "from a node's host network",
        support: Support::Generated(|d| d.probe(from("node"))),
    },
    Row {
        kinds: "Scenario, Step",
        fields: "spec.probes[].from.external",
        class: "from an external host",
        support: Support::Generated(|d| d.probe(from("external"))),
    },
    Row {
        kinds: "Scenario, Step",
        fields: "spec.probes[].from.pods",
        class: "several client pods at once, waiting out an affinity timeout",
        support: Support::Generated(|d| d.probe(from("pods"))),
    },
    Row {
        kinds: "Scenario, Step",
        fields: "spec.probes[].to.nodePort",
        class: "a node port on a node's address",
        support: Support::Generated(|d| d.probe(targets("nodePort"))),
    },
    Row {
        kinds: "Scenario, Step",
        fields: "spec.probes[].to.address",
        class: "a raw address: a deleted Service's old cluster IP, a health-check port on a second node address, \
                127.0.0.1 from outside (martian)",
        support: Support::Generated(|d| d.probe(targets("address"))),
    },
    Row {
        kinds: "Scenario, Step",
        fields: "spec.probes[].to.address",
        class: "a node port on 127.0.0.1, from the node itself",
        support: Support::Refused(
            "not yet generated: served in iptables mode only (localhostNodePorts); the suite's \
             `localhost-node-port` and `localhost-node-port-disabled` judge it",
        ),
    },
    Row {
        kinds: "Scenario, Step",
        fields: "spec.probes[].to.externalIP, spec.probes[].to.via",
        class: "an external IP, from outside through a node",
        support: Support::Generated(|d| d.probe(targets("externalIP"))),
    },
    Row {
        kinds: "Scenario, Step",
        fields: "spec.probes[].to.loadBalancer",
        class: "a load-balancer IP",
        support: Support::Generated(|d| d.probe(targets("loadBalancer"))),
    },
    Row {
        kinds: "Scenario, Step",
        fields: "spec.probes[].to.healthCheck, spec.probes[].to.node",
        class: "a health-check node port",
        support: Support::Generated(|d| d.probe(targets("healthCheck"))),
    },
    Row {
        kinds: "Scenario, Step",
        fields: "spec.probes[].protocol",
        class: "UDP",
        support: Support::Generated(|d| d.probe(|p| p.get("protocol") == Some(&Value::from("UDP")))),
    },
    Row {
        kinds: "Scenario, Step",
        fields: "spec.probes[].protocol",
        class: "SCTP",
        support: Support::Refused(
            "a kernel without SCTP (this harness's own CI machine) skips such a case, and a generated case must \
             be judged alike on every machine; the suite's SCTP scenarios run in the kernel matrix",
        ),
    },
    Row {
        kinds: "Scenario, Step",
        fields: "spec.probes[].interval",
        class: "attempts spaced past a short ClientIP affinity timeout",
        support: Support::Generated(affinity_waited_out),
    },
    Row {
        kinds: "Scenario, Step",
        fields: "spec.probes[].family",
        class: "IPv4 or IPv6 of a dual-stack target",
        support: Support::Refused(
            "`flows: all` probes every family of a dual-stack Service, and a listed probe's family follows from \
             the address it names",
        ),
    },
    Row {
        kinds: "Scenario, Step",
        fields: "spec.probes[].expect",
        class: "a written expectation",
        support: Support::Refused(
            "the oracle states every expectation; a generated case writes none, so nothing in it can disagree \
             with the oracle",
        ),
    },
    Row {
        kinds: "Scenario, Step",
        fields: "spec.probes[].sourcePort",
        class: "a UDP stream: every attempt from one source port, across steps",
        support: Support::Generated(|d| d.probe(|p| p.get("sourcePort").is_some())),
    },
    Row {
        kinds: "Scenario",
        fields: "spec.probes[].hold",
        class: "a TCP connection held across steps",
        support: Support::Generated(|d| d.probe(|p| p.get("hold").is_some_and(truthy))),
    },
    Row {
        kinds: "Step",
        fields: "spec.probes[].held",
        class: "a held connection checked after a step",
        support: Support::Generated(|d| d.has("Step", "spec.probes[].held", present)),
    },
    Row {
        kinds: "Step",
        fields: "spec.probes[].outOfWindow",
        class: "after a segment out of the window",
        support: Support::Generated(|d| d.has("Step", "spec.probes[].outOfWindow", truthy)),
    },
    // Steps.
    Row {
        kinds: "Step",
        fields: "metadata.name, spec.probes",
        class: "a step and the flows after it",
        support: Support::Generated(|d| d.has("Step", "metadata.name", present)),
    },
    Row {
        kinds: "Step",
        fields: "spec.restartProxy",
        class: "a restart alone",
        support: Support::Generated(|d| {
            d.any("Step", |s| values_at(s, "spec.restartProxy").iter().any(|v| truthy(v)))
                && d.after_a_step("Service").next().is_none()
        }),
    },
    Row {
        kinds: "Step",
        fields: "spec.restartProxy",
        class: "with a change made while the proxy was down",
        support: Support::Generated(|d| {
            d.has("Step", "spec.restartProxy", truthy) && d.after_a_step("Service").next().is_some()
        }),
    },
    Row {
        kinds: "Step",
        fields: "spec.delete[].kind, spec.delete[].namespace, spec.delete[].name",
        class: "a Service deleted, with its slices",
        support: Support::Generated(|d| d.has("Step", "spec.delete[].kind", is("Service"))),
    },
    Row {
        kinds: "Step",
        fields: "spec.delete[].kind",
        class: "an EndpointSlice alone, a Pod or a Node deleted",
        support: Support::Refused(
            "endpoints leave by their slice written again without them, as the EndpointSlice controller does; pods \
             and nodes do not change after the start",
        ),
    },
    Row {
        kinds: "Service",
        fields: "metadata.name",
        class: "a Service written again after a step (policies, affinity, type)",
        support: Support::Generated(|d| d.after_a_step("Service").next().is_some()),
    },
    Row {
        kinds: "EndpointSlice",
        fields: "endpoints",
        class: "a slice written again after a step (a rollout: one endpoint drains or leaves, another is added)",
        support: Support::Generated(|d| d.after_a_step("EndpointSlice").next().is_some()),
    },
    Row {
        kinds: "Step",
        fields: "spec.probes[].sourcePort",
        class: "a UDP stream kept across its endpoints' change of readiness",
        support: Support::Generated(|d| udp_stream_across(d, false)),
    },
    Row {
        kinds: "Step",
        fields: "spec.probes[].sourcePort, spec.delete",
        class: "a UDP stream kept across its Service's deletion",
        support: Support::Generated(|d| udp_stream_across(d, true)),
    },
    Row {
        kinds: "Step",
        fields: "spec.probes[].sourcePort, spec.restartProxy",
        class: "a UDP stream kept across endpoints changed while the proxy restarts",
        support: Support::Generated(udp_stream_across_a_restart_with_new_endpoints),
    },
    // Services.
    Row {
        kinds: "Service",
        fields: "metadata.name, metadata.namespace, spec.type",
        class: "ClusterIP",
        support: Support::Generated(|d| d.has("Service", "spec.type", is("ClusterIP"))),
    },
    Row {
        kinds: "Service",
        fields: "spec.type, spec.ports[].nodePort",
        class: "NodePort",
        support: Support::Generated(|d| d.has("Service", "spec.type", is("NodePort"))),
    },
    Row {
        kinds: "Service",
        fields: "spec.type, status.loadBalancer.ingress[].ip",
        class: "LoadBalancer, with one or two ingress IPs or none",
        support: Support::Generated(|d| d.has("Service", "status.loadBalancer.ingress[].ip", present)),
    },
    Row {
        kinds: "Service",
        fields: "spec.type, spec.externalName",
        class: "ExternalName",
        support: Support::Refused(
            "kube-proxy skips it (utils.go ShouldSkipService): it has no flow to probe",
        ),
    },
    Row {
        kinds: "Service",
        fields: "spec.clusterIP, spec.clusterIPs, spec.ipFamilies, spec.ipFamilyPolicy",
        class: "SingleStack, in either family of a dual-stack cluster",
        support: Support::Generated(|d| d.has("Service", "spec.ipFamilyPolicy", is("SingleStack"))),
    },
    Row {
        kinds: "Service",
        fields: "spec.clusterIPs, spec.ipFamilies, spec.ipFamilyPolicy",
        class: "PreferDualStack, both families",
        support: Support::Generated(|d| d.has("Service", "spec.ipFamilies", a_list_of_two)),
    },
    Row {
        kinds: "Service",
        fields: "spec.ipFamilyPolicy",
        class: "RequireDualStack",
        support: Support::Refused(
            "allocated as PreferDualStack is in a dual-stack cluster: the proxy reads the cluster IPs, not the \
             policy",
        ),
    },
    Row {
        kinds: "Service",
        fields: "spec.selector",
        class: "endpoints derived from pods",
        support: Support::Generated(|d| d.has("Service", "spec.selector", present)),
    },
    Row {
        kinds: "Service",
        fields: "spec.publishNotReadyAddresses",
        class: "true",
        support: Support::Generated(|d| d.has("Service", "spec.publishNotReadyAddresses", truthy)),
    },
    Row {
        kinds: "Service",
        fields: "spec.ports[].name, spec.ports[].port, spec.ports[].protocol, spec.ports[].targetPort",
        class: "one or two ports, TCP or UDP, target by number",
        support: Support::Generated(|d| d.has("Service", "spec.ports[].targetPort", Value::is_u64)),
    },
    Row {
        kinds: "Service",
        fields: "spec.ports[].targetPort",
        class: "target by the container port's name",
        support: Support::Generated(|d| d.has("Service", "spec.ports[].targetPort", Value::is_string)),
    },
    Row {
        kinds: "Service",
        fields: "spec.ports[].appProtocol",
        class: "any",
        support: Support::Refused("changes nothing a proxy does (`fields.rs`: irrelevant)"),
    },
    Row {
        kinds: "Service",
        fields: "spec.externalIPs",
        class: "an address of nobody's",
        support: Support::Generated(|d| d.has("Service", "spec.externalIPs[]", present)),
    },
    Row {
        kinds: "Service",
        fields: "spec.externalIPs",
        class: "a node's own address",
        support: Support::Generated(service_ip_on_a_node),
    },
    Row {
        kinds: "Service",
        fields: "spec.externalIPs, spec.ports[].port",
        class: "a node's own address, on a port that is another Service's node port",
        support: Support::Generated(service_port_on_a_node_port),
    },
    Row {
        kinds: "Service",
        fields: "spec.externalTrafficPolicy",
        class: "Cluster, Local",
        support: Support::Generated(|d| d.has("Service", "spec.externalTrafficPolicy", is("Local"))),
    },
    Row {
        kinds: "Service",
        fields: "spec.healthCheckNodePort",
        class: "with externalTrafficPolicy Local",
        support: Support::Generated(|d| d.has("Service", "spec.healthCheckNodePort", present)),
    },
    Row {
        kinds: "Service",
        fields: "spec.internalTrafficPolicy",
        class: "Cluster, Local",
        support: Support::Generated(|d| d.has("Service", "spec.internalTrafficPolicy", is("Local"))),
    },
    Row {
        kinds: "Service",
        fields: "spec.sessionAffinity",
        class: "ClientIP, default timeout",
        support: Support::Generated(|d| {
            d.any("Service", |s| {
                values_at(s, "spec.sessionAffinity").iter().any(|v| is("ClientIP")(v))
                    && values_at(s, "spec.sessionAffinityConfig").is_empty()
            })
        }),
    },
    Row {
        kinds: "Service",
        fields: "spec.sessionAffinityConfig.clientIP.timeoutSeconds",
        class: "long (a minute or more)",
        support: Support::Generated(|d| {
            d.has("Service", "spec.sessionAffinityConfig.clientIP.timeoutSeconds", |t| t.as_u64() >= Some(60))
        }),
    },
    Row {
        kinds: "Service",
        fields: "spec.sessionAffinityConfig.clientIP.timeoutSeconds",
        class: "short (seconds), waited out between attempts",
        support: Support::Generated(affinity_waited_out),
    },
    Row {
        kinds: "Service",
        fields: "spec.loadBalancerSourceRanges",
        class: "the external host's, the node network, elsewhere; one or two",
        support: Support::Generated(|d| d.has("Service", "spec.loadBalancerSourceRanges[]", present)),
    },
    Row {
        kinds: "Service",
        fields: "spec.loadBalancerSourceRanges, status.loadBalancer.ingress",
        class: "several load-balancer IPs, a range holding the nodes' addresses",
        support: Support::Generated(several_lb_ips_and_node_range),
    },
    Row {
        kinds: "Service",
        fields: "spec.loadBalancerSourceRanges, status.loadBalancer.ingress",
        class: "load-balancer IPs on the nodes' second addresses, ranges holding their primary addresses only",
        support: Support::Generated(lb_ip_on_a_node),
    },
    Row {
        kinds: "Service",
        fields: "spec.allocateLoadBalancerNodePorts",
        class: "false",
        support: Support::Generated(|d| {
            d.has("Service", "spec.allocateLoadBalancerNodePorts", |v| v.as_bool() == Some(false))
        }),
    },
    Row {
        kinds: "Service",
        fields: "spec.trafficDistribution",
        class: "PreferClose",
        support: Support::Generated(|d| d.has("Service", "spec.trafficDistribution", is("PreferClose"))),
    },
    Row {
        kinds: "Service",
        fields: "spec.trafficDistribution",
        class: "PreferSameZone, PreferSameNode",
        support: Support::Refused("refused by the reader: kube-proxy v1.30 knows PreferClose only"),
    },
    Row {
        kinds: "Service",
        fields: "metadata.annotations",
        class: "`service.kubernetes.io/topology-mode: Auto`",
        support: Support::Generated(|d| {
            d.has("Service", "metadata.annotations", |a| {
                a.get("service.kubernetes.io/topology-mode").is_some()
            })
        }),
    },
    Row {
        kinds: "Service",
        fields: "metadata.annotations",
        class: "`service.kubernetes.io/topology-aware-hints`",
        support: Support::Refused("the older name of the same annotation (serviceport.go reads either)"),
    },
    Row {
        kinds: "Service, EndpointSlice",
        fields: "metadata.labels",
        class: "`service-proxy-name`, `headless`",
        support: Support::Refused("refused by the reader: kube-proxy's informers skip such objects"),
    },
    Row {
        kinds: "Service",
        fields: "status.loadBalancer.ingress[].ipMode",
        class: "VIP (unwritten), Proxy",
        support: Support::Generated(|d| {
            d.has("Service", "status.loadBalancer.ingress[].ipMode", is("Proxy"))
        }),
    },
    Row {
        kinds: "Service",
        fields: "status.loadBalancer.ingress[].hostname",
        class: "a hostname without an IP",
        support: Support::Refused("refused by the reader: kube-proxy skips an ingress without an IP"),
    },
    // EndpointSlices.
    Row {
        kinds: "EndpointSlice",
        fields: "metadata.name, metadata.namespace, metadata.labels, addressType, ports, endpoints[].addresses",
        class: "written slices, one per family, of pods",
        support: Support::Generated(|d| d.has("EndpointSlice", "endpoints[].targetRef.name", present)),
    },
    Row {
        kinds: "EndpointSlice",
        fields: "addressType",
        class: "IPv6",
        support: Support::Generated(|d| d.has("EndpointSlice", "addressType", is("IPv6"))),
    },
    Row {
        kinds: "EndpointSlice",
        fields: "addressType",
        class: "FQDN",
        support: Support::Refused("refused by the reader: kube-proxy reads IP slices only"),
    },
    Row {
        kinds: "EndpointSlice",
        fields: "endpoints",
        class: "none (`endpoints: []`)",
        support: Support::Generated(|d| {
            d.has("EndpointSlice", "endpoints", |e| e.as_array().is_some_and(Vec::is_empty))
        }),
    },
    Row {
        kinds: "EndpointSlice",
        fields: "endpoints[].addresses, endpoints[].nodeName",
        class: "a node's host network, with and without `nodeName`",
        support: Support::Generated(|d| {
            d.any("EndpointSlice", |s| {
                values_at(s, "endpoints[]")
                    .iter()
                    .any(|e| e.get("targetRef").is_none() && e.get("nodeName").is_none())
            })
        }),
    },
    Row {
        kinds: "EndpointSlice",
        fields: "endpoints[].addresses",
        class: "an external host's address",
        support: Support::Refused(
            "not yet generated: the suite's `external-database` judges an endpoint outside the cluster",
        ),
    },
    Row {
        kinds: "EndpointSlice",
        fields: "endpoints[].conditions.ready, endpoints[].conditions.serving, endpoints[].conditions.terminating",
        class: "ready",
        support: Support::Generated(|d| {
            d.has("EndpointSlice", "endpoints[].conditions", conditions(true, true, false))
        }),
    },
    Row {
        kinds: "EndpointSlice",
        fields: "endpoints[].conditions",
        class: "terminating and serving",
        support: Support::Generated(|d| {
            d.has("EndpointSlice", "endpoints[].conditions", conditions(false, true, true))
        }),
    },
    Row {
        kinds: "EndpointSlice",
        fields: "endpoints[].conditions",
        class: "terminating, not serving",
        support: Support::Generated(|d| {
            d.has("EndpointSlice", "endpoints[].conditions", conditions(false, false, true))
        }),
    },
    Row {
        kinds: "EndpointSlice",
        fields: "endpoints[].conditions",
        class: "not ready",
        support: Support::Generated(|d| {
            d.has("EndpointSlice", "endpoints[].conditions", conditions(false, false, false))
        }),
    },
    Row {
        kinds: "EndpointSlice",
        fields: "endpoints[].hints.forZones",
        class: "a zone hint on every ready endpoint (its own zone or the other)",
        support: Support::Generated(|d| d.has("EndpointSlice", "endpoints[].hints.forZones[].name", present)),
    },
    Row {
        kinds: "EndpointSlice",
        fields: "endpoints[].hints.forZones",
        class: "hints on some ready endpoints only",
        support: Support::Generated(|d| d.any("EndpointSlice", partial_hints)),
    },
    Row {
        kinds: "EndpointSlice",
        fields: "endpoints[].hints.forNodes",
        class: "node hints",
        support: Support::Refused("refused by the reader: kube-proxy v1.30 reads zone hints only"),
    },
    Row {
        kinds: "EndpointSlice",
        fields: "endpoints[].zone, endpoints[].targetRef, endpoints[].hostname, endpoints[].deprecatedTopology",
        class: "any",
        support: Support::Generated(|d| d.has("EndpointSlice", "endpoints[].zone", present)),
    },
    // Pods.
    Row {
        kinds: "Pod",
        fields: "metadata.name, metadata.namespace, metadata.labels, spec.nodeName, spec.containers, \
                 status.podIP, status.podIPs, status.phase",
        class: "a running pod on a node, in every family of the case",
        support: Support::Generated(|d| d.has("Pod", "spec.nodeName", present)),
    },
    Row {
        kinds: "Pod",
        fields: "spec.containers[].ports",
        class: "a named container port",
        support: Support::Generated(|d| d.has("Pod", "spec.containers[].ports[].name", present)),
    },
    Row {
        kinds: "Pod",
        fields: "status.conditions",
        class: "not ready",
        support: Support::Generated(|d| d.has("Pod", "status.conditions[].status", is("False"))),
    },
    Row {
        kinds: "Pod",
        fields: "metadata.deletionTimestamp",
        class: "terminating",
        support: Support::Generated(|d| d.has("Pod", "metadata.deletionTimestamp", present)),
    },
    Row {
        kinds: "Pod",
        fields: "status.phase",
        class: "Pending, Succeeded or Failed, without an address",
        support: Support::Refused("such a pod is not built and serves nothing: to a proxy it is no pod"),
    },
    Row {
        kinds: "Pod",
        fields: "spec.hostNetwork",
        class: "true",
        support: Support::Refused(
            "a host-network endpoint is written as a slice endpoint at its node's address, which is all kube-proxy \
             reads of it (derived slices over host-network pods are refused by the reader)",
        ),
    },
    Row {
        kinds: "Pod",
        fields: "spec.hostname, spec.subdomain",
        class: "any",
        support: Support::Refused("changes nothing a proxy does (`fields.rs`: irrelevant)"),
    },
    // Nodes.
    Row {
        kinds: "Node",
        fields: "metadata, spec, status",
        class: "Node objects",
        support: Support::Refused(
            "nodes are written under `spec.nodes`, which the reader turns into the Node objects a proxy reads \
             (`node_objects.rs`)",
        ),
    },
];

/// Whether some row covers field `path` of a document of `kind`: its own path, one above it,
/// or (for a list or a mapping of fields) one below.
pub fn covered(kind: &str, path: &str) -> bool {
    let below = |inner: &str, outer: &str| {
        inner == outer || inner.starts_with(&format!("{outer}.")) || inner.starts_with(&format!("{outer}["))
    };
    let path = path.trim_end_matches("[]");
    ROWS.iter().any(|row| {
        let kind_matches = row.kinds == "any" || row.kinds.split(", ").any(|k| k == kind);
        let fields = || row.fields.split(", ").map(|f| f.trim_end_matches("[]"));
        kind_matches && fields().any(|field| below(path, field) || below(field, path))
    })
}

/// The table as the manual shows it.
pub fn markdown() -> String {
    let mut out = String::from("| documents | fields | values | generated |\n| --- | --- | --- | --- |\n");
    for row in ROWS {
        let fields: Vec<String> = row.fields.split(", ").map(|f| format!("`{f}`")).collect();
        let support = match &row.support {
            Support::Generated(_) => "yes".to_string(),
            Support::Refused(why) => format!("no: {why}"),
        };
        out.push_str(&format!("| {} | {} | {} | {support} |\n", row.kinds, fields.join(", "), row.class));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_step_into_every_element_of_a_list() {
        let v: Value = serde_json::json!({"spec": {"ports": [{"port": 80}, {"port": 81}]}});
        let ports: Vec<u64> = values_at(&v, "spec.ports[].port").iter().filter_map(|p| p.as_u64()).collect();
        assert_eq!(ports, vec![80, 81]);
        assert!(values_at(&v, "spec.selector").is_empty());
    }

    /// The files of up to `count` cases of `seed`, as `explore` writes them, one at a time.
    fn generated(seed: u64, count: u64) -> impl Iterator<Item = Documents> {
        let mut guide = crate::explore::features::FieldCombinations::default();
        (0..count)
            .filter_map(move |n| {
                crate::explore::prepare(crate::explore::generate(seed, n, &mut guide), "").ok()
            })
            .map(|ready| Documents::read(&ready.text).expect("a generated file is YAML"))
    }

    #[test]
    fn every_row_marked_generated_is_in_some_generated_file() {
        // Generating is the cost (about 40 ms a case unoptimised): stop once every row is seen.
        let mut missing: Vec<&Row> =
            ROWS.iter().filter(|row| matches!(row.support, Support::Generated(_))).collect();
        for file in generated(3, 600) {
            missing.retain(|row| !matches!(row.support, Support::Generated(found) if found(&file)));
            if missing.is_empty() {
                break;
            }
        }
        let missing: Vec<String> =
            missing.iter().map(|row| format!("{}: {} ({})", row.kinds, row.fields, row.class)).collect();
        assert!(
            missing.is_empty(),
            "rows marked generated that 600 cases never wrote:\n{}",
            missing.join("\n")
        );
    }

    /// Free-form maps: their keys are data, not fields.
    const FREE_FORM: &[&str] = &["labels", "annotations", "selector", "featureGates"];

    /// Every field path of `value`, lists written `[]`.
    fn paths(value: &Value, at: String, out: &mut Vec<String>) {
        match value {
            Value::Object(map) if !FREE_FORM.iter().any(|f| at.ends_with(f)) => {
                for (key, v) in map {
                    let below = if at.is_empty() { key.clone() } else { format!("{at}.{key}") };
                    paths(v, below, out);
                }
            }
            Value::Array(items) => {
                if items.is_empty() {
                    out.push(format!("{at}[]"));
                }
                for item in items {
                    paths(item, format!("{at}[]"), out);
                }
            }
            _ => out.push(at),
        }
    }

    /// (kind, path) of every field in the shipped suite and the annotated reference.
    fn fields_in_files() -> Vec<(String, String)> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(root.join("scenarios"))
            .expect("the suite")
            .map(|e| e.expect("an entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            .collect();
        files.push(root.join("docs/src/scenarios/annotated.yaml"));
        let mut fields = Vec::new();
        for file in files {
            let text = std::fs::read_to_string(&file).expect("readable");
            let docs = Documents::read(&text).unwrap_or_else(|| panic!("{} is YAML", file.display()));
            for doc in &docs.docs {
                let items =
                    doc.get("items").and_then(Value::as_array).cloned().unwrap_or_else(|| vec![doc.clone()]);
                for item in items {
                    let kind = item.get("kind").and_then(Value::as_str).unwrap_or("?").to_string();
                    let mut found = Vec::new();
                    paths(&item, String::new(), &mut found);
                    fields.extend(found.into_iter().map(|p| (kind.clone(), p)));
                }
            }
        }
        fields
    }

    /// (kind, path) of every field the reader's audit (`scenario/fields.rs`) names.
    fn fields_in_the_audit() -> Vec<(String, String)> {
        let audit = include_str!("../../scenario/src/scenario/fields.rs");
        let mut kind = String::new();
        let mut fields = Vec::new();
        for line in audit.lines() {
            if let Some(heading) = line.strip_prefix("//! ## ") {
                kind = heading.split_whitespace().next().unwrap_or("").to_string();
            }
            let Some(first_column) = line.strip_prefix("//! | ").and_then(|l| l.split(" | ").next()) else {
                continue;
            };
            for token in first_column.split('`').skip(1).step_by(2) {
                // `metadata.labels["…"]` and `status.addresses[type=InternalIP]` name the field
                // before the bracket; `…/topology-aware-hints` continues the one before.
                // A token with a slash is a label's key, not a field.
                let path = token.split(['[', ' ']).next().unwrap_or("");
                if path.starts_with(|c: char| c.is_ascii_lowercase()) && !path.contains('/') {
                    fields.push((kind.clone(), path.to_string()));
                }
            }
        }
        assert!(fields.len() > 40, "the audit's tables were not found: {fields:?}");
        fields
    }

    #[test]
    fn every_field_of_the_format_is_some_rows() {
        let mut missing: Vec<String> = fields_in_files()
            .into_iter()
            .chain(fields_in_the_audit())
            .filter(|(kind, path)| !covered(kind, path))
            .map(|(kind, path)| format!("{kind} {path}"))
            .collect();
        missing.sort();
        missing.dedup();
        assert!(
            missing.is_empty(),
            "fields of the format no row of the parity table covers:\n{}",
            missing.join("\n")
        );
    }

    #[test]
    fn the_manual_shows_the_table() {
        let manual_path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/src/explore.md");
        let manual = std::fs::read_to_string(&manual_path).expect("the manual");
        let (start, end) = ("<!-- parity:start -->\n", "<!-- parity:end -->");
        let (Some(i), Some(j)) = (manual.find(start), manual.find(end)) else {
            panic!("{} lacks the markers {start:?} and {end:?}", manual_path.display());
        };
        let shown = &manual[i + start.len()..j];
        if shown != markdown() {
            if std::env::var_os("PACKETPROOF_BLESS").is_some() {
                let updated = format!("{}{}{}", &manual[..i + start.len()], markdown(), &manual[j..]);
                std::fs::write(&manual_path, updated).expect("writing the manual");
            } else {
                panic!(
                    "the manual's parity table is not the code's: `PACKETPROOF_BLESS=1 cargo test -p packetproof \
                     --lib parity` writes it"
                );
            }
        }
    }

    #[test]
    fn a_row_covers_the_fields_below_its_own() {
        assert!(covered("Service", "spec.ports[].nodePort"));
        assert!(covered("Scenario", "spec.probes[].expect.verdict"));
        assert!(covered("Step", "spec.probes[].to.healthCheck"));
        assert!(covered("Service", "spec.ports"));
        assert!(!covered("Service", "spec.noSuchField"));
        assert!(!covered("Pod", "spec.externalIPs"));
    }
}
