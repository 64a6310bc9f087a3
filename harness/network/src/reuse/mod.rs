//! A topology used again: building namespaces, links and addresses is the kernel's most
//! serialized work (the RTNL and namespace locks), so a run that needs the same topology as
//! the last gets it back, reset, instead of a new one. `state` reads what a topology holds;
//! `reset` undoes what a run changed and proves, by reading again, that the topology is as
//! built; a topology that does not read so is not used again.

pub mod reset;
pub mod state;

pub use reset::reset;
pub use state::{Depth, State};
