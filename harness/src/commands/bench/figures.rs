//! What `bench --scale` measures, shared by the table, the JSON report and the gate: the
//! figures by key, one proxy's figures at one scale, and how a value prints.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::stats::Summary;

/// A proxy as given on the command line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Side {
    pub proxy: String,
    pub options: Vec<String>,
}

impl Side {
    pub fn label(&self) -> String {
        if self.options.is_empty() {
            self.proxy.clone()
        } else {
            format!("{} ({})", self.proxy, self.options.join(", "))
        }
    }
}

/// One proxy at one scale, over its rounds.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Measured {
    #[serde(flatten)]
    pub side: Side,
    pub services: usize,
    pub rounds: usize,
    /// By key (see [`FIGURES`]): every sample and their summary.
    pub figures: BTreeMap<String, Figure>,
    pub harness_peak_mb: f64,
    pub proxy_peak_mb: f64,
    /// The rounds' wall time together, processes included.
    pub wall_s: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Figure {
    pub unit: String,
    #[serde(flatten)]
    pub summary: Summary,
    pub samples: Vec<f64>,
}

/// The figures, in the table's order: key, title, unit, and whether the gate judges it.
pub const FIGURES: &[(&str, &str, &str, bool)] = &[
    ("start-to-synced", "start to synced", "ms", true),
    ("add-service", "add a Service, on the wire", "ms", true),
    ("remove-endpoint", "remove an endpoint, on the wire", "ms", true),
    ("scale-up", "scale a Service 0 → 1, on the wire", "ms", true),
    ("delete-service", "delete a Service, on the wire", "ms", true),
    ("add-service-synced", "add a Service, proxy reports synced", "ms", false),
    ("remove-endpoint-synced", "remove an endpoint, proxy reports synced", "ms", false),
    ("scale-up-synced", "scale a Service 0 → 1, proxy reports synced", "ms", false),
    ("delete-service-synced", "delete a Service, proxy reports synced", "ms", false),
    ("connect-first", "connect to the first Service", "µs", true),
    ("connect-last", "connect to the last Service", "µs", true),
];

pub fn value(v: f64, unit: &str) -> String {
    if unit == "ms" { format!("{v:.1} ms") } else { format!("{v:.0} {unit}") }
}
