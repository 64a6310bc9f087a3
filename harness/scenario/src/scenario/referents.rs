//! What a probe may refer to by name (nodes, external hosts, pods, Services), gathered once
//! by `validate` and read by `probes`, `targets` and `flows`.

use crate::model::{ExternalHost, Node};

use super::pods::PodEntry;
use super::registry::Registry;
use super::services::ServiceEntry;

/// Everything a probe may refer to.
pub(crate) struct Names<'r, 'a> {
    pub nodes: &'r Registry<Node>,
    pub external_hosts: &'r Registry<ExternalHost>,
    pub pods: &'r Registry<PodEntry>,
    pub services: &'r Registry<ServiceEntry<'a>>,
}
