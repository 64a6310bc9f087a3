//! A trial that runs this binary as `cargo nextest run` does (nextest's libtest protocol:
//! `--list --format terse`, the same with `--ignored`, then `--exact NAME --nocapture` per
//! trial in a process of its own) and checks, from the files each process reports reading
//! (`PACKETPROOF_TRACE_LOADS`), that a listing checks no file whole (only those that name SCTP,
//! to know whether this host can run them) and a trial process reads its own file only.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use libtest_mimic::{Failed, Trial};
use packetproof::scenario;

pub const TRACE_ENV: &str = "PACKETPROOF_TRACE_LOADS";
pub const TRACE_PREFIX: &str = "packetproof-trace:";

pub const NAME: &str = "runner: nextest protocol";

/// A cheap scenario the protocol check runs for real when it may create namespaces.
const RUN_ONE: &str = "no-endpoints-reject [builtin-iptables]";

pub fn trial(privileged: bool) -> Trial {
    Trial::test(NAME, move || check(privileged))
}

/// What one run of this binary printed, and which files it read how.
struct Run {
    stdout: String,
    stderr: String,
    success: bool,
    /// (`peek` or `load`, file).
    reads: Vec<(String, PathBuf)>,
}

fn run(args: &[&str]) -> Result<Run, Failed> {
    let exe = std::env::current_exe().map_err(|e| format!("this test binary's path: {e}"))?;
    let out = Command::new(&exe)
        .args(args)
        .env(TRACE_ENV, "1")
        // The reports are the parent's to write.
        .env_remove("PACKETPROOF_JUNIT")
        .env_remove("PACKETPROOF_JSON")
        .output()
        .map_err(|e| format!("running {} {args:?}: {e}", exe.display()))?;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let reads = stderr
        .lines()
        .filter_map(|l| l.strip_prefix(TRACE_PREFIX))
        .filter_map(|l| l.trim().split_once(' '))
        .map(|(what, file)| (what.to_string(), PathBuf::from(file)))
        .collect();
    Ok(Run {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr,
        success: out.status.success(),
        reads,
    })
}

/// The trial names of a `--list --format terse` output (`NAME: test`).
fn listed(run: &Run) -> BTreeSet<String> {
    run.stdout.lines().filter_map(|l| l.strip_suffix(": test")).map(str::to_string).collect()
}

fn ensure(ok: bool, what: impl FnOnce() -> String) -> Result<(), Failed> {
    if ok { Ok(()) } else { Err(what().into()) }
}

fn check(privileged: bool) -> Result<(), Failed> {
    let suite =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios").canonicalize().expect("scenarios/");
    let files = scenario::discover(&[suite]).map_err(|e| format!("{e:#}"))?;
    let naming_sctp: BTreeSet<&PathBuf> = files.iter().filter(|f| scenario::peek(f).names_sctp).collect();

    // The listing: every file peeked at once; only SCTP ones checked whole.
    let list = run(&["--list", "--format", "terse"])?;
    ensure(list.success, || format!("--list failed:\n{}", list.stderr))?;
    let names = listed(&list);
    ensure(names.contains(NAME) && names.contains(RUN_ONE), || {
        format!("--list lacks {RUN_ONE:?}:\n{}", list.stdout)
    })?;
    let peeked: Vec<&PathBuf> = list.reads.iter().filter(|(w, _)| w == "peek").map(|(_, f)| f).collect();
    ensure(peeked.len() == files.len(), || {
        format!("--list peeked {} times at {} files", peeked.len(), files.len())
    })?;
    for (what, file) in &list.reads {
        ensure(what == "peek" || naming_sctp.contains(file), || {
            format!("--list checked {} whole, though it names no SCTP", file.display())
        })?;
    }

    // The ignored trials are listed ones.
    let ignored = run(&["--list", "--format", "terse", "--ignored"])?;
    ensure(ignored.success, || format!("--list --ignored failed:\n{}", ignored.stderr))?;
    let ignored = listed(&ignored);
    ensure(ignored.is_subset(&names), || format!("--ignored lists unknown trials: {ignored:?}"))?;

    // One trial by its exact name: its file alone is read.
    let own =
        files.iter().find(|f| f.file_stem().is_some_and(|s| s == "no-endpoints-reject")).expect("shipped");
    let one = run(&["--list", "--format", "terse", "--exact", RUN_ONE])?;
    ensure(listed(&one) == BTreeSet::from([RUN_ONE.to_string()]), || {
        format!("--exact listed:\n{}", one.stdout)
    })?;
    ensure(one.reads.iter().all(|(_, f)| f == own), || format!("--exact {RUN_ONE:?} read {:?}", one.reads))?;
    if privileged {
        let ran = run(&["--exact", RUN_ONE, "--nocapture"])?;
        ensure(ran.success && ran.stdout.contains("1 passed"), || {
            format!("--exact {RUN_ONE:?} did not pass:\n{}\n{}", ran.stdout, ran.stderr)
        })?;
        let loads: Vec<&(String, PathBuf)> = ran.reads.iter().filter(|(w, _)| w == "load").collect();
        ensure(ran.reads.iter().all(|(_, f)| f == own) && loads.len() == 1, || {
            format!("running {RUN_ONE:?} read {:?}", ran.reads)
        })?;
    }
    Ok(())
}
