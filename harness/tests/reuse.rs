//! A topology used again judges as a fresh one. After each kind of run (steps and a restart,
//! held connections, UDP streams on fixed source ports, external hosts steered through nodes,
//! session affinity, both families, a node port on 127.0.0.1, rule coverage's trace table,
//! a failing proxy) the kept topology's full state (links, addresses, routes, policy rules,
//! neighbours, nftables tables, legacy iptables tables, IPVS, ipsets, sockets, conntrack
//! counts, every kernel setting of every namespace) equals a fresh build's, and a second run
//! on it judges every probe as the first did. Needs root (skipped without it, as the suite).
//! With `PACKETPROOF_KUBE_PROXY=PATH` and `--ignored`, a real kube-proxy too.

use std::path::Path;

use packetproof::model::{ProxyChoice, Scenario};
use packetproof::proxy::apiserver::ApiServerProxy;
use packetproof::proxy::kube_proxy_config::Mode;
use packetproof::proxy::{self, Proxy};
use packetproof::results::{Outcome, ScenarioReport};
use packetproof::reuse::Depth;
use packetproof::runner::{self, RunOptions};
use packetproof::stage::{Keeper, Stage};

/// One scenario of each kind of run the reset must undo.
const KINDS: &[&str] = &[
    "hairpin.yaml",
    "live-udp-kept-across-restart.yaml",
    "live-held-connection.yaml",
    "live-stale-udp-conntrack.yaml",
    "external-ip-on-node-address-through-another-node.yaml",
    "session-affinity.yaml",
    "dual-stack.yaml",
    "localhost-node-port.yaml",
    "kubernetes-host-network-endpoints.yaml",
];

fn scenario(name: &str) -> Scenario {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios").join(name);
    packetproof::admission::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

fn proxy(name: &str, options: serde_json::Value) -> Box<dyn Proxy> {
    let options = options.as_object().cloned().unwrap_or_default();
    proxy::build(&ProxyChoice { name: name.into(), options }, Path::new(".")).unwrap()
}

/// Each probe's name with whether it passed, or the outcome when nothing was judged.
fn judged(report: &ScenarioReport) -> Vec<(String, bool)> {
    match &report.outcome {
        Outcome::Judged(verdicts) => verdicts.iter().map(|v| (v.probe.name.clone(), v.passed())).collect(),
        other => panic!("{}: not judged: {other:?}", report.scenario),
    }
}

/// Runs each of `names` with `proxy` on a kept stage; then compares the kept topology with a
/// fresh one, and runs it again on the kept one.
fn reused_equals_fresh(proxy: &dyn Proxy, names: &[&str], coverage: bool) {
    if !packetproof::privileges::scenarios_can_run() {
        return;
    }
    for name in names {
        let s = scenario(name);
        let options = RunOptions { reuse_topologies: true, coverage, ..RunOptions::default() };
        let mut keeper = Keeper::default();
        let first = runner::run_kept(&s, proxy, &options, Some(&mut keeper)).unwrap();
        let Some(kept) = keeper.kept() else {
            panic!("{name} with {}: not kept: {}", proxy.name(), keeper.refused().unwrap_or("no reason"))
        };
        let reused = kept.state(Depth::Full).unwrap();
        let fresh = Stage::build(&s.cluster, &Default::default()).unwrap();
        let built = fresh.state(Depth::Full).unwrap();
        drop(fresh);
        let left = reused.differences(&built);
        assert!(left.is_empty(), "{name} with {}: the reset left:\n{}", proxy.name(), left.join("\n"));
        let second = runner::run_kept(&s, proxy, &options, Some(&mut keeper)).unwrap();
        assert_eq!(judged(&second), judged(&first), "{name} with {}: judged otherwise when reused", proxy.name());
    }
}

#[test]
fn builtin_iptables() {
    reused_equals_fresh(proxy("builtin-iptables", serde_json::json!({})).as_ref(), KINDS, false);
}

#[test]
fn builtin_nftables() {
    reused_equals_fresh(proxy("builtin-nftables", serde_json::json!({})).as_ref(), KINDS, false);
}

/// Rule coverage adds a trace table to every node; the reset takes it away with the proxy's.
#[test]
fn with_rule_coverage() {
    let names = &["hairpin.yaml", "live-udp-kept-across-restart.yaml"];
    reused_equals_fresh(proxy("builtin-iptables", serde_json::json!({})).as_ref(), names, true);
    reused_equals_fresh(proxy("builtin-nftables", serde_json::json!({})).as_ref(), names, true);
}

/// A broken proxy's run fails probes; its topology is reset all the same.
#[test]
fn after_a_mutant() {
    let broken = proxy("builtin-iptables", serde_json::json!({"mutant": "no-hairpin-masq"}));
    reused_equals_fresh(broken.as_ref(), &["hairpin.yaml"], false);
}

/// IPVS needs a kernel with ip_vs (the kernel matrix's guests): it adds a link, addresses,
/// ipsets and virtual servers, and sets IPVS's kernel settings.
#[test]
fn builtin_ipvs() {
    let ipvs = proxy("builtin-ipvs", serde_json::json!({}));
    if let Some(reason) = ipvs.unavailable() {
        eprintln!("skipped: {reason}");
        return;
    }
    reused_equals_fresh(ipvs.as_ref(), &["hairpin.yaml", "session-affinity.yaml"], false);
}

/// The reference proxies run as processes on the nodes, through the embedded API server.
#[test]
fn reference_proxies() {
    let bin = Path::new(env!("CARGO_BIN_EXE_packetproof"));
    for mode in [Mode::Iptables, Mode::Nftables] {
        let reference = ApiServerProxy::reference_at(bin, mode, &[]).unwrap();
        let names = &["hairpin.yaml", "live-udp-kept-across-restart.yaml", "localhost-node-port.yaml"];
        reused_equals_fresh(&reference, names, false);
    }
}

/// Run it with `PACKETPROOF_KUBE_PROXY=PATH cargo test --test reuse -- --ignored`.
#[test]
#[ignore = "needs a kube-proxy binary: set PACKETPROOF_KUBE_PROXY=PATH and run with --ignored"]
fn a_real_kube_proxy() {
    let kube_proxy = std::env::var("PACKETPROOF_KUBE_PROXY")
        .expect("PACKETPROOF_KUBE_PROXY must name a kube-proxy binary for this test");
    let command = format!("{kube_proxy} --config={{config}} --hostname-override={{node}}");
    for mode in ["iptables", "nftables"] {
        let real = proxy("apiserver", serde_json::json!({"mode": mode, "command": command}));
        reused_equals_fresh(real.as_ref(), &["hairpin.yaml", "live-udp-kept-across-restart.yaml"], false);
    }
}
