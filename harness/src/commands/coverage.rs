//! `packetproof coverage merge`: the rule coverage of several runs (modes, kernels, shards)
//! as one table per proxy, read from their JSON reports (`run --coverage --json FILE`) or
//! from an earlier merge's output.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::{EXIT_FAIL, EXIT_PASS};
use crate::coverage::{self, Table};

/// What a coverage file holds: the `coverage` key of a JSON report, alone or in the report.
#[derive(Serialize, Deserialize)]
struct File {
    #[serde(default)]
    coverage: Vec<Table>,
}

/// Merges `files`, prints the merged tables (with the probes behind each covered template when
/// `covering`), writes them to `json` if given; exit 1 when a proxy is below `minimum`.
pub fn merge(files: &[PathBuf], json: Option<&Path>, minimum: Option<f64>, covering: bool) -> Result<i32> {
    let mut tables = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let file: File = serde_json::from_str(&text)
            .with_context(|| format!("{}: not a JSON report or coverage file", path.display()))?;
        if file.coverage.is_empty() {
            anyhow::bail!("{}: holds no coverage (was the run made with --coverage?)", path.display());
        }
        tables.extend(file.coverage);
    }
    let merged = coverage::merge(tables);
    print!("{}", crate::report::coverage_text(&merged, covering));
    if let Some(path) = json {
        let text = serde_json::to_string_pretty(&File { coverage: merged.clone() })?;
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    let below = minimum.map(|m| coverage::table::below(&merged, m)).unwrap_or_default();
    for why in &below {
        println!("{why}");
    }
    Ok(if below.is_empty() { EXIT_PASS } else { EXIT_FAIL })
}
