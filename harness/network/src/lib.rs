//! packetproof's kernel side, which knows the model and nothing of Services' semantics or of
//! the proxies: a cluster built as network namespaces, veths, bridges and routes (`topology`),
//! the one privilege gate (`privileges`), the pods' servers and the probes' sockets (`traffic`),
//! and what the kernel says happened (`observe`: AF_PACKET captures, conntrack, nftables traces,
//! rule handles over netlink).
//!
//! A topology used again (`reuse`): what a run changed, put back, and proof that it was.
//!
//! Layers inside, top to bottom: `traffic` · `reuse`, then `observe`, then `topology` ·
//! `privileges`. It uses
//! only `packetproof-model`; cargo refuses it any import of the oracle, the proxies or the
//! runner.

// The bottom layer under the names the layers above use (`crate::model`).
use packetproof_model::{containment, model, signals};

pub mod observe;
pub mod privileges;
pub mod reuse;
pub mod topology;
pub mod traffic;
