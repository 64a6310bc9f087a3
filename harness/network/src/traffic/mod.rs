//! Real traffic: servers in every pod that report who they are and whom they saw, and a client
//! that sends probes from a source namespace and classifies what came back.

mod attempt;
pub mod client;
pub mod held;
pub mod reply;
mod sctp;
pub mod server;

pub use client::{Attempt, Pace, Plan, Prober, Sent, Speech};
pub use server::Servers;
