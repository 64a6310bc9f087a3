//! Hostile scenario files: a name from a scenario never leaves the artifacts directory,
//! two scenarios never share an evidence folder, and an earlier run's evidence never survives.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A scratch folder for one test, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("pp-hostile-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `scenarios/hairpin.yaml` with its scenario's `metadata.name` replaced by `name`.
fn hairpin_named(name: &str) -> String {
    let original =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/hairpin.yaml"))
            .unwrap();
    let quoted = serde_json::to_string(name).unwrap();
    original.replacen("metadata:\n  name: hairpin\n", &format!("metadata:\n  name: {quoted}\n"), 1)
}

fn packetproof(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_packetproof"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("running packetproof")
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[test]
fn a_scenario_name_never_becomes_a_path_outside_the_artifacts() {
    let scratch = Scratch::new("names");
    let outside = scratch.0.join("outside");
    let work = scratch.0.join("a/b/work");
    std::fs::create_dir_all(&work).unwrap();
    let names = [
        outside.to_str().unwrap().to_string(),
        "../../outside".into(),
        "..".into(),
        ".".into(),
        String::new(),
        "a/b".into(),
        "evil\\name".into(),
    ];
    for name in &names {
        std::fs::write(work.join("s.yaml"), hairpin_named(name)).unwrap();
        let checked = packetproof(&work, &["check", "s.yaml"]);
        assert_eq!(checked.status.code(), Some(2), "check accepted {name:?}: {}", text(&checked));
        assert!(text(&checked).contains("metadata.name"), "{name:?}: {}", text(&checked));
        let ran =
            packetproof(&work, &["run", "--jobs", "1", "--keep-evidence", "--artifacts", "art", "s.yaml"]);
        assert_eq!(ran.status.code(), Some(2), "run accepted {name:?}: {}", text(&ran));
        // Nothing was written anywhere: not outside, not beside or above the artifacts.
        assert!(!outside.exists(), "{name:?} wrote {}", outside.display());
        let mut written: Vec<_> = walk(&scratch.0);
        written.retain(|p| p != &work.join("s.yaml"));
        assert!(written.is_empty(), "{name:?} left {written:?}");
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

#[test]
fn two_files_with_one_scenario_name_are_refused() {
    let scratch = Scratch::new("twins");
    std::fs::write(scratch.0.join("one.yaml"), hairpin_named("twin")).unwrap();
    std::fs::write(scratch.0.join("two.yaml"), hairpin_named("twin")).unwrap();
    for args in [&["check", "."][..], &["run", "--jobs", "1", "."][..]] {
        let out = packetproof(&scratch.0, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(text(&out).contains("each scenario of a run needs its own name"), "{args:?}: {}", text(&out));
    }
}

/// A planted file and the evidence of an earlier run are gone after the next run, passing or
/// not; a link planted as the scenario's folder is removed, never followed.
#[test]
fn earlier_evidence_never_survives_a_rerun() {
    if !packetproof::privileges::scenarios_can_run() {
        return;
    }
    let scratch = Scratch::new("rerun");
    std::fs::write(scratch.0.join("s.yaml"), hairpin_named("hairpin")).unwrap();
    let folder = scratch.0.join("art/hairpin");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join("planted"), "old").unwrap();
    let out = packetproof(&scratch.0, &["run", "--jobs", "1", "--artifacts", "art", "s.yaml"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(!folder.exists(), "a passing run without --keep-evidence left {}", folder.display());

    let target = scratch.0.join("target");
    std::fs::create_dir_all(&target).unwrap();
    std::fs::write(target.join("keep"), "mine").unwrap();
    std::os::unix::fs::symlink(&target, &folder).unwrap();
    let out =
        packetproof(&scratch.0, &["run", "--jobs", "1", "--keep-evidence", "--artifacts", "art", "s.yaml"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(folder.join("summary.txt").is_file(), "no evidence kept: {}", text(&out));
    assert!(!folder.is_symlink(), "the planted link was followed");
    assert_eq!(std::fs::read_dir(&target).unwrap().count(), 1, "the link's target was written to");
}

/// Out-of-range flags are refused as input (exit 2) before anything runs: a zero timeout
/// would read answered probes as silent, a huge one hangs, zero jobs runs nothing.
#[test]
fn flags_out_of_range_are_refused() {
    let scratch = Scratch::new("flags");
    std::fs::write(scratch.0.join("s.yaml"), hairpin_named("hairpin")).unwrap();
    for flags in [&["--timeout-ms", "0"][..], &["--timeout-ms", "99999999999"], &["--jobs", "0"]] {
        let mut args = vec!["run"];
        args.extend_from_slice(flags);
        args.push("s.yaml");
        let out = packetproof(&scratch.0, &args);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {}", text(&out));
        assert!(
            text(&out).contains("outside") || text(&out).contains("not a whole number"),
            "{}",
            text(&out)
        );
    }
}

/// A scenario named by its bare file name resolves its folder as `.` (the `command` adapter
/// reads `proxies/<stem>.json` beside it).
#[test]
fn a_bare_file_name_finds_the_files_beside_it() {
    let scenarios = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
    let out = packetproof(&scenarios, &["check", "command-clusterip.yaml"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}

/// `check` refuses what `run` could not set up: a name longer than a namespace name can
/// carry (a valid DNS-1123 subdomain of 250 characters), and a `ruleset` scenario whose rule
/// dump is missing.
#[test]
fn check_refuses_what_run_could_not_set_up() {
    let scratch = Scratch::new("setup");
    let long = ["a".repeat(63), "b".repeat(63), "c".repeat(63), "d".repeat(60)].join(".");
    std::fs::write(scratch.0.join("s.yaml"), hairpin_named("hairpin").replace("web-0", &long)).unwrap();
    let out = packetproof(&scratch.0, &["check", "s.yaml"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("at most 200"), "{}", text(&out));

    let original = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/seed-001-mysql-replay.yaml"),
    )
    .unwrap();
    std::fs::write(scratch.0.join("s.yaml"), original).unwrap();
    let out = packetproof(&scratch.0, &["check", "s.yaml"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("no rule dump for node"), "{}", text(&out));
}

/// Root without CAP_NET_ADMIN and CAP_SYS_ADMIN is told so, as a user without root is, instead
/// of failing on a bare EPERM; nothing is judged, so the run fails as input or machine (2).
#[test]
fn root_without_the_capabilities_is_told_which_are_missing() {
    let setpriv = Path::new("/usr/bin/setpriv").exists();
    if !packetproof::privileges::scenarios_can_run()
        || !packetproof::privileges::tool_or_skip(setpriv, "setpriv (util-linux) is not installed")
    {
        return;
    }
    let scratch = Scratch::new("caps");
    std::fs::write(scratch.0.join("s.yaml"), hairpin_named("hairpin")).unwrap();
    let out = Command::new("setpriv")
        .args(["--bounding-set=-net_admin,-sys_admin", "--inh-caps=-net_admin,-sys_admin"])
        .arg(env!("CARGO_BIN_EXE_packetproof"))
        .args(["run", "s.yaml"])
        .current_dir(&scratch.0)
        .output()
        .expect("running setpriv");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("without CAP_SYS_ADMIN and CAP_NET_ADMIN"), "{}", text(&out));
}

/// The terminal's closing line and the JSON summary count the same scenarios the same way.
#[test]
fn the_terminal_and_json_counts_agree() {
    if !packetproof::privileges::scenarios_can_run() {
        return;
    }
    let scratch = Scratch::new("counts");
    let scenarios = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
    for file in ["hairpin.yaml", "kube-dns-udp.yaml"] {
        std::fs::copy(scenarios.join(file), scratch.0.join(file)).unwrap();
    }
    // The mutant breaks hairpin and leaves kube-dns-udp passing: one of each.
    let out = packetproof(
        &scratch.0,
        &[
            "run",
            "--proxy",
            "builtin-iptables",
            "--proxy-option",
            "mutant=no-hairpin-masq",
            "--json",
            "r.json",
            "--junit",
            "r.xml",
            ".",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(scratch.0.join("r.json")).unwrap()).unwrap();
    let line = format!(
        "{} passed, {} failed, {} skipped, {} errors",
        json["passed"], json["failed"], json["skipped"], json["errors"]
    );
    assert_eq!(line, "1 passed, 1 failed, 0 skipped, 0 errors", "{json}");
    assert!(String::from_utf8_lossy(&out.stdout).contains(&line), "{}", text(&out));
    // The report says what it judged: the proxy with its options.
    let proxies: Vec<&str> =
        json["scenarios"].as_array().unwrap().iter().filter_map(|s| s["proxy"].as_str()).collect();
    assert_eq!(proxies, ["builtin-iptables (mutant=no-hairpin-masq)"; 2], "{json}");
    let xml = std::fs::read_to_string(scratch.0.join("r.xml")).unwrap();
    assert!(
        xml.contains(r#"<property name="proxy" value="builtin-iptables (mutant=no-hairpin-masq)"/>"#),
        "{xml}"
    );
}

/// `check` checks every file it can and says `ok` for each that passes, whatever the others
/// do; missing paths, empty directories and dangling or looping links are named as such.
#[test]
fn check_reports_every_path_and_every_passing_file() {
    let scratch = Scratch::new("paths");
    std::fs::write(scratch.0.join("a.yaml"), hairpin_named("a")).unwrap();
    std::fs::write(scratch.0.join("b.yaml"), hairpin_named("b")).unwrap();
    std::fs::create_dir(scratch.0.join("empty")).unwrap();
    std::fs::create_dir(scratch.0.join("links")).unwrap();
    std::fs::write(scratch.0.join("links/c.yaml"), hairpin_named("c")).unwrap();
    std::os::unix::fs::symlink("nowhere.yaml", scratch.0.join("links/dangling.yaml")).unwrap();
    std::os::unix::fs::symlink("loop.yaml", scratch.0.join("links/loop.yaml")).unwrap();
    let out = packetproof(&scratch.0, &["check", "a.yaml", "/nonexistent", "b.yaml", "empty", "links"]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(2), "{said}");
    for line in [
        "ok a (a.yaml",
        "ok b (b.yaml",
        "ok c (links/c.yaml",
        "/nonexistent: no such file or directory",
        "empty: no scenario files",
        "links/dangling.yaml: a symbolic link to nothing",
        "links/loop.yaml: a symbolic link that loops",
    ] {
        assert!(said.contains(line), "missing {line:?} in:\n{said}");
    }
    // `run` of an empty directory is refused as input, like `check`.
    let out = packetproof(&scratch.0, &["run", "empty"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("no scenario files"), "{}", text(&out));
}

/// A report that could not be written at the end is refused before anything runs.
#[test]
fn an_unwritable_report_path_is_refused_first() {
    let scratch = Scratch::new("junit");
    std::fs::write(scratch.0.join("s.yaml"), hairpin_named("hairpin")).unwrap();
    let out = packetproof(&scratch.0, &["run", "--junit", "/nonexistent/dir/r.xml", "s.yaml"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("the JUnit report /nonexistent/dir/r.xml cannot be written"),
        "{}",
        text(&out)
    );
    assert!(!text(&out).contains("PASS"), "it ran first: {}", text(&out));
}

/// `run --show all` prints a passing scenario's flow table, for reviewing what it judged.
#[test]
fn show_all_prints_a_passing_scenarios_flow_table() {
    if !packetproof::privileges::scenarios_can_run() {
        return;
    }
    let scratch = Scratch::new("show");
    std::fs::write(scratch.0.join("s.yaml"), hairpin_named("hairpin")).unwrap();
    let out = packetproof(&scratch.0, &["run", "--show", "all", "s.yaml"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("self-via-service-tcp"), "no flow table: {}", text(&out));
}

/// SIGTERM stops a run as Ctrl-C does (its namespaces removed) and exits 143, as a shell
/// reports a death by SIGTERM: a CI system tells a stopped job from an interrupted one.
#[test]
fn sigterm_removes_the_runs_namespaces_and_exits_143() {
    if !packetproof::privileges::scenarios_can_run() {
        return;
    }
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/session-affinity-timeout.yaml");
    let mut child = Command::new(env!("CARGO_BIN_EXE_packetproof"))
        .args(["run", "--jobs", "1"])
        .arg(&scenario)
        .current_dir(std::env::temp_dir())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("starting packetproof");
    let prefix = format!("pp-{}-", child.id());
    let mine = || -> Vec<String> {
        std::fs::read_dir("/run/netns")
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect::<Vec<String>>()
            })
            .unwrap_or_default()
            .into_iter()
            .filter(|n: &String| n.starts_with(&prefix))
            .collect()
    };
    let started = std::time::Instant::now();
    while mine().is_empty() {
        assert!(child.try_wait().unwrap().is_none(), "the run ended before its namespaces were seen");
        assert!(started.elapsed().as_secs() < 60, "no namespace within 60 s");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM)
        .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(143), "{status}");
    assert!(mine().is_empty(), "left behind: {:?}", mine());
}

/// `check --show` prints what each probe must see and why, without running anything; `check`
/// warns of a selector that matches no pod (valid, but often a typo in a label).
#[test]
fn check_shows_expectations_and_warns_of_selectors_matching_nothing() {
    let scratch = Scratch::new("show-check");
    let scenario = hairpin_named("hairpin");
    std::fs::write(scratch.0.join("s.yaml"), &scenario).unwrap();
    let out = packetproof(&scratch.0, &["check", "--show", "s.yaml"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("self-via-service-tcp (from pod web-0): web-0 seeing masq node-a"),
        "{}",
        text(&out)
    );
    let extra = "---\napiVersion: v1\nkind: Service\nmetadata: {name: other, namespace: default}\n\
                 spec: {selector: {app: wbe}, clusterIP: 10.96.0.99, ports: [{name: http, port: 80, targetPort: 8080}]}\n";
    std::fs::write(scratch.0.join("s.yaml"), format!("{scenario}{extra}")).unwrap();
    let out = packetproof(&scratch.0, &["check", "s.yaml"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("the selector {app: wbe} matches no pod"), "{}", text(&out));
}
