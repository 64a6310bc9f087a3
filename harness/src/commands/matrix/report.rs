//! The matrix's combined report: each kernel × proxy with the report its guest wrote (`run
//! --json`, `mutants --json` or `diff --json`), written and read back (by `merge`) with the
//! same types, never by looking up keys.

use serde::{Deserialize, Serialize};

use super::timings::GuestSeconds;
use crate::commands::diff::DiffReport;
use crate::commands::mutants::HuntReport;
use crate::report::{JsonRun, ReportedScenario};

/// What a guest wrote as its report, read back as the type that wrote it.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum GuestReport {
    /// `--against`: the guest's `diff --json`.
    Diff(DiffReport),
    /// `--mutants`: the guest's `mutants --json`.
    Hunt(HuntReport),
    Run(JsonRun),
}

impl GuestReport {
    /// The scenarios a run judged (a hunt or a diff has none).
    pub(crate) fn scenarios(&self) -> &[ReportedScenario] {
        match self {
            GuestReport::Run(run) => &run.scenarios,
            GuestReport::Hunt(_) | GuestReport::Diff(_) => &[],
        }
    }
}

/// `matrix --json`: the exit code and every kernel × proxy. Written with the guests' reports
/// borrowed (`R = &GuestReport`), read back owning them: one type, so one shape.
#[derive(Serialize, Deserialize)]
pub(crate) struct MatrixReport<R = GuestReport> {
    pub exit_code: i32,
    pub runs: Vec<MatrixRun<R>>,
}

/// One kernel × proxy of a matrix.
#[derive(Serialize, Deserialize)]
pub(crate) struct MatrixRun<R = GuestReport> {
    /// The kernel as asked for (`6.12`) and the version booted (`6.12.117-1`).
    pub kernel: String,
    pub version: String,
    pub proxy: String,
    /// `pass`, `fail`, `error`; with `--against`, `same` or `differs`.
    pub status: String,
    pub exit_code: i32,
    /// Why the run could not be carried out, if it could not.
    pub error: Option<String>,
    /// Where its output, reports and evidence were kept, if they were.
    pub evidence: Option<String>,
    pub report: Option<R>,
    /// With `--against`: the table the guest's `diff` printed.
    pub differences: Option<String>,
    /// Where the guest's time went (none when the VM never booted).
    pub seconds: Option<GuestSeconds>,
}
