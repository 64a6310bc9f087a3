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

/// Each probe's name with whether it passed; the outcome itself when nothing was judged.
fn judged(report: &ScenarioReport) -> Vec<(String, bool)> {
    match &report.outcome {
        Outcome::Judged(verdicts) => verdicts.iter().map(|v| (v.probe.name.clone(), v.passed())).collect(),
        other => vec![(format!("{other:?}"), false)],
    }
}

/// Runs each of `names` with `proxy` on a kept stage; then compares the kept topology with a
/// fresh one, and runs it again on the kept one. One scenario after another: the test runner
/// runs this file's tests beside others, some of which wait on answers with a short timeout.
fn reused_equals_fresh(proxy: &dyn Proxy, names: &[&str], coverage: bool) {
    if !packetproof::privileges::scenarios_can_run() {
        return;
    }
    let failures: Vec<String> = names.iter().filter_map(|name| check(proxy, name, coverage).err()).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

fn check(proxy: &dyn Proxy, name: &str, coverage: bool) -> Result<(), String> {
    let s = scenario(name);
    let said = |what: String| format!("{name} with {}: {what}", proxy.name());
    let options = RunOptions { reuse_topologies: true, coverage, ..RunOptions::default() };
    let mut keeper = Keeper::default();
    let first =
        runner::run_kept(&s, proxy, &options, Some(&mut keeper)).map_err(|e| said(format!("{e:#}")))?;
    let kept = keeper.reset_kept().map_err(|e| said(format!("{e:#}")))?;
    let Some(kept) = kept else {
        return Err(said(format!("not kept: {}", keeper.refused().unwrap_or("no reason"))));
    };
    let reused = kept.state(Depth::Full).map_err(|e| said(format!("{e:#}")))?;
    let fresh = Stage::build(&s.cluster, &Default::default()).map_err(|e| said(format!("{e:#}")))?;
    let built = fresh.state(Depth::Full).map_err(|e| said(format!("{e:#}")))?;
    drop(fresh);
    let left = reused.differences(&built);
    if !left.is_empty() {
        return Err(said(format!("the reset left:\n{}", left.join("\n"))));
    }
    let second =
        runner::run_kept(&s, proxy, &options, Some(&mut keeper)).map_err(|e| said(format!("{e:#}")))?;
    judged_alike(&first, &second).map_err(|e| said(format!("judged otherwise when reused: {e}")))
}

/// Whether two runs judged every probe alike; else both runs' verdicts, `a` first.
fn judged_alike(a: &ScenarioReport, b: &ScenarioReport) -> Result<(), String> {
    match judged(a) == judged(b) {
        true => Ok(()),
        false => Err(format!("{:?} then {:?}", judged(a), judged(b))),
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

/// `diff` runs a scenario's second side on the first side's topology, reset: the other mode
/// on it judges every probe as on a fresh one.
#[test]
fn the_other_mode_after_a_reset() {
    if !packetproof::privileges::scenarios_can_run() {
        return;
    }
    let names = ["hairpin.yaml", "live-udp-kept-across-restart.yaml", "session-affinity.yaml"];
    let (iptables, nftables) =
        (proxy("builtin-iptables", serde_json::json!({})), proxy("builtin-nftables", serde_json::json!({})));
    let mut failures = Vec::new();
    for (first, then) in [(&iptables, &nftables), (&nftables, &iptables)] {
        for name in names {
            if let Err(e) = after_another(first.as_ref(), then.as_ref(), name) {
                failures.push(e);
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

fn after_another(first: &dyn Proxy, then: &dyn Proxy, name: &str) -> Result<(), String> {
    let s = scenario(name);
    let said = |what: String| format!("{name}, {} after {}: {what}", then.name(), first.name());
    let options = RunOptions { reuse_topologies: true, ..RunOptions::default() };
    let mut keeper = Keeper::default();
    runner::run_kept(&s, first, &options, Some(&mut keeper)).map_err(|e| said(format!("{e:#}")))?;
    if keeper.reset_kept().map_err(|e| said(format!("{e:#}")))?.is_none() {
        return Err(said(format!("not kept: {}", keeper.refused().unwrap_or("no reason"))));
    }
    let reused =
        runner::run_kept(&s, then, &options, Some(&mut keeper)).map_err(|e| said(format!("{e:#}")))?;
    let fresh = runner::run(&s, then, &RunOptions::default()).map_err(|e| said(format!("{e:#}")))?;
    judged_alike(&fresh, &reused)
        .map_err(|e| said(format!("judged otherwise than fresh (fresh, reused): {e}")))
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

/// IPVS adds a link, addresses, ipsets and virtual servers, and sets IPVS's kernel settings.
/// Run it with `cargo test --test reuse -- --ignored` on a kernel with ip_vs.
#[test]
#[ignore = "needs a kernel with ip_vs (this project's host has none): run it with --ignored where there is"]
fn builtin_ipvs() {
    let ipvs = proxy("builtin-ipvs", serde_json::json!({}));
    if let Some(reason) = ipvs.unavailable() {
        panic!("{reason}");
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
        let mut options = serde_json::json!({"mode": mode, "command": command});
        if mode == "nftables" {
            // Alpha in v1.30 (refused without its gate), on by default from v1.31.
            options["featureGates"] = serde_json::json!({"NFTablesProxyMode": true});
        }
        let real = proxy("apiserver", options);
        reused_equals_fresh(real.as_ref(), &["hairpin.yaml", "live-udp-kept-across-restart.yaml"], false);
    }
}
