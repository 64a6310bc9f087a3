//! The sync metrics of kube-proxy v1.30 (pkg/proxy/metrics/metrics.go) on `/metrics`, in
//! Prometheus' text format as Go's client writes it. As in v1.30 they are unlabelled: both
//! families' proxiers set the same gauges and observe into the same histogram, so a value
//! says that *some* family synced or queued then.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::routing::get;

const DURATION: &str = "kubeproxy_sync_proxy_rules_duration_seconds";
const PROGRAMMING: &str = "kubeproxy_network_programming_duration_seconds";
const LAST_QUEUED: &str = "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds";
const LAST_SYNCED: &str = "kubeproxy_sync_proxy_rules_last_timestamp_seconds";
const RESTORE_FAILURES: &str = "kubeproxy_sync_proxy_rules_iptables_restore_failures_total";

/// `SyncProxyRulesLatency`'s buckets: `ExponentialBuckets(0.001, 2, 15)`.
fn buckets() -> impl Iterator<Item = f64> {
    (0..15).map(|i| 0.001 * f64::from(1u32 << i))
}

/// `NetworkProgrammingLatency`'s buckets: 0.25 s and 0.5 s, then every second to 59 s, every
/// 5 s to 115 s, every 30 s to 5 min.
fn programming_buckets() -> impl Iterator<Item = f64> {
    let quarters = [0.25, 0.5].into_iter();
    let seconds = (1..=59).map(f64::from);
    let fives = (0..12).map(|i| 60.0 + 5.0 * f64::from(i));
    let halves = (0..7).map(|i| 120.0 + 30.0 * f64::from(i));
    quarters.chain(seconds).chain(fives).chain(halves)
}

/// A Prometheus histogram: cumulative bucket counts, count and sum.
#[derive(Debug, Clone, Default, PartialEq)]
struct Histogram {
    buckets: Vec<u64>,
    count: u64,
    sum: f64,
}

impl Histogram {
    fn observe(&mut self, bounds: impl Iterator<Item = f64>, secs: f64) {
        let bounds: Vec<f64> = bounds.collect();
        self.buckets.resize(bounds.len(), 0);
        for (count, bound) in self.buckets.iter_mut().zip(bounds) {
            if secs <= bound {
                *count += 1;
            }
        }
        self.count += 1;
        self.sum += secs;
    }

    fn render(&self, name: &str, bounds: impl Iterator<Item = f64>, out: &mut String) {
        for (i, bound) in bounds.enumerate() {
            let count = self.buckets.get(i).copied().unwrap_or(0);
            let _ = writeln!(out, "{name}_bucket{{le=\"{}\"}} {}", go_float(bound), go_float(count as f64));
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", go_float(self.count as f64));
        let _ = writeln!(out, "{name}_sum {}", go_float(self.sum));
        let _ = writeln!(out, "{name}_count {}", go_float(self.count as f64));
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metrics {
    /// `SyncProxyRulesLastTimestamp`: set after every successful sync.
    last_synced: f64,
    /// `SyncProxyRulesLastQueuedTimestamp`: set by every `Sync()`, and once by each
    /// family's `SyncLoop`.
    last_queued: f64,
    /// `SyncProxyRulesLatency`: one observation per sync attempt of an initialized proxier.
    syncs: Histogram,
    /// `NetworkProgrammingLatency`: one observation per slice change a successful sync wrote.
    programming: Histogram,
    /// `IptablesRestoreFailuresTotal`: one per sync whose rules could not be applied (both
    /// modes count into it in v1.30: pkg/proxy/iptables and pkg/proxy/nftables proxier.go).
    restore_failures: u64,
}

/// `SetToCurrentTime`: `float64(t.UnixNano()) / 1e9`.
fn unix_seconds(t: SystemTime) -> f64 {
    let nanos = match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as f64,
        Err(e) => -(e.duration().as_nanos() as f64),
    };
    nanos / 1e9
}

impl Metrics {
    pub(crate) fn set_last_synced(&mut self, now: SystemTime) {
        self.last_synced = unix_seconds(now);
    }

    pub(crate) fn count_restore_failure(&mut self) {
        self.restore_failures += 1;
    }

    pub(crate) fn set_last_queued(&mut self, now: SystemTime) {
        self.last_queued = unix_seconds(now);
    }

    pub(crate) fn observe_programming(&mut self, since_trigger: Duration) {
        self.programming.observe(programming_buckets(), since_trigger.as_secs_f64());
    }

    pub fn observe(&mut self, took: Duration) {
        self.syncs.observe(buckets(), took.as_secs_f64());
    }

    /// The exposition, families in name order as Go's registry gathers them.
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        let histogram = |out: &mut String, name: &str, help: &str| {
            let _ = writeln!(out, "# HELP {name} [ALPHA] {help}\n# TYPE {name} histogram");
        };
        histogram(&mut out, PROGRAMMING, "In Cluster Network Programming Latency in seconds");
        self.programming.render(PROGRAMMING, programming_buckets(), &mut out);
        histogram(&mut out, DURATION, "SyncProxyRules latency in seconds");
        self.syncs.render(DURATION, buckets(), &mut out);
        let _ = writeln!(
            out,
            "# HELP {RESTORE_FAILURES} [ALPHA] Cumulative proxy iptables restore failures\n# TYPE {RESTORE_FAILURES} counter\n{RESTORE_FAILURES} {}",
            go_float(self.restore_failures as f64)
        );
        let mut gauge = |name: &str, help: &str, value: f64| {
            let _ = writeln!(
                out,
                "# HELP {name} [ALPHA] {help}\n# TYPE {name} gauge\n{name} {}",
                go_float(value)
            );
        };
        gauge(LAST_QUEUED, "The last time a sync of proxy rules was queued", self.last_queued);
        gauge(LAST_SYNCED, "The last time proxy rules were successfully synced", self.last_synced);
        out
    }
}

/// A sample value as Prometheus' Go client writes it: `strconv.FormatFloat(f, 'g', -1, 64)`
/// (shortest digits; exponent form from 1e+06 up and below 1e-04).
pub(crate) fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    if f == 0.0 {
        return "0".into();
    }
    let sign = if f < 0.0 { "-" } else { "" };
    // Rust's `{:e}` gives the same shortest digits: `d.ddde±x`.
    let shortest = format!("{:e}", f.abs());
    let (mantissa, exp) = shortest.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("{:e} has a numeric exponent");
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    if !(-4..6).contains(&exp) {
        let (first, rest) = digits.split_at(1);
        let rest = if rest.is_empty() { String::new() } else { format!(".{rest}") };
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{first}{rest}e{esign}{:02}", exp.abs());
    }
    // Plain form: the decimal point `exp + 1` digits in.
    let point = exp + 1;
    let (whole, fraction) = if point <= 0 {
        ("0".to_string(), format!("{}{digits}", "0".repeat(point.unsigned_abs() as usize)))
    } else {
        let point = point as usize;
        let padded = format!("{digits:0<point$}");
        let (w, f) = padded.split_at(point);
        (w.to_string(), f.to_string())
    };
    if fraction.is_empty() { format!("{sign}{whole}") } else { format!("{sign}{whole}.{fraction}") }
}

/// The route, over the shared metrics.
pub(crate) fn router(metrics: Arc<Mutex<Metrics>>) -> Router {
    Router::new().route(
        "/metrics",
        get(move || {
            let text = metrics.lock().unwrap_or_else(|e| e.into_inner()).render();
            async move { ([("content-type", "text/plain; version=0.0.4; charset=utf-8")], text) }
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_read_as_gos_client_writes_them() {
        for (f, go) in [
            (0.0, "0"),
            (1.0, "1"),
            (3.0, "3"),
            (0.001, "0.001"),
            (16.384, "16.384"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (123456.0, "123456"),
            (1234567.0, "1.234567e+06"),
            (1_722_506_400.5, "1.7225064005e+09"),
            (1_722_506_400.0, "1.7225064e+09"),
            (-2.5, "-2.5"),
            (f64::INFINITY, "+Inf"),
        ] {
            assert_eq!(go_float(f), go, "{f}");
        }
    }

    #[test]
    fn the_exposition_has_the_sync_metrics_unlabelled() {
        let mut m = Metrics::default();
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_722_506_400_250);
        m.set_last_queued(t);
        m.observe(Duration::from_millis(3));
        m.observe(Duration::from_millis(100));
        m.set_last_synced(t + Duration::from_millis(500));
        let text = m.render();
        // `float64(t.UnixNano()) / 1e9`, digits and all, as Go computes and prints it.
        let expected_head = "\
# HELP kubeproxy_sync_proxy_rules_duration_seconds [ALPHA] SyncProxyRules latency in seconds
# TYPE kubeproxy_sync_proxy_rules_duration_seconds histogram
kubeproxy_sync_proxy_rules_duration_seconds_bucket{le=\"0.001\"} 0
kubeproxy_sync_proxy_rules_duration_seconds_bucket{le=\"0.002\"} 0
kubeproxy_sync_proxy_rules_duration_seconds_bucket{le=\"0.004\"} 1
";
        assert!(text.contains(expected_head), "{text}");
        assert!(
            text.starts_with("# HELP kubeproxy_network_programming_duration_seconds"),
            "names in order: {text}"
        );
        let expected_tail = "\
kubeproxy_sync_proxy_rules_duration_seconds_bucket{le=\"0.064\"} 1
kubeproxy_sync_proxy_rules_duration_seconds_bucket{le=\"0.128\"} 2
";
        assert!(text.contains(expected_tail), "{text}");
        let expected_end = "\
kubeproxy_sync_proxy_rules_duration_seconds_bucket{le=\"16.384\"} 2
kubeproxy_sync_proxy_rules_duration_seconds_bucket{le=\"+Inf\"} 2
kubeproxy_sync_proxy_rules_duration_seconds_sum 0.10300000000000001
kubeproxy_sync_proxy_rules_duration_seconds_count 2
# HELP kubeproxy_sync_proxy_rules_iptables_restore_failures_total [ALPHA] Cumulative proxy iptables restore failures
# TYPE kubeproxy_sync_proxy_rules_iptables_restore_failures_total counter
kubeproxy_sync_proxy_rules_iptables_restore_failures_total 0
# HELP kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds [ALPHA] The last time a sync of proxy rules was queued
# TYPE kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds gauge
kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds 1.7225064002499998e+09
# HELP kubeproxy_sync_proxy_rules_last_timestamp_seconds [ALPHA] The last time proxy rules were successfully synced
# TYPE kubeproxy_sync_proxy_rules_last_timestamp_seconds gauge
kubeproxy_sync_proxy_rules_last_timestamp_seconds 1.7225064007500002e+09
";
        assert!(text.ends_with(expected_end), "{text}");
        assert_eq!(text.lines().filter(|l| l.contains("rules_duration_seconds_bucket")).count(), 16);
        assert!(!text.contains("ip_family"), "v1.30's metrics carry no family label");
    }

    #[test]
    fn programming_latency_has_kube_proxy_s_buckets() {
        let bounds: Vec<f64> = programming_buckets().collect();
        assert_eq!(bounds.len(), 80);
        assert_eq!(
            (bounds[0], bounds[1], bounds[2], bounds[60], bounds[61], bounds[73]),
            (0.25, 0.5, 1.0, 59.0, 60.0, 120.0)
        );
        assert_eq!(bounds.last(), Some(&300.0));
        let mut m = Metrics::default();
        m.observe_programming(Duration::from_millis(300));
        m.observe_programming(Duration::from_millis(1500));
        let text = m.render();
        for line in [
            "kubeproxy_network_programming_duration_seconds_bucket{le=\"0.25\"} 0",
            "kubeproxy_network_programming_duration_seconds_bucket{le=\"0.5\"} 1",
            "kubeproxy_network_programming_duration_seconds_bucket{le=\"2\"} 2",
            "kubeproxy_network_programming_duration_seconds_count 2",
            "kubeproxy_network_programming_duration_seconds_sum 1.8",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in {text}");
        }
    }
}
