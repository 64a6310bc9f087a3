//! packetproof's scenario reader: a scenario file (one `kind: Scenario` document and plain
//! Kubernetes objects) to the model, checked, every error at a line, column and field.
//!
//! It uses the model (with the YAML reader that keeps positions and the kernel's facts) and the
//! Kubernetes semantics it shares with the oracle and the proxies (`packetproof-oracle`'s
//! `kubernetes`). What it cannot tell by reading (whether the proxy a file names can be built
//! for it, whether the oracle can judge its probes) it asks through `scenario::Admission`,
//! which the harness above implements; cargo refuses it any import of the proxies, the oracle's
//! judgements or the runner.

// The layers below under the names the modules use (`crate::model`, `crate::kubernetes`).
use packetproof_model::{kernel, model, yaml};
use packetproof_oracle::kubernetes;

pub mod scenario;
