//! `packetproof explore`: generated cases against a proxy, failures shrunk to scenario files.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use serde::Serialize;

use super::{EXIT_ERROR, EXIT_FAIL, EXIT_PASS, clear_leftovers, proxy_choice};
use crate::explore::features::Feature;
use crate::explore::{self, Settings, Stop, Summary};
use crate::runner::RunOptions;

#[derive(clap::Args)]
pub struct Args {
    /// The seed the cases are drawn from (default: one from the clock, printed); the same seed
    /// and packetproof version give the same cases.
    #[arg(long)]
    pub seed: Option<u64>,
    /// How long to explore, with its unit (`90s`, `2m`, `1h`).
    #[arg(long, value_parser = budget, conflicts_with = "cases")]
    pub budget: Option<Duration>,
    /// How many cases to explore (default 100, unless `--budget`).
    #[arg(long)]
    pub cases: Option<usize>,
    /// Proxy to program the nodes with.
    #[arg(long, default_value = crate::model::DEFAULT_PROXY)]
    pub proxy: String,
    /// An option for the `--proxy` adapter, `KEY=VALUE` (as `run --proxy-option`); repeatable.
    #[arg(long = "proxy-option", value_name = "KEY=VALUE")]
    pub proxy_options: Vec<String>,
    /// Also run every case on this proxy and report each flow whose behaviour differs between
    /// the two (as `packetproof diff`), confirmed by a second run, instead of the oracle's
    /// failures: iptables mode against nftables, one release against another.
    #[arg(long)]
    pub against: Option<String>,
    /// An option for `--against`, `KEY=VALUE`; repeatable.
    #[arg(long = "against-option", value_name = "KEY=VALUE", requires = "against")]
    pub against_options: Vec<String>,
    /// Judge by this profile instead of the proxy's own (as `run --profile`).
    #[arg(long)]
    pub profile: Option<crate::model::Profile>,
    /// What steers generation: `fields` prefers field combinations not yet generated;
    /// `coverage` also traces which of the proxy's rules each case reached (as `run
    /// --coverage`) and mutates the cases that reached a rule template first.
    #[arg(long, value_enum, default_value = "fields", conflicts_with = "against")]
    pub guide: crate::explore::GuideKind,
    /// Where each confirmed failure is written, shrunk, as a scenario file.
    #[arg(long, default_value = "explore-findings")]
    pub out: PathBuf,
    /// Also write the fewest judged cases that reach everything the exploration reached, as
    /// scenario files (a suite for `packetproof mutants DIR`).
    #[arg(long, value_name = "DIR")]
    pub save_corpus: Option<PathBuf>,
    /// Milliseconds an attempt waits for an answer (as `run --timeout-ms`).
    #[arg(long, default_value_t = 1000, value_parser = super::timeout_ms)]
    pub timeout_ms: u64,
    /// Cases run at once (default: four per core).
    #[arg(long, value_parser = super::jobs)]
    pub jobs: Option<usize>,
    /// Build every run's namespaces afresh instead of resetting an earlier run's of the same
    /// shape (a case's other side with `--against`; a shrinking's candidates). Slower; the
    /// verdicts are the same.
    #[arg(long)]
    pub fresh_topologies: bool,
    /// Runs a failure's shrinking may take at most.
    #[arg(long, default_value_t = 300)]
    pub shrink_runs: usize,
    /// Also write every generated case here, as it runs.
    #[arg(long, value_name = "DIR")]
    pub keep_cases: Option<PathBuf>,
    /// Also write the closing report as JSON: every count, each finding with its shrunk file,
    /// each case not confirmed with its suspect, the coverage reached.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Also write a JUnit XML report: a test case per generated case; a finding is a failure,
    /// a case not confirmed, a harness fault or a setup error is an error.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Explore slice K of N of `--seed`'s exploration, for many machines: slice K draws from
    /// its own seed (seed × N + K − 1), and `packetproof merge` joins the slices' `--json`
    /// reports, refusing a missing one.
    #[arg(long, value_name = "count:K/N", requires = "seed", value_parser = seed_slice)]
    pub partition: Option<super::partition::Partition>,
}

/// `count:K/N`: seeds are dealt, not hashed.
fn seed_slice(text: &str) -> Result<super::partition::Partition, String> {
    let slice: super::partition::Partition = text.parse()?;
    if slice.scheme != super::partition::Scheme::Count {
        return Err(format!("{text:?}: an exploration's slices are seeds, dealt as count:K/N"));
    }
    Ok(slice)
}

/// What `--json` calls an exploration's report, which `packetproof merge` tells apart by it.
pub const REPORT_KIND: &str = "explore";

/// `90s`, `2m`, `1h`, `500ms`.
fn budget(text: &str) -> Result<Duration, String> {
    let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &text[digits.len()..];
    let n: u64 =
        digits.parse().map_err(|_| format!("{text:?}: expected a number and a unit (90s, 2m, 1h)"))?;
    let seconds = match unit {
        "ms" => return Ok(Duration::from_millis(n)),
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        _ => return Err(format!("{text:?}: the unit must be ms, s, m or h")),
    };
    Ok(Duration::from_secs(seconds))
}

pub fn main(args: Args) -> Result<i32> {
    let base_seed = args.seed.unwrap_or_else(|| {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        now.as_secs() ^ u64::from(now.subsec_nanos())
    });
    let seed = match args.partition {
        Some(p) => base_seed.wrapping_mul(u64::from(p.of)).wrapping_add(u64::from(p.slice - 1)),
        None => base_seed,
    };
    if let Some(p) = args.partition {
        println!("slice {}/{} of seed {base_seed}", p.slice, p.of);
    }
    let proxy = proxy_choice(&args.proxy, &args.proxy_options)?;
    crate::proxy::build(&proxy, std::path::Path::new("."))?;
    let against =
        args.against.as_deref().map(|name| proxy_choice(name, &args.against_options)).transpose()?;
    if let Some(against) = &against {
        crate::proxy::build(against, std::path::Path::new("."))?;
    }
    if let Some(reason) = crate::privileges::preflight() {
        anyhow::bail!("cannot explore here: {reason}");
    }
    clear_leftovers(false)?;
    let stop = match (args.budget, args.cases) {
        (Some(budget), _) => Stop::After(budget),
        (None, cases) => Stop::Cases(cases.unwrap_or(100)),
    };
    match &against {
        Some(other) => println!(
            "exploring with seed {seed}: {} against {} ({})",
            proxy.label(),
            other.label(),
            describe(stop)
        ),
        None => println!("exploring with seed {seed} against {} ({})", proxy.label(), describe(stop)),
    }
    let settings = Settings {
        seed,
        stop,
        proxy,
        options: RunOptions {
            timeout: Duration::from_millis(args.timeout_ms),
            profile: args.profile,
            // Where runs go through the engine: a case's two sides (`--against`) on one worker,
            // the second on the first's namespaces; a shrinking's candidates. Each new case
            // builds its own: of 600 cases generated, 596 had namespaces of their own shape.
            reuse_topologies: !args.fresh_topologies,
            ..RunOptions::default()
        },
        jobs: args.jobs.unwrap_or_else(crate::engine::Engine::default_jobs),
        out: args.out,
        save_corpus: args.save_corpus,
        shrink_runs: args.shrink_runs,
        keep_cases: args.keep_cases,
        against,
        guide: args.guide,
    };
    for file in args.json.iter().chain(&args.junit) {
        std::fs::write(file, "").with_context(|| format!("cannot write {}", file.display()))?;
    }
    let summary = explore::explore(&settings, |s| {
        println!(
            "  {} cases: {} passed, {} findings, {} flows judged",
            s.cases,
            s.passed.len(),
            s.findings.len(),
            s.flows_judged
        )
    })?;
    print!("{}", report(&summary, seed));
    let code = exit_code(&summary);
    let label = settings.proxy.label();
    if let Some(file) = &args.json {
        let slice = args.partition.map(|p| JsonSlice { seed: base_seed, slice: p.slice, of: p.of });
        let guide = clap::ValueEnum::to_possible_value(&args.guide).map(|v| v.get_name().to_string());
        let report = json_report(&summary, seed, slice, &label, guide.as_deref().unwrap_or(""), code);
        let text = serde_json::to_string_pretty(&report)?;
        std::fs::write(file, text + "\n").with_context(|| format!("writing {}", file.display()))?;
    }
    if let Some(file) = &args.junit {
        std::fs::write(file, junit_report(&summary, seed, &label)?)
            .with_context(|| format!("writing {}", file.display()))?;
    }
    Ok(code)
}

/// As `run`'s: 1 when a case failed (a confirmed finding); 2 when the machine or the generator
/// was at fault, or nothing passed; else 0.
fn exit_code(summary: &Summary) -> i32 {
    exit_code_of(
        summary.findings.len(),
        summary.differences.iter().any(|d| !d.documented),
        summary.errors.len() + summary.rejected.len() + summary.harness_faults.len(),
        summary.passed.len() as u64,
    )
}

/// `explore`'s exit code from its counts (also a merged exploration's): a finding or an
/// undocumented difference fails; a setup error, a case the reader refused or a harness fault,
/// or nothing passed, is the machine's or the generator's.
pub fn exit_code_of(findings: usize, undocumented_difference: bool, faults: usize, passed: u64) -> i32 {
    if findings > 0 || undocumented_difference {
        EXIT_FAIL
    } else if faults > 0 || passed == 0 {
        EXIT_ERROR
    } else {
        EXIT_PASS
    }
}

fn describe(stop: Stop) -> String {
    match stop {
        Stop::After(d) => format!("for {}s", d.as_secs()),
        Stop::Cases(n) => format!("{n} cases"),
    }
}

/// The closing report: counts, what was covered, each finding.
pub fn report(s: &Summary, seed: u64) -> String {
    let mut out = String::new();
    for e in &s.rejected {
        out.push_str(&format!("generator bug, a case the reader refused:\n{e}\n"));
    }
    for e in &s.errors {
        out.push_str(&format!("setup error: {e}\n"));
    }
    for u in &s.unconfirmed {
        out.push_str(&format!(
            "not confirmed ({}; suspect: {}): {}: {} ({})\n",
            u.what,
            u.suspect.name(),
            u.case,
            u.why,
            u.file.display()
        ));
    }
    for fault in &s.harness_faults {
        out.push_str(&format!("harness fault (its witnesses disagree; not a finding): {fault}\n"));
    }
    let flows: usize = s.covered.iter().filter(|f| matches!(f, Feature::Flow(_))).count();
    let rules: usize = s.covered.iter().filter(|f| matches!(f, Feature::Rule(_))).count();
    let fields = s.covered.len() - flows - rules;
    out.push_str(&format!(
        "seed {seed}: {} cases, {} passed, {} confirmed failures, {} not confirmed, {} harness faults, {} skipped, {} setup errors, {} refused by the reader\n",
        s.cases,
        s.passed.len(),
        s.findings.len(),
        s.unconfirmed.len(),
        s.harness_faults.len(),
        s.skipped.len(),
        s.errors.len(),
        s.rejected.len()
    ));
    if s.flows_compared > 0 {
        // Compared, not judged: the oracle's verdicts of each side are not collected here.
        out.push_str(&format!(
            "{} flows compared on both proxies; covered {fields} field combinations\n",
            s.flows_compared
        ));
    } else {
        out.push_str(&format!(
            "{} flows judged, {} not judged (no defined outcome); covered {} field combinations and {} kinds of flow × outcome\n",
            s.flows_judged,
            s.flows_unjudged,
            fields,
            flows
        ));
        if rules > 0 {
            out.push_str(&format!("reached {rules} rule templates of the proxy's\n"));
        }
    }
    out.push_str(&differences(s));
    out.push_str(&findings(s));
    if let Some((dir, kept)) = &s.corpus {
        out.push_str(&format!("corpus: {kept} cases in {}\n", dir.display()));
    }
    out
}

/// `--against`: each case that behaved differently on the two proxies, and their count.
fn differences(s: &Summary) -> String {
    let mut out = String::new();
    for d in &s.differences {
        let (verb, choice) =
            if d.documented { ("differs", ", as each side's profile allows") } else { ("DIFFERS", "") };
        out.push_str(&format!(
            "{verb} {}: {} flows behave differently{choice}: {}\n",
            d.case,
            d.flows.len(),
            d.file.display()
        ));
    }
    if !s.differences.is_empty() {
        let documented = s.differences.iter().filter(|d| d.documented).count();
        out.push_str(&format!(
            "{} cases behave differently on the two proxies ({documented} as each side's profile allows)\n",
            s.differences.len()
        ));
    }
    out
}

/// Each confirmed failure: shrunk to what, failing how, named by which bug.
fn findings(s: &Summary) -> String {
    let mut out = String::new();
    for f in &s.findings {
        if let Some(same) = &f.same_as {
            out.push_str(&format!(
                "FAILED {} as {same} did (not shrunk again): {}\n",
                f.case,
                f.file.display()
            ));
            continue;
        }
        let (services, pods, nodes, steps) = f.size;
        out.push_str(&format!(
            "FAILED {}: shrunk to {services} Services, {pods} pods, {nodes} nodes, {steps} steps: {}\n",
            f.case,
            f.file.display()
        ));
        for (symptom, kind) in &f.signature {
            out.push_str(&format!("  fails as {symptom} on {kind}\n"));
        }
        if let Some(bug) = &f.known_bug {
            out.push_str(&format!("  {bug}\n"));
        }
        match f.passes_unbroken {
            Some(true) => out.push_str("  passes on the proxy without the mutant\n"),
            Some(false) => out.push_str("  ALSO FAILS on the proxy without the mutant\n"),
            None => {}
        }
    }
    out
}

/// The closing report, as `--json` writes it.
#[derive(Serialize)]
struct JsonReport<'a> {
    version: &'static str,
    kind: &'static str,
    seed: u64,
    /// With `--partition`: the seed sliced and which slice this is.
    slice: Option<JsonSlice>,
    proxy: &'a str,
    guide: &'a str,
    exit_code: i32,
    cases: usize,
    passed: usize,
    confirmed_failures: usize,
    not_confirmed: Vec<JsonUnconfirmed<'a>>,
    harness_faults: &'a [String],
    skipped: usize,
    setup_errors: &'a [String],
    refused_by_the_reader: &'a [String],
    flows_judged: usize,
    flows_not_judged: usize,
    findings: Vec<JsonFinding<'a>>,
    /// With `--against`: the cases on which the two proxies behave differently.
    differences: Vec<JsonDifference<'a>>,
    /// Field combinations generated, and kinds of flow × outcome judged.
    covered_fields: Vec<&'a str>,
    covered_flows: Vec<&'a str>,
    /// With `--guide coverage`: the proxy's rule templates some case reached.
    covered_rules: Vec<&'a str>,
    corpus: Option<JsonCorpus<'a>>,
}

#[derive(Serialize)]
struct JsonSlice {
    seed: u64,
    slice: u32,
    of: u32,
}

#[derive(Serialize)]
struct JsonUnconfirmed<'a> {
    case: &'a str,
    suspect: &'static str,
    why: &'a str,
    file: &'a std::path::Path,
}

#[derive(Serialize)]
struct JsonFinding<'a> {
    case: &'a str,
    file: &'a std::path::Path,
    /// Each symptom with the kind of flow it showed on.
    fails_as: Vec<(String, &'a str)>,
    known_bug: Option<&'a str>,
    passes_unbroken: Option<bool>,
    services: usize,
    pods: usize,
    nodes: usize,
    steps: usize,
    /// The earlier finding it fails as (not shrunk again).
    same_as: Option<&'a str>,
}

#[derive(Serialize)]
struct JsonDifference<'a> {
    case: &'a str,
    file: &'a std::path::Path,
    flows: Vec<JsonFlowDiff<'a>>,
    /// Each side passes under its own profile: a documented choice, not a finding.
    documented: bool,
}

#[derive(Serialize)]
struct JsonFlowDiff<'a> {
    probe: &'a str,
    proxy: &'a str,
    against: &'a str,
    /// Whether the oracle allows each side's behaviour (`null`: not judged).
    proxy_passed: Option<bool>,
    against_passed: Option<bool>,
}

#[derive(Serialize)]
struct JsonCorpus<'a> {
    dir: &'a std::path::Path,
    cases: usize,
}

fn json_report<'a>(
    s: &'a Summary,
    seed: u64,
    slice: Option<JsonSlice>,
    proxy: &'a str,
    guide: &'a str,
    exit_code: i32,
) -> JsonReport<'a> {
    let covered = |kind: fn(&Feature) -> Option<&str>| s.covered.iter().filter_map(kind).collect::<Vec<_>>();
    JsonReport {
        version: crate::report::VERSION,
        kind: REPORT_KIND,
        seed,
        slice,
        proxy,
        guide,
        exit_code,
        cases: s.cases,
        passed: s.passed.len(),
        confirmed_failures: s.findings.len(),
        not_confirmed: s
            .unconfirmed
            .iter()
            .map(|u| JsonUnconfirmed { case: &u.case, suspect: u.suspect.name(), why: &u.why, file: &u.file })
            .collect(),
        harness_faults: &s.harness_faults,
        skipped: s.skipped.len(),
        setup_errors: &s.errors,
        refused_by_the_reader: &s.rejected,
        flows_judged: s.flows_judged,
        flows_not_judged: s.flows_unjudged,
        findings: s
            .findings
            .iter()
            .map(|f| {
                let (services, pods, nodes, steps) = f.size;
                JsonFinding {
                    case: &f.case,
                    file: &f.file,
                    fails_as: f
                        .signature
                        .iter()
                        .map(|(symptom, kind)| (symptom.to_string(), kind.as_str()))
                        .collect(),
                    known_bug: f.known_bug.as_deref(),
                    passes_unbroken: f.passes_unbroken,
                    services,
                    pods,
                    nodes,
                    steps,
                    same_as: f.same_as.as_deref(),
                }
            })
            .collect(),
        differences: s
            .differences
            .iter()
            .map(|d| JsonDifference {
                case: &d.case,
                file: &d.file,
                documented: d.documented,
                flows: d
                    .flows
                    .iter()
                    .map(|f| JsonFlowDiff {
                        probe: &f.probe,
                        proxy: &f.left,
                        against: &f.right,
                        proxy_passed: f.passed.0,
                        against_passed: f.passed.1,
                    })
                    .collect(),
            })
            .collect(),
        covered_fields: covered(|f| if let Feature::Field(t) = f { Some(t) } else { None }),
        covered_flows: covered(|f| if let Feature::Flow(t) = f { Some(t) } else { None }),
        covered_rules: covered(|f| if let Feature::Rule(t) = f { Some(t) } else { None }),
        corpus: s.corpus.as_ref().map(|(dir, cases)| JsonCorpus { dir, cases: *cases }),
    }
}

/// One test suite, a test case per generated case: passed, skipped (with why), a finding as a
/// failure, and as errors a case not confirmed, a harness fault, a setup error and a case the
/// reader refused. The counts are the closing line's.
fn junit_report(s: &Summary, seed: u64, proxy: &str) -> Result<String> {
    use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
    let mut suite = TestSuite::new(format!("explore seed {seed}"));
    suite.add_property(quick_junit::Property::new("proxy", proxy));
    let classname = format!("explore.{seed}");
    let mut add = |name: &str, status: TestCaseStatus| {
        let mut case = TestCase::new(name, status);
        case.set_classname(classname.as_str());
        suite.add_test_case(case);
    };
    let error = |kind: &str, message: &str| {
        let mut status = TestCaseStatus::non_success(NonSuccessKind::Error);
        status.set_type(kind).set_message(message);
        status
    };
    for name in &s.passed {
        add(name, TestCaseStatus::success());
    }
    for (name, why) in &s.skipped {
        let mut status = TestCaseStatus::skipped();
        status.set_message(why.as_str());
        add(name, status);
    }
    for f in &s.findings {
        let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
        let fails_as: Vec<String> =
            f.signature.iter().map(|(symptom, kind)| format!("{symptom} on {kind}")).collect();
        status.set_message(format!("fails as {}", fails_as.join(", "))).set_description(format!(
            "shrunk case: {}\n{}",
            f.file.display(),
            f.known_bug.as_deref().unwrap_or("no known bug reproduces it")
        ));
        add(&f.case, status);
    }
    for d in &s.differences {
        if d.documented {
            add(&d.case, TestCaseStatus::success());
            continue;
        }
        let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
        let flows: Vec<String> =
            d.flows.iter().map(|f| format!("{}: {} | {}", f.probe, f.left, f.right)).collect();
        status
            .set_message(format!("{} flows behave differently on the two proxies", d.flows.len()))
            .set_description(format!("case: {}\n{}", d.file.display(), flows.join("\n")));
        add(&d.case, status);
    }
    for u in &s.unconfirmed {
        add(
            &u.case,
            error("not-confirmed", &format!("failed once; suspect: {}: {}", u.suspect.name(), u.why)),
        );
    }
    for (case, kind, message) in s
        .harness_faults
        .iter()
        .map(|f| (f, "harness-fault"))
        .chain(s.errors.iter().map(|e| (e, "setup-error")))
        .map(|(text, kind)| (text.split(':').next().unwrap_or_default(), kind, text))
    {
        add(case, error(kind, message));
    }
    // The reader's words lead a refused case's text, not its name.
    for (i, refused) in s.rejected.iter().enumerate() {
        add(&format!("refused by the reader {}", i + 1), error("generator-bug", refused));
    }
    let mut report = Report::new("packetproof");
    report.add_test_suite(suite);
    crate::report::junit_root_without_skipped(&report.to_string()?)
}
