//! `packetproof matrix`: the suite on several kernels, each in its own VM (the `vm` crate),
//! with every chosen proxy; one line per kernel × proxy and a combined JSON report.
//! Exit codes as `run`: 0 all passed, 1 a probe failed, 2 a run could not be carried out.

mod differences;
mod junit;
mod mutants;
pub(crate) mod report;
mod timings;

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::commands::{EXIT_ERROR, EXIT_FAIL, EXIT_PASS};
use report::{GuestReport, MatrixReport, MatrixRun};

#[derive(clap::Args)]
pub struct Args {
    /// Scenario files or directories (relative to here; default `scenarios`).
    paths: Vec<PathBuf>,
    /// Kernels, comma-separated: Debian versions (5.10, 6.1, 6.12, 7.3, 6.12.117) or suites
    /// (bookworm, trixie-backports); fetched once into ~/.cache/packetproof/kernels.
    #[arg(long, value_delimiter = ',', required = true)]
    kernels: Vec<String>,
    /// Proxies to run on every kernel, comma-separated.
    #[arg(long, value_delimiter = ',', default_values = [crate::proxy::iptables::NAME, crate::proxy::nftables::NAME])]
    proxy: Vec<String>,
    /// An option for every proxy, `KEY=VALUE` (as `run --proxy-option`); repeatable.
    #[arg(long = "proxy-option", value_name = "KEY=VALUE")]
    proxy_options: Vec<String>,
    /// A host file the guests need (a proxy's binary, a script it runs), carried into every
    /// guest as `/usr/local/bin/NAME`, first on the guest's PATH, with the shared libraries
    /// it loads (as ldd finds them here); NAME is the file's own name unless given. NAME
    /// must be a plain file name. Repeatable. E.g. `--proxy apiserver --proxy-option
    /// mode=ipvs --proxy-option 'command=kube-proxy --config={config}
    /// --hostname-override={node}' --guest-file ./kube-proxy`.
    #[arg(long = "guest-file", value_name = "[NAME=]PATH", value_parser = guest_file)]
    guest_files: Vec<vm::GuestProgram>,
    /// Instead of judging each proxy: `packetproof diff` inside every guest, each `--proxy`
    /// (with `--proxy-option`) against this one (with `--against-option`); exit 1 where any
    /// flow behaves differently.
    #[arg(long, conflicts_with = "mutants")]
    against: Option<String>,
    /// An option for `--against`, `KEY=VALUE`; repeatable.
    #[arg(long = "against-option", value_name = "KEY=VALUE", requires = "against")]
    against_options: Vec<String>,
    /// As `run --profile`.
    #[arg(long)]
    profile: Option<String>,
    /// As `run --timeout-ms`, but 3000 by default: a guest under software emulation can take
    /// over a second for an SCTP association and its answer.
    #[arg(long, default_value_t = 3000, value_parser = crate::commands::timeout_ms)]
    timeout_ms: u64,
    /// Scenarios run at once inside each VM (default: two per vCPU, see `JOBS_PER_VCPU`).
    #[arg(long, value_parser = crate::commands::jobs)]
    jobs: Option<usize>,
    /// VMs at once (default: two one-vCPU VMs per core, or as many as the cores hold vCPUs,
    /// and no more than the host's memory holds).
    #[arg(long)]
    vms: Option<usize>,
    /// vCPUs per VM (one: see `vms_for_cores`).
    #[arg(long, default_value_t = 1)]
    cpus: u32,
    /// Memory per VM in MiB (6.1 needs ≥ 320).
    #[arg(long, default_value_t = 512)]
    memory_mib: u32,
    /// Where a failing kernel × proxy leaves its output, reports and evidence
    /// (`ARTIFACTS/KERNEL/PROXY/`).
    #[arg(long, default_value = "artifacts")]
    artifacts: PathBuf,
    /// Keep the output, reports and evidence (pcaps, conntrack, rules) of passing runs too.
    #[arg(long)]
    keep_evidence: bool,
    /// Write the combined JSON report here (every kernel × proxy with its run's own report).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write a combined JUnit XML report here: a test suite per kernel × proxy × scenario,
    /// named `KERNEL (VERSION) PROXY: SCENARIO`, a test case per probe.
    #[arg(long)]
    junit: Option<PathBuf>,
    /// Fetch the kernels into the cache and stop (for CI's preparation step).
    #[arg(long)]
    fetch_only: bool,
    /// Minutes a VM may run before it is killed (a hung guest; 1 to 1440): the runs it
    /// finished stand, the one it was in is an error with its output so far.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=1440))]
    vm_limit_minutes: u64,
    /// Hunt the proxies' mutation catalogs in each VM (`packetproof mutants --first-kill`
    /// over the scenarios) instead of running the scenarios: for IPVS mode, whose kernel
    /// machinery the host may lack.
    #[arg(long)]
    mutants: bool,
    /// With `--mutants`: only these mutants (names as `packetproof mutants` prints them).
    #[arg(long = "only", requires = "mutants")]
    only: Vec<String>,
    /// In every guest, only slice K of N of the scenarios (or with `--mutants`, of the
    /// mutants), as `run --partition`; `packetproof merge` joins the slices' reports.
    #[arg(long, value_name = "hash:K/N|count:K/N", conflicts_with = "against")]
    partition: Option<crate::commands::partition::Partition>,
    /// Measure rule coverage in every guest (as `run --coverage`) and print one table per
    /// proxy across the kernels: a template is covered when a probe hit it on any kernel.
    #[arg(long, conflicts_with_all = ["against", "mutants"])]
    coverage: bool,
}

/// `--guest-file [NAME=]PATH`, checked before any VM boots.
fn guest_file(text: &str) -> Result<vm::GuestProgram, String> {
    vm::GuestProgram::parse(text).map_err(|e| format!("{e:#}"))
}

/// Programs the guests run that this host lacks, so the guests lack them too: kube-proxy's
/// IPVS mode (v1.30.3, pkg/util/ipset/ipset.go) runs `ipset`, as does `builtin-ipvs`, which
/// also runs `ipvsadm`; `conntrack` and `iptables-restore` are required of every guest.
fn missing_for(args: &Args) -> Vec<String> {
    let missing = vm::missing_tools();
    use crate::proxy::kube_proxy_config::Mode;
    use crate::proxy::registry;
    let mut wanted: Vec<(&str, String)> = Vec::new();
    let sides = args.proxy.iter().map(|p| (p, &args.proxy_options));
    for (proxy, options) in sides.chain(args.against.iter().map(|p| (p, &args.against_options))) {
        // An option that does not parse is refused where the proxy is built.
        let Ok(choice) = super::proxy_choice(proxy, options) else { continue };
        if registry::mode_of(&choice.name, &choice.options) != Mode::Ipvs {
            continue;
        }
        if registry::built_in(proxy).is_some() {
            wanted.extend(["ipset", "ipvsadm"].map(|t| (t, format!("{proxy} runs it"))));
        } else {
            wanted.push(("ipset", "kube-proxy's IPVS mode (mode=ipvs) runs it".into()));
        }
    }
    let mut out: Vec<String> = Vec::new();
    for (tool, why) in wanted {
        if missing.contains(&tool) && !out.iter().any(|o| o.starts_with(&format!("{tool} "))) {
            out.push(format!("{tool} ({why})"));
        }
    }
    out
}

/// One kernel × proxy, as it ended.
struct Cell {
    kernel: String,
    version: String,
    proxy: String,
    exit_code: i32,
    /// The guest's JSON report of the run, if it wrote one.
    report: Option<GuestReport>,
    error: Option<String>,
    /// Where its files were kept, if they were.
    kept: Option<PathBuf>,
    /// With `--against`: the guest's `diff` table (every flow that behaves differently).
    differences: Option<String>,
    /// Where the guest's time went (none when the VM never booted).
    seconds: Option<timings::GuestSeconds>,
}

pub fn main(args: Args) -> Result<i32> {
    crate::signals::on_termination(|| {
        eprintln!("\npacketproof: interrupted, stopping the VMs");
        vm::abort_all();
    });
    let Some(paths) = checked_inputs(&args)? else { return Ok(EXIT_ERROR) };
    let started = Instant::now();
    let mut kernels = Vec::new();
    for spec in &args.kernels {
        eprintln!("packetproof: kernel {spec}…");
        kernels.push(vm::kernel(spec).with_context(|| format!("kernel {spec}"))?);
    }
    if args.fetch_only {
        for k in &kernels {
            println!("{} ({}, {}) cached: {}", k.spec, k.version, k.release, k.vmlinuz.display());
        }
        return Ok(EXIT_PASS);
    }
    let scratch = vm::Scratch::new("matrix")?;
    let userland = scratch.path().join("userland.cpio");
    build_userland(&args, &paths, &userland)?;
    let machine = vm::Machine {
        cpus: args.cpus,
        memory_mib: args.memory_mib,
        accel: vm::Accel::from_env()?,
        limit: Duration::from_secs(args.vm_limit_minutes * 60),
    };
    let at_once = args
        .vms
        .unwrap_or_else(|| fitting_in_memory(args.memory_mib).min(fitting_in_cores(args.cpus)))
        .clamp(1, kernels.len().max(1));
    eprintln!(
        "packetproof: {} kernels × {} proxies, {at_once} VMs at once ({} vCPUs, {} MiB, {:?})",
        kernels.len(),
        args.proxy.len(),
        args.cpus,
        args.memory_mib,
        machine.accel
    );
    let guests = Guests {
        userland: &userland,
        machine: &machine,
        args: &args,
        paths: &paths,
        scratch: scratch.path(),
    };
    let cells = run_kernels(&kernels, at_once, &guests);
    write_reports(&args, &cells)?;
    print_summary(&args, &cells);
    let code = exit_code(&cells);
    println!("matrix: {} runs in {:.1}s (exit {code})", cells.len(), started.elapsed().as_secs_f64());
    Ok(code)
}

/// The host's checks before any kernel is fetched or VM booted: the machine can run VMs, the
/// scenarios read as `run` reads them, the proxies' names are plain, the options agree. The
/// scenario paths, or `None` when a file was refused (reported).
fn checked_inputs(args: &Args) -> Result<Option<Vec<PathBuf>>> {
    if let Some(reason) = vm::unavailable() {
        anyhow::bail!("cannot run the matrix here: {reason}");
    }
    for stale in vm::remove_stale_scratch() {
        eprintln!("packetproof: removed {} left by an earlier matrix run", stale.display());
    }
    let paths = if args.paths.is_empty() { vec![PathBuf::from("scenarios")] } else { args.paths.clone() };
    // The same validation as `run`, on the host, before any VM boots.
    if crate::commands::load_all(&paths)?.is_none() {
        return Ok(None);
    }
    // A proxy's name names its directory in the share and under --artifacts.
    if let Some(bad) = args.proxy.iter().chain(&args.against).find(|p| !plain_name(p)) {
        anyhow::bail!("--proxy {bad:?}: not a proxy's name (letters, digits, '-', '_' and '.', not first)");
    }
    if args.mutants && args.junit.is_some() {
        anyhow::bail!("--junit reports scenario runs; a --mutants hunt has its verdicts in --json");
    }
    Ok(Some(paths))
}

/// The guests' userland: this binary, the scenarios, `--guest-file`s and this host's programs.
fn build_userland(args: &Args, paths: &[PathBuf], userland: &Path) -> Result<()> {
    let missing = missing_for(args);
    if !missing.is_empty() {
        anyhow::bail!(
            "the guests are built from this host's programs, and it lacks: {} (install them; \
             ci/install-deps.sh lists them)",
            missing.join(", ")
        );
    }
    for program in &args.guest_files {
        eprintln!(
            "packetproof: {} goes into every guest as {}",
            program.source.display(),
            program.guest_path()
        );
    }
    let binary = std::env::current_exe().context("finding the packetproof binary")?;
    let payload = vm::Payload { binary: &binary, files: paths, programs: &args.guest_files };
    vm::build_userland(&payload, userland)
}

/// What every guest is booted with.
struct Guests<'a> {
    userland: &'a Path,
    machine: &'a vm::Machine,
    args: &'a Args,
    paths: &'a [PathBuf],
    scratch: &'a Path,
}

/// Every kernel's VM, `at_once` at a time; each cell printed as its VM ends, then all in the
/// order asked for (kernels down, proxies across).
fn run_kernels(kernels: &[vm::Kernel], at_once: usize, guests: &Guests<'_>) -> Vec<Cell> {
    let next = Mutex::new(kernels.iter());
    let cells = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..at_once {
            scope.spawn(|| {
                while let Some(kernel) = { next.lock().unwrap_or_else(|e| e.into_inner()).next() } {
                    let kernel_cells = run_kernel(kernel, guests);
                    for cell in &kernel_cells {
                        println!("{}", line(cell));
                    }
                    cells.lock().unwrap_or_else(|e| e.into_inner()).extend(kernel_cells);
                }
            });
        }
    });
    let mut cells = cells.into_inner().unwrap_or_else(|e| e.into_inner());
    let args = guests.args;
    let order = |c: &Cell| {
        (args.kernels.iter().position(|k| *k == c.kernel), args.proxy.iter().position(|p| *p == c.proxy))
    };
    cells.sort_by_key(order);
    cells
}

/// Each cell as the JUnit report and the by-kernel comparison read it.
fn cell_runs(cells: &[Cell]) -> Vec<junit::CellRun<'_>> {
    cells
        .iter()
        .map(|c| junit::CellRun {
            kernel: &c.kernel,
            version: &c.version,
            proxy: &c.proxy,
            report: c.report.as_ref(),
            error: c.error.as_deref(),
        })
        .collect()
}

/// `--json` and `--junit`.
fn write_reports(args: &Args, cells: &[Cell]) -> Result<()> {
    if let Some(path) = &args.json {
        std::fs::write(path, combined_json(cells)?).with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.junit {
        std::fs::write(path, junit::junit(&cell_runs(cells))?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// The kernel table, then coverage, timings, skips and what differs by kernel.
fn print_summary(args: &Args, cells: &[Cell]) {
    println!("\n{}", table(cells));
    if args.coverage {
        // Each guest's tables, one per proxy, joined across the kernels.
        let tables = cells.iter().filter_map(|c| match &c.report {
            Some(GuestReport::Run(run)) => Some(run.coverage.clone()),
            _ => None,
        });
        let merged = crate::coverage::table::merge(tables.flatten());
        print!("{}", crate::report::coverage_text(&merged, false));
        if merged.is_empty() {
            println!("rules: no guest measured coverage");
        }
    }
    println!("\ntimings (each guest's own clock):");
    for cell in cells {
        if let Some(seconds) = &cell.seconds {
            let scenarios = cell.report.as_ref().map(GuestReport::scenarios).unwrap_or_default();
            let cpu = match &cell.report {
                Some(GuestReport::Run(run)) => run.cpu.as_ref(),
                _ => None,
            };
            println!("{}", timings::line(&cell.kernel, &cell.proxy, seconds, scenarios, cpu));
        }
    }
    // What holds on one kernel and not another shows here: skips carry their reason (minKernel,
    // a missing module), per kernel × proxy.
    for line in skipped(cells) {
        println!("{line}");
    }
    // `--against` runs report differences between proxies, not scenario outcomes to compare
    // across kernels.
    if args.against.is_none() {
        for line in differences::by_kernel(&cell_runs(cells)) {
            println!("differs by kernel: {line}");
        }
    }
}

/// VMs whose memory (guest plus qemu's own, measured 0.43–0.56 GiB) fits in what is free.
fn fitting_in_memory(memory_mib: u32) -> usize {
    let available_kib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemAvailable:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        })
        .unwrap_or(0);
    let per_vm_kib = (memory_mib as u64 + 600) * 1024;
    (available_kib / per_vm_kib).max(1) as usize
}

/// VMs at once for the host's cores.
fn fitting_in_cores(cpus: u32) -> usize {
    vms_for_cores(std::thread::available_parallelism().map_or(1, |n| n.get()), cpus)
}

/// Two one-vCPU VMs per core; VMs of several vCPUs never outnumber the cores. Measured (2
/// cores, TCG, the whole suite on four kernels × two modes; docs/src/measurements.md):
/// - a one-vCPU guest is idle 40 % of its run (its /proc/stat; a profile inside it: 43 % in
///   the idle loop), waiting for answers and for a flow's silence to last its timeout, so a
///   second VM on the core fills that time: four VMs of one vCPU took 303 s wall (549 s of
///   qemu CPU) and 373 s (704 s), two took 428 s (523 s) and 394 s (475 s). Sharing a core
///   costs CPU (the translation caches of four qemus contend for the host's caches), and still
///   finished first both times;
/// - four VMs of two vCPUs took 620 s and 1174 s: vCPU threads of one guest preempted on a
///   busy core hold its locks while its other vCPUs spin, and thrash the translation caches.
fn vms_for_cores(cores: usize, cpus: u32) -> usize {
    let vcpus_per_core = if cpus <= 1 { 2 } else { 1 };
    (cores * vcpus_per_core / cpus.max(1) as usize).max(1)
}

/// Scenarios at once per vCPU in a guest's `run`, against `run`'s four per core on a host.
/// Under TCG a guest computes rather than waits: with four per vCPU it was idle 0.1–1.1 s of
/// 270–400 s runs, and every switch between its processes flushes the emulator's jump cache
/// (a profile of qemu: 23 % of its CPU in `qht_lookup_custom`, the translated-block lookup).
const JOBS_PER_VCPU: usize = 2;

/// Boots `kernel` once and runs every proxy inside, one after another.
fn run_kernel(kernel: &vm::Kernel, guests: &Guests<'_>) -> Vec<Cell> {
    let args = guests.args;
    let runs: Vec<vm::GuestRun> =
        args.proxy.iter().map(|proxy| guest_run(proxy, args, guests.paths)).collect();
    let share = guests.scratch.join(format!("share-{}", kernel.spec));
    let started = Instant::now();
    let booted = vm::boot(kernel, guests.userland, guests.machine, &runs, &share);
    let vm_seconds = started.elapsed().as_secs_f64();
    eprintln!("packetproof: kernel {} done in {vm_seconds:.1}s", kernel.spec);
    let cells = match booted {
        Err(e) => args
            .proxy
            .iter()
            .map(|proxy| Cell {
                kernel: kernel.spec.clone(),
                version: kernel.version.clone(),
                proxy: proxy.clone(),
                exit_code: EXIT_ERROR,
                report: None,
                error: Some(format!("{e:#}")),
                kept: None,
                differences: None,
                seconds: None,
            })
            .collect(),
        Ok(booted) => {
            let timeline = vm::timeline(&booted.console);
            booted
                .runs
                .iter()
                .map(|run| {
                    let seconds = timings::GuestSeconds::of(&timeline, &run.name, vm_seconds);
                    finished_run(kernel, run, &booted, seconds, args)
                })
                .collect()
        }
    };
    let _ = std::fs::remove_dir_all(&share);
    cells
}

/// One run of a VM that booted: its exit code and report, kept with its evidence when it did
/// not pass (or `--keep-evidence`), and what failed printed.
fn finished_run(
    kernel: &vm::Kernel,
    run: &vm::RunResult,
    booted: &vm::Booted,
    seconds: timings::GuestSeconds,
    args: &Args,
) -> Cell {
    let report = std::fs::read_to_string(run.dir.join("report.json"))
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok());
    let output = std::fs::read_to_string(run.dir.join("output.txt")).unwrap_or_default();
    // A run the VM finished stands even if the VM was stopped in a later one.
    let (exit_code, error) = match (run.exit_code, &booted.stopped) {
        (Some(code), _) => (code, None),
        (None, Some(why)) if output.is_empty() => (EXIT_ERROR, Some(format!("{why}, before this run began"))),
        (None, Some(why)) => {
            (EXIT_ERROR, Some(format!("{why}; console:\n{}", vm::tail(&booted.console, 30))))
        }
        (None, None) => (EXIT_ERROR, Some(unfinished(&booted.console))),
    };
    let differences = match &report {
        Some(GuestReport::Diff(diff)) => Some(diff.table()),
        _ => None,
    };
    let mut cell = Cell {
        kernel: kernel.spec.clone(),
        version: kernel.version.clone(),
        proxy: run.name.clone(),
        exit_code,
        report,
        error,
        kept: None,
        differences,
        seconds: Some(seconds),
    };
    if exit_code == EXIT_PASS && !args.keep_evidence {
        return cell;
    }
    let keep = args.artifacts.join(&kernel.spec).join(&run.name);
    match keep_run(&run.dir, &keep, &booted.console) {
        Ok(()) => cell.kept = Some(keep),
        Err(e) => eprintln!("packetproof: could not keep {}: {e:#}", run.dir.display()),
    }
    if let Some(table) = &cell.differences {
        eprintln!(
            "--- {} {} against {}:\n{table}",
            kernel.spec,
            run.name,
            args.against.as_deref().unwrap_or_default()
        );
    } else if exit_code != EXIT_PASS && !output.is_empty() {
        // The guest's own report of what failed (so far, if it was stopped).
        eprintln!("--- {} {} (exit {exit_code}):\n{}", kernel.spec, run.name, failing_part(&output));
    }
    cell
}

/// A name that is safe as one path component and in the guest's job script.
fn plain_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Why a run inside the guest never finished: the guest kernel's crash when its console
/// shows one, and the console's end.
fn unfinished(console: &str) -> String {
    let tail = vm::tail(console, 30);
    if let Some(failure) = vm::unpack_failure(console) {
        return format!("the guest could not start: {failure}; console:\n{tail}");
    }
    match vm::kernel_crash(console) {
        Some(crash) => format!("the guest kernel crashed: {crash}; console:\n{tail}"),
        None => format!("the guest never finished; console:\n{tail}"),
    }
}

/// The `packetproof run` command line of one proxy inside the guest.
fn guest_run(proxy: &str, args: &Args, paths: &[PathBuf]) -> vm::GuestRun {
    let mut run = vm::GuestRun { name: proxy.to_string(), args: Vec::new() };
    let dir = run.guest_dir();
    if args.mutants {
        let paths: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        run.args = mutants::guest_args(proxy, &args.only, &format!("{dir}/report.json"), &paths);
        // One run per vCPU unless told: a hunt waits only 300 ms for an answer, which a busy
        // emulated guest can miss (a false kill).
        let jobs = args.jobs.unwrap_or(args.cpus as usize).max(1);
        run.args.splice(1..1, ["--jobs".to_string(), jobs.to_string()]);
        if let Some(slice) = args.partition {
            run.args.splice(1..1, ["--partition".to_string(), slice.to_string()]);
        }
        return run;
    }
    if let Some(against) = &args.against {
        let mut a: Vec<String> = vec!["diff".into(), "--left".into(), proxy.into()];
        for option in &args.proxy_options {
            a.extend(["--left-option".into(), option.clone()]);
        }
        a.extend(["--right".into(), against.clone()]);
        for option in &args.against_options {
            a.extend(["--right-option".into(), option.clone()]);
        }
        if let Some(jobs) = args.jobs {
            a.extend(["--jobs".into(), jobs.to_string()]);
        }
        a.extend(["--timeout-ms".into(), args.timeout_ms.to_string()]);
        a.extend(["--artifacts".into(), format!("{dir}/artifacts")]);
        a.extend(["--json".into(), format!("{dir}/report.json")]);
        a.extend(paths.iter().map(|p| p.display().to_string()));
        run.args = a;
        return run;
    }
    let mut a: Vec<String> = vec!["run".into(), "--proxy".into(), proxy.into()];
    for option in &args.proxy_options {
        a.extend(["--proxy-option".into(), option.clone()]);
    }
    if let Some(profile) = &args.profile {
        a.extend(["--profile".into(), profile.clone()]);
    }
    if args.keep_evidence {
        a.push("--keep-evidence".into());
    }
    let jobs = args.jobs.unwrap_or(JOBS_PER_VCPU * args.cpus.max(1) as usize);
    a.extend(["--jobs".into(), jobs.to_string()]);
    if let Some(slice) = args.partition {
        a.extend(["--partition".into(), slice.to_string()]);
    }
    if args.coverage {
        a.push("--coverage".into());
    }
    a.extend(["--timeout-ms".into(), args.timeout_ms.to_string(), "--color".into(), "never".into()]);
    a.extend(["--artifacts".into(), format!("{dir}/artifacts")]);
    a.extend(["--json".into(), format!("{dir}/report.json"), "--junit".into(), format!("{dir}/junit.xml")]);
    a.extend(paths.iter().map(|p| p.display().to_string()));
    run.args = a;
    run
}

/// Copies a run's directory (output, reports, evidence) and the console to `keep`.
fn keep_run(dir: &Path, keep: &Path, console: &str) -> Result<()> {
    let _ = std::fs::remove_dir_all(keep);
    std::fs::create_dir_all(keep).with_context(|| format!("creating {}", keep.display()))?;
    // The console first: a guest that never ran the job has nothing else to show.
    std::fs::write(keep.join("console.log"), console)?;
    if dir.exists() {
        copy_tree(dir, keep)?;
    }
    Ok(())
}

fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    for entry in std::fs::read_dir(from).with_context(|| format!("listing {}", from.display()))? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)
                .with_context(|| format!("copying {}", entry.path().display()))?;
        }
    }
    Ok(())
}

/// The lines of a guest's `run` output from its first failure on (the flow tables), else its tail.
fn failing_part(output: &str) -> String {
    let lines: Vec<&str> = output.lines().collect();
    let first =
        lines.iter().position(|l| l.contains(" FAIL ") || l.contains(" ERROR ") || l.contains("FAIL "));
    match first {
        Some(i) => lines[i..].iter().take(60).copied().collect::<Vec<_>>().join("\n"),
        None => vm::tail(output, 20),
    }
}

fn counts(report: &GuestReport) -> String {
    match report {
        GuestReport::Hunt(hunt) => mutants::counts(hunt),
        GuestReport::Diff(diff) => diff.table().lines().last().unwrap_or_default().to_string(),
        GuestReport::Run(run) => format!(
            "{} passed, {} failed, {} skipped, {} errors",
            run.passed, run.failed, run.skipped, run.errors
        ),
    }
}

fn verdict(cell: &Cell) -> &'static str {
    match cell.exit_code {
        EXIT_PASS if cell.differences.is_some() => "SAME",
        EXIT_FAIL if cell.differences.is_some() => "DIFFERS",
        EXIT_PASS => "PASS",
        EXIT_FAIL => "FAIL",
        _ => "ERROR",
    }
}

/// `6.12 (6.12.117-1) builtin-nftables PASS 44 passed, 0 failed, 1 skipped, 0 errors`
fn line(cell: &Cell) -> String {
    let what = match (&cell.report, &cell.error) {
        (_, Some(error)) => error.lines().next().unwrap_or_default().to_string(),
        (Some(report), None) => counts(report),
        (None, None) => format!("no report (exit {})", cell.exit_code),
    };
    let kept = cell.kept.as_ref().map(|k| format!("  [{}]", k.display())).unwrap_or_default();
    format!("{} ({}) {} {}: {what}{kept}", cell.kernel, cell.version, cell.proxy, verdict(cell))
}

/// Kernels down, proxies across, each cell PASS/FAIL/ERROR.
fn table(cells: &[Cell]) -> String {
    let mut proxies: Vec<&str> = Vec::new();
    let mut kernels: Vec<(&str, &str)> = Vec::new();
    for c in cells {
        if !proxies.contains(&c.proxy.as_str()) {
            proxies.push(&c.proxy);
        }
        if !kernels.iter().any(|(k, _)| *k == c.kernel) {
            kernels.push((&c.kernel, &c.version));
        }
    }
    let first = kernels.iter().map(|(k, v)| k.len() + v.len() + 3).max().unwrap_or(6).max(6);
    let mut out = format!("{:first$}", "kernel");
    for p in &proxies {
        out.push_str(&format!("  {p:<w$}", w = p.len().max(5)));
    }
    out.push('\n');
    for (k, v) in &kernels {
        out.push_str(&format!("{:first$}", format!("{k} ({v})")));
        for p in &proxies {
            let cell = cells.iter().find(|c| c.kernel == *k && c.proxy == *p);
            out.push_str(&format!("  {:<w$}", cell.map_or("-", verdict), w = p.len().max(5)));
        }
        out.push('\n');
    }
    out
}

/// `5.10 builtin-iptables: skipped ipvs: needs kernel 5.15 or newer (minKernel); …`, one per
/// skipped scenario of every kernel × proxy.
fn skipped(cells: &[Cell]) -> Vec<String> {
    let mut out = Vec::new();
    for cell in cells {
        let scenarios = cell.report.as_ref().map(GuestReport::scenarios).unwrap_or_default();
        for s in scenarios.iter().filter(|s| s.status == "skipped") {
            out.push(format!(
                "{} {}: skipped {}: {}",
                cell.kernel,
                cell.proxy,
                s.name,
                s.reason.as_deref().unwrap_or_default()
            ));
        }
    }
    out
}

/// 2 if any run could not be carried out, else 1 if any failed, else 0.
fn exit_code(cells: &[Cell]) -> i32 {
    if cells.is_empty() || cells.iter().any(|c| c.exit_code != EXIT_PASS && c.exit_code != EXIT_FAIL) {
        EXIT_ERROR
    } else if cells.iter().any(|c| c.exit_code == EXIT_FAIL) {
        EXIT_FAIL
    } else {
        EXIT_PASS
    }
}

fn combined_json(cells: &[Cell]) -> Result<String> {
    let runs = cells
        .iter()
        .map(|c| MatrixRun {
            kernel: c.kernel.clone(),
            version: c.version.clone(),
            proxy: c.proxy.clone(),
            status: verdict(c).to_lowercase(),
            exit_code: c.exit_code,
            error: c.error.clone(),
            evidence: c.kept.as_ref().map(|k| k.display().to_string()),
            report: c.report.as_ref(),
            differences: c.differences.clone(),
            seconds: c.seconds,
        })
        .collect();
    Ok(serde_json::to_string_pretty(&MatrixReport { exit_code: exit_code(cells), runs })?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(kernel: &str, proxy: &str, exit_code: i32) -> Cell {
        Cell {
            kernel: kernel.into(),
            version: format!("{kernel}.1-1"),
            proxy: proxy.into(),
            exit_code,
            report: serde_json::from_value(
                serde_json::json!({"passed": 3, "failed": 0, "skipped": 1, "errors": 0, "scenarios": []}),
            )
            .ok(),
            error: None,
            kept: None,
            differences: None,
            seconds: None,
        }
    }

    #[test]
    fn one_vcpu_vms_share_a_core_by_two_and_bigger_ones_never_outnumber_the_cores() {
        assert_eq!(vms_for_cores(2, 1), 4);
        assert_eq!(vms_for_cores(2, 2), 1);
        assert_eq!(vms_for_cores(8, 2), 4);
        assert_eq!(vms_for_cores(1, 4), 1);
    }

    #[test]
    fn a_proxy_name_is_one_plain_path_component() {
        assert!(plain_name("builtin-nftables-v1.31") && plain_name("apiserver"));
        for bad in ["", "..", "../etc", "a/b", "$(reboot)", ".hidden", "a b"] {
            assert!(!plain_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn the_worst_run_decides_the_exit_code() {
        assert_eq!(exit_code(&[cell("5.10", "a", 0), cell("7.3", "a", 0)]), EXIT_PASS);
        assert_eq!(exit_code(&[cell("5.10", "a", 0), cell("7.3", "a", 1)]), EXIT_FAIL);
        assert_eq!(exit_code(&[cell("5.10", "a", 2), cell("7.3", "a", 1)]), EXIT_ERROR);
        assert_eq!(exit_code(&[]), EXIT_ERROR);
    }

    #[test]
    fn one_line_per_kernel_and_proxy_and_a_table() {
        let cells = [cell("5.10", "builtin-iptables", 0), cell("5.10", "builtin-nftables", 1)];
        assert_eq!(
            line(&cells[0]),
            "5.10 (5.10.1-1) builtin-iptables PASS: 3 passed, 0 failed, 1 skipped, 0 errors"
        );
        let t = table(&cells);
        assert!(t.contains("5.10 (5.10.1-1)  PASS              FAIL"), "{t}");
    }

    #[test]
    fn skipped_scenarios_are_listed_per_kernel_with_their_reason() {
        let mut old = cell("5.10", "builtin-nftables", 0);
        let scenario = |name: &str, status: &str| {
            serde_json::json!({"name": name, "file": "x.yaml", "status": status, "elapsed_seconds": 0.0,
                               "probes": [], "not_judged": []})
        };
        let mut skipped_one = scenario("new-feature", "skipped");
        skipped_one["reason"] =
            "needs kernel 5.15 or newer (minKernel); this kernel is 5.10.0-32-amd64".into();
        old.report = serde_json::from_value(serde_json::json!({"passed": 1, "failed": 0, "skipped": 1,
            "errors": 0, "scenarios": [scenario("sctp", "passed"), skipped_one]}))
        .ok();
        let new = cell("7.3", "builtin-nftables", 0);
        assert_eq!(
            skipped(&[old, new]),
            [
                "5.10 builtin-nftables: skipped new-feature: needs kernel 5.15 or newer (minKernel); this kernel is 5.10.0-32-amd64"
            ]
        );
    }

    #[test]
    fn the_guest_run_writes_its_reports_into_its_share_directory() {
        let args = Args {
            paths: vec![],
            kernels: vec!["7.3".into()],
            proxy: vec!["builtin-iptables".into()],
            proxy_options: vec!["mutant=no-sctp".into()],
            guest_files: vec![],
            against: None,
            against_options: vec![],
            profile: None,
            timeout_ms: 500,
            jobs: None,
            vms: None,
            cpus: 2,
            memory_mib: 512,
            artifacts: "artifacts".into(),
            keep_evidence: false,
            json: None,
            junit: None,
            fetch_only: false,
            vm_limit_minutes: 30,
            mutants: false,
            only: vec![],
            partition: None,
            coverage: false,
        };
        let run = guest_run("builtin-iptables", &args, &[PathBuf::from("scenarios/sctp.yaml")]);
        let line = run.args.join(" ");
        assert!(
            line.starts_with(
                "run --proxy builtin-iptables --proxy-option mutant=no-sctp --jobs 4 --timeout-ms 500"
            ),
            "two scenarios per vCPU: {line}"
        );
        assert!(line.contains("--json /share/builtin-iptables/report.json"));
        assert!(line.ends_with("scenarios/sctp.yaml"));

        // A slice of the suite in every guest, as `run --partition` takes it.
        let args = Args { partition: Some("hash:2/3".parse().unwrap()), ..args };
        let line = guest_run("builtin-iptables", &args, &[]).args.join(" ");
        assert!(line.contains(" --partition hash:2/3 --timeout-ms"), "{line}");
        // A hunt in a guest: one run per vCPU, the slice of the catalog.
        let args = Args { mutants: true, ..args };
        let line = guest_run("builtin-iptables", &args, &[]).args.join(" ");
        assert!(line.starts_with("mutants --partition hash:2/3 --jobs 2 --proxy builtin-iptables"), "{line}");
        let args = Args { partition: None, mutants: false, ..args };
        // Coverage measured in every guest.
        let args = Args { coverage: true, ..args };
        let line = guest_run("builtin-iptables", &args, &[]).args.join(" ");
        assert!(line.contains(" --coverage --timeout-ms"), "{line}");
        let args = Args { coverage: false, ..args };

        let args = Args {
            against: Some("builtin-ipvs".into()),
            against_options: vec!["mutant=no-affinity".into()],
            proxy_options: vec!["mode=ipvs".into()],
            ..args
        };
        let run = guest_run("apiserver", &args, &[PathBuf::from("scenarios/sctp.yaml")]);
        assert_eq!(
            run.args.join(" "),
            "diff --left apiserver --left-option mode=ipvs --right builtin-ipvs --right-option \
             mutant=no-affinity --timeout-ms 500 --artifacts /share/apiserver/artifacts --json \
             /share/apiserver/report.json scenarios/sctp.yaml"
        );
    }

    fn diff_report(
        flows: Vec<crate::compare::FlowDiff>,
        not_compared: Vec<crate::compare::NotCompared>,
    ) -> GuestReport {
        let compared = usize::from(not_compared.is_empty());
        let exit_code = if !not_compared.is_empty() {
            EXIT_ERROR
        } else if flows.is_empty() {
            EXIT_PASS
        } else {
            EXIT_FAIL
        };
        GuestReport::Diff(crate::commands::diff::DiffReport {
            left: "apiserver".into(),
            right: "builtin-ipvs".into(),
            differences: crate::compare::Differences { flows, not_compared, compared },
            exit_code,
        })
    }

    /// A guest whose `diff` could not set a side up (e.g. a `--guest-file` named unlike the
    /// command) exits 2: an error with the guest's reason, never "DIFFERS".
    #[test]
    fn a_guests_diff_whose_side_was_never_set_up_is_an_error_not_a_difference() {
        let not_set_up = crate::compare::NotCompared {
            scenario: "hairpin".into(),
            why: "left: setup error: kube-proxy: not found".into(),
            error: true,
        };
        let report = diff_report(vec![], vec![not_set_up]);
        let differences = match &report {
            GuestReport::Diff(d) => Some(d.table()),
            _ => None,
        };
        let cell = Cell { report: Some(report), differences, ..cell("7.3", "apiserver", EXIT_ERROR) };
        assert_eq!(verdict(&cell), "ERROR");
        assert!(
            line(&cell).ends_with("ERROR: 1 scenarios not compared: a side could not be set up"),
            "{}",
            line(&cell)
        );
        assert_eq!(exit_code(&[cell]), EXIT_ERROR);
    }

    /// The guest's `diff --json` reads back as a diff (not as a run or a hunt), and the combined
    /// report reads back with the types that wrote it.
    #[test]
    fn a_guests_diff_and_the_combined_report_read_back_as_the_types_that_wrote_them() {
        let differs = crate::compare::FlowDiff {
            scenario: "hairpin".into(),
            probe: "p".into(),
            left: "refused".into(),
            right: "answered".into(),
            passed: (Some(false), Some(true)),
        };
        let written = serde_json::to_string(&diff_report(vec![differs.clone()], vec![])).unwrap();
        let GuestReport::Diff(read) = serde_json::from_str(&written).unwrap() else { panic!("{written}") };
        assert_eq!(read.differences.flows, [differs]);
        assert!(read.table().ends_with("1 flows behave differently\n"), "{}", read.table());
        let cell = Cell {
            report: Some(GuestReport::Diff(read)),
            differences: Some("table".into()),
            ..cell("7.3", "apiserver", EXIT_FAIL)
        };
        assert_eq!(verdict(&cell), "DIFFERS");
        let combined: MatrixReport = serde_json::from_str(&combined_json(&[cell]).unwrap()).unwrap();
        assert_eq!((combined.exit_code, combined.runs[0].status.as_str()), (EXIT_FAIL, "differs"));
        assert!(matches!(combined.runs[0].report, Some(GuestReport::Diff(_))));
    }
}
