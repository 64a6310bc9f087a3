//! The external adapters with real namespaces and packets: `ruleset` replays real kube-proxy
//! dumps (the seed scenarios pass, and fail once a dump is edited), and `command` runs a proxy
//! program per node (the scenario passes in both modes, fails with a broken program, and a
//! program that fails or never becomes ready is a clear setup error).
//!
//! Needs root; without it each test is skipped, unless PACKETPROOF_REQUIRE_PRIVILEGES=1.

use std::path::{Path, PathBuf};
use std::time::Duration;

use packetproof::model::Scenario;
use packetproof::proxy::command::CommandProxy;
use packetproof::proxy::ruleset::Ruleset;
use packetproof::proxy::{self, Env, Proxy, State};
use packetproof::results::{Outcome, ScenarioReport};
use packetproof::runner::{self, RunOptions};
use packetproof::topology::Topology;
use packetproof::{admission, report};
use serde_json::json;

/// Whether this host can run scenarios; a skip is printed, or a panic when privileges are
/// required.
fn privileged() -> bool {
    packetproof::privileges::scenarios_can_run()
}

fn suite() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios").canonicalize().expect("scenarios/ exists")
}

fn load(name: &str) -> Scenario {
    admission::load(&suite().join(format!("{name}.yaml"))).unwrap_or_else(|e| panic!("{e}"))
}

fn run(s: &Scenario, proxy: &dyn Proxy) -> anyhow::Result<ScenarioReport> {
    // Every expected outcome here is an answer or a refusal: a short wait keeps a failing run
    // quick, and cannot make a correct one fail (answers take well under a millisecond).
    let options = RunOptions { timeout: Duration::from_millis(300), ..RunOptions::default() };
    runner::run(s, proxy, &options)
}

/// The report's flow table, after requiring that it ran and passed (or failed) as told.
fn judged(s: &Scenario, report: &ScenarioReport, passed: bool) -> String {
    let Outcome::Judged(verdicts) = &report.outcome else {
        panic!("{} did not run: {:?}", s.name, report.outcome)
    };
    let table = format!("{}\n{}", report::scenario_line(report), report::flow_table(&s.cluster, verdicts));
    println!("{table}");
    assert_eq!(report.passed(), passed, "{table}");
    table
}

/// A scratch directory of this test's own, removed first if a killed run left it.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pp-adapters-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

// ---------------------------------------------------------------- ruleset

#[test]
fn seed_004_dump_implements_its_services() {
    if !privileged() {
        return;
    }
    let s = load("seed-004-nginx-replay");
    assert_eq!(s.proxy.name, "ruleset");
    // As `spec.proxy` selects it: the dump found by convention beside the scenario.
    let proxy = proxy::build(&s.proxy, s.source.parent().unwrap()).unwrap();
    judged(&s, &run(&s, proxy.as_ref()).unwrap(), true);
}

#[test]
fn seed_000_dump_implements_its_services() {
    if !privileged() {
        return;
    }
    let s = load("seed-000-kube-dns-replay");
    let proxy = Ruleset::from_options(&serde_json::Value::Null, &suite()).unwrap();
    judged(&s, &run(&s, &proxy).unwrap(), true);
}

#[test]
fn seed_001_dump_implements_its_services() {
    if !privileged() {
        return;
    }
    let s = load("seed-001-mysql-replay");
    judged(&s, &run(&s, &Ruleset::default()).unwrap(), true);
}

#[test]
fn a_dump_with_an_edited_dnat_target_fails_the_seed() {
    if !privileged() {
        return;
    }
    let s = load("seed-004-nginx-replay");
    let real = std::fs::read_to_string(suite().join("rulesets/seed-004-nginx-replay.rules")).unwrap();
    let right = "-j DNAT --to-destination 10.64.2.4:80";
    assert_eq!(real.matches(right).count(), 1);
    let dir = scratch("edited-dnat");
    std::fs::write(dir.join("edited.rules"), real.replace(right, "-j DNAT --to-destination 10.64.2.4:8080"))
        .unwrap();
    let proxy = Ruleset::from_options(&json!({"ruleset": "edited.rules"}), &dir).unwrap();
    let table = judged(&s, &run(&s, &proxy).unwrap(), false);
    assert!(table.contains("pod-to-cluster-ip") && table.contains("refused"), "{table}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn per_node_dumps_are_found_by_convention() {
    if !privileged() {
        return;
    }
    let s = load("seed-004-nginx-local-replay");
    judged(&s, &run(&s, &Ruleset::default()).unwrap(), true);
}

#[test]
fn the_seed_004_local_dump_as_one_nodes_rules_fails() {
    if !privileged() {
        return;
    }
    // The write-up's dump as printed: worker02's rules plus worker01's DROP, on every node.
    let s = load("seed-004-nginx-local-replay");
    let worker02 = std::fs::read_to_string(
        suite().join("rulesets/seed-004-nginx-local-replay.ecs-matrix-k8s-cluster-worker02.rules"),
    )
    .unwrap();
    let drop = "-A KUBE-EXTERNAL-SERVICES -p tcp -m comment --comment \"default/nginx has no local endpoints\" -m addrtype --dst-type LOCAL -m tcp --dport 30783 -j DROP\n";
    let last_input = "-A INPUT -j KUBE-FIREWALL\n";
    assert_eq!(worker02.matches(last_input).count(), 1);
    let whole = worker02.replace(last_input, &format!("{last_input}{drop}"));
    let dir = scratch("whole-local-dump");
    std::fs::write(dir.join("whole.rules"), whole).unwrap();
    let proxy = Ruleset::from_options(&json!({"ruleset": "whole.rules"}), &dir).unwrap();
    let table = judged(&s, &run(&s, &proxy).unwrap(), false);
    // Outside traffic to worker01 is DNATed to worker02's pod without masquerade: the pod's
    // reply bypasses worker01, so the flow never completes, where it must be dropped.
    assert!(table.contains("FAIL  client-to-worker01-node-port"), "{table}");
    assert!(table.contains("ok    client-to-worker02-node-port"), "{table}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Replays what the built-in proxy writes for each node of `name` (`packetproof rules`), as
/// if it had been dumped there, and requires the scenario to pass as it does under the
/// built-in proxy.
fn replay_builtin_rules(name: &str) {
    let s = load(name);
    let dir = scratch(&format!("builtin-{name}"));
    let mut per_node = serde_json::Map::new();
    for node in &s.cluster.nodes {
        let file = format!("{}.rules", node.name);
        std::fs::write(dir.join(&file), proxy::iptables::render_node(&s.cluster, &node.name, None)).unwrap();
        per_node.insert(node.name.clone(), file.into());
    }
    let proxy = Ruleset::from_options(&json!({ "rulesets": per_node }), &dir).unwrap();
    judged(&s, &run(&s, &proxy).unwrap(), true);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_ipv6_dump_is_replayed_with_ip6tables() {
    if privileged() {
        replay_builtin_rules("ipv6-node-port");
    }
}

#[test]
fn a_dual_stack_dump_is_replayed_per_family() {
    if privileged() {
        replay_builtin_rules("dual-stack");
    }
}

#[test]
fn a_dump_iptables_restore_refuses_is_a_setup_error_naming_the_file() {
    if !privileged() {
        return;
    }
    let s = load("seed-000-kube-dns-replay");
    let dir = scratch("bad-dump");
    std::fs::write(dir.join("bad.rules"), "*nat\n-A KUBE-SERVICES -j KUBE-NOWHERE\nCOMMIT\n").unwrap();
    let proxy = Ruleset::from_options(
        &json!({"rulesets": {"control-plane": "bad.rules", "worker": "bad.rules"}}),
        &dir,
    )
    .unwrap();
    let error = format!("{:#}", run(&s, &proxy).unwrap_err());
    assert!(error.contains("bad.rules") && error.contains("iptables-restore"), "{error}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// seed-000's kube-dns rules in kube-proxy's nftables layout (hand-written after
/// pkg/proxy/nftables/proxier.go; the seeds hold no nft dump): the same Service as an
/// `nft list ruleset`, to prove the nft path of the replay. (nft 1.0.6 takes the name
/// `dstnat` only on prerouting: the output hook gets its value, -100.)
const KUBE_DNS_NFT: &str = r#"table ip kube-proxy {
	map service-ips {
		type ipv4_addr . inet_proto . inet_service : verdict
		elements = { 10.96.0.10 . udp . 53 : goto service-FY5PMXPG-kube-system/kube-dns/udp/dns }
	}

	chain mark-for-masquerade {
		meta mark set meta mark | 0x00004000
	}

	chain masquerading {
		meta mark & 0x00004000 == 0x00000000 return
		meta mark set meta mark ^ 0x00004000
		masquerade fully-random
	}

	chain services {
		ip daddr . meta l4proto . th dport vmap @service-ips
	}

	chain nat-prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		jump services
	}

	chain nat-output {
		type nat hook output priority -100; policy accept;
		jump services
	}

	chain nat-postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		jump masquerading
	}

	chain service-FY5PMXPG-kube-system/kube-dns/udp/dns {
		ip daddr 10.96.0.10 udp dport 53 ip saddr != 10.244.0.0/16 jump mark-for-masquerade
		numgen random mod 2 vmap { 0 : goto endpoint-5JEPYTQN-kube-system/kube-dns/udp/dns__10.244.0.5/53, 1 : goto endpoint-LS5RD4ZU-kube-system/kube-dns/udp/dns__10.244.0.7/53 }
	}

	chain endpoint-5JEPYTQN-kube-system/kube-dns/udp/dns__10.244.0.5/53 {
		ip saddr 10.244.0.5 jump mark-for-masquerade
		meta l4proto udp dnat to 10.244.0.5:53
	}

	chain endpoint-LS5RD4ZU-kube-system/kube-dns/udp/dns__10.244.0.7/53 {
		ip saddr 10.244.0.7 jump mark-for-masquerade
		meta l4proto udp dnat to 10.244.0.7:53
	}
}
"#;

#[test]
fn an_nft_ruleset_is_replayed_with_nft() {
    if !privileged() {
        return;
    }
    let s = load("seed-000-kube-dns-replay");
    let dir = scratch("nft");
    std::fs::write(dir.join("kube-dns.nft"), KUBE_DNS_NFT).unwrap();
    let proxy = Ruleset::from_options(&json!({"ruleset": "kube-dns.nft"}), &dir).unwrap();
    judged(&s, &run(&s, &proxy).unwrap(), true);
    // The same rules with one endpoint's DNAT pointing elsewhere: caught.
    let broken = KUBE_DNS_NFT.replace("dnat to 10.244.0.7:53", "dnat to 10.244.0.7:54");
    std::fs::write(dir.join("kube-dns.nft"), broken).unwrap();
    let table = judged(&s, &run(&s, &proxy).unwrap(), false);
    // Every attempt DNATed to the wrong port is refused; that coredns-1 never answers is not
    // always beyond chance among the ~20 attempts that do answer (2^-20 against the 1e-6 bound).
    assert!(table.contains("refused: connection refused"), "{table}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Builds the scenario's namespaces, starts `proxy` and hands both to `f`; tears down after.
fn with_started(s: &Scenario, proxy: &dyn Proxy, f: impl FnOnce(&mut dyn proxy::Running, &Topology)) {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let topology = runtime.block_on(Topology::build(&s.cluster)).unwrap();
    {
        let env = Env { topology: &topology, runtime: runtime.handle().clone(), source: &s.source };
        let state = State { cluster: &s.cluster, objects: &s.objects };
        let mut running = proxy.start(&state, &env).unwrap();
        f(running.as_mut(), &topology);
        running.stop().unwrap();
    }
    topology.teardown().unwrap();
}

#[test]
fn a_replay_refuses_to_follow_a_changed_state() {
    if !privileged() {
        return;
    }
    let s = load("seed-000-kube-dns-replay");
    with_started(&s, &Ruleset::default(), |running, topology| {
        let dump = running.dump_node(&topology.nodes[0]).unwrap();
        assert!(dump.contains("KUBE-SVC-TCOU7JCQXEZGVUNU"), "{dump}");
        let state = State { cluster: &s.cluster, objects: &s.objects };
        let error = format!("{:#}", running.update(&state).unwrap_err());
        assert!(error.contains("cannot follow a change of the desired state"), "{error}");
    });
}

// ---------------------------------------------------------------- command

/// The scenario's program, run once per node and per state.
fn oneshot(extra: &[&str]) -> CommandProxy {
    let mut command =
        vec!["python3", "proxies/clusterip.py", "--state", "{state}", "--cluster-cidr", "{clusterCIDR}"];
    command.extend(extra);
    CommandProxy::from_options(&json!({"command": command}), &suite()).unwrap()
}

#[test]
fn a_proxy_daemon_implements_its_services() {
    if !privileged() {
        return;
    }
    let s = load("command-clusterip");
    assert_eq!(s.proxy.name, "command");
    // As `spec.proxy` selects it: the options from proxies/command-clusterip.json.
    let proxy = proxy::build(&s.proxy, s.source.parent().unwrap()).unwrap();
    judged(&s, &run(&s, proxy.as_ref()).unwrap(), true);
}

#[test]
fn a_oneshot_proxy_implements_its_services() {
    if !privileged() {
        return;
    }
    let s = load("command-clusterip");
    judged(&s, &run(&s, &oneshot(&[])).unwrap(), true);
}

#[test]
fn a_broken_proxy_program_fails_the_scenario() {
    if !privileged() {
        return;
    }
    let s = load("command-clusterip");
    let table = judged(&s, &run(&s, &oneshot(&["--bug", "dnat-to-service-port"])).unwrap(), false);
    assert!(table.contains("pod-to-web") && table.contains("refused"), "{table}");
}

#[test]
fn an_update_reaches_the_program_in_both_modes() {
    if !privileged() {
        return;
    }
    let s = load("command-clusterip");
    // The daemon of proxies/command-clusterip.json reloads on SIGHUP, this one watches the
    // file, and a oneshot runs again.
    let watching = json!({
        "command": ["python3", "proxies/clusterip.py", "--state", "{state}", "--cluster-cidr", "{clusterCIDR}", "--daemon", "--watch"],
        "mode": "daemon",
        "ready": ["sh", "-c", "test \"$(cat '{state}.applied' 2>/dev/null)\" = '{generation}'"],
        "reload": "watch",
    });
    let watching = CommandProxy::from_options(&watching, &suite()).unwrap();
    for proxy in [CommandProxy::default(), watching, oneshot(&[])] {
        with_started(&s, &proxy, |running, topology| {
            let state = State { cluster: &s.cluster, objects: &s.objects };
            running.update(&state).unwrap();
            let logs = running.artifacts();
            let (_, stdout) = logs
                .iter()
                .find(|(name, _)| name == "command-node-a.stdout")
                .expect("node-a's stdout is kept");
            let stdout = String::from_utf8_lossy(stdout);
            assert!(
                stdout.contains("applied generation 1") && stdout.contains("applied generation 2"),
                "{stdout}"
            );
            let dump = running.dump_node(&topology.nodes[0]).unwrap();
            assert!(dump.contains("--to-destination 10.244.2.10:8080"), "{dump}");
        });
    }
}

#[test]
fn a_failing_oneshot_is_a_setup_error_with_its_stderr() {
    if !privileged() {
        return;
    }
    let s = load("command-clusterip");
    let command = json!({"command": ["sh", "-c", "echo cannot program {node} >&2; exit 3"]});
    let proxy = CommandProxy::from_options(&command, &suite()).unwrap();
    let error = format!("{:#}", run(&s, &proxy).unwrap_err());
    assert!(error.contains("cannot program node-a") && error.contains("exit status: 3"), "{error}");
}

#[test]
fn a_daemon_that_never_becomes_ready_is_a_setup_error_and_is_stopped() {
    if !privileged() {
        return;
    }
    let s = load("command-clusterip");
    let dir = scratch("never-ready");
    let options = json!({
        "command": ["sh", "-c", format!("echo $$ > {}/{{node}}.pid; echo waiting >&2; exec sleep 600", dir.display())],
        "mode": "daemon",
        "ready": ["sh", "-c", "echo not yet >&2; exit 1"],
        "timeoutSeconds": 1,
    });
    let proxy = CommandProxy::from_options(&options, &suite()).unwrap();
    let error = format!("{:#}", run(&s, &proxy).unwrap_err());
    assert!(error.contains("node-a: not ready within 1s"), "{error}");
    assert!(error.contains("not yet") && error.contains("waiting"), "{error}");
    // Both nodes' daemons went with the failed start.
    for node in ["node-a", "node-b"] {
        let pid = std::fs::read_to_string(dir.join(format!("{node}.pid"))).unwrap();
        assert!(
            !Path::new(&format!("/proc/{}", pid.trim())).exists(),
            "{node}'s daemon (pid {pid}) outlived its start"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_daemon_that_exits_before_it_is_ready_is_a_setup_error_with_its_stderr() {
    if !privileged() {
        return;
    }
    let s = load("command-clusterip");
    let options = json!({
        "command": ["sh", "-c", "echo no iptables here >&2; exit 1"],
        "mode": "daemon",
        "ready": ["false"],
    });
    let proxy = CommandProxy::from_options(&options, &suite()).unwrap();
    let error = format!("{:#}", run(&s, &proxy).unwrap_err());
    assert!(
        error.contains("exited (exit status: 1) before it was ready") && error.contains("no iptables here"),
        "{error}"
    );
}
