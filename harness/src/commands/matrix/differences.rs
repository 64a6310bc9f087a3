//! What one kernel does and another does not: for each proxy, the scenarios whose outcome is
//! not the same on every kernel the matrix ran, with the kernels of each outcome. A line per
//! scenario, so that a kernel-specific failure (or skip) is named beside the kernel table.

use super::junit::CellRun;
use crate::report::ReportedScenario;

/// `sctp with builtin-iptables: passed on 6.12, 7.3; failed on 5.10`, in the order the
/// scenarios and kernels first appear. A run without a report (its guest panicked, say) is
/// one line, `every scenario with builtin-ipvs: no report from 6.12`, and takes no part in
/// the comparison: a line per scenario would only repeat that the run failed.
pub(crate) fn by_kernel(cells: &[CellRun<'_>]) -> Vec<String> {
    let mut proxies: Vec<&str> = Vec::new();
    for c in cells {
        if !proxies.contains(&c.proxy) {
            proxies.push(c.proxy);
        }
    }
    let mut out = Vec::new();
    for proxy in proxies {
        let runs: Vec<&CellRun<'_>> = cells.iter().filter(|c| c.proxy == proxy).collect();
        if runs.len() < 2 {
            continue;
        }
        let (runs, unreported): (Vec<&CellRun<'_>>, Vec<&CellRun<'_>>) =
            runs.into_iter().partition(|run| run.report.is_some());
        if !unreported.is_empty() {
            let kernels: Vec<&str> = unreported.iter().map(|run| run.kernel).collect();
            out.push(format!("every scenario with {proxy}: no report from {}", kernels.join(", ")));
        }
        let mut names: Vec<&str> = Vec::new();
        for run in &runs {
            for s in scenarios(run) {
                let name = s.name.as_str();
                if !names.contains(&name) {
                    names.push(name);
                }
            }
        }
        for name in names {
            // Outcome → kernels, in first-seen order of outcomes.
            let mut outcomes: Vec<(String, Vec<&str>)> = Vec::new();
            for run in &runs {
                let status = scenarios(run)
                    .find(|s| s.name == name)
                    .map(|s| s.status.clone())
                    .unwrap_or_else(|| "not run".into());
                match outcomes.iter_mut().find(|(o, _)| *o == status) {
                    Some((_, kernels)) => kernels.push(run.kernel),
                    None => outcomes.push((status, vec![run.kernel])),
                }
            }
            if outcomes.len() > 1 {
                let parts: Vec<String> =
                    outcomes.iter().map(|(o, kernels)| format!("{o} on {}", kernels.join(", "))).collect();
                out.push(format!("{name} with {proxy}: {}", parts.join("; ")));
            }
        }
    }
    out
}

fn scenarios<'v>(run: &CellRun<'v>) -> impl Iterator<Item = &'v ReportedScenario> {
    run.report.map(super::GuestReport::scenarios).unwrap_or_default().iter()
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::super::GuestReport;
    use super::*;

    fn report(statuses: &[(&str, &str)]) -> GuestReport {
        let scenarios: Vec<Value> = statuses
            .iter()
            .map(|(n, s)| {
                json!({"name": n, "file": format!("scenarios/{n}.yaml"), "status": s,
                       "elapsed_seconds": 1.0, "probes": [], "not_judged": []})
            })
            .collect();
        serde_json::from_value(
            json!({"passed": 0, "failed": 0, "skipped": 0, "errors": 0, "scenarios": scenarios}),
        )
        .unwrap()
    }

    fn cell<'a>(kernel: &'a str, proxy: &'a str, report: Option<&'a GuestReport>) -> CellRun<'a> {
        CellRun { kernel, version: "x", proxy, report, error: None }
    }

    #[test]
    fn a_scenario_whose_outcome_differs_between_kernels_is_named_with_the_kernels_of_each_outcome() {
        let old = report(&[("sctp", "failed"), ("hairpin", "passed")]);
        let new = report(&[("sctp", "passed"), ("hairpin", "passed")]);
        let newer = report(&[("sctp", "passed"), ("hairpin", "passed")]);
        let cells = [
            cell("5.10", "builtin-iptables", Some(&old)),
            cell("6.12", "builtin-iptables", Some(&new)),
            cell("7.3", "builtin-iptables", Some(&newer)),
        ];
        let lines = by_kernel(&cells);
        assert_eq!(lines, ["sctp with builtin-iptables: failed on 5.10; passed on 6.12, 7.3"]);
    }

    #[test]
    fn proxies_are_compared_only_with_themselves() {
        let passed = report(&[("sctp", "passed")]);
        let skipped = report(&[("sctp", "skipped")]);
        let cells = [
            cell("5.10", "builtin-iptables", Some(&passed)),
            cell("5.10", "builtin-nftables", Some(&skipped)),
            cell("7.3", "builtin-iptables", Some(&passed)),
            cell("7.3", "builtin-nftables", Some(&passed)),
        ];
        assert_eq!(by_kernel(&cells), ["sctp with builtin-nftables: skipped on 5.10; passed on 7.3"]);
    }

    #[test]
    fn a_run_without_report_is_one_line_not_one_per_scenario() {
        let passed = report(&[("sctp", "passed"), ("hairpin", "passed")]);
        let failed = report(&[("sctp", "failed"), ("hairpin", "passed")]);
        let cells = [
            cell("5.10", "builtin-ipvs", Some(&passed)),
            cell("6.12", "builtin-ipvs", None),
            cell("7.3", "builtin-ipvs", Some(&failed)),
        ];
        assert_eq!(
            by_kernel(&cells),
            [
                "every scenario with builtin-ipvs: no report from 6.12",
                "sctp with builtin-ipvs: passed on 5.10; failed on 7.3"
            ]
        );
    }

    #[test]
    fn one_kernel_has_nothing_to_differ_from() {
        let failed = report(&[("sctp", "failed")]);
        assert!(by_kernel(&[cell("5.10", "builtin-iptables", Some(&failed))]).is_empty());
    }
}
