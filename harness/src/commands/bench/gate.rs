//! The performance gate: `diff` for speed. A candidate's figures regress on the baseline's
//! when, for the same count of Services, a figure the gate judges (start to synced, the four
//! changes on the wire, the two connect times) meets all three of:
//! - its median is at least `ratio` times the baseline's (default 1.5);
//! - the medians differ by at least `floor` milliseconds (default 1 ms: below that, other
//!   load on a shared machine moves a connect time by as much);
//! - the one-sided Mann–Whitney U test, candidate larger than baseline, gives p < `alpha`
//!   (default 0.01) on the two figures' samples.
//!
//! Each condition alone errs: a ratio of medians swings on a few noisy samples, a p-value
//! finds differences too small to matter in a thousand samples, and a floor alone ignores the
//! size of the figure. Together a regression is large, real and more than noise.

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

use super::figures::{FIGURES, Measured, value};
use super::stats::mann_whitney_greater;

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Thresholds {
    pub ratio: f64,
    pub alpha: f64,
    pub floor_ms: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Comparison {
    pub services: usize,
    pub figure: String,
    pub unit: String,
    pub baseline_median: f64,
    pub candidate_median: f64,
    pub ratio: f64,
    pub u: f64,
    pub p: f64,
    pub regressed: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Verdict {
    pub candidate: String,
    pub baseline: String,
    pub thresholds: Thresholds,
    pub comparisons: Vec<Comparison>,
}

impl Verdict {
    pub fn regressed(&self) -> bool {
        self.comparisons.iter().any(|c| c.regressed)
    }
}

/// Compares every scale the candidate was measured at with the baseline's figures there.
pub fn judge(candidate: &[Measured], baseline: &[Measured], t: &Thresholds) -> Result<Verdict> {
    let mut comparisons = Vec::new();
    let mut names = (String::new(), String::new());
    for c in candidate {
        let at_scale: Vec<&Measured> = baseline.iter().filter(|b| b.services == c.services).collect();
        let b = match at_scale.as_slice() {
            [] => bail!("the baseline has no figures at {} Services", c.services),
            [one] => *one,
            several => match several.iter().find(|b| b.side.proxy == c.side.proxy) {
                Some(b) => *b,
                None => bail!(
                    "the baseline has several proxies at {} Services and none is {}",
                    c.services,
                    c.side.proxy
                ),
            },
        };
        names = (c.side.label(), b.side.label());
        for (key, _, unit, judged) in FIGURES {
            let (Some(cf), Some(bf)) = (c.figures.get(*key), b.figures.get(*key)) else { continue };
            if !judged {
                continue;
            }
            let (cm, bm) = (cf.summary.median, bf.summary.median);
            let ratio = if bm > 0.0 { cm / bm } else { f64::INFINITY };
            let to_ms = if *unit == "µs" { 1e-3 } else { 1.0 };
            let (u, p) = mann_whitney_greater(&cf.samples, &bf.samples).unwrap_or((0.0, 1.0));
            let regressed = ratio >= t.ratio && (cm - bm) * to_ms >= t.floor_ms && p < t.alpha;
            comparisons.push(Comparison {
                services: c.services,
                figure: key.to_string(),
                unit: unit.to_string(),
                baseline_median: bm,
                candidate_median: cm,
                ratio,
                u,
                p,
                regressed,
            });
        }
    }
    if comparisons.is_empty() {
        bail!("nothing to compare: the candidate has no figures");
    }
    Ok(Verdict { candidate: names.0, baseline: names.1, thresholds: *t, comparisons })
}

pub fn print(v: &Verdict) {
    let t = v.thresholds;
    println!(
        "gate: {} against {} (regression: median ≥ {}× and ≥ {} ms more, and one-sided Mann–Whitney p < {})",
        v.candidate, v.baseline, t.ratio, t.floor_ms, t.alpha
    );
    println!(
        "  {:>8} {:<18} {:>11} {:>11} {:>7} {:>9}  verdict",
        "Services", "figure", "baseline", "candidate", "ratio", "p"
    );
    for c in &v.comparisons {
        println!(
            "  {:>8} {:<18} {:>11} {:>11} {:>6.2}× {:>9.2e}  {}",
            c.services,
            c.figure,
            value(c.baseline_median, &c.unit),
            value(c.candidate_median, &c.unit),
            c.ratio,
            c.p,
            if c.regressed { "REGRESSED" } else { "ok" }
        );
    }
    let regressed = v.comparisons.iter().filter(|c| c.regressed).count();
    if regressed == 0 {
        println!("gate: no regression");
    } else {
        println!("gate: {regressed} figure(s) regressed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::bench::figures::{Figure, Side};
    use crate::commands::bench::stats::Summary;

    fn measured(proxy: &str, start: &[f64], connect: &[f64]) -> Measured {
        let figure = |unit: &str, s: &[f64]| Figure {
            unit: unit.into(),
            summary: Summary::of(s).unwrap(),
            samples: s.to_vec(),
        };
        Measured {
            side: Side { proxy: proxy.into(), options: vec![] },
            services: 200,
            rounds: start.len(),
            figures: [
                ("start-to-synced".to_string(), figure("ms", start)),
                ("connect-first".to_string(), figure("µs", connect)),
            ]
            .into(),
            harness_peak_mb: 0.0,
            proxy_peak_mb: 0.0,
            wall_s: 0.0,
        }
    }

    const T: Thresholds = Thresholds { ratio: 1.5, alpha: 0.01, floor_ms: 1.0 };

    #[test]
    fn a_large_certain_slowdown_regresses_and_noise_does_not() {
        let base = measured("a", &[100.0, 110.0, 105.0, 98.0, 102.0], &[100.0; 5]);
        let slow = measured("b", &[300.0, 310.0, 305.0, 298.0, 302.0], &[100.0; 5]);
        let v = judge(&[slow], std::slice::from_ref(&base), &T).unwrap();
        assert!(v.regressed());
        assert!(v.comparisons.iter().find(|c| c.figure == "start-to-synced").unwrap().regressed);
        assert!(!v.comparisons.iter().find(|c| c.figure == "connect-first").unwrap().regressed);
        let same = measured("a", &[101.0, 99.0, 108.0, 103.0, 104.0], &[100.0; 5]);
        assert!(!judge(&[same], std::slice::from_ref(&base), &T).unwrap().regressed());
    }

    #[test]
    fn each_condition_is_needed() {
        let base = measured("a", &[1.0, 1.1, 1.05, 0.98, 1.02], &[100.0, 110.0, 105.0, 98.0, 102.0]);
        // Three times slower but under the 1 ms floor (connect times in µs).
        let v = judge(
            &[measured("b", &[1.0; 5], &[300.0, 310.0, 305.0, 298.0, 302.0])],
            std::slice::from_ref(&base),
            &T,
        );
        assert!(!v.unwrap().regressed());
        // Twice as slow by the medians, but the samples overlap too much for p < 0.01.
        let base = measured("a", &[100.0, 1000.0, 100.0, 1000.0, 100.0], &[100.0; 5]);
        let v = judge(&[measured("b", &[200.0, 200.0, 200.0, 1000.0, 90.0], &[100.0; 5])], &[base], &T);
        assert!(!v.unwrap().regressed());
    }

    #[test]
    fn a_missing_scale_is_an_input_error() {
        let mut other = measured("a", &[1.0], &[1.0]);
        other.services = 1000;
        assert!(judge(&[measured("a", &[1.0], &[1.0])], &[other], &T).is_err());
    }
}
