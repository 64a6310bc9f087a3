//! packetproof's bottom layer, which uses nothing of packetproof: what every layer above reads
//! and nothing it may reach up into (cargo refuses an import of the harness from here).
//!
//! - `model`: plain data, a cluster, its Services and endpoints, probes, profiles;
//! - `yaml`: positions and paths in a scenario file, for the reader's diagnostics;
//! - `kernel`: facts of the running kernel;
//! - `signals`: the process's signal handling;
//! - `containment`: nothing a run starts outlives it.

pub mod containment;
pub mod kernel;
pub mod model;
pub mod signals;
pub mod yaml;
