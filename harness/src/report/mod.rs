//! Terminal reports: one line per scenario, and for a failing scenario its whole flow table,
//! expected beside observed, in the spirit of kube-proxy's packet-flow tests; the JUnit and
//! JSON reports; the evidence files a scenario leaves (`evidence`).

pub mod evidence;
mod json;
mod junit;
pub mod known_bugs;
pub mod terminal;

pub(crate) use json::CpuSeconds;
pub(crate) use json::Run as JsonRun;
pub(crate) use json::Scenario as ReportedScenario;
pub(crate) use json::Timings as ScenarioTimings;
pub(crate) use json::VERSION;
pub use json::{json_report, json_report_of_slice};
pub use junit::junit_report;
pub(crate) use junit::{
    Origin as JunitOrigin, root_without_skipped as junit_root_without_skipped, suite as junit_suite,
};
pub use terminal::Paint;

use std::fmt::Write;

use std::collections::{BTreeMap, BTreeSet};

use crate::model::{Cluster, Target};
use crate::oracle::{self, Outcome as Expected};
use crate::results::{Outcome, ScenarioReport};
use crate::verdict::{ProbeVerdict, Symptom};

/// `PASS kube-dns-udp  1 probe, 40 attempts  0.31s  (scenarios/kube-dns-udp.yaml)`
pub fn scenario_line(report: &ScenarioReport) -> String {
    scenario_line_painted(report, Paint::PLAIN)
}

/// [`scenario_line`] with its status word coloured by `paint`.
pub(crate) fn scenario_line_painted(report: &ScenarioReport, paint: Paint) -> String {
    let (status, detail) = match &report.outcome {
        Outcome::Skipped(reason) => ("SKIP", format!("skipped: {reason}")),
        Outcome::ProxyFailed(reason) => ("FAIL", format!("the proxy failed: {reason}")),
        Outcome::Judged(verdicts) => {
            let attempts: usize = verdicts.iter().map(|v| v.observed.len()).sum();
            let failed = verdicts.iter().filter(|v| v.failed()).count();
            let faulted = verdicts.iter().filter(|v| v.faulted()).count();
            let status = match (failed, faulted) {
                (0, 0) => "PASS",
                (0, _) => "FAULT",
                _ => "FAIL",
            };
            let mut detail = format!("{} probes, {attempts} attempts", verdicts.len());
            if failed > 0 {
                let _ = write!(detail, ", {failed} failed");
                let chosen = verdicts
                    .iter()
                    .filter(|v| v.failed() && v.expected.basis != oracle::Basis::Contract)
                    .count();
                if let (true, Some(profile)) = (chosen > 0, report.profile) {
                    let contract = failed - chosen;
                    let _ = write!(
                        detail,
                        " ({contract} against the Kubernetes contract, {chosen} only against {profile}'s choices)"
                    );
                }
            }
            if faulted > 0 {
                let _ = write!(detail, ", {faulted} unobserved (harness fault)");
            }
            if !report.unjudged.is_empty() {
                let _ = write!(detail, ", {} not judged", report.unjudged.len());
            }
            (status, detail)
        }
    };
    let profile = report.profile.map(|p| format!(", profile {p}")).unwrap_or_default();
    format!(
        "{} {}  {detail}  {:.2}s  ({}, {}{profile})",
        paint.status(status),
        report.scenario,
        report.elapsed.as_secs_f64(),
        report.source.display(),
        report.proxy
    )
}

/// Flows left out of a scenario, one line each with the reason.
pub fn unjudged_lines(report: &ScenarioReport) -> String {
    report.unjudged.iter().map(|(name, why)| format!("  not judged: {name}: {why}\n")).collect()
}

/// The flow table of a judged scenario; failing probes carry their reasons beneath them.
pub fn flow_table(cluster: &Cluster, verdicts: &[ProbeVerdict]) -> String {
    flow_table_painted(cluster, verdicts, Paint::PLAIN)
}

/// [`flow_table`] with `ok`/`FAIL` and the reasons of failures coloured by `paint`.
pub(crate) fn flow_table_painted(cluster: &Cluster, verdicts: &[ProbeVerdict], paint: Paint) -> String {
    let header = ["", "probe", "from", "to", "expected", "observed"];
    let rows: Vec<[String; 6]> = verdicts
        .iter()
        .map(|v| {
            [
                match (v.failed(), v.faulted()) {
                    (true, _) => "FAIL".into(),
                    (false, true) => "FAULT".into(),
                    (false, false) => "ok".into(),
                },
                v.probe.name.clone(),
                v.probe.from.to_string(),
                destination(cluster, &v.probe.to, v),
                expected(&v.expected.outcome),
                v.observed_summary(),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let mut out = String::new();
    // The status column is painted after padding, so escape codes never count as width.
    let line = |out: &mut String, cells: &[&str], paint: Paint| {
        let mut text = String::from("  ");
        for (i, cell) in cells.iter().enumerate() {
            if i == 0 && !cell.is_empty() {
                let pad = widths[i].saturating_sub(cell.len());
                let _ = write!(text, "{}{:pad$}  ", paint.status(cell), "");
            } else {
                let _ = write!(text, "{cell:<w$}  ", w = widths[i]);
            }
        }
        let _ = writeln!(out, "{}", text.trim_end());
    };
    line(&mut out, &header, Paint::PLAIN);
    for (row, verdict) in rows.iter().zip(verdicts) {
        line(&mut out, &row.each_ref().map(String::as_str), paint);
        for failure in &verdict.failures {
            let _ = writeln!(out, "        {}", paint.failure_detail(&format!("✗ {failure}")));
        }
        // The harness's own failures to observe, apart from the proxy's.
        for fault in &verdict.harness_faults {
            let _ = writeln!(out, "        {}", paint.failure_detail(&format!("? harness fault: {fault}")));
        }
        if !verdict.passed() {
            let e = &verdict.expected;
            let _ = writeln!(out, "        why expected: {} (by {})", e.because, e.basis);
        }
    }
    out
}

pub(crate) fn destination(cluster: &Cluster, target: &Target, verdict: &ProbeVerdict) -> String {
    let proto = verdict.probe.protocol;
    match target {
        Target::ClusterIp { service, port } => {
            let name =
                cluster.service(service).map(|s| s.namespaced_name()).unwrap_or_else(|| service.clone());
            format!("svc {name}:{port} {}/{proto}", verdict.destination)
        }
        Target::NodePort { service, port, node, .. } => {
            format!("nodeport {service}:{port}@{node} {}/{proto}", verdict.destination)
        }
        Target::ExternalIp { service, port, via, .. } => {
            format!("externalIP {service}:{port}{} {}/{proto}", via_suffix(via), verdict.destination)
        }
        Target::LoadBalancer { service, port, via, .. } => {
            format!("loadbalancer {service}:{port}{} {}/{proto}", via_suffix(via), verdict.destination)
        }
        Target::HealthCheck { service, node } => {
            format!("healthcheck {service}@{node} {}/HTTP", verdict.destination)
        }
        Target::Address(addr) => format!("{addr}/{proto}"),
        Target::Localhost { node, .. } => format!("{}/{proto} of {node}", verdict.destination),
    }
}

fn via_suffix(via: &Option<String>) -> String {
    via.as_ref().map(|n| format!(" via {n}")).unwrap_or_default()
}

pub(crate) fn expected(outcome: &Expected) -> String {
    match outcome {
        Expected::Answered { backends, .. } => {
            // Backends usually share one source rule; print it once when they do.
            let sources: std::collections::BTreeSet<String> =
                backends.values().map(|s| s.to_string()).collect();
            let pods: Vec<&str> = backends.keys().map(String::as_str).collect();
            if sources.len() == 1 {
                format!("{} seeing {}", pods.join("|"), sources.into_iter().next().unwrap_or_default())
            } else {
                let each: Vec<String> = backends.iter().map(|(p, s)| format!("{p} seeing {s}")).collect();
                each.join("; ")
            }
        }
        other => other.to_string(),
    }
}

/// The closing line CI systems read: `N passed, N failed, N skipped, N errors`, the same four
/// counts as the JSON report's summary (an error is a scenario that could not be set up).
pub(crate) fn summary_line(reports: &[&ScenarioReport], errors: usize) -> String {
    let passed = reports.iter().filter(|r| r.passed()).count();
    let skipped = reports.iter().filter(|r| matches!(r.outcome, Outcome::Skipped(_))).count();
    let failed = reports.iter().filter(|r| r.failed()).count();
    let faults = harness_faults_count(reports.iter().filter(|r| r.faulted()).count());
    format!("{passed} passed, {failed} failed, {skipped} skipped, {errors} errors{faults}")
}

/// `, N harness faults` for a closing line, only when there are some, so that a clean run's
/// line stays the one CI systems read.
pub(crate) fn harness_faults_count(faults: usize) -> String {
    match faults {
        0 => String::new(),
        n => format!(", {n} harness faults"),
    }
}

/// The known bugs whose signature the judged scenarios' failures match
/// (`known_bugs::matches` says how much must match).
pub fn known_bug_matches<'r>(
    reports: impl IntoIterator<Item = &'r ScenarioReport>,
) -> Vec<known_bugs::Match> {
    let mut judged: BTreeMap<(&str, &str), BTreeSet<Symptom>> = BTreeMap::new();
    for report in reports {
        let scenario = report.scenario.as_str();
        match &report.outcome {
            Outcome::Judged(verdicts) => {
                judged.insert((scenario, known_bugs::PROXY), BTreeSet::new());
                judged.insert((scenario, known_bugs::ANY), BTreeSet::new());
                for v in verdicts {
                    let symptoms = v.symptoms();
                    judged.entry((scenario, known_bugs::ANY)).or_default().extend(symptoms.iter().copied());
                    judged.entry((scenario, v.probe.name.as_str())).or_default().extend(symptoms);
                }
            }
            Outcome::ProxyFailed(_) => {
                judged.insert((scenario, known_bugs::PROXY), BTreeSet::from([Symptom::ProxyFailed]));
            }
            Outcome::Skipped(_) => {}
        }
    }
    known_bugs::matches(|scenario, probe| judged.get(&(scenario, probe)).cloned())
}

/// What the terminal prints after the summary: one line per known bug matched, with the
/// failing probes that match it.
pub fn known_bug_lines(matches: &[known_bugs::Match]) -> String {
    matches
        .iter()
        .map(|m| {
            let probes: Vec<String> = m.probes.iter().map(|(s, p)| format!("{s}: {p}")).collect();
            format!("the failures of {} {}\n", probes.join(", "), m.bug.headline())
        })
        .collect()
}

/// The headlines of the known bugs `matches` that name probe `probe` of `scenario`.
pub(crate) fn headlines_for(matches: &[known_bugs::Match], scenario: &str, probe: &str) -> Vec<String> {
    matches
        .iter()
        .filter(|m| m.probes.iter().any(|(s, p)| s == scenario && p == probe))
        .map(|m| m.bug.headline())
        .collect()
}

/// The run's rule coverage, one table per proxy, from the scenarios that measured it.
pub fn coverage_tables(finished: &[Finished<'_>]) -> Vec<crate::coverage::Table> {
    crate::coverage::tables(finished.iter().filter_map(|f| match f {
        Finished::Ran { report, .. } => {
            report.coverage.as_deref().map(|c| (report.proxy.as_str(), report.scenario.as_str(), c))
        }
        Finished::Error { .. } => None,
    }))
}

/// What the terminal prints for each table: its line, the templates no probe hit (each with
/// an example and where it was written) and, with `covering`, the probes behind each covered
/// template.
pub fn coverage_text(tables: &[crate::coverage::Table], covering: bool) -> String {
    let mut out = String::new();
    for table in tables {
        out.push_str(&table.uncovered_lines());
        if covering {
            out.push_str(&table.covering_lines());
        }
        out.push_str(&table.line());
        out.push('\n');
    }
    out
}

/// A scenario as it ended, for the machine-readable reports.
pub enum Finished<'a> {
    Ran {
        scenario: &'a crate::model::Scenario,
        report: &'a ScenarioReport,
    },
    /// It could not be set up (topology, proxy programming): an error, not a failure.
    Error {
        scenario: &'a crate::model::Scenario,
        error: String,
    },
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::oracle::Expectation;
    use crate::traffic::Attempt;

    /// A scenario of the suite with one passing and one failing verdict.
    fn judged() -> (crate::model::Scenario, ScenarioReport) {
        let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/kube-dns-udp.yaml");
        let s = crate::admission::load(&file).unwrap_or_else(|e| panic!("{e}"));
        let rejected = Expectation::required(Expected::Rejected, "no endpoints");
        let refused = || Attempt::Refused { reason: "ICMP port unreachable".into() };
        let to = "10.96.0.10:53".parse().expect("an address");
        let verdicts = vec![
            crate::verdict::judge(&s.probes[0], to, &rejected, vec![refused(), refused()]),
            crate::verdict::judge(&s.probes[1], to, &rejected, vec![refused(), Attempt::Silent]),
        ];
        let report = ScenarioReport {
            scenario: s.name.clone(),
            source: s.source.clone(),
            proxy: "builtin-iptables".into(),
            outcome: Outcome::Judged(verdicts),
            elapsed: Duration::from_millis(250),
            artifacts: None,
            unjudged: Vec::new(),
            profile: None,
            coverage: None,
            timings: Default::default(),
        };
        (s, report)
    }

    #[test]
    fn colour_only_adds_escapes_to_the_plain_text() {
        let (s, report) = judged();
        let Outcome::Judged(verdicts) = &report.outcome else { unreachable!() };
        let plain = format!("{}\n{}", scenario_line(&report), flow_table(&s.cluster, verdicts));
        let painted = format!(
            "{}\n{}",
            scenario_line_painted(&report, Paint::COLOUR),
            flow_table_painted(&s.cluster, verdicts, Paint::COLOUR)
        );
        assert!(!plain.contains('\x1b'), "{plain}");
        assert!(
            painted.contains("\x1b[1m\x1b[31mFAIL\x1b[0m") && painted.contains("\x1b[1m\x1b[32mok\x1b[0m")
        );
        assert_eq!(anstream::adapter::strip_str(&painted).to_string(), plain);
        // The columns line up the same with colour: padding is counted without escapes.
        assert!(plain.contains("\n  ok    client-to-dns "), "{plain}");
        assert!(plain.contains("\n  FAIL  client-to-dns-tcp "), "{plain}");
    }

    /// Known bugs are named from the failures' kinds, never their sentences: every probe of
    /// `no-hairpin-masq`'s signature failing with its symptom, in words nothing like the
    /// verdict's, still names it.
    #[test]
    fn a_reworded_failure_still_names_its_known_bug() {
        use crate::model::{Probe, Source, Target};
        use crate::verdict::Failure;
        let bug = known_bugs::by_name("no-hairpin-masq").expect("in the catalog");
        let mut by_scenario: BTreeMap<&str, Vec<ProbeVerdict>> = BTreeMap::new();
        for mark in bug.signature {
            let probe = Probe {
                name: mark.probe.to_string(),
                ..Probe::example(
                    Source::Pod("client".into()),
                    Target::Address("10.96.0.1:80".parse().unwrap()),
                )
            };
            by_scenario.entry(mark.scenario).or_default().push(ProbeVerdict {
                probe,
                destination: "10.96.0.1:80".parse().unwrap(),
                expected: crate::oracle::Expectation::required(Expected::Rejected, "test"),
                observed: Vec::new(),
                failures: vec![Failure::new(mark.symptom, "worded in a way no parser has ever seen")],
                harness_faults: vec![],
            });
        }
        let reports: Vec<ScenarioReport> = by_scenario
            .into_iter()
            .map(|(scenario, verdicts)| ScenarioReport {
                scenario: scenario.to_string(),
                source: scenario.into(),
                proxy: "builtin-iptables".into(),
                outcome: Outcome::Judged(verdicts),
                elapsed: Duration::ZERO,
                artifacts: None,
                unjudged: Vec::new(),
                profile: None,
                coverage: None,
                timings: Default::default(),
            })
            .collect();
        let named: Vec<&str> = known_bug_matches(&reports).iter().map(|m| m.bug.name).collect();
        assert!(named.contains(&"no-hairpin-masq"), "{named:?}");
    }
}
