//! Nothing a run starts outlives it, whenever the signal comes: SIGTERM is sent to `run` at
//! each phase of a `command` proxy's start, by the proxy's own commands (so the phase is
//! reached by construction, not by a delay), and afterwards no process the run started is
//! left, none holds a network namespace (read from `/proc/*/ns/net`, not only `ip netns`), and
//! no namespace or scratch directory of the run remains.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// One phase: its name, the daemon's command and its readiness check (`sh -c` scripts, as the
/// adapter's options take them). Each script first records the namespace it runs in (`NS`,
/// replaced by a file of the test's), so that the test can look for any process still in it.
const PHASES: &[(&str, &str, &str)] = &[
    // As the daemon starts, before anything is ready.
    ("daemon starting", "kill -TERM $PPID; exec sleep 6047", "exit 1"),
    // A daemon that left its process group: a grandchild in a session of its own.
    ("daemon escaped its group", "setsid sleep 6047 & kill -TERM $PPID; exec sleep 6047", "exit 1"),
    // While the harness checks readiness.
    ("readiness check", "setsid sleep 6047 & exec sleep 6047", "kill -TERM $PPID; exit 1"),
    // Once the node is programmed: the daemons run, as when the leak was found.
    (
        "node programmed",
        "setsid sleep 6047 & echo {generation} > {state}.applied; exec sleep 6047",
        "test \"$(cat '{state}.applied' 2>/dev/null)\" = '{generation}' && kill -TERM $PPID",
    ),
];

#[test]
fn a_signal_at_each_phase_of_a_command_proxys_start_leaves_nothing() {
    if !packetproof::privileges::scenarios_can_run() {
        return;
    }
    let scenario = std::fs::read_to_string(root().join("scenarios/command-clusterip.yaml")).unwrap();
    for (name, command, ready) in PHASES {
        let dir = std::env::temp_dir().join(format!("pp-signal-sweep-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("proxies")).unwrap();
        std::fs::write(dir.join("sweep.yaml"), &scenario).unwrap();
        let record = format!("readlink /proc/self/ns/net >> {}/namespaces; ", dir.display());
        let options = serde_json::json!({
            "command": ["sh", "-c", format!("{record}{command}")],
            "mode": "daemon",
            "ready": ["sh", "-c", format!("{record}{ready}")],
            "timeoutSeconds": 20,
        });
        std::fs::write(dir.join("proxies/sweep.json"), options.to_string()).unwrap();

        let run = Command::new(env!("CARGO_BIN_EXE_packetproof"))
            .args(["run", "sweep.yaml", "--artifacts"])
            .arg(dir.join("artifacts"))
            .current_dir(&dir)
            .env("PATH", format!("{}:/usr/sbin:/sbin", std::env::var("PATH").unwrap_or_default()))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("packetproof runs");
        let pid = run.id();
        let out = run.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(143), "{name}: not ended by its SIGTERM: {stderr}");

        let namespaces = std::fs::read_to_string(dir.join("namespaces")).unwrap_or_default();
        let namespaces: BTreeSet<&str> = namespaces.lines().collect();
        assert!(!namespaces.is_empty(), "{name}: the proxy's commands never ran: {stderr}");
        let holders = holders_of(&namespaces, &dir);
        assert!(holders.is_empty(), "{name}: processes still in the run's namespaces: {holders:?}");
        let sleepers = processes_running(&["sleep", "6047"]);
        assert!(sleepers.is_empty(), "{name}: the proxy's processes still run: {sleepers:?}");
        let left = leftovers(pid);
        assert!(left.is_empty(), "{name}: left behind: {left:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every process of this test's proxy (its commands mention `6047` or the test's folder)
/// whose network namespace (`net:[inode]`) is one of `namespaces`. (The kernel reuses a freed
/// namespace's number: another test's process may hold a namespace numbered as one of ours.)
fn holders_of(namespaces: &BTreeSet<&str>, dir: &Path) -> Vec<String> {
    let ours = |pid: u32| {
        let line = cmdline(pid);
        line.contains("6047") || line.contains(dir.to_string_lossy().as_ref())
    };
    pids()
        .filter(|pid| {
            let ns = std::fs::read_link(format!("/proc/{pid}/ns/net")).unwrap_or_default();
            namespaces.contains(ns.to_string_lossy().as_ref()) && ours(*pid)
        })
        .map(|pid| format!("{pid} {}", cmdline(pid)))
        .collect()
}

/// Every process whose command line is exactly `argv`.
fn processes_running(argv: &[&str]) -> Vec<u32> {
    let wanted = argv.join("\0") + "\0";
    pids()
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == wanted.as_bytes()))
        .collect()
}

fn pids() -> impl Iterator<Item = u32> {
    std::fs::read_dir("/proc").unwrap().filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
}

fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .unwrap_or_default()
}

/// The namespaces (`/run/netns/pp-PID-…`) and scratch directories (`/tmp/packetproof-…PID…`)
/// of the run whose process was `pid`.
fn leftovers(pid: u32) -> Vec<String> {
    let mut left = Vec::new();
    let named = |dir: &str, prefixes: &[String]| -> Vec<String> {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| prefixes.iter().any(|p| n.starts_with(p.as_str())))
            .map(|n| format!("{dir}/{n}"))
            .collect()
    };
    left.extend(named("/run/netns", &[format!("pp-{pid}-")]));
    let tmp = std::env::temp_dir();
    left.extend(named(
        &tmp.to_string_lossy(),
        &[format!("packetproof-command-{pid}-"), format!("packetproof-pp-{pid}-")],
    ));
    left
}
