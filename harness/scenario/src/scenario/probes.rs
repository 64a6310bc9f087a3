//! `spec.probes` → `model::Probe`, every name resolved against the scenario (targets in
//! `targets.rs`).

use std::collections::HashMap;

use crate::model::{
    Clients, IpFamily, Life, Probe, Protocol, Source, StatedExpectation, StatedSource, StatedVerdict, Target,
};

use super::duration::parse_interval;
use super::error::{Diagnostics, Site};
use super::referents::Names;
use super::registry::Lookup;
use super::spec::{ExpectSpec, ProbeSpec, ProtocolSpec, SourceKindSpec, SourceSpec, VerdictSpec};
use super::targets;
use super::yaml::FieldPath;

pub(crate) const DEFAULT_COUNT: u32 = 10;
pub(crate) const MAX_COUNT: u32 = 10_000;

/// The HTTP statuses of a health-check node port: 200 with local endpoints, 503 without.
const HEALTH_CHECK_STATUSES: [u16; 2] = [200, 503];

pub(crate) fn resolve(
    site: &Site<'_>,
    probes: &[(usize, FieldPath, ProbeSpec)],
    names: &Names<'_, '_>,
    diag: &mut Diagnostics,
) -> Vec<Probe> {
    let mut out = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (i, path, spec) in probes {
        let name = spec.name.clone().unwrap_or_else(|| format!("probe[{i}]"));
        let name_path = path.key("name");
        if let Some(first) = seen.insert(name.clone(), *i) {
            diag.value(
                site,
                &name_path,
                format!("duplicate probe name {name:?} (also spec.probes[{first}])"),
            );
        } else if name.is_empty() {
            diag.value(site, &name_path, "a probe name must not be empty");
        }
        let before = diag.count();
        let probes = resolve_one(site, path, spec, name, names, diag);
        if diag.count() != before {
            continue;
        }
        for probe in probes {
            // A part of a probe from several clients, `NAME[POD]`, is a name like any other.
            if probe.clients.is_some()
                && let Some(first) = seen.insert(probe.name.clone(), *i)
            {
                let message = format!("duplicate probe name {:?} (also spec.probes[{first}])", probe.name);
                diag.value(site, &name_path, message);
            }
            out.push(probe);
        }
    }
    out
}

fn resolve_one(
    site: &Site<'_>,
    path: &FieldPath,
    spec: &ProbeSpec,
    name: String,
    names: &Names<'_, '_>,
    diag: &mut Diagnostics,
) -> Vec<Probe> {
    let (Some(from_spec), Some(to_spec)) = (&spec.from, &spec.to) else {
        let missing = if spec.from.is_none() { "from" } else { "to" };
        diag.value(
            site,
            path,
            format!("a probe needs `{missing}` (only a `held` check in a step takes its opener's)"),
        );
        return Vec::new();
    };
    let from = sources(site, &path.key("from"), from_spec, names, diag);
    let stated = spec.protocol.map(protocol_of);
    // Several clients are all pods: a target's checks of its source read any one of them alike.
    let first = from.as_ref().and_then(|f| f.first());
    let to = targets::resolve(site, &path.key("to"), to_spec, stated, first, names, diag);
    let life = super::held::life(site, path, spec, diag);
    let count = spec.count.unwrap_or(if life == Life::OneShot { DEFAULT_COUNT } else { 1 });
    check_count(site, &path.key("count"), count, diag);
    let interval = spec.interval.as_ref().and_then(|text| {
        parse_interval(&text.0).map_err(|e| diag.value(site, &path.key("interval"), e)).ok()
    });
    let family = spec.family.as_deref().and_then(|text| {
        let at = path.key("family");
        match IpFamily::parse_k8s(text) {
            // One of the cluster's families (whether source and target have addresses of it is
            // the oracle's check, once the cluster is whole).
            Some(family) => diag.one_family(site, &at, family, text).then_some(family),
            None => {
                diag.value(site, &at, format!("unknown family {text:?} (expected IPv4 or IPv6)"));
                None
            }
        }
    });
    let source_port = spec.source_port.filter(|&port| {
        let fixed = FIXED_SOURCE_PORTS.contains(&port);
        if !fixed {
            let range = format!("{}-{}", FIXED_SOURCE_PORTS.start(), FIXED_SOURCE_PORTS.end());
            let message =
                format!("sourcePort must be in {range} (higher ports are the probes' own), not {port}");
            diag.value(site, &path.key("sourcePort"), message);
        }
        fixed
    });
    let target = to.as_ref().map(|(t, _)| t);
    let expect = spec.expect.as_ref().map(|e| expectation(site, &path.key("expect"), e, target, names, diag));
    let (Some((to, protocol)), Some(from)) = (to, from) else { return Vec::new() };
    let protocol = protocol.unwrap_or(Protocol::Tcp);
    super::held::check(site, path, &life, &to, protocol, count, source_port, diag);
    let one = |from: Source| Probe {
        family,
        name: name.clone(),
        from,
        to: to.clone(),
        protocol,
        count,
        interval,
        source_port,
        expect: expect.clone(),
        life: life.clone(),
        clients: None,
    };
    let [_, _, ..] = from.as_slice() else { return from.into_iter().map(one).collect() };
    refuse_with_clients(site, path, spec, &to, diag);
    let clients = Clients { probe: name.clone(), count: from.len() as u32 };
    from.into_iter()
        .map(|source| Probe {
            name: format!("{name}[{}]", source.name()),
            clients: Some(clients.clone()),
            ..one(source)
        })
        .collect()
}

/// What a probe from several clients cannot be: each of its parts is a plain request, sent
/// with the others at once (a held connection, a fixed source port and a health check each
/// have a kind of their own).
fn refuse_with_clients(
    site: &Site<'_>,
    path: &FieldPath,
    spec: &ProbeSpec,
    to: &Target,
    diag: &mut Diagnostics,
) {
    let why = "is not for a probe from several clients (`from: {pods: [...]}`): give each client a probe of its own";
    for (given, key) in [(spec.hold.is_some(), "hold"), (spec.source_port.is_some(), "sourcePort")] {
        if given {
            diag.value(site, &path.key(key), format!("`{key}` {why}"));
        }
    }
    if matches!(to, Target::HealthCheck { .. }) {
        diag.value(site, &path.key("to"), format!("a health check {why}"));
    }
}

/// The most clients a probe may have (`from: {pods: [...]}`): each part waits on threads of
/// its own.
const MAX_CLIENTS: usize = 64;

/// Source ports a probe may fix; the automatic ones start above them.
const FIXED_SOURCE_PORTS: std::ops::RangeInclusive<u16> = 1024..=19999;

/// A probe's or the flows' `count`.
pub(crate) fn check_count(site: &Site<'_>, path: &FieldPath, count: u32, diag: &mut Diagnostics) {
    if !(1..=MAX_COUNT).contains(&count) {
        diag.value(site, path, format!("count must be between 1 and {MAX_COUNT}, not {count}"));
    }
}

fn protocol_of(p: ProtocolSpec) -> Protocol {
    match p {
        ProtocolSpec::Tcp => Protocol::Tcp,
        ProtocolSpec::Udp => Protocol::Udp,
        ProtocolSpec::Sctp => Protocol::Sctp,
    }
}

fn sources(
    site: &Site<'_>,
    path: &FieldPath,
    spec: &SourceSpec,
    names: &Names<'_, '_>,
    diag: &mut Diagnostics,
) -> Option<Vec<Source>> {
    let given: Vec<&str> = [
        ("pod", spec.pod.is_some()),
        ("pods", spec.pods.is_some()),
        ("node", spec.node.is_some()),
        ("external", spec.external.is_some()),
    ]
    .into_iter()
    .filter_map(|(key, given)| given.then_some(key))
    .collect();
    let [key] = given.as_slice() else {
        let got = if given.is_empty() { "none".to_string() } else { given.join(" and ") };
        diag.value(site, path, format!("give exactly one of pod, pods, node, external (got {got})"));
        return None;
    };
    let at = path.key(key);
    let one = |name: &Option<String>| name.as_deref().unwrap_or_default().to_string();
    let source = match *key {
        "pods" => return pods(site, &at, spec.pods.as_deref().unwrap_or_default(), names, diag),
        "pod" => {
            names.pods.resolve(&one(&spec.pod), site, &at, diag).map(|p| Source::Pod(p.pod.name.clone()))
        }
        "node" => {
            names.nodes.resolve(&one(&spec.node), site, &at, diag).map(|n| Source::Node(n.name.clone()))
        }
        _ => names
            .external_hosts
            .resolve(&one(&spec.external), site, &at, diag)
            .map(|h| Source::External(h.name.clone())),
    };
    source.map(|s| vec![s])
}

/// `pods: [NAME, ...]`: two or more distinct pods, each a client of its own.
fn pods(
    site: &Site<'_>,
    path: &FieldPath,
    list: &[String],
    names: &Names<'_, '_>,
    diag: &mut Diagnostics,
) -> Option<Vec<Source>> {
    if !(2..=MAX_CLIENTS).contains(&list.len()) {
        let message =
            format!("`pods` names 2 to {MAX_CLIENTS} clients, not {} (one client is `pod`)", list.len());
        diag.value(site, path, message);
        return None;
    }
    let before = diag.count();
    let mut seen = HashMap::new();
    let mut out = Vec::with_capacity(list.len());
    for (i, name) in list.iter().enumerate() {
        let at = path.index(i);
        if let Some(first) = seen.insert(name.as_str(), i) {
            diag.value(site, &at, format!("pod {name:?} is already a client ({path}[{first}])"));
        } else if let Some(p) = names.pods.resolve(name, site, &at, diag) {
            out.push(Source::Pod(p.pod.name.clone()));
        }
    }
    (diag.count() == before).then_some(out)
}

/// `target` is `None` when it did not resolve (then nothing is checked against it).
fn expectation(
    site: &Site<'_>,
    path: &FieldPath,
    spec: &ExpectSpec,
    target: Option<&Target>,
    names: &Names<'_, '_>,
    diag: &mut Diagnostics,
) -> StatedExpectation {
    let verdict = match spec.verdict {
        VerdictSpec::Answered => StatedVerdict::Answered,
        VerdictSpec::Rejected => StatedVerdict::Rejected,
        VerdictSpec::Dropped => StatedVerdict::Dropped,
        VerdictSpec::Forwarded => StatedVerdict::Forwarded,
    };
    let answered = verdict == StatedVerdict::Answered;
    let health_check = target.map(|t| matches!(t, Target::HealthCheck { .. }));
    let stated = [
        ("backends", "backends only go", spec.backends.is_some()),
        ("source", "source only goes", spec.source.is_some()),
    ];
    for (key, only, given) in stated {
        if !given {
            continue;
        }
        if !answered {
            diag.value(site, &path.key(key), format!("{only} with verdict: answered"));
        } else if health_check == Some(true) {
            diag.value(
                site,
                &path.key(key),
                format!(
                    "{key} does not apply to a healthCheck target: the proxy on the node answers it \
                     (state httpStatus instead)"
                ),
            );
        }
    }
    if let Some(status) = spec.http_status {
        let at = path.key("httpStatus");
        if !HEALTH_CHECK_STATUSES.contains(&status) {
            diag.value(
                site,
                &at,
                format!(
                    "httpStatus must be 200 (the node has local endpoints) or 503 (it has none), not {status}"
                ),
            );
        } else if health_check == Some(false) {
            diag.value(site, &at, "httpStatus only goes with a healthCheck target");
        } else if !answered {
            diag.value(site, &at, "httpStatus only goes with verdict: answered");
        }
    }
    let backends = spec.backends.as_ref().map(|backend_names| {
        for (k, name) in backend_names.iter().enumerate() {
            // A backend is a pod, or an external host or node that is an endpoint (no pod).
            let host = matches!(names.external_hosts.get(name), Lookup::Found(_));
            if !host && !matches!(names.nodes.get(name), Lookup::Found(_)) {
                names.pods.resolve(name, site, &path.key("backends").index(k), diag);
            }
        }
        backend_names.clone()
    });
    let source = spec.source.map(|s| match s {
        SourceKindSpec::Client => StatedSource::Client,
        SourceKindSpec::Masqueraded => StatedSource::Masqueraded,
    });
    let profile = spec.profile.as_deref().and_then(|name| match name.parse() {
        Ok(profile) => Some(profile),
        Err(message) => {
            diag.value(site, &path.key("profile"), message);
            None
        }
    });
    StatedExpectation { verdict, backends, source, http_status: spec.http_status, profile }
}
