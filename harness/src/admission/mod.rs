//! The admission stage: a scenario file is admitted once the reader found it well formed, the
//! proxy it names can be built for it, and the oracle can judge every probe it states. The
//! reader (`scenario`) knows neither proxies nor the oracle; it asks this stage, through
//! [`scenario::Admission`], and reports the answers at the file's lines like its own.

use std::path::Path;

use crate::model::{Cluster, Probe, ProxyChoice, Scenario};
use crate::scenario::{self, ScenarioErrors};
use crate::{oracle, proxy};

/// Reads, validates and admits one scenario file.
pub fn load(path: &Path) -> Result<Scenario, ScenarioErrors> {
    scenario::load(path, &Checks)
}

/// [`load`] for scenario text; `path` only names the file in errors and in `Scenario::source`.
pub fn load_str(text: &str, path: &Path) -> Result<Scenario, ScenarioErrors> {
    scenario::load_str(text, path, &Checks)
}

/// The answers to the reader's questions: the proxy factory's and the oracle's.
pub struct Checks;

impl scenario::Admission for Checks {
    fn proxy_problem(&self, choice: &ProxyChoice, file: &Path, nodes: &[&str]) -> Option<String> {
        let problem = proxy::build(choice, crate::model::folder_of(file))
            .and_then(|proxy| proxy.check_inputs(file, nodes));
        problem.err().map(|e| format!("{e:#}"))
    }

    fn probe_problems(&self, cluster: &Cluster, probes: &[Probe]) -> Vec<(usize, &'static str, String)> {
        oracle::scenario_problems(cluster, probes)
    }
}

#[cfg(test)]
mod fuzz_tests;
