//! The statistics of the performance gate: a summary of samples (min, median, p95) and the
//! one-sided Mann–Whitney U test. No maintained Rust crate offers the test (statrs has the
//! distributions, not the test), so it is written here, after scipy's `mannwhitneyu`: the
//! exact null distribution of U when the samples are small and untied, else the normal
//! approximation with tie and continuity corrections (`method="asymptotic"`).

use serde::{Deserialize, Serialize};

/// Min, median and 95th percentile of a figure, with how many samples made it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub n: usize,
    pub min: f64,
    pub median: f64,
    pub p95: f64,
}

impl Summary {
    /// `None` for no samples. The median of an even count is the mean of the middle two; the
    /// p95 is the nearest rank (the smallest sample with at least 95 % at or below it).
    pub fn of(samples: &[f64]) -> Option<Summary> {
        if samples.is_empty() {
            return None;
        }
        let mut s = samples.to_vec();
        s.sort_by(f64::total_cmp);
        let n = s.len();
        let median = if n % 2 == 1 { s[n / 2] } else { (s[n / 2 - 1] + s[n / 2]) / 2.0 };
        let rank = ((0.95 * n as f64).ceil() as usize).clamp(1, n);
        Some(Summary { n, min: s[0], median, p95: s[rank - 1] })
    }
}

/// Samples up to which (both sides together) an untied test uses the exact distribution.
const EXACT_UP_TO: usize = 60;

/// The one-sided Mann–Whitney U test that `x` tends to be larger than `y`: `U` (pairs where
/// the x sample is larger, a tie counting half) and the p-value `P(U' ≥ U)` under the null
/// hypothesis that both come from one distribution. `None` when either side is empty.
pub fn mann_whitney_greater(x: &[f64], y: &[f64]) -> Option<(f64, f64)> {
    let (n, m) = (x.len(), y.len());
    if n == 0 || m == 0 {
        return None;
    }
    // Ranks of the pooled samples, ties sharing their mean rank.
    let mut pooled: Vec<(f64, bool)> =
        x.iter().map(|&v| (v, true)).chain(y.iter().map(|&v| (v, false))).collect();
    pooled.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (mut rank_sum_x, mut tie_term, mut tied) = (0.0, 0.0, false);
    let mut i = 0;
    while i < pooled.len() {
        let mut j = i;
        while j + 1 < pooled.len() && pooled[j + 1].0 == pooled[i].0 {
            j += 1;
        }
        let t = (j - i + 1) as f64;
        let rank = (i + j) as f64 / 2.0 + 1.0;
        rank_sum_x += rank * pooled[i..=j].iter().filter(|p| p.1).count() as f64;
        if t > 1.0 {
            tied = true;
            tie_term += t * t * t - t;
        }
        i = j + 1;
    }
    let u = rank_sum_x - (n * (n + 1)) as f64 / 2.0;
    let p = if !tied && n + m <= EXACT_UP_TO {
        exact_upper_tail(n, m, u.round() as usize)
    } else {
        let (nf, mf, total) = (n as f64, m as f64, (n + m) as f64);
        let sigma = (nf * mf / 12.0 * ((total + 1.0) - tie_term / (total * (total - 1.0)))).sqrt();
        if sigma == 0.0 {
            1.0
        } else {
            let z = (u - nf * mf / 2.0 - 0.5) / sigma;
            0.5 * erfc(z / std::f64::consts::SQRT_2)
        }
    };
    Some((u, p.clamp(0.0, 1.0)))
}

/// `P(U ≥ u)` for untied samples of sizes `n` and `m`: the share of the `C(n+m, n)` equally
/// likely orderings whose U is at least `u`, counted by the recurrence
/// `f(n, m, u) = f(n-1, m, u-m) + f(n, m-1, u)` (the largest value is an x or a y).
fn exact_upper_tail(n: usize, m: usize, u: usize) -> f64 {
    // counts[j][v]: orderings of i x-values and j y-values with U = v, for the current i.
    let max_u = n * m;
    let mut counts = vec![vec![0.0f64; max_u + 1]; m + 1];
    for row in counts.iter_mut() {
        row[0] = 1.0; // i = 0: U is 0 whatever j is.
    }
    for i in 1..=n {
        let mut next = vec![vec![0.0f64; max_u + 1]; m + 1];
        next[0][0] = 1.0;
        for j in 1..=m {
            for v in 0..=i * j {
                let x_largest = if v >= j { counts[j][v - j] } else { 0.0 };
                next[j][v] = x_largest + next[j - 1][v];
            }
        }
        counts = next;
    }
    let row = &counts[m];
    let total: f64 = row.iter().sum();
    row[u.min(max_u + 1)..].iter().sum::<f64>() / total
}

/// The complementary error function (Numerical Recipes' `erfcc`: fractional error below
/// 1.2e-7 everywhere), enough for a p-value compared with an alpha of 0.01.
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = t * poly.exp();
    if x >= 0.0 { r } else { 2.0 - r }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tolerance: f64) -> bool {
        (a - b).abs() <= tolerance
    }

    #[test]
    fn summary_takes_min_median_and_nearest_rank_p95() {
        let s = Summary::of(&[5.0, 1.0, 3.0]).unwrap();
        assert_eq!((s.n, s.min, s.median, s.p95), (3, 1.0, 3.0, 5.0));
        let twenty: Vec<f64> = (1..=20).map(f64::from).collect();
        let s = Summary::of(&twenty).unwrap();
        assert_eq!((s.median, s.p95), (10.5, 19.0));
        assert!(Summary::of(&[]).is_none());
    }

    /// scipy's documented example (`scipy.stats.mannwhitneyu`, the males' and females'
    /// ages): U1 = 17; exact two-sided p = 0.1111 (one-sided 1/18 = 0.0556), asymptotic
    /// two-sided p = 0.11134688653314041.
    #[test]
    fn matches_scipy_on_its_documented_example() {
        let males = [19.0, 22.0, 16.0, 29.0, 24.0];
        let females = [20.0, 11.0, 17.0, 12.0];
        let (u, p) = mann_whitney_greater(&males, &females).unwrap();
        assert_eq!(u, 17.0);
        assert!(close(p, 0.111_111_111 / 2.0, 1e-9), "{p}");
        // The same samples through the normal approximation (a tie forces it).
        let (nf, mf) = (5.0, 4.0);
        let sigma = (nf * mf / 12.0 * 10.0f64).sqrt();
        let z = (17.0 - 10.0 - 0.5) / sigma;
        assert!(close(0.5 * erfc(z / std::f64::consts::SQRT_2) * 2.0, 0.111_346_886_533_140_41, 1e-6));
    }

    #[test]
    fn exact_tails_of_separated_samples_are_one_over_the_orderings() {
        // All five x above all five y: one ordering in C(10, 5) = 252.
        let (u, p) = mann_whitney_greater(&[6.0, 7.0, 8.0, 9.0, 10.0], &[1.0, 2.0, 3.0, 4.0, 5.0]).unwrap();
        assert_eq!(u, 25.0);
        assert!(close(p, 1.0 / 252.0, 1e-12), "{p}");
        // The other way round, every ordering has U ≥ 0.
        let (u, p) = mann_whitney_greater(&[1.0, 2.0, 3.0, 4.0, 5.0], &[6.0, 7.0, 8.0, 9.0, 10.0]).unwrap();
        assert_eq!((u, p), (0.0, 1.0));
        // n = 3, m = 2 (10 orderings; U = 0..6 with counts 1, 1, 2, 2, 2, 1, 1).
        assert!(close(exact_upper_tail(3, 2, 6), 0.1, 1e-12));
        assert!(close(exact_upper_tail(3, 2, 5), 0.2, 1e-12));
        assert!(close(exact_upper_tail(3, 2, 4), 0.4, 1e-12));
    }

    /// Large samples take the normal approximation, with ties: a shift of the whole sample
    /// is found, an identical sample is not (p = 0.5 plus the continuity correction's share).
    #[test]
    fn large_and_tied_samples_use_the_normal_approximation() {
        let base: Vec<f64> = (0..100).map(|i| f64::from(i % 10)).collect();
        let shifted: Vec<f64> = base.iter().map(|v| v + 5.0).collect();
        let (_, p) = mann_whitney_greater(&shifted, &base).unwrap();
        assert!(p < 1e-10, "{p}");
        let (u, p) = mann_whitney_greater(&base, &base).unwrap();
        assert_eq!(u, 5000.0);
        assert!(p > 0.5 && p < 0.55, "{p}");
        // Every value equal: no evidence at all.
        assert_eq!(mann_whitney_greater(&[1.0; 40], &[1.0; 40]).unwrap().1, 1.0);
    }

    #[test]
    fn erfc_is_accurate_enough_for_a_p_value() {
        // erfc(0) = 1, erfc(1) = 0.157299207050285, erfc(-1) = 1.842700792949715,
        // erfc(3) = 2.209049699858544e-05.
        assert!(close(erfc(0.0), 1.0, 1e-7));
        assert!(close(erfc(1.0), 0.157_299_207_050_285, 1e-7));
        assert!(close(erfc(-1.0), 1.842_700_792_949_715, 1e-7));
        assert!((erfc(3.0) / 2.209_049_699_858_544e-5 - 1.0).abs() < 1e-6);
    }
}
