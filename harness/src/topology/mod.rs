//! The cluster as network namespaces: a namespace per node, pod and external host, and one for
//! the node network, joined by veth pairs and bridges over netlink. Removed on every path out.

pub mod netns;

pub use netns::Netns;

/// A node namespace, as handed to a proxy to program.
#[derive(Debug, Clone)]
pub struct NodeHandle {
    /// The scenario's node name.
    pub name: String,
    pub netns: Netns,
}
