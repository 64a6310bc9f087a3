//! `packetproof diff`: the flows whose behaviour differs between two proxies
//! ([`crate::compare`]), as a table, and the exit code.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::{EXIT_ERROR, EXIT_FAIL, EXIT_PASS, clear_leftovers, load_all};
pub use crate::compare::{Behaviour, Differences, FlowDiff, NotCompared, behaviour, diff};
use crate::engine::{Engine, RunProgress};
use crate::model::ProxyChoice;
use crate::proxy;
use crate::report::Paint;
use crate::runner::RunOptions;

/// The differences as a table, or a line saying there are none; then each scenario not
/// compared, and a closing line with the exit code's reason.
pub fn table(left: &str, right: &str, found: &Differences) -> String {
    // With nothing compared, "no behaviour differs" would claim what nobody checked.
    let mut out = if found.compared == 0 && found.flows.is_empty() {
        String::new()
    } else {
        flow_table(left, right, &found.flows)
    };
    for n in &found.not_compared {
        out.push_str(&format!("not compared: {}: {}\n", n.scenario, n.why));
    }
    let errors = found.not_compared.iter().filter(|n| n.error).count();
    if errors > 0 {
        out.push_str(&format!("{errors} scenarios not compared: a side could not be set up\n"));
    } else if found.compared == 0 {
        out.push_str("nothing was compared: every scenario was skipped\n");
    }
    out
}

fn flow_table(left: &str, right: &str, diffs: &[FlowDiff]) -> String {
    if diffs.is_empty() {
        return format!("no behaviour differs between {left} and {right}\n");
    }
    let header = ["scenario", "probe", left, right];
    let rows: Vec<[&str; 4]> = diffs
        .iter()
        .map(|d| [d.scenario.as_str(), d.probe.as_str(), d.left.as_str(), d.right.as_str()])
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: [&str; 4]| {
        let text: Vec<String> = cells.iter().zip(widths).map(|(c, w)| format!("{c:<w$}")).collect();
        format!("{}\n", text.join("  ").trim_end())
    };
    let mut out = line(header);
    for row in rows {
        out.push_str(&line(row));
    }
    out.push_str(&format!("{} flows behave differently\n", diffs.len()));
    out
}

/// What `diff --json` writes: the two proxies as reports name them and what differed; the
/// kernel matrix reads a guest's back with this type.
#[derive(Serialize, Deserialize)]
pub(crate) struct DiffReport {
    pub left: String,
    pub right: String,
    pub differences: Differences,
    pub exit_code: i32,
}

impl DiffReport {
    /// The table `diff` prints.
    pub(crate) fn table(&self) -> String {
        table(&self.left, &self.right, &self.differences)
    }
}

/// `packetproof diff`: the flows whose behaviour differs between two proxies; with `json`, also
/// written there as a [`DiffReport`].
pub fn main(
    paths: &[PathBuf],
    left: &ProxyChoice,
    right: &ProxyChoice,
    options: &RunOptions,
    jobs: usize,
    json: Option<&Path>,
) -> Result<i32> {
    let Some(scenarios) = load_all(paths)? else { return Ok(EXIT_ERROR) };
    for choice in [left, right] {
        proxy::build(choice, Path::new("."))?;
    }
    clear_leftovers(!options.nodes.is_empty())?;
    let engine = Engine { options: options.clone(), jobs };
    let mut progress = RunProgress::new(Paint::for_stdout(clap::ColorChoice::Auto));
    let found = diff(&scenarios, left, right, &engine, &mut [&mut progress])?;
    let report = DiffReport {
        left: left.label(),
        right: right.label(),
        exit_code: diff_exit_code(&found),
        differences: found,
    };
    print!("{}", report.table());
    if let Some(root) = &options.artifacts {
        for folder in kept_evidence(root, &report.differences) {
            println!("evidence of a side that failed: {}", folder.display());
        }
    }
    if let Some(path) = json {
        let text = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(report.exit_code)
}

/// The evidence folders (`root/left/SCENARIO`, `root/right/SCENARIO`) kept for the differing
/// flows' sides that failed the oracle, each once.
fn kept_evidence(root: &Path, found: &Differences) -> std::collections::BTreeSet<PathBuf> {
    found
        .flows
        .iter()
        .flat_map(|d| {
            [("left", d.passed.0), ("right", d.passed.1)]
                .into_iter()
                .filter(|&(_, passed)| passed == Some(false))
                .map(|(side, _)| root.join(side).join(&d.scenario))
        })
        .filter(|folder| folder.is_dir())
        .collect()
}

/// As `run`'s: 2 when a side could not be set up or nothing was compared (input or machine at
/// fault), 1 when some flow differs, 0 otherwise.
fn diff_exit_code(found: &Differences) -> i32 {
    if found.setup_failed() || found.compared == 0 {
        EXIT_ERROR
    } else if found.flows.is_empty() {
        EXIT_PASS
    } else {
        EXIT_FAIL
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_diff_that_could_not_compare_is_an_error_and_a_skip_beside_a_comparison_is_not() {
        let not = |error| NotCompared { scenario: "s".into(), why: "left: …".into(), error };
        let found = |flows: usize, not_compared, compared| Differences {
            flows: (0..flows)
                .map(|_| FlowDiff {
                    scenario: "s".into(),
                    probe: "p".into(),
                    left: "a".into(),
                    right: "b".into(),
                    passed: (None, None),
                })
                .collect(),
            not_compared,
            compared,
        };
        assert_eq!(diff_exit_code(&found(0, vec![not(false)], 1)), EXIT_PASS);
        assert_eq!(diff_exit_code(&found(1, vec![], 1)), EXIT_FAIL);
        assert_eq!(
            diff_exit_code(&found(1, vec![not(true)], 1)),
            EXIT_ERROR,
            "an error outweighs a difference"
        );
        assert_eq!(diff_exit_code(&found(0, vec![not(false)], 0)), EXIT_ERROR, "nothing compared");
    }

    #[test]
    fn the_evidence_named_is_the_failing_sides_and_only_where_it_was_kept() {
        let root = std::env::temp_dir().join(format!("pp-diff-kept-{}", std::process::id()));
        std::fs::create_dir_all(root.join("right/s")).unwrap();
        let flow = |scenario: &str, passed| FlowDiff {
            scenario: scenario.into(),
            probe: "p".into(),
            left: "a".into(),
            right: "b".into(),
            passed,
        };
        let found = Differences {
            flows: vec![
                flow("s", (Some(true), Some(false))),
                flow("s", (None, Some(false))),
                flow("t", (Some(false), None)),
            ],
            not_compared: vec![],
            compared: 2,
        };
        let kept = kept_evidence(&root, &found);
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(kept.into_iter().collect::<Vec<_>>(), [root.join("right/s")], "t's left kept nothing");
    }

    #[test]
    fn a_scenario_not_compared_is_listed_with_why() {
        let not = NotCompared {
            scenario: "hairpin".into(),
            why: "right: skipped: no SCTP sockets".into(),
            error: true,
        };
        let found = Differences { flows: vec![], not_compared: vec![not], compared: 0 };
        assert_eq!(
            table("l", "r", &found),
            "not compared: hairpin: right: skipped: no SCTP sockets\n\
             1 scenarios not compared: a side could not be set up\n"
        );
    }
}
