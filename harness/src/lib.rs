//! packetproof: proves what a Kubernetes service proxy does with real packets.
//!
//! The modules form layers that only point down (`tests/layers.rs` holds the build to it):
//!
//! ```text
//! cli                 clap only
//! commands            run · check · rules · diff · mutants · bench · matrix · coverage · explore · soak · merge · cleanup
//! explore             generated cases, run by the engine; shrinking; the corpus
//! compare             two proxies' behaviour on the same scenarios, flow by flow
//! engine              schedules runs, emits events to reporters
//! runner              one scenario: build, program, probe, observe, judge
//! report              terminal · JUnit · JSON; evidence files
//! results             what a scenario's run comes to: the contract its readers share
//! coverage            which of the proxy's rules the probes matched (kernel traces; counters where traces cannot see), by template
//! probe · stage       one module per kind of probe: how it is planned, sent, observed, judged;
//!                     the stage: namespaces, servers, the proxy, captures, up and down in order
//! admission           a file is admitted: read, its proxy buildable for it, its probes judgeable
//! verdict             expected vs observed, with evidence; a run judged across its probes
//! proxy               iptables | nftables | ipvs | ruleset | command | apiserver | cluster,
//!                     and the reference proxy (a stand-in kube-proxy the `apiserver` adapter runs)
//! apiserver           the embedded Kubernetes API server
//!                     (with proxy: the crate `packetproof-proxy`)
//! traffic · observe · topology · privileges      the kernel side
//! oracle | scenario   expected outcomes, from Kubernetes semantics alone | files → model, checked
//!                     (the crates `packetproof-oracle` | `packetproof-scenario`)
//! kubernetes          Kubernetes and kube-proxy semantics shared by oracle and proxies
//!                     (with oracle: the crate `packetproof-oracle`)
//! model · yaml · kernel · signals · containment   plain data; the process's signal handling;
//!                     nothing a run starts outlives it (the crate `packetproof-model`)
//! ```

// The bottom layer (`harness/model`), the kernel side (`harness/network`), the judge
// (`harness/oracle`), the reader (`harness/scenario`) and the proxies with the API server they
// watch (`harness/proxy`) are crates of their own, so that cargo refuses an upward import from
// them; re-exported under the same names.
pub use packetproof_model::{containment, kernel, model, signals};
pub use packetproof_network::{observe, privileges, reuse, topology, traffic};
pub use packetproof_oracle::{kubernetes, oracle};
pub use packetproof_proxy::{apiserver, proxy};
pub use packetproof_scenario::scenario;

pub mod admission;
pub mod cli;
pub mod commands;
pub mod compare;
pub mod coverage;
pub mod engine;
pub mod explore;
pub mod probe;
pub mod report;
pub mod results;
pub mod runner;
pub mod stage;
pub mod verdict;
