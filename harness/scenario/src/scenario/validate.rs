//! The whole check of one file's documents, in dependency order, and the assembly of the
//! model once nothing is wrong: networks and nodes → pods → services → endpoints → probes
//! (given, then generated flows), then what only the admission stage can tell: whether the
//! proxy can be built for the file, and the oracle's findings on every probe. The same pipeline
//! assembles the first state and every step's, objects served as kube-apiserver stores them.

use std::collections::HashMap;
use std::path::Path;

use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::model::{Cluster, Endpoint, Node, Objects, Probe, Scenario, Service, Step};

use super::addresses::Addresses;
use super::endpoints::{self, Context, Given, SliceData, endpoints_for};
use super::error::{Diagnostics, Site};
use super::objects::{self, Classified, Parsed};
use super::pods::Pods;
use super::registry::Registry;
use super::scenario_doc::ScenarioDoc;
use super::selectors::ByLabel;
use super::services::ServiceEntry;
use super::steps::{self, StepDoc};
use super::yaml::{Document, FieldPath, Pos};
use super::{
    Admission, UNDEFINED_OUTCOME, backend_names, defaults, derive, flows, held, host_network, node_objects,
    pods, probes, referents, scenario_doc, services,
};

pub(crate) fn build(
    docs: &[Document],
    source: &Path,
    admission: &dyn Admission,
    diag: &mut Diagnostics,
) -> Option<Scenario> {
    let (first, step_docs) = steps::split(docs);
    let mut assembled = assemble(&first, None, source, admission, diag)?;
    admit_probes(&mut assembled, admission, diag);
    let mut scenario = assembled.scenario;
    // Each step's state is the one before it, changed; each is checked whole.
    let mut state = first;
    for docs in &step_docs {
        let step = steps::read(docs.doc, diag);
        state = steps::next_state(&state, &step, &docs.applied, diag);
        if let Some(mut assembled) = assemble(&state, Some(&step), source, admission, diag) {
            admit_probes(&mut assembled, admission, diag);
            let mut next = into_step(assembled.scenario, &step);
            let earlier: Vec<&crate::model::Probe> =
                scenario.probes.iter().chain(scenario.steps.iter().flat_map(|s| &s.probes)).collect();
            let checks = held::resolve(&step.site, &next.name, &step.held, &earlier, diag);
            next.probes.extend(checks);
            scenario.steps.push(next);
        }
    }
    diag.is_empty().then_some(scenario)
}

/// A step's assembled state; its probes are named after it, so reports tell the phases apart.
fn into_step(state: Scenario, doc: &steps::StepDoc<'_>) -> Step {
    let name = doc.name.clone().unwrap_or_default();
    let probes = state
        .probes
        .into_iter()
        .map(|mut p| {
            p.name = format!("{name}: {}", p.name);
            p
        })
        .collect();
    Step {
        name,
        description: doc.description.clone(),
        cluster: state.cluster,
        objects: state.objects,
        probes,
        restart_proxy: doc.restart_proxy,
    }
}

/// Everything but the oracle's check, for tests of what the parser alone accepts.
#[cfg(test)]
pub(crate) fn build_without_oracle(
    docs: &[Document],
    source: &Path,
    admission: &dyn Admission,
    diag: &mut Diagnostics,
) -> Option<Scenario> {
    let docs: Vec<&Document> = docs.iter().collect();
    assemble(&docs, None, source, admission, diag).map(|a| a.scenario)
}

/// A scenario whose every part is valid on its own.
struct Assembled<'a> {
    scenario: Scenario,
    /// The Scenario document, where the oracle's findings are reported.
    doc: &'a Document,
    /// How many of `scenario.probes` are given in `spec.probes`; the rest are generated flows.
    given: usize,
}

/// Assembles a state: the file's first one (`step` none), or the one after `step`, whose
/// probes replace the Scenario document's.
fn assemble<'a>(
    docs: &[&'a Document],
    step: Option<&StepDoc<'a>>,
    source: &Path,
    admission: &dyn Admission,
    diag: &mut Diagnostics,
) -> Option<Assembled<'a>> {
    let classified = objects::classify(docs, diag);
    let document = pick_scenario(&classified, diag);
    let mut addresses = Addresses::default();
    // A step's state re-reads the Scenario document, whose findings the first state reported.
    let mut doc = match step {
        None => scenario_doc::read(document, &mut addresses, diag),
        Some(_) => scenario_doc::read(document, &mut addresses, &mut Diagnostics::new(source.into())),
    };
    node_objects::read(
        &classified.nodes,
        &classified.unparsed,
        doc.site.as_ref().filter(|_| step.is_none()),
        &doc.networks,
        &mut doc.nodes,
        &mut addresses,
        diag,
    );
    match step {
        None => check_proxy(&doc, source, admission, diag),
        Some(step) => {
            doc.probes = step.probes.clone();
            doc.flows = None;
            doc.site = Some(step.site.clone());
        }
    }
    let mut pods = pods::read(
        &classified.pods,
        &classified.unparsed,
        &doc.nodes,
        doc.networks.is_dual(),
        &mut addresses,
        diag,
    );
    backend_names::refuse_shared(
        &[
            backend_names::Kind::of(&pods.registry),
            backend_names::Kind::of(&doc.nodes),
            backend_names::Kind::of(&doc.external_hosts),
        ],
        diag,
    );
    let mut services =
        services::read(&classified.services, &classified.unparsed, &doc.networks, &mut addresses, diag);
    for name in &classified.kindless {
        // A document without a readable kind may be any pod or service (or its address).
        pods.registry.tolerate(name.as_deref());
        pods.ips_incomplete = true;
        services.tolerate(name.as_deref());
    }
    let cx =
        Context { services: &services, pods: &pods, nodes: &doc.nodes, external_hosts: &doc.external_hosts };
    let given = endpoints::read_given(&classified.slices, &classified.unparsed, &cx, diag);
    let Derived { endpoints: derived_endpoints, slices: derived, warnings } =
        derive_endpoints(&services, &pods, &doc.nodes, &given, classified.services.len(), diag);
    let names = referents::Names {
        nodes: &doc.nodes,
        external_hosts: &doc.external_hosts,
        pods: &pods.registry,
        services: &services,
    };
    let (probes, given_probes) = resolve_probes(&doc, &names, diag);
    if !diag.is_empty() {
        return None;
    }

    let model_services = model_services(services, derived_endpoints, &given);
    // What a proxy is served: the objects as kube-apiserver would store them (moved, not
    // copied: a file's objects are most of what reading it holds).
    let objects = Objects {
        services: classified.services.into_iter().map(|p| defaults::service(p.object)).collect(),
        endpoint_slices: given_then_derived(classified.slices, derived),
        pods: classified.pods.into_iter().map(|p| defaults::pod(p.object)).collect(),
    };
    let cluster = Cluster {
        second_family: doc.networks.second_family()?,
        pod_cidr: doc.networks.pod_cidr?,
        service_cidr: doc.networks.service_cidr?,
        node_network: doc.networks.node_network?,
        nodes: doc.nodes.into_values().collect(),
        external_hosts: doc.external_hosts.into_values().collect(),
        pods: pods.registry.into_values().map(|e| e.pod).collect(),
        services: model_services,
        proxy: doc.proxy_config,
    };
    let scenario = Scenario {
        name: doc.name?,
        source: source.to_path_buf(),
        description: doc.description,
        min_kernel: doc.min_kernel,
        proxy: doc.proxy,
        cluster,
        probes,
        objects,
        unjudged_flows: Vec::new(),
        warnings,
        steps: Vec::new(),
    };
    let doc = match step {
        Some(step) => step.site.doc,
        None => document?,
    };
    Some(Assembled { scenario, doc, given: given_probes })
}

/// What derivation made of the Services with a selector and no slice in the file.
struct Derived {
    /// Each Service's endpoints, per port, in the registry's order; none for a Service whose
    /// endpoints come from the file's slices.
    endpoints: Vec<Option<Vec<Vec<Endpoint>>>>,
    /// The derived EndpointSlices, as the proxy is served them.
    slices: Vec<EndpointSlice>,
    /// Selectors that match no pod: valid, but often a typo in a label.
    warnings: Vec<String>,
}

/// The EndpointSlice controller's part: slices for each Service whose slices the file does not
/// give, from the pods its selector picks.
fn derive_endpoints(
    services: &Registry<ServiceEntry<'_>>,
    pods: &Pods,
    nodes: &Registry<Node>,
    given: &Given,
    count: usize,
    diag: &mut Diagnostics,
) -> Derived {
    // About one slice per Service: room made at once, not by doubling (they are large).
    let mut derived = Vec::with_capacity(count);
    // Each Service's endpoints from the slices derived for it (none: from the file's slices),
    // in the registry's order. Worked out as its slices are derived, so that only their objects
    // are held from then on, not their data too.
    let mut derived_endpoints = Vec::with_capacity(count);
    let host_network_pods =
        ByLabel::new(pods.host_network.iter().map(|p| (p, p.namespace.as_str(), &p.labels)));
    let pods_by_label =
        ByLabel::new(pods.registry.values().map(|p| (p, p.pod.namespace.as_str(), &p.pod.labels)));
    let mut warnings = Vec::new();
    for e in services.values() {
        if given.services_with_slices.contains(&e.service.name) {
            derived_endpoints.push(None);
            continue;
        }
        if host_network::refuse_derived(e, &host_network_pods, diag) {
            derived_endpoints.push(None);
        } else {
            let slices = derive::derive(e, &pods_by_label, nodes, diag);
            let data: Vec<&SliceData> = slices.iter().map(|(data, _)| data).collect();
            derived_endpoints.push(Some(endpoints_for(&e.service, &data)));
            derived.extend(slices.into_iter().map(|(_, object)| object));
        }
        // Valid (its ports then have no endpoints, and reject), but often a typo in a label.
        if let Some(selector) = &e.selector
            && !selector.is_empty()
            && !pods.ips_incomplete
            && !pods.registry.is_incomplete()
            && pods_by_label.selected(&e.service.namespace, selector).next().is_none()
        {
            let shown: Vec<String> = selector.iter().map(|(k, v)| format!("{k}: {v}")).collect();
            warnings.push(format!(
                "Service {}: the selector {{{}}} matches no pod, so its ports have no endpoints",
                e.service.namespaced_name(),
                shown.join(", ")
            ));
        }
    }
    Derived { endpoints: derived_endpoints, slices: derived, warnings }
}

/// The probes given in `spec.probes`, then the flows `spec.flows` generates; and how many are
/// given.
fn resolve_probes(
    doc: &ScenarioDoc<'_>,
    names: &referents::Names<'_, '_>,
    diag: &mut Diagnostics,
) -> (Vec<Probe>, usize) {
    let mut probes = match &doc.site {
        Some(site) => probes::resolve(site, &doc.probes, names, diag),
        None => Vec::new(),
    };
    let given_probes = probes.len();
    if let (Some(flows), Some(site)) = (&doc.flows, &doc.site) {
        let generated = flows::generate(flows, names);
        flows::check_names(site, &doc.probes, &generated, diag);
        if generated.is_empty() && doc.probes.is_empty() {
            diag.value(
                site,
                &FieldPath::parse("spec.flows"),
                "flows found nothing to probe: the scenario has no Service",
            );
        }
        probes.extend(generated);
    }
    (probes, given_probes)
}

/// The model's Services, each port with its endpoints: derived ones, or those of the file's
/// slices of the Service.
fn model_services(
    services: Registry<ServiceEntry<'_>>,
    derived_endpoints: Vec<Option<Vec<Vec<Endpoint>>>>,
    given: &Given,
) -> Vec<Service> {
    // Each Service's slices in the file, found by its name rather than searched for.
    let mut slices_of: HashMap<&str, Vec<&SliceData>> = HashMap::with_capacity(given.slices.len());
    for slice in &given.slices {
        slices_of.entry(slice.service.as_str()).or_default().push(slice);
    }
    let mut derived_endpoints = derived_endpoints.into_iter();
    services
        .into_values()
        .map(|e| {
            let mut service = e.service;
            let endpoints = derived_endpoints.next().flatten().unwrap_or_else(|| {
                let slices = slices_of.get(service.name.as_str()).map(Vec::as_slice).unwrap_or_default();
                endpoints_for(&service, slices)
            });
            for (port, endpoints) in service.ports.iter_mut().zip(endpoints) {
                port.endpoints = endpoints;
            }
            service
        })
        .collect()
}

/// The EndpointSlices a proxy is served: the file's, then the derived ones. The derived are
/// most of them: they are defaulted in the vector that holds them.
fn given_then_derived(
    given: Vec<Parsed<'_, EndpointSlice>>,
    derived: Vec<EndpointSlice>,
) -> Vec<EndpointSlice> {
    let mut all: Vec<EndpointSlice> = derived.into_iter().map(defaults::endpoint_slice).collect();
    all.splice(0..0, given.into_iter().map(|p| defaults::endpoint_slice(p.object)));
    all
}

/// The file's one Scenario document; reports none or several.
fn pick_scenario<'a>(classified: &Classified<'a>, diag: &mut Diagnostics) -> Option<&'a Document> {
    let (first, rest) = match classified.scenarios.split_first() {
        Some(split) => split,
        None if classified.scenario_unreadable => return None,
        None => {
            diag.push(
                Pos { line: 1, column: 1 },
                "kind".to_string(),
                "no Scenario document: a scenario file needs one document with \
                 apiVersion: packetproof.dev/v1alpha1 and kind: Scenario",
            );
            return None;
        }
    };
    for doc in rest {
        diag.value(
            &Site::new(doc, ""),
            &FieldPath::parse("kind"),
            format!(
                "a second Scenario document (the first starts at line {}): a file holds exactly one",
                first.start.line
            ),
        );
    }
    Some(first)
}

/// `spec.proxy` can be built for this file and its nodes (an adapter checks its options, and
/// that the files they name exist), so that `check` refuses what `run` could not set up.
fn check_proxy(
    doc: &scenario_doc::ScenarioDoc<'_>,
    source: &Path,
    admission: &dyn Admission,
    diag: &mut Diagnostics,
) {
    let Some(site) = &doc.site else { return };
    let nodes: Vec<&str> = doc.nodes.names().collect();
    if let Some(problem) = admission.proxy_problem(&doc.proxy, source, &nodes) {
        diag.value(site, &FieldPath::parse("spec.proxy"), problem);
    }
}

/// The last check, once the model is whole, asked once: every probe must be predictable and
/// every `expect:` must agree with Kubernetes semantics. Generated flows whose outcome the
/// oracle cannot define are left out and listed, rather than guessed at, or reported as errors
/// in a file that only asked for "all"; any other finding on a generated flow names it, at
/// `spec.flows`.
fn admit_probes(assembled: &mut Assembled<'_>, admission: &dyn Admission, diag: &mut Diagnostics) {
    let given = assembled.given;
    let site = Site::new(assembled.doc, "");
    let scenario = &mut assembled.scenario;
    let written = written_positions(&scenario.probes);
    let mut undefined = Vec::new();
    let mut last = None;
    for (index, field, message) in admission.probe_problems(&scenario.cluster, &scenario.probes) {
        if index >= given && field == UNDEFINED_OUTCOME {
            undefined.push((index, message));
        } else if index < given {
            // The parts of a probe from several clients share its entry, and mostly its problem.
            let problem = (written[index], field, message);
            if last.as_ref() != Some(&problem) {
                let path = FieldPath::parse(&format!("spec.probes[{}].{field}", problem.0));
                diag.value(&site, &path, problem.2.clone());
            }
            last = Some(problem);
        } else {
            let name = &scenario.probes[index].name;
            diag.value(&site, &FieldPath::parse("spec.flows"), format!("{name}: {message}"));
        }
    }
    // The findings come in the probes' order.
    let mut undefined = undefined.into_iter().peekable();
    let mut kept = Vec::with_capacity(scenario.probes.len());
    for (i, probe) in std::mem::take(&mut scenario.probes).into_iter().enumerate() {
        match undefined.next_if(|(at, _)| *at == i) {
            Some((_, reason)) => scenario.unjudged_flows.push((probe.name, reason)),
            None => kept.push(probe),
        }
    }
    scenario.probes = kept;
}

/// Each probe's position in `spec.probes`: the parts of a probe from several clients are one
/// entry there, next to each other here.
fn written_positions(probes: &[Probe]) -> Vec<usize> {
    let mut out = Vec::with_capacity(probes.len());
    let mut previous: Option<&Probe> = None;
    for probe in probes {
        let same_entry = previous.is_some_and(|p| {
            p.clients.as_ref().is_some_and(|c| Some(&c.probe) == probe.clients.as_ref().map(|c| &c.probe))
        });
        let next = match out.last() {
            Some(&at) if same_entry => at,
            Some(&at) => at + 1,
            None => 0,
        };
        out.push(next);
        previous = Some(probe);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Source;
    use crate::scenario::tests::WEB;
    use crate::scenario::yaml;

    #[test]
    fn undefined_flows_are_set_aside_and_other_findings_name_the_flow_at_spec_flows() {
        let docs = yaml::parse(WEB).unwrap();
        let docs: Vec<&Document> = docs.iter().collect();
        let mut diag = Diagnostics::new("x.yaml".into());
        let admission = crate::scenario::tests::Checks;
        let mut assembled = assemble(&docs, None, Path::new("x.yaml"), &admission, &mut diag).unwrap();
        assert_eq!(assembled.given, 3);
        // A flow no generator makes (external hosts have no route to cluster IPs), so the
        // oracle cannot predict it.
        let mut undefined = assembled.scenario.probes[0].clone();
        undefined.name = "flow: external outside -> web:http clusterIP".into();
        undefined.from = Source::External("outside".into());
        undefined.expect = None;
        // An outcome Kubernetes leaves open, stated without saying whose choice it is.
        let mut unowned = assembled.scenario.probes[2].clone();
        unowned.name = "flow: node node-a -> 10.96.0.99:80".into();
        unowned.expect.as_mut().unwrap().profile = None;
        assembled.scenario.probes.extend([undefined, unowned]);
        admit_probes(&mut assembled, &admission, &mut diag);
        let errors = diag.into_errors().errors;
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].field, "spec.flows");
        assert!(errors[0].message.starts_with("flow: node node-a -> 10.96.0.99:80: "), "{}", errors[0]);
        let unjudged: Vec<&str> = assembled.scenario.unjudged_flows.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(unjudged, ["flow: external outside -> web:http clusterIP"]);
        assert_eq!(assembled.scenario.probes.len(), 4);
    }
}
