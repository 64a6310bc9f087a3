//! packetproof's proxies, which program a scenario's nodes: the built-in ones (`iptables`,
//! `nftables`, `ipvs`, over the shared `ruleset`), the adapters that run a user's proxy
//! (`command`, `apiserver`, `cluster`), the reference proxy (a stand-in kube-proxy the
//! `apiserver` adapter runs), the mutants (deliberately broken built-ins) and the one registry
//! every command asks; below them the embedded Kubernetes API server (`apiserver`) they are
//! served by.
//!
//! Layers inside, top to bottom: `proxy`, then `apiserver`. It uses the model, the kernel side
//! (`packetproof-network`: topology, observe) and the Kubernetes semantics it shares
//! with the oracle (`packetproof-oracle`'s `kubernetes`); cargo refuses it any import of the
//! scenario reader, the runner, the reports or the commands above it.

// The layers below under the names the modules use (`crate::model`, `crate::topology`, ...).
use packetproof_model::{containment, model, yaml};
#[cfg(test)]
use packetproof_network::privileges;
use packetproof_network::{observe, topology};
use packetproof_oracle::kubernetes;

pub mod apiserver;
pub mod proxy;
