//! `/healthz` and `/livez` as kube-proxy v1.30 serves them (pkg/proxy/healthcheck/
//! proxier_health.go, `ProxierHealthServer`): each family's proxier reports `Updated` after a
//! successful sync and `QueuedUpdate` when a change is queued; the proxy is healthy unless a
//! family has had a change queued for `healthTimeout` without syncing. Healthy answers are
//! 200 with `lastUpdated` = now, so they say nothing about syncs: that is what the metrics
//! are for (`metrics`). Unhealthy ones are 503. Healthy from start-up, before any sync.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use k8s_openapi::api::core::v1::Node as K8sNode;
use k8s_openapi::jiff::Timestamp;

use crate::model::IpFamily;

/// The taint the cluster autoscaler puts on a node it is about to delete.
const TO_BE_DELETED_TAINT: &str = "ToBeDeletedByClusterAutoscaler";

/// When this process started: the origin of Go's monotonic clock readings (`m=+…`).
static START: OnceLock<Instant> = OnceLock::new();

/// Fixes the monotonic origin; call first thing.
pub(crate) fn mark_start() {
    START.get_or_init(Instant::now);
}

/// A moment as Go's `time.Now()` holds it: the wall clock, and the monotonic reading that
/// comparisons use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Moment {
    pub wall: SystemTime,
    /// Since the process started.
    pub mono: Duration,
}

impl Moment {
    pub fn now() -> Moment {
        let start = *START.get_or_init(Instant::now);
        Moment { wall: SystemTime::now(), mono: start.elapsed() }
    }

    /// `t.Sub(earlier)`, never negative.
    fn since(self, earlier: Moment) -> Duration {
        self.mono.saturating_sub(earlier.mono)
    }
}

/// Go's `time.Time.String()` of a UTC time with a monotonic reading
/// (`2024-08-01 10:00:00.5 +0000 UTC m=+12.300000000`); `None` is Go's zero time.
pub(crate) fn go_time(moment: Option<Moment>) -> String {
    let Some(m) = moment else { return "0001-01-01 00:00:00 +0000 UTC".into() };
    let ts = Timestamp::try_from(m.wall).unwrap_or(Timestamp::UNIX_EPOCH);
    let nanos = ts.subsec_nanosecond();
    let fraction =
        if nanos == 0 { String::new() } else { format!(".{nanos:09}").trim_end_matches('0').to_string() };
    format!(
        "{}{fraction} +0000 UTC m=+{}.{:09}",
        ts.strftime("%Y-%m-%d %H:%M:%S"),
        m.mono.as_secs(),
        m.mono.subsec_nanos()
    )
}

/// `ProxierHealthServer`'s state.
#[derive(Debug, Clone)]
pub struct ProxierHealth {
    timeout: Duration,
    last_updated: BTreeMap<IpFamily, Moment>,
    oldest_pending: BTreeMap<IpFamily, Moment>,
    node_eligible: bool,
}

impl ProxierHealth {
    /// Healthy, and the node eligible, until told otherwise.
    pub fn new(timeout: Duration) -> ProxierHealth {
        ProxierHealth {
            timeout,
            last_updated: BTreeMap::new(),
            oldest_pending: BTreeMap::new(),
            node_eligible: true,
        }
    }

    /// `Updated`: the family's proxier synced (or its loop started).
    pub(crate) fn updated(&mut self, family: IpFamily, now: Moment) {
        self.oldest_pending.remove(&family);
        self.last_updated.insert(family, now);
    }

    /// `QueuedUpdate`: the family has a change to sync; the first one since its last sync
    /// starts the clock.
    pub(crate) fn queued_update(&mut self, family: IpFamily, now: Moment) {
        self.oldest_pending.entry(family).or_insert(now);
    }

    /// `isHealthy`: unhealthy (with that family's last update) if a family's oldest queued
    /// change is `timeout` old; else healthy with the latest update of any family.
    fn is_healthy(&self, now: Moment) -> (bool, Option<Moment>) {
        let mut last: Option<Moment> = None;
        for (family, &updated) in &self.last_updated {
            if last.is_none_or(|l| updated.mono > l.mono) {
                last = Some(updated);
            }
            let Some(&pending) = self.oldest_pending.get(family) else { continue };
            if now.since(pending) >= self.timeout {
                return (false, Some(updated));
            }
        }
        (true, last)
    }

    /// `SyncNode`: a deleted node, or one the autoscaler is about to delete, is not eligible.
    pub(crate) fn sync_node(&mut self, node: &K8sNode) {
        let deleted = node.metadata.deletion_timestamp.is_some();
        let tainted = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| t.iter().any(|t| t.key == TO_BE_DELETED_TAINT));
        self.node_eligible = !deleted && !tainted;
    }

    /// `healthzHandler`: status and body.
    pub fn healthz(&self, now: Moment) -> (StatusCode, String) {
        let (healthy, last) = self.is_healthy(now);
        let healthy = healthy && self.node_eligible;
        let (code, last) =
            if healthy { (StatusCode::OK, Some(now)) } else { (StatusCode::SERVICE_UNAVAILABLE, last) };
        let body = format!(
            r#"{{"lastUpdated": "{}","currentTime": "{}", "nodeEligible": {}}}"#,
            go_time(last),
            go_time(Some(now)),
            self.node_eligible
        );
        (code, body)
    }

    /// `livezHandler`: as healthz, but whatever the node.
    pub(crate) fn livez(&self, now: Moment) -> (StatusCode, String) {
        let (healthy, last) = self.is_healthy(now);
        let (code, last) =
            if healthy { (StatusCode::OK, Some(now)) } else { (StatusCode::SERVICE_UNAVAILABLE, last) };
        (code, format!(r#"{{"lastUpdated": "{}","currentTime": "{}"}}"#, go_time(last), go_time(Some(now))))
    }
}

/// The routes, over the shared state.
pub(crate) fn router(health: Arc<Mutex<ProxierHealth>>) -> Router {
    let answer = |health: Arc<Mutex<ProxierHealth>>, live: bool| {
        move || {
            let state = health.lock().unwrap_or_else(|e| e.into_inner());
            let (code, body) = if live { state.livez(Moment::now()) } else { state.healthz(Moment::now()) };
            let headers = [("content-type", "application/json"), ("x-content-type-options", "nosniff")];
            async move { (code, headers, body) }
        }
    };
    Router::new()
        .route("/healthz", get(answer(Arc::clone(&health), false)))
        .route("/livez", get(answer(health, true)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use IpFamily::{V4, V6};

    /// A fake clock: moments `t` seconds after a fixed start.
    struct Clock(Duration);

    impl Clock {
        fn now(&self) -> Moment {
            Moment {
                wall: SystemTime::UNIX_EPOCH + Duration::from_secs(1_722_506_400) + self.0,
                mono: self.0,
            }
        }
        fn step(&mut self, secs: u64) {
            self.0 += Duration::from_secs(secs);
        }
    }

    /// kube-proxy's `testProxyHealthUpdater` (pkg/proxy/healthcheck/healthcheck_test.go), with
    /// its 10 s timeout, for both handlers.
    #[test]
    fn the_updater_cases_of_kube_proxys_own_test() {
        for live in [false, true] {
            let mut hs = ProxierHealth::new(Duration::from_secs(10));
            let mut clock = Clock(Duration::ZERO);
            let code = |hs: &ProxierHealth, clock: &Clock| {
                if live { hs.livez(clock.now()).0 } else { hs.healthz(clock.now()).0 }
            };
            let (ok, down) = (StatusCode::OK, StatusCode::SERVICE_UNAVAILABLE);
            // 200 by default, and after the first update of both families.
            assert_eq!(code(&hs, &clock), ok);
            hs.updated(V4, clock.now());
            hs.updated(V6, clock.now());
            assert_eq!(code(&hs, &clock), ok);
            // Still 200 as long as nothing is queued.
            clock.step(25);
            assert_eq!(code(&hs, &clock), ok);
            // Each family late on its own, then both: 503; updating both: 200.
            for late in [vec![V4], vec![V6], vec![V4, V6]] {
                for &f in &late {
                    hs.queued_update(f, clock.now());
                }
                clock.step(25);
                assert_eq!(code(&hs, &clock), down, "{late:?} late");
                hs.updated(V4, clock.now());
                hs.updated(V6, clock.now());
                clock.step(5);
                assert_eq!(code(&hs, &clock), ok, "{late:?} updated");
            }
            // IPv6 late: updating IPv4 changes nothing, updating IPv6 heals.
            hs.queued_update(V6, clock.now());
            clock.step(25);
            assert_eq!(code(&hs, &clock), down);
            hs.updated(V4, clock.now());
            assert_eq!(code(&hs, &clock), down);
            hs.updated(V6, clock.now());
            assert_eq!(code(&hs, &clock), ok);
            // Both late: 200 only after both update.
            hs.queued_update(V4, clock.now());
            hs.queued_update(V6, clock.now());
            clock.step(25);
            assert_eq!(code(&hs, &clock), down);
            hs.updated(V4, clock.now());
            assert_eq!(code(&hs, &clock), down);
            hs.updated(V6, clock.now());
            assert_eq!(code(&hs, &clock), ok);
        }
    }

    /// `TestHealthzServer` / `TestLivezServer`: a ToBeDeleted taint or a deletion makes healthz
    /// (only) fail; other taints do not.
    #[test]
    fn healthz_follows_the_nodes_eligibility_and_livez_does_not() {
        let node = |taint: Option<&str>, deleted: bool| -> K8sNode {
            let mut n: K8sNode =
                serde_json::from_value(serde_json::json!({"metadata": {"name": "node-a"}})).unwrap();
            if let Some(key) = taint {
                n.spec = Some(
                    serde_json::from_value(
                        serde_json::json!({"taints": [{"key": key, "effect": "NoSchedule"}]}),
                    )
                    .unwrap(),
                );
            }
            if deleted {
                n.metadata.deletion_timestamp =
                    Some(serde_json::from_value(serde_json::json!("2024-08-01T10:00:00Z")).unwrap());
            }
            n
        };
        let mut hs = ProxierHealth::new(Duration::from_secs(10));
        let now = Clock(Duration::ZERO).now();
        for (n, healthy) in [
            (node(Some("other"), false), true),
            (node(Some(TO_BE_DELETED_TAINT), false), false),
            (node(Some("other"), false), true),
            (node(None, true), false),
        ] {
            hs.sync_node(&n);
            assert_eq!(hs.healthz(now).0 == StatusCode::OK, healthy, "{n:?}");
            assert_eq!(hs.livez(now).0, StatusCode::OK);
        }
        assert!(hs.healthz(now).1.ends_with(r#", "nodeEligible": false}"#), "{}", hs.healthz(now).1);
    }

    #[test]
    fn a_healthy_answer_says_now_in_gos_form() {
        let mut clock = Clock(Duration::from_millis(1500));
        let mut hs = ProxierHealth::new(Duration::from_secs(10));
        // Before any update: healthy, and `lastUpdated` is the current time.
        let (code, body) = hs.healthz(clock.now());
        assert_eq!(code, StatusCode::OK);
        assert_eq!(
            body,
            r#"{"lastUpdated": "2024-08-01 10:00:01.5 +0000 UTC m=+1.500000000","currentTime": "2024-08-01 10:00:01.5 +0000 UTC m=+1.500000000", "nodeEligible": true}"#
        );
        // Unhealthy: 503 with the late family's last update.
        hs.updated(V4, clock.now());
        let synced = clock.now();
        hs.queued_update(V4, clock.now());
        clock.step(10);
        let (code, body) = hs.healthz(clock.now());
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.starts_with(&format!(r#"{{"lastUpdated": "{}","#, go_time(Some(synced)))), "{body}");
        assert_eq!(go_time(None), "0001-01-01 00:00:00 +0000 UTC");
        let whole = Moment { wall: SystemTime::UNIX_EPOCH, mono: Duration::from_nanos(5) };
        assert_eq!(go_time(Some(whole)), "1970-01-01 00:00:00 +0000 UTC m=+0.000000005");
    }
}
