//! Which target form the keys of a probe's `to:` select (`targets.rs` resolves it): `service`
//! with at most one frontend key (`nodePort`, `externalIP`, `loadBalancer`), or `healthCheck`,
//! or else `address`; then every key the form does not take is an error at that key.

use super::error::{Diagnostics, Site};
use super::spec::TargetSpec;
use super::yaml::FieldPath;

/// Every form, for messages.
pub(crate) const FORMS: &str = "{service, port}, {service, port, nodePort[, address]}, \
     {service, port, externalIP[, via]}, {service, port, loadBalancer[, via]}, {healthCheck, node} \
     or {address, port[, via]}";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    ClusterIp,
    NodePort,
    ExternalIp,
    LoadBalancer,
    HealthCheck,
    Address,
}

impl Form {
    /// The keys the form takes (`FORMS` spells them out).
    fn keys(self) -> &'static [&'static str] {
        match self {
            Form::ClusterIp => &["service", "port"],
            Form::NodePort => &["service", "port", "nodePort", "address"],
            Form::ExternalIp => &["service", "port", "externalIP", "via"],
            Form::LoadBalancer => &["service", "port", "loadBalancer", "via"],
            Form::HealthCheck => &["healthCheck", "node"],
            Form::Address => &["address", "port", "via"],
        }
    }

    fn syntax(self) -> &'static str {
        match self {
            Form::ClusterIp => "{service, port}",
            Form::NodePort => "{service, port, nodePort[, address]}",
            Form::ExternalIp => "{service, port, externalIP[, via]}",
            Form::LoadBalancer => "{service, port, loadBalancer[, via]}",
            Form::HealthCheck => "{healthCheck, node}",
            Form::Address => "{address, port[, via]}",
        }
    }
}

/// The keys given, in the order of `TargetSpec`.
fn given(spec: &TargetSpec) -> Vec<&'static str> {
    [
        ("service", spec.service.is_some()),
        ("port", spec.port.is_some()),
        ("nodePort", spec.node_port.is_some()),
        ("externalIP", spec.external_ip.is_some()),
        ("loadBalancer", spec.load_balancer.is_some()),
        ("via", spec.via.is_some()),
        ("healthCheck", spec.health_check.is_some()),
        ("node", spec.node.is_some()),
        ("address", spec.address.is_some()),
    ]
    .into_iter()
    .filter_map(|(key, present)| present.then_some(key))
    .collect()
}

/// Which form the keys select; every key the form does not take is reported.
pub(crate) fn form(
    site: &Site<'_>,
    path: &FieldPath,
    spec: &TargetSpec,
    diag: &mut Diagnostics,
) -> Option<Form> {
    let keys = given(spec);
    let has = |key: &str| keys.contains(&key);
    let form = if has("service") && has("healthCheck") {
        diag.value(
            site,
            path,
            format!("give service or healthCheck, not both (the target forms are {FORMS})"),
        );
        return None;
    } else if has("healthCheck") {
        Form::HealthCheck
    } else if has("service") {
        let frontends: Vec<&str> =
            keys.iter().copied().filter(|k| ["nodePort", "externalIP", "loadBalancer"].contains(k)).collect();
        match frontends.as_slice() {
            [] => Form::ClusterIp,
            ["nodePort"] => Form::NodePort,
            ["externalIP"] => Form::ExternalIp,
            ["loadBalancer"] => Form::LoadBalancer,
            _ => {
                diag.value(
                    site,
                    path,
                    format!(
                        "give at most one of nodePort, externalIP, loadBalancer (got {})",
                        frontends.join(" and ")
                    ),
                );
                return None;
            }
        }
    } else if has("address") {
        Form::Address
    } else {
        diag.value(site, path, format!("no target: give one of {FORMS}"));
        return None;
    };
    let stray: Vec<&str> = keys.into_iter().filter(|k| !form.keys().contains(k)).collect();
    for key in &stray {
        diag.key(
            site,
            &path.key(key),
            format!("{key} does not go with {}; the target forms are {FORMS}", form.syntax()),
        );
    }
    stray.is_empty().then_some(form)
}
