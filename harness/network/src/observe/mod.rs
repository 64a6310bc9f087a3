//! What the kernel did with the probes: packet captures on interfaces inside namespaces, and
//! the conntrack table of a namespace. Kernel-facing and thin; the verdict interprets.

pub mod capture;
pub mod conntrack;
pub mod conntrack_events;
pub mod ipset;
mod nfnetlink;
pub mod nftables;
pub mod nftrace;
pub mod packet;
pub mod packet_socket;
pub mod pcap;

pub use capture::{Capture, Frame, flow_frames};
pub use conntrack::{Flow, Tuple};
pub use packet::{L4, NeighbourRequest, Packet};
pub use pcap::write_pcap;

#[cfg(test)]
mod tests;
