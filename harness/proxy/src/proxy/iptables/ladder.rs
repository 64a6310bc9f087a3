//! The probability ladder kube-proxy uses to spread connections over `n` endpoints: rule `i`
//! (of `n`) matches with probability `1/(n-i)`, the last rule always matches, so each endpoint
//! gets `1/n` overall.

/// The `--probability` kube-proxy writes when `remaining` endpoints are left, i.e. `1/remaining`
/// with ten decimals (`computeProbability`: `fmt.Sprintf("%0.10f", 1.0/float64(n))`).
pub(crate) fn probability(remaining: usize) -> String {
    format!("{:.10}", 1.0 / remaining as f64)
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
}
