//! packetproof's judge, which knows only Kubernetes: what each probe must come to under a
//! Service's semantics (`oracle`), from the model alone, and the Kubernetes and kube-proxy
//! semantics it shares with the proxies so that the two cannot drift (`kubernetes`: which
//! endpoints a node uses, topology hints, local-traffic detection).
//!
//! It uses only `packetproof-model`: cargo refuses it any import of the proxies it judges, or
//! of anything else above it.

// The model under the name the layers above use (`crate::model`).
use packetproof_model::model;

pub mod kubernetes;
pub mod oracle;
