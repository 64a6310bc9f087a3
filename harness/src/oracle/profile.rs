//! Contract versus implementation. Most outcomes are required by Kubernetes; a few are the
//! choice of one implementation (what happens at a valid cluster IP's wrong port, whether
//! node ports answer on 127.0.0.1 or on a node's secondary addresses). A run names the
//! profile it is held to; under `kubernetes`, outcomes Kubernetes leaves open are not judged.

use std::fmt;

use crate::model::Profile;

/// Why an expectation holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Basis {
    /// Kubernetes requires it of every proxy.
    Contract,
    /// The named implementation's choice, where Kubernetes leaves the outcome open.
    Choice(Profile),
}

impl fmt::Display for Basis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Basis::Contract => f.write_str("the Kubernetes contract"),
            Basis::Choice(p) => write!(f, "{p}'s choice"),
        }
    }
}
