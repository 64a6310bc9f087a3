//! The kinds of document a scenario file holds, by their `kind` and `apiVersion` (read by
//! `objects`, which sorts documents, and by `fields`, which refuses fields not modelled).

use super::spec;

/// A document's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Scenario,
    Service,
    EndpointSlice,
    Pod,
    Node,
}

impl Kind {
    pub(super) fn parse(kind: &str) -> Option<Kind> {
        Some(match kind {
            spec::KIND => Kind::Scenario,
            "Service" => Kind::Service,
            "EndpointSlice" => Kind::EndpointSlice,
            "Pod" => Kind::Pod,
            "Node" => Kind::Node,
            _ => return None,
        })
    }

    pub(super) fn api_version(self) -> &'static str {
        match self {
            Kind::Scenario => spec::API_VERSION,
            Kind::Service | Kind::Pod | Kind::Node => "v1",
            Kind::EndpointSlice => "discovery.k8s.io/v1",
        }
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::Scenario => spec::KIND,
            Kind::Service => "Service",
            Kind::EndpointSlice => "EndpointSlice",
            Kind::Pod => "Pod",
            Kind::Node => "Node",
        }
    }
}
