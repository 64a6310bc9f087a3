//! The probability ladder kube-proxy uses to spread connections over `n` endpoints: rule `i`
//! (of `n`) matches with probability `1/(n-i)`, the last rule always matches, so each endpoint
//! gets `1/n` overall.

/// The `--probability` kube-proxy writes when `remaining` endpoints are left, i.e. `1/remaining`
/// with ten decimals (`computeProbability`: `fmt.Sprintf("%0.10f", 1.0/float64(n))`).
pub(crate) fn probability(remaining: usize) -> String {
    format!("{:.10}", 1.0 / remaining as f64)
}

/// What `iptables-save` prints for a `--probability` that was loaded as `written`: the kernel
/// keeps `round(p * 2^31)` and `libxt_statistic` prints it back with eleven decimals, so
/// `0.5000000000` comes back as `0.50000000000` and `0.1428571429` as `0.14285714272`.
#[cfg(test)]
pub(crate) fn saved_probability(written: &str) -> Option<String> {
    let p: f64 = written.parse().ok()?;
    let scale = f64::from(0x8000_0000u32);
    let stored = (p * scale).round();
    Some(format!("{:.11}", stored / scale))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seven_endpoint_ladder() {
        let ladder: Vec<String> = (0..6).map(|i| probability(7 - i)).collect();
        assert_eq!(
            ladder,
            ["0.1428571429", "0.1666666667", "0.2000000000", "0.2500000000", "0.3333333333", "0.5000000000"]
        );
    }

    #[test]
    fn saved_form_matches_iptables_save() {
        // Seed 000 and seed 001 (real dumps) print a half as eleven decimals.
        assert_eq!(saved_probability("0.5000000000").unwrap(), "0.50000000000");
        // Measured with iptables-nft 1.8.9: restore 1/7, 1/3, 1/6 and save them back.
        assert_eq!(saved_probability("0.1428571429").unwrap(), "0.14285714272");
        assert_eq!(saved_probability("0.3333333333").unwrap(), "0.33333333349");
        assert_eq!(saved_probability("0.1666666667").unwrap(), "0.16666666651");
        assert_eq!(saved_probability("x"), None);
    }
}
