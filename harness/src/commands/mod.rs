//! The commands behind `packetproof`'s subcommands: each takes parsed arguments and returns
//! the exit code. Exit codes: 0 everything passed; 1 a proxy failed; 2 the input or the
//! machine is at fault (bad scenario files, a setup error).

pub mod bench;
pub mod check;
pub mod cleanup;
pub mod coverage;
pub mod diff;
pub mod explore;
pub mod explore_merge;
pub mod matrix;
pub mod merge;
pub mod mutants;
pub mod partition;
pub mod rules;
pub mod run;
pub mod soak;

pub use mutants::HuntArgs;
pub use run::{Chosen, Outputs, run_one};

use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::model::{ProxyChoice, Scenario};
use crate::{admission, proxy, scenario};

pub(crate) const EXIT_PASS: i32 = 0;
pub(crate) const EXIT_FAIL: i32 = 1;
pub(crate) const EXIT_ERROR: i32 = 2;

/// `--timeout-ms`: how long an attempt waits for an answer. Below 10 ms answered probes would
/// read as silent (a proxy failure that is not one); above a minute a run seems to hang.
pub fn timeout_ms(text: &str) -> Result<u64, String> {
    bounded(text, 10, 60_000)
}

/// `--jobs`: scenarios at once; 0 would run nothing.
pub fn jobs(text: &str) -> Result<usize, String> {
    bounded(text, 1, 256).map(|n| n as usize)
}

/// `--min-coverage`: a percentage, 0 to 100.
pub fn percent(text: &str) -> Result<f64, String> {
    match text.trim_end_matches('%').parse::<f64>() {
        Ok(p) if (0.0..=100.0).contains(&p) => Ok(p),
        Ok(p) => Err(format!("{p} is outside 0..=100")),
        Err(_) => Err(format!("{text:?} is not a number")),
    }
}

fn bounded(text: &str, low: u64, high: u64) -> Result<u64, String> {
    let n: u64 = text.parse().map_err(|_| format!("{text:?} is not a whole number"))?;
    if (low..=high).contains(&n) { Ok(n) } else { Err(format!("{n} is outside {low}..={high}")) }
}

/// The scenarios a command reads when given no path.
pub(crate) fn default_paths(paths: Vec<PathBuf>) -> Vec<PathBuf> {
    if paths.is_empty() { vec![PathBuf::from("scenarios")] } else { paths }
}

/// Removes what killed runs left behind: namespaces, additions to existing nodes, and objects
/// they wrote to a cluster's API (deleted the way the `cluster` proxy wrote them).
pub(crate) fn remove_leftovers(include_live: bool) -> Result<crate::topology::Leftovers> {
    crate::topology::remove_leftovers(include_live, proxy::cluster::delete_leftover)
}

/// Before a run: removes what killed runs left behind, saying what. Additions an earlier run
/// made to existing nodes or a cluster that cannot be taken back now (the cluster unreachable,
/// say) stop a run on existing nodes (`on_existing_nodes`: they may be the same nodes), exit 2;
/// a run on packetproof's own namespaces, which nothing of theirs reaches, goes on and says so.
pub(crate) fn clear_leftovers(on_existing_nodes: bool) -> Result<()> {
    let found = remove_leftovers(false)?;
    for stale in &found.removed {
        eprintln!("packetproof: removed {stale}, left by an earlier run");
    }
    if found.not_undone.is_empty() {
        return Ok(());
    }
    let list = found.not_undone.join("\n  ");
    if on_existing_nodes {
        anyhow::bail!(
            "what an earlier run added to existing nodes could not be taken back, and they may be this run's \
             (`packetproof cleanup` tries again):\n  {list}"
        );
    }
    eprintln!(
        "packetproof: warning: what an earlier run added to existing nodes could not be taken back \
         (`packetproof cleanup` tries again); this run's namespaces are its own:\n  {list}"
    );
    Ok(())
}

/// Loads and validates every scenario; prints every error and returns `None` if any file is bad.
pub(crate) fn load_all(paths: &[PathBuf]) -> Result<Option<Vec<Scenario>>> {
    load_each(paths, |_| {})
}

/// [`load_all`], telling `on_loaded` of each scenario that loaded, also when others did not.
fn load_each(paths: &[PathBuf], mut on_loaded: impl FnMut(&Scenario)) -> Result<Option<Vec<Scenario>>> {
    let (files, unreadable) = scenario::discover_each(paths);
    for problem in &unreadable {
        eprintln!("{problem}");
    }
    let mut scenarios = Vec::new();
    let mut bad = !unreadable.is_empty();
    let mut named: std::collections::HashMap<String, PathBuf> = std::collections::HashMap::new();
    for file in &files {
        match admission::load(file) {
            Ok(s) => {
                // A name is the scenario's evidence folder and its report entry: two files
                // with one name would overwrite each other's evidence.
                if let Some(first) = named.insert(s.name.clone(), s.source.clone()) {
                    eprintln!(
                        "{}: metadata.name: scenario {:?} is also the name of {}: \
                         each scenario of a run needs its own name",
                        s.source.display(),
                        s.name,
                        first.display()
                    );
                    bad = true;
                } else {
                    on_loaded(&s);
                }
                scenarios.push(s);
            }
            Err(errors) => {
                eprintln!("{errors}");
                bad = true;
            }
        }
    }
    Ok((!bad).then_some(scenarios))
}

/// The `--proxy` and `--proxy-option` flags as a proxy choice.
pub(crate) fn proxy_choice(name: &str, options: &[String]) -> Result<ProxyChoice> {
    let mut choice = ProxyChoice::named(name);
    for option in options {
        let (key, value) = option
            .split_once('=')
            .with_context(|| format!("--proxy-option {option:?}: expected KEY=VALUE"))?;
        let value = serde_json::from_str(value).unwrap_or_else(|_| serde_json::Value::String(value.into()));
        choice.options.insert(key.to_string(), value);
    }
    Ok(choice)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_diff_column_names_a_command_by_its_program() {
        let choice = proxy_choice(
            "apiserver",
            &["mode=nftables".into(), "command=/opt/k8s/kube-proxy --config={config} --v=2".into()],
        )
        .unwrap();
        assert_eq!(choice.label(), "apiserver (kube-proxy, mode=nftables)");
        assert_eq!(
            proxy_choice("builtin-iptables", &["mutant=x".into()]).unwrap().label(),
            "builtin-iptables (mutant=x)"
        );
    }
}
