//! packetproof: proves what a Kubernetes service proxy does with real packets.
//!
//! The pipeline runs one way (see `../shared/STYLE.md`):
//! `scenario` (files → [`model`]) → `oracle` (expected outcome per probe) and
//! `topology` (namespaces) → `proxy` (programs nodes) → `traffic` (real probes) →
//! `verdict` (expected vs observed) → `report`.

pub mod apiserver;
pub mod bench;
pub mod cli;
pub mod diff;
pub mod engine;
pub mod kernel;
mod matrix;
mod matrix_differences;
mod matrix_junit;
mod matrix_mutants;
pub mod model;
pub mod mutants;
pub mod observe;
pub mod oracle;
pub mod privileges;
pub mod proxy;
pub mod reference_proxy;
pub mod report;
pub mod runner;
pub mod scenario;
pub mod topology;
pub mod traffic;
pub mod verdict;
