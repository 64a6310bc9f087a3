//! The kernel matrix on the oldest and newest kernels of the measured set (5.10 and 7.3), in
//! VMs: real SCTP associations through the three built-in modes (IPVS included, which the
//! host may not have) with a few core scenarios beside them, a broken SCTP rule caught inside
//! the VMs, and IPVS mutants killed there. Skipped with the reason where qemu is
//! missing; under PACKETPROOF_REQUIRE_PRIVILEGES=1 (`.ci/run`) that fails instead.

use std::path::{Path, PathBuf};
use std::process::Command;

const KERNELS: &str = "5.10,7.3";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize().expect("the repository")
}

/// The kube-proxy binary an ignored test was asked to run with; a run of it without one is a
/// mistake, never a pass.
fn kube_proxy() -> std::ffi::OsString {
    std::env::var_os("PACKETPROOF_KUBE_PROXY")
        .expect("PACKETPROOF_KUBE_PROXY must name a kube-proxy v1.30 binary for this test")
}

fn vms_can_run() -> bool {
    let qemu = ["/usr/bin/qemu-system-x86_64", "/usr/local/bin/qemu-system-x86_64"]
        .iter()
        .any(|p| Path::new(p).exists());
    packetproof::privileges::tool_or_skip(
        qemu,
        "qemu-system-x86_64 is not installed (ci/install-deps.sh installs it)",
    ) && packetproof::privileges::tool_or_skip(
        nix::unistd::Uid::effective().is_root(),
        "the kernel matrix needs root (9p share, qemu)",
    )
}

/// Runs `packetproof matrix` on [`KERNELS`] from the repository; returns its exit code and
/// combined report.
fn matrix(args: &[&str], json: &Path) -> (i32, serde_json::Value) {
    matrix_on(KERNELS, args, json)
}

fn matrix_on(kernels: &str, args: &[&str], json: &Path) -> (i32, serde_json::Value) {
    let output = Command::new(env!("CARGO_BIN_EXE_packetproof"))
        .arg("matrix")
        .args(["--kernels", kernels, "--json"])
        .arg(json)
        .args(args)
        .current_dir(repo())
        .output()
        .expect("running packetproof matrix");
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let report =
        std::fs::read_to_string(json).unwrap_or_else(|e| panic!("no combined report ({e}):\n{stdout}"));
    (output.status.code().unwrap_or(-1), serde_json::from_str(&report).expect("the combined report is JSON"))
}

/// `(kernel, proxy, scenario) -> status` of every scenario in the combined report.
fn statuses(report: &serde_json::Value) -> Vec<(String, String, String, String)> {
    let mut out = Vec::new();
    for run in report["runs"].as_array().expect("runs") {
        let (kernel, proxy) = (run["kernel"].as_str().unwrap(), run["proxy"].as_str().unwrap());
        let scenarios = run["report"]["scenarios"]
            .as_array()
            .unwrap_or_else(|| panic!("{kernel} {proxy}: no report: {run}"));
        for s in scenarios {
            out.push((
                kernel.into(),
                proxy.into(),
                s["name"].as_str().unwrap().into(),
                s["status"].as_str().unwrap().into(),
            ));
        }
    }
    out
}

// Once ignored for a finding (5.10 + builtin-iptables: 1 in 10 SCTP associations reported
// "associated, but no answer"). The probe said "associated" without knowing it: a
// non-blocking SCTP connect reports the socket writable as soon as the INIT is sent (fixed in
// traffic/sctp.rs). With evidence kept, 17 runs of this set on 5.10 (5 with 7.3 beside it,
// both modes) showed no retransmitted, aborted or unanswered chunk; a failing run keeps its
// pcaps and conntrack events under artifacts/KERNEL/PROXY/ (see the book's kernel matrix chapter).
#[test]
fn sctp_and_core_scenarios_pass_on_the_oldest_and_newest_kernels_and_a_broken_sctp_rule_is_caught() {
    if !vms_can_run() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("packetproof-vm-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    // The three built-in modes: SCTP is answered for real (never skipped), beside core
    // scenarios; IPVS mode too, which is never skipped inside the VMs.
    let (code, report) = matrix(
        &[
            "--proxy",
            "builtin-iptables,builtin-nftables,builtin-ipvs",
            "scenarios/sctp.yaml",
            "scenarios/pod-to-clusterip-cross-node.yaml",
            "scenarios/hairpin.yaml",
            "scenarios/no-endpoints-reject.yaml",
            "scenarios/external-nodeport-masquerade.yaml",
        ],
        &dir.join("core.json"),
    );
    let all = statuses(&report);
    assert_eq!(all.len(), 2 * 3 * 5, "every kernel × mode × scenario reported: {all:?}");
    for (kernel, proxy, scenario, status) in &all {
        assert_eq!(status, "passed", "{scenario} on {kernel} with {proxy}");
    }
    assert_eq!(code, 0);

    // The same SCTP scenario replayed from a dump of the built-in iptables rules, once intact
    // and once with the SCTP cluster-IP rule removed: the intact replay passes, the broken one
    // fails on the probe that crosses the removed rule, on both kernels.
    let (code, report) =
        matrix(&["--proxy", "ruleset", "harness/tests/data/broken-sctp"], &dir.join("broken.json"));
    let all = statuses(&report);
    assert_eq!(all.len(), 2 * 2, "{all:?}");
    for (kernel, _, scenario, status) in &all {
        let expected = if scenario == "sctp-rule-removed" { "failed" } else { "passed" };
        assert_eq!(status, expected, "{scenario} on {kernel}");
    }
    for run in report["runs"].as_array().unwrap() {
        let broken = run["report"]["scenarios"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == "sctp-rule-removed")
            .unwrap();
        let failed: Vec<&str> = broken["probes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["passed"] == false)
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            failed,
            ["pod-to-cluster-ip"],
            "{}: the SCTP node port still works, the cluster IP does not",
            run["kernel"]
        );
    }
    assert_eq!(code, 1, "a failed probe, not an error");
    let _ = std::fs::remove_dir_all(&dir);
    // The failing runs' evidence is kept under artifacts/; the matrix leaves nothing else.
    let leftovers: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("packetproof-vm."))
        .filter(|e| {
            let pid = e.file_name().to_string_lossy().trim_start_matches("packetproof-vm.").to_string();
            !Path::new("/proc").join(pid).exists()
        })
        .collect();
    assert!(leftovers.is_empty(), "scratch directories left behind: {leftovers:?}");
}

/// A program carried into the guest (`--guest-file`) runs there through the `apiserver`
/// adapter, as a user's kube-proxy would: this build's own reference proxy, under another
/// name, judged against `builtin-iptables` by `packetproof diff` inside the VM (`--against`).
/// One boot of 7.3, one scenario.
#[test]
fn a_carried_program_runs_as_the_proxy_inside_a_vm() {
    if !vms_can_run() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("packetproof-vm-carried-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Without its debug sections, as the matrix carries its own binary: the initramfs lives
    // in the guest's memory.
    let program = dir.join("pp-reference");
    let stripped = Command::new("strip")
        .arg("--strip-debug")
        .arg("-o")
        .arg(&program)
        .arg(env!("CARGO_BIN_EXE_packetproof"))
        .status()
        .expect("running strip");
    assert!(stripped.success());
    let guest_file = format!("pp-reference={}", program.display());
    let (code, report) = matrix_on(
        "7.3",
        &[
            "--proxy",
            "apiserver",
            "--proxy-option",
            "command=pp-reference reference-proxy --config {config} --netns {netns} --service-cidr {serviceCIDR}",
            "--guest-file",
            &guest_file,
            // The guest holds two copies of this build (the matrix's and the carried one),
            // packed and unpacked: more than the default 512 MiB.
            "--memory-mib",
            "1024",
            "--against",
            "builtin-iptables",
            "scenarios/hairpin.yaml",
        ],
        &dir.join("carried.json"),
    );
    let runs = report["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 1, "{report}");
    assert_eq!(runs[0]["status"], "same", "{report}");
    let table = runs[0]["differences"].as_str().unwrap_or_else(|| panic!("no diff table: {report}"));
    assert!(table.starts_with("no behaviour differs between"), "{table}");
    assert_eq!(code, 0);

    // A name that would leave /usr/local/bin is refused before any VM boots (exit 2).
    let refused = Command::new(env!("CARGO_BIN_EXE_packetproof"))
        .args(["matrix", "--kernels", "7.3", "--guest-file"])
        .arg(format!("../etc/x={}", program.display()))
        .current_dir(repo())
        .output()
        .expect("running packetproof matrix");
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("plain file name"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A real kube-proxy in IPVS mode, inside a VM: the binary named by `PACKETPROOF_KUBE_PROXY`
/// (built by the user from kubernetes/kubernetes, v1.30; nothing fetched is committed or
/// downloaded by CI, so ignored there and counted as skipped). It must pass what the
/// `kube-proxy-ipvs` profile expects of these scenarios on 7.3, SCTP included. Run it with
/// `PACKETPROOF_KUBE_PROXY=PATH cargo test --test vm_matrix -- --ignored`.
#[test]
#[ignore = "needs a kube-proxy v1.30 binary: set PACKETPROOF_KUBE_PROXY=PATH and run with --ignored"]
fn a_real_kube_proxy_in_ipvs_mode_passes_inside_a_vm() {
    let kube_proxy = kube_proxy();
    if !vms_can_run() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("packetproof-vm-kube-proxy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let guest_file = format!("kube-proxy={}", Path::new(&kube_proxy).display());
    let scenarios = [
        "scenarios/sctp.yaml",
        "scenarios/pod-to-clusterip-cross-node.yaml",
        "scenarios/hairpin.yaml",
        "scenarios/no-endpoints-reject.yaml",
        "scenarios/external-nodeport-masquerade.yaml",
    ];
    let mut args = vec![
        "--proxy",
        "apiserver",
        "--proxy-option",
        "mode=ipvs",
        "--proxy-option",
        "command=kube-proxy --config={config} --hostname-override={node}",
        "--guest-file",
        &guest_file,
        // kube-proxy (67 MB without debug sections) and its unpacked copy in the guest's memory.
        "--memory-mib",
        "1024",
        // Its first sync under TCG: informers and 17 ipsets took over 60 s on a loaded host.
        "--proxy-option",
        "syncTimeoutSeconds=400",
        "--artifacts",
        "artifacts/vm-kube-proxy",
    ];
    args.extend(scenarios);
    let (code, report) = matrix_on("7.3", &args, &dir.join("kube-proxy.json"));
    let all = statuses(&report);
    assert_eq!(all.len(), scenarios.len(), "{all:?}");
    for (kernel, proxy, scenario, status) in &all {
        assert_eq!(status, "passed", "{scenario} on {kernel} with {proxy}");
    }
    assert_eq!(code, 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// IPVS mode's mutants are hunted where IPVS is: inside a VM. Its own mutant (the service
/// addresses gone from `kube-ipvs0`, kubernetes#85422) and three it shares with the other
/// modes must each be killed by one of the scenarios that catch them on the host. The whole
/// catalog: `packetproof matrix --kernels 6.12 --proxy builtin-ipvs --mutants scenarios`
/// (the book's kernel matrix chapter, IPVS mutants in VMs).
#[test]
fn ipvs_mutants_are_killed_inside_a_vm() {
    if !vms_can_run() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("packetproof-vm-mutants-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mutants = ["service-addresses-not-bound", "no-hairpin-masq", "no-affinity", "no-node-port-masq"];
    let mut args = vec!["--proxy", "builtin-ipvs", "--mutants", "--artifacts", "artifacts/vm-mutants"];
    for m in mutants {
        args.extend(["--only", m]);
    }
    args.extend([
        "scenarios/pod-to-clusterip-cross-node.yaml",
        "scenarios/hairpin.yaml",
        "scenarios/session-affinity.yaml",
        "scenarios/external-nodeport-masquerade.yaml",
    ]);
    let (code, report) = matrix_on("7.3", &args, &dir.join("mutants.json"));
    let runs = report["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 1, "{report}");
    let hunt = &runs[0]["report"];
    assert_eq!(hunt["baseline"], serde_json::json!([]), "the unbroken IPVS proxy passes these scenarios");
    let verdicts: Vec<(&str, bool)> = hunt["mutants"]
        .as_array()
        .unwrap_or_else(|| panic!("no hunt report: {report}"))
        .iter()
        .map(|m| (m["name"].as_str().unwrap(), m["killed"] == true))
        .collect();
    assert_eq!(verdicts, mutants.map(|m| (m, true)), "{hunt}");
    // One worker keeps to a scenario's runs: at least one ran on a topology an IPVS run left,
    // reset (virtual servers, ipsets, kube-ipvs0, IPVS's kernel settings), and every reset held.
    let topologies = &hunt["topologies"];
    assert!(topologies["kept"].as_u64() >= Some(1), "no IPVS topology reused: {topologies}");
    assert_eq!(topologies["not_reset"], 0, "an IPVS topology's reset left something: {hunt}");
    assert_eq!(code, 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Ctrl-C while a VM runs: the matrix kills its VMs, removes its scratch directory and exits
/// 130. When to interrupt is decided by what is seen (a qemu whose command line names the
/// run's scratch directory), not by a wait.
#[test]
fn an_interrupted_matrix_leaves_no_vm_and_no_scratch_directory() {
    if !vms_can_run() {
        return;
    }
    let mut run = Command::new(env!("CARGO_BIN_EXE_packetproof"))
        .args(["matrix", "--kernels", "7.3", "scenarios/hairpin.yaml"])
        .current_dir(repo())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("starting packetproof matrix");
    let harness = run.id();
    let scratch = std::env::temp_dir().join(format!("packetproof-vm.{harness}"));
    let started = std::time::Instant::now();
    while qemu_processes(&scratch).is_empty() {
        if let Some(status) = run.try_wait().unwrap() {
            panic!("the matrix ended ({status}) before its VM was seen running");
        }
        assert!(started.elapsed().as_secs() < 300, "no VM started within 300 s");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(harness as i32), nix::sys::signal::Signal::SIGINT)
        .expect("interrupting the matrix");
    let status = run.wait().unwrap();
    assert_eq!(status.code(), Some(130), "an interrupted matrix exits 130");
    // SIGKILL is delivered before the harness exits; a killed qemu is gone once reaped (by
    // init, now that its parent is gone).
    let gone = std::time::Instant::now();
    while !qemu_processes(&scratch).is_empty() {
        assert!(
            gone.elapsed().as_secs() < 30,
            "qemu outlived the interrupted matrix: {:?}",
            qemu_processes(&scratch)
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(!scratch.exists(), "{} left behind", scratch.display());
}

/// Live qemu processes whose command line names `scratch` (the VMs of that matrix run: their
/// initramfs and share are there; the tools that build the initramfs name it too).
fn qemu_processes(scratch: &Path) -> Vec<u32> {
    let needle = scratch.to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { return false };
            let cmdline = String::from_utf8_lossy(&cmdline);
            let program = cmdline.split('\0').next().unwrap_or_default();
            program.ends_with("qemu-system-x86_64") && cmdline.contains(&needle)
        })
        .collect()
}
