//! `spec.proxyConfig.detectLocalMode` and `detectLocal` → `model::DetectLocal`, checked as
//! kube-proxy checks them (pkg/proxy/apis/config/validation/validation.go
//! `validateDetectLocalMode`, `validateInterface`), and refused where packetproof's nodes
//! cannot say what the mode would match.

use crate::model::DetectLocal;
use crate::model::{NODE_UPLINK, POD_BRIDGE};

use super::error::{Diagnostics, Site};
use super::spec::ProxyConfigSpec;
use super::yaml::FieldPath;

const MODES: &str = "ClusterCIDR, NodeCIDR, BridgeInterface, InterfaceNamePrefix";

/// `proxy_config` is the path of `spec.proxyConfig`.
pub(crate) fn read(
    site: &Site<'_>,
    proxy_config: &FieldPath,
    spec: &ProxyConfigSpec,
    diag: &mut Diagnostics,
) -> DetectLocal {
    let mode_path = proxy_config.key("detectLocalMode");
    let settings = proxy_config.key("detectLocal");
    let bridge_path = settings.key("bridgeInterface");
    let prefix_path = settings.key("interfaceNamePrefix");
    let given = spec.detect_local.as_ref();
    let bridge = given.and_then(|d| d.bridge_interface.as_deref());
    let prefix = given.and_then(|d| d.interface_name_prefix.as_deref());
    let mode = spec.detect_local_mode.as_deref().unwrap_or("");
    // kube-proxy reads each setting only in its own mode; one set for another mode would be
    // silently ignored.
    let unused = |diag: &mut Diagnostics, path: &FieldPath, value: Option<&str>, needs: &str| {
        if value.is_some() {
            diag.key(site, path, format!("has no effect unless detectLocalMode is {needs}: remove it"));
        }
    };
    match mode {
        "" | "ClusterCIDR" | "NodeCIDR" => {
            unused(diag, &bridge_path, bridge, "BridgeInterface");
            unused(diag, &prefix_path, prefix, "InterfaceNamePrefix");
            if mode == "NodeCIDR" { DetectLocal::NodeCidr } else { DetectLocal::ClusterCidr }
        }
        "BridgeInterface" => {
            unused(diag, &prefix_path, prefix, "InterfaceNamePrefix");
            match interface(site, diag, &mode_path, &bridge_path, bridge, "bridgeInterface") {
                Some(name) => {
                    if name == NODE_UPLINK {
                        diag.value(site, &bridge_path, uplink_refusal(&format!("the bridge {name}")));
                    }
                    DetectLocal::BridgeInterface(name)
                }
                None => DetectLocal::ClusterCidr,
            }
        }
        "InterfaceNamePrefix" => {
            unused(diag, &bridge_path, bridge, "BridgeInterface");
            match interface(site, diag, &mode_path, &prefix_path, prefix, "interfaceNamePrefix") {
                Some(prefix) => {
                    if NODE_UPLINK.starts_with(&prefix) {
                        diag.value(site, &prefix_path, uplink_refusal(&format!("the prefix {prefix:?}")));
                    }
                    DetectLocal::InterfaceNamePrefix(prefix)
                }
                None => DetectLocal::ClusterCidr,
            }
        }
        other => {
            diag.value(
                site,
                &mode_path,
                format!("unsupported value {other:?}: supported values are {MODES}"),
            );
            DetectLocal::ClusterCidr
        }
    }
}

/// The interface setting a mode needs (`validateInterface`: must not be empty).
fn interface(
    site: &Site<'_>,
    diag: &mut Diagnostics,
    mode_path: &FieldPath,
    path: &FieldPath,
    value: Option<&str>,
    field: &str,
) -> Option<String> {
    match value {
        None => {
            diag.value(site, mode_path, format!("this mode needs detectLocal.{field}, which is not set"));
            None
        }
        Some("") => {
            diag.value(site, path, "must not be empty");
            None
        }
        Some(name) => Some(name.to_string()),
    }
}

/// Why a setting that matches the nodes' uplink cannot be judged.
fn uplink_refusal(what: &str) -> String {
    format!(
        "{what} matches {NODE_UPLINK}, each node's uplink, where traffic from other nodes and external \
         hosts arrives: counted as pod traffic, it goes unmasqueraded and its replies may bypass the node, \
         which is not modelled (the pods hang off the bridge {POD_BRIDGE})"
    )
}
