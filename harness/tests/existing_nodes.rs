//! Running against nodes that already exist, with the cluster's own API server and proxy
//! (`run --node NAME=REF --proxy cluster`), proved on a stand-in cluster
//! (`proxy::apiserver::stand_in`): nodes that are privileged podman containers found through `podman
//! inspect`, their image made here offline (or, where no engine or no static busybox exists,
//! plain namespaces; the container tests then say skipped and why, and fail instead under
//! `PACKETPROOF_REQUIRE_CONTAINERS=1`, as `.ci/run` sets it), each running the reference proxy
//! against an embedded API server.
//! Every test compares each node's links, addresses, routes, rules and settings before and
//! after: a passing run, a failing run (a mutant installed as the nodes' proxy) and Ctrl-C
//! leave them as they were. Needs root (the one privilege gate).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use packetproof::apiserver::Kind;
use packetproof::model::Profile;
use packetproof::model::Scenario;
use packetproof::proxy::apiserver::stand_in::{NodeProxy, Nodes, StandIns, podman_unavailable};
use packetproof::proxy::apiserver::sync::unix_now;
use packetproof::proxy::cluster::ClusterProxy;
use packetproof::proxy::kube_proxy_config::Mode;
use packetproof::results::{Outcome, ScenarioReport};
use packetproof::runner::{self, RunOptions};

const SCENARIO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/existing-nodes.yaml");

/// A scenario with a step: the EndpointSlice changes while a UDP client keeps its source port.
const STEP_SCENARIO: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/live-stale-udp-conntrack.yaml");

fn scenario() -> Scenario {
    load(SCENARIO)
}

fn load(path: &str) -> Scenario {
    packetproof::admission::load(Path::new(path)).unwrap()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap()
}

fn node_proxy(flags: &[&str]) -> NodeProxy {
    NodeProxy {
        bin: PathBuf::from(env!("CARGO_BIN_EXE_packetproof")),
        mode: Mode::Iptables,
        flags: flags.iter().map(|f| f.to_string()).collect(),
    }
}

/// Whether stand-in nodes of `kind` can be made here; if not, says why.
fn can_run(kind: Nodes) -> bool {
    if !packetproof::privileges::scenarios_can_run() {
        return false;
    }
    match (kind, podman_unavailable()) {
        (Nodes::Podman, Some(reason)) => {
            // A missing engine is not a missing privilege: the namespace variant still runs.
            // Where containers are promised (CI), their absence is a failure, never a skip.
            assert!(
                std::env::var_os("PACKETPROOF_REQUIRE_CONTAINERS").is_none_or(|v| v != "1"),
                "PACKETPROOF_REQUIRE_CONTAINERS=1, but no container can be made: {reason}"
            );
            eprintln!("skipped: {reason}; the same test runs on plain namespaces");
            false
        }
        _ => true,
    }
}

/// Containers where podman can make them, namespaces otherwise.
fn best_nodes() -> Nodes {
    if podman_unavailable().is_none() { Nodes::Podman } else { Nodes::Namespaces }
}

/// Runs the scenario against a stand-in cluster whose nodes run the reference proxy with
/// `flags`: the report, and each node before and after.
fn run_against(
    kind: Nodes,
    flags: &[&str],
) -> (ScenarioReport, BTreeMap<String, String>, BTreeMap<String, String>) {
    run_scenario(&scenario(), kind, flags)
}

fn run_scenario(
    scenario: &Scenario,
    kind: Nodes,
    flags: &[&str],
) -> (ScenarioReport, BTreeMap<String, String>, BTreeMap<String, String>) {
    let rt = runtime();
    let stand_ins = StandIns::start(&scenario.cluster, kind, &node_proxy(flags), rt.handle()).unwrap();
    let before = stand_ins.snapshot().unwrap();
    let proxy = ClusterProxy::new(stand_ins.kubeconfig.clone(), Profile::KUBE_PROXY_IPTABLES);
    let options = RunOptions { nodes: stand_ins.nodes.clone(), ..RunOptions::default() };
    let started = Instant::now();
    let report = runner::run(scenario, &proxy, &options)
        .unwrap_or_else(|e| panic!("{e:#}\nstand-in proxies:\n{}", stand_ins.logs()));
    eprintln!("{kind:?}: the run took {:?}", started.elapsed());
    let after = stand_ins.snapshot().unwrap();
    assert_eq!(stand_ins.store.list(Kind::Service).1.len(), 0, "packetproof's Services left in the API");
    assert_eq!(stand_ins.store.list(Kind::EndpointSlice).1.len(), 0, "packetproof's slices left in the API");
    stand_ins.stop().unwrap();
    (report, before, after)
}

fn assert_same(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) {
    for (node, was) in before {
        let now = &after[node];
        if was != now {
            let diff: Vec<String> = was
                .lines()
                .filter(|l| !now.lines().any(|n| n == *l))
                .map(|l| format!("- {l}"))
                .chain(now.lines().filter(|l| !was.lines().any(|w| w == *l)).map(|l| format!("+ {l}")))
                .collect();
            panic!("node {node} changed:\n{}", diff.join("\n"));
        }
    }
}

/// Every failure of the report, for an assertion message.
fn failures(report: &ScenarioReport) -> String {
    match &report.outcome {
        Outcome::Judged(v) => v.iter().map(|p| format!("{}: {:?}\n", p.probe.name, p.failures)).collect(),
        Outcome::Skipped(reason) => format!("skipped: {reason}"),
        Outcome::ProxyFailed(reason) => format!("the proxy failed: {reason}"),
    }
}

fn judged(report: &ScenarioReport) -> Vec<(String, bool)> {
    match &report.outcome {
        Outcome::Judged(v) => v.iter().map(|p| (p.probe.name.clone(), p.passed())).collect(),
        Outcome::Skipped(reason) => panic!("skipped: {reason}"),
        Outcome::ProxyFailed(reason) => panic!("the proxy failed: {reason}"),
    }
}

#[test]
fn a_scenario_passes_on_stand_in_containers_and_leaves_them_as_found() {
    if !can_run(Nodes::Podman) {
        return;
    }
    let (report, before, after) = run_against(Nodes::Podman, &[]);
    assert!(report.passed(), "{}", failures(&report));
    assert_same(&before, &after);
}

/// `packetproof run` of the scenario against the stand-ins, as a user types it.
fn run_command(stand_ins: &StandIns, artifacts: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_packetproof"));
    cmd.args(["run", SCENARIO, "--proxy", "cluster", "--profile", "kube-proxy-iptables", "--color", "never"])
        .arg("--proxy-option")
        .arg(format!("kubeconfig={}", stand_ins.kubeconfig.display()))
        .arg("--artifacts")
        .arg(artifacts);
    for (node, reference) in &stand_ins.nodes {
        cmd.arg("--node").arg(format!("{node}={reference}"));
    }
    cmd
}

/// Through the command line this time: `--node node-a=netns:/run/netns/…`.
#[test]
fn a_scenario_passes_on_stand_in_namespaces_and_leaves_them_as_found() {
    if !can_run(Nodes::Namespaces) {
        return;
    }
    let rt = runtime();
    let stand_ins =
        StandIns::start(&scenario().cluster, Nodes::Namespaces, &node_proxy(&[]), rt.handle()).unwrap();
    let before = stand_ins.snapshot().unwrap();
    let artifacts = std::env::temp_dir().join(format!("pp-existing-cli-{}", std::process::id()));
    let out = run_command(&stand_ins, &artifacts).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("1 passed, 0 failed"), "{stdout}");
    assert_eq!(stand_ins.store.list(Kind::Service).1.len(), 0, "packetproof's Services left in the API");
    let after = stand_ins.snapshot().unwrap();
    stand_ins.stop().unwrap();
    let _ = std::fs::remove_dir_all(&artifacts);
    assert_same(&before, &after);
}

/// A proxy packetproof would start itself is refused on nodes it did not make.
#[test]
fn only_the_clusters_own_proxy_runs_on_existing_nodes() {
    let out = Command::new(env!("CARGO_BIN_EXE_packetproof"))
        .args(["run", SCENARIO, "--proxy", "builtin-iptables", "--color", "never"])
        .args(["--node", "node-a=netns:/nonexistent", "--node", "node-b=netns:/nonexistent"])
        .output()
        .unwrap();
    let all = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(2), "{all}");
    assert!(all.contains("against existing nodes the proxy is the cluster's own"), "{all}");
}

#[test]
fn a_mutant_installed_as_the_nodes_proxy_is_caught_and_the_nodes_are_left_as_found() {
    let kind = best_nodes();
    if !can_run(kind) {
        return;
    }
    let (report, before, after) = run_against(kind, &["--mutant", "no-hairpin-masq"]);
    let verdicts = judged(&report);
    assert!(verdicts.contains(&("hairpin".to_string(), false)), "{verdicts:?}");
    assert!(verdicts.contains(&("frontend-to-api-cross-node".to_string(), true)), "{verdicts:?}");
    assert_same(&before, &after);
}

/// `packetproof run` against the stand-ins, returned once it has wired its pods and written
/// every object (two Services, two slices): it then waits for the nodes' proxies or sends probes.
fn started_and_written(stand_ins: &StandIns, artifacts: &Path) -> std::process::Child {
    let mut child = run_command(stand_ins, artifacts).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while stand_ins.store.list(Kind::Service).1.len() + stand_ins.store.list(Kind::EndpointSlice).1.len() < 4
    {
        assert!(child.try_wait().unwrap().is_none(), "the run ended before its objects were written");
        assert!(Instant::now() < deadline, "the run never wrote its objects");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// Runs the scenario against stand-ins, stops it with `stop` once its objects are written, and
/// requires the nodes and the API as they were found once the nodes' proxies have synced.
fn stopped_run_leaves_nothing(label: &str, stop: impl FnOnce(&mut std::process::Child, &StandIns)) {
    let kind = best_nodes();
    if !can_run(kind) {
        return;
    }
    let scenario = scenario();
    let rt = runtime();
    let stand_ins = StandIns::start(&scenario.cluster, kind, &node_proxy(&[]), rt.handle()).unwrap();
    let before = stand_ins.snapshot().unwrap();
    let artifacts = std::env::temp_dir().join(format!("pp-existing-{label}-{}", std::process::id()));
    let mut child = started_and_written(&stand_ins, &artifacts);
    let metrics = stand_ins.metrics();
    let stopped = unix_now();
    stop(&mut child, &stand_ins);
    assert_eq!(stand_ins.store.list(Kind::Service).1.len(), 0, "packetproof's Services left in the API");
    assert_eq!(stand_ins.store.list(Kind::EndpointSlice).1.len(), 0, "packetproof's slices left in the API");
    // The nodes' proxies remove the rules of the deleted objects.
    stand_ins.wait_synced(stopped, metrics).unwrap();
    let after = stand_ins.snapshot().unwrap();
    stand_ins.stop().unwrap();
    let _ = std::fs::remove_dir_all(&artifacts);
    assert_same(&before, &after);
}

#[test]
fn ctrl_c_during_a_run_leaves_the_nodes_and_the_api_as_found() {
    stopped_run_leaves_nothing("ctrl-c", |child, _| {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGINT,
        )
        .unwrap();
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(130), "{status}");
    });
}

/// A run killed outright (SIGKILL: no handler runs) leaves its additions behind; its journal
/// lets `packetproof cleanup` take back every one of them, objects in the API included.
#[test]
fn cleanup_takes_back_what_a_killed_run_added_to_the_nodes_and_the_api() {
    stopped_run_leaves_nothing("kill", |child, stand_ins| {
        let before_kill = stand_ins.store.list(Kind::Service).1.len();
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(
            stand_ins.store.list(Kind::Service).1.len(),
            before_kill,
            "a killed run cleaned up after itself"
        );
        let out = Command::new(env!("CARGO_BIN_EXE_packetproof")).arg("cleanup").output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains("removed the additions of"), "{stdout}");
    });
}

#[test]
fn a_step_reaches_the_nodes_through_the_clusters_api_and_a_proxy_that_keeps_stale_entries_is_caught() {
    let kind = best_nodes();
    if !can_run(kind) {
        return;
    }
    let scenario = load(STEP_SCENARIO);
    let (report, before, after) = run_scenario(&scenario, kind, &[]);
    assert!(report.passed(), "{}", failures(&report));
    assert_same(&before, &after);
    let (report, before, after) = run_scenario(&scenario, kind, &["--no-conntrack-cleanup"]);
    assert_eq!(
        judged(&report),
        [("before".to_string(), true), ("endpoint-replaced: after".to_string(), false)]
    );
    assert_same(&before, &after);
}
