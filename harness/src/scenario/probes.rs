//! `spec.probes` → `model::Probe`, every name resolved against the scenario (targets in
//! `targets.rs`).

use std::collections::HashMap;

use crate::model::{
    IpFamily, Life, Probe, Protocol, Source, StatedExpectation, StatedSource, StatedVerdict, Target,
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
        let probe = resolve_one(site, path, spec, name, names, diag);
        if let Some(probe) = probe.filter(|_| diag.count() == before) {
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
) -> Option<Probe> {
    let (Some(from_spec), Some(to_spec)) = (&spec.from, &spec.to) else {
        let missing = if spec.from.is_none() { "from" } else { "to" };
        diag.value(
            site,
            path,
            format!("a probe needs `{missing}` (only a `held` check in a step takes its opener's)"),
        );
        return None;
    };
    let from = source(site, &path.key("from"), from_spec, names, diag);
    let stated = spec.protocol.map(protocol_of);
    let to = targets::resolve(site, &path.key("to"), to_spec, stated, from.as_ref(), names, diag);
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
    let (to, protocol) = to?;
    let protocol = protocol.unwrap_or(Protocol::Tcp);
    super::held::check(site, path, &life, &to, protocol, count, source_port, diag);
    Some(Probe { family, name, from: from?, to, protocol, count, interval, source_port, expect, life })
}

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

fn source(
    site: &Site<'_>,
    path: &FieldPath,
    spec: &SourceSpec,
    names: &Names<'_, '_>,
    diag: &mut Diagnostics,
) -> Option<Source> {
    let given: Vec<(&str, &String)> =
        [("pod", &spec.pod), ("node", &spec.node), ("external", &spec.external)]
            .into_iter()
            .filter_map(|(k, v)| v.as_ref().map(|v| (k, v)))
            .collect();
    let [(key, name)] = given.as_slice() else {
        let got = if given.is_empty() {
            "none".to_string()
        } else {
            given.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(" and ")
        };
        diag.value(site, path, format!("give exactly one of pod, node, external (got {got})"));
        return None;
    };
    let at = path.key(key);
    match *key {
        "pod" => names.pods.resolve(name, site, &at, diag).map(|p| Source::Pod(p.pod.name.clone())),
        "node" => names.nodes.resolve(name, site, &at, diag).map(|n| Source::Node(n.name.clone())),
        _ => names.external_hosts.resolve(name, site, &at, diag).map(|h| Source::External(h.name.clone())),
    }
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
