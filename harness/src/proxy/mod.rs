//! Service proxy implementations behind one small trait, and a factory that picks one by name.
//!
//! A proxy sees only the desired state (the cluster's Services and endpoints), never the
//! oracle's expectations.

pub mod healthcheck;
pub mod iptables;
pub mod node_ports;

use anyhow::Result;

use crate::model::Cluster;
use crate::topology::NodeHandle;

/// Something that programs node namespaces to implement Services.
pub trait Proxy: Send + Sync {
    /// The name a scenario or the command line selects it by.
    fn name(&self) -> &str;

    /// Programs one node namespace with the cluster's Services, as the proxy on that node would.
    fn program_node(&self, cluster: &Cluster, node: &NodeHandle) -> Result<()>;

    /// The node's data-plane state as loaded (e.g. `iptables-save`), for failure reports.
    fn dump_node(&self, node: &NodeHandle) -> Result<String>;
}

/// The proxies this build knows, by name.
pub const KNOWN_PROXIES: &[&str] = &[iptables::NAME];

/// Builds the proxy a scenario or the command line names.
pub fn by_name(name: &str) -> Result<Box<dyn Proxy>> {
    match name {
        iptables::NAME => Ok(Box::new(iptables::BuiltinIptables::default())),
        other => anyhow::bail!("unknown proxy {other:?} (known: {})", KNOWN_PROXIES.join(", ")),
    }
}
