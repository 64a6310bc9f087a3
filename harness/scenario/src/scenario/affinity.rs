//! `spec.sessionAffinity` and `spec.sessionAffinityConfig` → `model::SessionAffinity`, with the
//! API server's defaulting and limits.

use k8s_openapi::api::core::v1::ServiceSpec;

use crate::model::SessionAffinity;

use super::error::{Diagnostics, Site};
use super::yaml::FieldPath;

/// Kubernetes' default `sessionAffinityConfig.clientIP.timeoutSeconds` (three hours).
pub(crate) const DEFAULT_TIMEOUT_SECONDS: u32 = 10_800;
/// The API server's maximum (one day).
pub(crate) const MAX_TIMEOUT_SECONDS: u32 = 86_400;

pub(crate) fn read(site: &Site<'_>, spec: &ServiceSpec, diag: &mut Diagnostics) -> Option<SessionAffinity> {
    let config = FieldPath::parse("spec.sessionAffinityConfig");
    match spec.session_affinity.as_deref() {
        None | Some("None") => {
            // Not refused by the API server but dropped (pkg/apis/core/v1/defaults.go
            // SetDefaults_Service): a config written for nothing is a slip worth showing.
            if spec.session_affinity_config.is_some() {
                diag.value(
                    site,
                    &config,
                    "sessionAffinityConfig only applies with sessionAffinity: ClientIP (the API server would drop it)",
                );
                return None;
            }
            Some(SessionAffinity::None)
        }
        Some("ClientIP") => {
            let given = spec
                .session_affinity_config
                .as_ref()
                .and_then(|c| c.client_ip.as_ref())
                .and_then(|c| c.timeout_seconds);
            let Some(seconds) = given else {
                return Some(SessionAffinity::ClientIp { timeout_seconds: DEFAULT_TIMEOUT_SECONDS });
            };
            match u32::try_from(seconds).ok().filter(|s| (1..=MAX_TIMEOUT_SECONDS).contains(s)) {
                Some(timeout_seconds) => Some(SessionAffinity::ClientIp { timeout_seconds }),
                None => {
                    diag.value(
                        site,
                        &config.key("clientIP").key("timeoutSeconds"),
                        format!(
                            "timeoutSeconds must be between 1 and {MAX_TIMEOUT_SECONDS} (one day), not {seconds}"
                        ),
                    );
                    None
                }
            }
        }
        Some(other) => {
            diag.value(
                site,
                &FieldPath::parse("spec.sessionAffinity"),
                format!("unknown sessionAffinity {other:?} (expected None or ClientIP)"),
            );
            None
        }
    }
}
