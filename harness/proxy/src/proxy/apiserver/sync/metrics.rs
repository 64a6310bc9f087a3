//! Reading kube-proxy's sync metrics and deciding from them whether a push has been applied.
//!
//! The gauges (pkg/proxy/metrics/metrics.go): `kubeproxy_sync_proxy_rules_last_timestamp_seconds`
//! is set at the end of every successful sync, `..._last_queued_timestamp_seconds` whenever a
//! change is queued for a sync (`Proxier.Sync`), and the histogram
//! `kubeproxy_sync_proxy_rules_duration_seconds` observes every sync. In v1.30 they carry no
//! label and both families' proxiers (kube-proxy runs one per family wherever iptables and
//! ip6tables both work: cmd/kube-proxy/app/server_linux.go `platformCheckSupported`) write the
//! same series, so one family's sync looks like both; newer releases label them `ip_family`
//! (kubernetes/kubernetes#129034). Both forms are read.
//!
//! `kubeproxy_network_programming_duration_seconds` observes, once per EndpointSlice change
//! that carried an `endpoints.kubernetes.io/last-change-trigger-time` newer than the proxy's
//! start, the moment a successful sync wrote that change into the rules
//! (pkg/proxy/endpointschangetracker.go `EndpointSliceUpdate`, pkg/proxy/iptables/proxier.go
//! `syncProxyRules`, v1.30). It is unlabelled in every release.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

const LAST_SYNCED: &str = "kubeproxy_sync_proxy_rules_last_timestamp_seconds";
const LAST_QUEUED: &str = "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds";
const SYNCS: &str = "kubeproxy_sync_proxy_rules_duration_seconds_count";
const SYNC_SECONDS: &str = "kubeproxy_sync_proxy_rules_duration_seconds_sum";
/// Counts syncs whose ruleset the kernel refused, in both modes (the nftables proxier counts
/// its failed transactions here too: pkg/proxy/nftables/proxier.go, v1.30). A failed sync
/// still observes its duration and, in v1.30, shares its series with the other family's
/// successful one, so only this counter tells it.
const RESTORE_FAILURES: &str = "kubeproxy_sync_proxy_rules_iptables_restore_failures_total";
/// From v1.31 nftables mode counts its failed transactions here instead (labelled by family,
/// pkg/proxy/metrics/metrics.go `NFTablesSyncFailuresTotal`); both are summed.
const NFTABLES_SYNC_FAILURES: &str = "kubeproxy_sync_proxy_rules_nftables_sync_failures_total";
const PROGRAMMED: &str = "kubeproxy_network_programming_duration_seconds_count";

/// When the signals cannot decide (a change queued while a sync was running, or a family the
/// push reached that found nothing to do), the proxy is taken as synced once they have not
/// moved for this long: kube-proxy's default min-sync-period (1 s) and a sync.
const UNDECIDED_GRACE: Duration = Duration::from_secs(2);

/// At start-up, how long certain-looking series must stand still: kube-proxy's default
/// min-sync-period, within which a family's queued sync starts.
const START_SETTLE: Duration = Duration::from_secs(1);

/// Seconds since the Unix epoch, as the gauges count them.
pub fn unix_now() -> f64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// The sync series of one proxier (an `ip_family` label value), or of all (`None`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Gauges {
    pub last_synced: f64,
    pub last_queued: f64,
    pub syncs: f64,
    pub sync_seconds: f64,
    /// Syncs whose ruleset the kernel refused: `RESTORE_FAILURES` and `NFTABLES_SYNC_FAILURES`, summed.
    pub failed_syncs: f64,
    /// Slice changes programmed (`network_programming_duration_seconds_count`).
    pub programmed: f64,
}

/// The sync series of a `/metrics` answer, by `ip_family` label (`None`: unlabelled).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SyncMetrics(pub BTreeMap<Option<String>, Gauges>);

impl SyncMetrics {
    /// Parses Prometheus text; other series are ignored.
    pub fn parse(text: &str) -> SyncMetrics {
        let mut out: BTreeMap<Option<String>, Gauges> = BTreeMap::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((series, value)) = line.rsplit_once(' ') else { continue };
            let Ok(value) = value.trim().parse::<f64>() else { continue };
            let (name, labels) = match series.split_once('{') {
                Some((name, labels)) => (name, labels.trim_end_matches('}')),
                None => (series, ""),
            };
            let family = labels
                .split(',')
                .find_map(|l| l.strip_prefix("ip_family=").map(|v| v.trim_matches('"').to_string()));
            let g = out.entry(family).or_default();
            match name {
                LAST_SYNCED => g.last_synced = value,
                LAST_QUEUED => g.last_queued = value,
                SYNCS => g.syncs = value,
                SYNC_SECONDS => g.sync_seconds = value,
                RESTORE_FAILURES | NFTABLES_SYNC_FAILURES => g.failed_syncs += value,
                PROGRAMMED => g.programmed = value,
                _ => {}
            }
        }
        out.retain(|_, g| *g != Gauges::default());
        SyncMetrics(out)
    }

    fn get(&self, family: &Option<String>) -> Gauges {
        self.0.get(family).copied().unwrap_or_default()
    }

    /// Slice changes programmed, whatever series carries the count.
    fn programmed(&self) -> f64 {
        self.0.values().map(|g| g.programmed).sum()
    }

    /// The sync series, by family: without an entry that holds only the programming count,
    /// which is unlabelled even where the sync series are labelled per family.
    fn syncs(&self) -> impl Iterator<Item = (&Option<String>, &Gauges)> {
        self.0.iter().filter(|(_, g)| **g != Gauges { programmed: g.programmed, ..Gauges::default() })
    }

    /// Whether every sync series is one family's (`ip_family`, kube-proxy v1.31 and later),
    /// rather than v1.30's one set shared by both families' proxiers.
    fn per_family(&self) -> bool {
        self.syncs().all(|(family, _)| family.is_some())
    }
}

/// The IP families whose proxier a push reached (metaproxier's dispatch: a Service to the
/// families of its cluster IPs, an EndpointSlice to its address type;
/// pkg/proxy/metaproxier/meta_proxier.go).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Families {
    pub ipv4: bool,
    pub ipv6: bool,
}

impl Families {
    pub(crate) const BOTH: Families = Families { ipv4: true, ipv6: true };

    /// Whether `now` has a series labelled with each of these families.
    fn all_labelled(self, now: &SyncMetrics) -> bool {
        let has = |name: &str| now.syncs().any(|(family, _)| family.as_deref() == Some(name));
        (!self.ipv4 || has("IPv4")) && (!self.ipv6 || has("IPv6"))
    }

    fn expected_syncs(self, family: &Option<String>) -> f64 {
        match family.as_deref() {
            None => f64::from(u8::from(self.ipv4) + u8::from(self.ipv6)),
            Some("IPv4") => f64::from(u8::from(self.ipv4)),
            Some("IPv6") => f64::from(u8::from(self.ipv6)),
            Some(_) => 1.0,
        }
    }
}

/// Decides, poll by poll, whether one node's proxy has applied a push.
///
/// Synced for sure, per series: as many syncs since the push as families it reached, the
/// last one successful and ended after the push, and begun after the last queued change
/// (its end less its duration, from the histogram, is after the last queue time). The last
/// condition catches a change queued while a sync was running, which kube-proxy applies in
/// a next sync. Where only that order or the count is unproven but a sync ended after the
/// push and after the last queue (or nothing was queued), the signals are taken as final once
/// they have stood still for [`UNDECIDED_GRACE`]. At start-up every family must have synced
/// (no grace for a missing count), and even a certain answer must stand still for
/// [`START_SETTLE`].
///
/// A push of EndpointSlice changes only, each stamped with a trigger time, has a second proof
/// of the order ([`SyncJudge::with_programming`]): once the programming histogram counted every
/// change, the syncs that wrote them began after each was received, so no change can be
/// waiting for a next sync.
#[derive(Debug, Clone)]
pub struct SyncJudge {
    pushed: f64,
    before: SyncMetrics,
    families: Families,
    previous: SyncMetrics,
    last_sync_seconds: BTreeMap<Option<String>, f64>,
    undecided_since: Option<(Instant, SyncMetrics)>,
    /// At start-up every family syncs once, so "nothing queued" is never an answer.
    starting: bool,
    /// How many slice changes with a trigger time the push made, when it made no other.
    programming: Option<f64>,
    /// At start-up, the node's topology labels reach the proxier by an event of their own
    /// (v1.31-v1.33 `OnNodeAdd`, v1.34+ `NodeTopologyConfig.OnTopologyChange`, both a
    /// full resync), which can come after the first sync: its certain-looking series must stand
    /// still for [`START_SETTLE`] too, as v1.30's shared ones do.
    labels_follow: bool,
}

impl SyncJudge {
    /// A proxy started at Unix time `started` (after its state was pushed): each of the
    /// families kube-proxy runs syncs once.
    pub fn at_start(started: f64) -> SyncJudge {
        SyncJudge { starting: true, ..SyncJudge::after_push(started, SyncMetrics::default(), Families::BOTH) }
    }

    /// A push at Unix time `pushed` that reached `families`; `before`: the metrics just
    /// before it.
    pub(crate) fn after_push(pushed: f64, before: SyncMetrics, families: Families) -> SyncJudge {
        SyncJudge {
            pushed,
            previous: before.clone(),
            before,
            families,
            last_sync_seconds: BTreeMap::new(),
            undecided_since: None,
            starting: false,
            programming: None,
            labels_follow: false,
        }
    }

    /// At start-up on a node with a zone label: the label's resync may follow the first sync
    /// (see the field), so a certain answer must stand still for [`START_SETTLE`].
    pub(crate) fn with_topology_labels(self, labelled: bool) -> SyncJudge {
        SyncJudge { labels_follow: labelled && self.starting, ..self }
    }

    /// The push made `changes` EndpointSlice changes (added or modified, none deleted, no
    /// other object changed), each with a fresh `last-change-trigger-time`: each is one
    /// observation of the programming histogram when a sync has written it.
    pub(crate) fn with_programming(self, changes: usize) -> SyncJudge {
        SyncJudge { programming: (changes > 0).then_some(changes as f64), ..self }
    }

    /// Whether every slice change of the push has been written by a sync.
    fn all_programmed(&self, now: &SyncMetrics) -> bool {
        self.programming.is_some_and(|wanted| now.programmed() - self.before.programmed() >= wanted)
    }

    /// How many syncs failed since the push (at start-up: since the proxy started).
    pub(crate) fn failed_syncs(&self, now: &SyncMetrics) -> f64 {
        now.0.iter().map(|(family, g)| g.failed_syncs - self.before.get(family).failed_syncs).sum()
    }

    pub fn synced(&mut self, now: &SyncMetrics, at: Instant) -> bool {
        for (family, g) in now.syncs() {
            let prev = self.previous.get(family);
            if g.syncs > prev.syncs {
                // Exact with one sync since the last poll, an upper bound with more.
                self.last_sync_seconds.insert(family.clone(), g.sync_seconds - prev.sync_seconds);
            }
        }
        self.previous = now.clone();
        if now.syncs().next().is_none() {
            return false;
        }
        let mut certain = true;
        let programmed = self.all_programmed(now);
        for (family, g) in now.syncs() {
            match self.series_state(family, g, programmed) {
                State::Certain => {}
                State::Undecided => certain = false,
                State::Pending => {
                    self.undecided_since = None;
                    return false;
                }
            }
        }
        // At start-up a family's first counted sync holds the whole state (a proxier syncs
        // only once it has listed Services and EndpointSlices), so a series per family is
        // certain at once, once every family kube-proxy runs has one.
        let per_family_certain = now.per_family() && self.families.all_labelled(now) && !self.labels_follow;
        if certain && (!self.starting || per_family_certain) {
            return true;
        }
        // With v1.30's shared series the count cannot be trusted alone at start-up: one
        // family's initial sync and its Node-triggered resync (or a second initial sync, when
        // the Service and EndpointSlice informers finish together) count as two while the
        // other family's first sync still runs; its end moves the series, which restarts the
        // wait. Nothing else kube-proxy v1.30 publishes tells the families apart: its logs
        // name no family, `/healthz` reports the newest of both, and the rules show a
        // family's restore but not the end of its sync (the health check servers and the
        // conntrack cleanup come after).
        let grace = if certain { START_SETTLE } else { UNDECIDED_GRACE };
        match &self.undecided_since {
            Some((since, seen)) if seen == now => at.duration_since(*since) >= grace,
            _ => {
                self.undecided_since = Some((at, now.clone()));
                false
            }
        }
    }

    /// `programmed`: every slice change of the push is in the rules (see the type's comment).
    fn series_state(&self, family: &Option<String>, g: &Gauges, programmed: bool) -> State {
        let expected = self.families.expected_syncs(family);
        if expected == 0.0 {
            return State::Certain;
        }
        let syncs = g.syncs - self.before.get(family).syncs;
        let ended_after_push = g.last_synced >= self.pushed && g.last_synced >= g.last_queued;
        // The histogram's duration runs past the timestamp (health check servers and the
        // conntrack cleanup come after it), so this underestimates the start: a proof when
        // true, no disproof when false.
        let began_after_queue = programmed
            || self
                .last_sync_seconds
                .get(family)
                .is_some_and(|seconds| g.last_synced - seconds >= g.last_queued);
        if syncs >= expected && ended_after_push && began_after_queue {
            State::Certain
        } else if self.starting && syncs < expected {
            // Every proxier syncs once at start-up, however long it takes (a loaded machine).
            State::Pending
        } else if ended_after_push || (!self.starting && syncs == 0.0 && g.last_queued < self.pushed) {
            State::Undecided
        } else {
            State::Pending
        }
    }

    /// The series as a sentence, for an error.
    pub(crate) fn describe(&self, now: &SyncMetrics) -> String {
        if now.syncs().next().is_none() {
            return "no kubeproxy_sync_proxy_rules_* series".into();
        }
        let series: Vec<String> = now
            .syncs()
            .map(|(family, g)| {
                format!(
                    "{}: {} syncs since the change (wanted {}), last sync {} and last queued {}",
                    family.as_deref().unwrap_or("all families"),
                    g.syncs - self.before.get(family).syncs,
                    self.families.expected_syncs(family),
                    self.since_push(g.last_synced),
                    self.since_push(g.last_queued),
                )
            })
            .collect();
        series.join("; ")
    }

    /// A timestamp gauge against the push; kube-proxy leaves one it never set at 0.
    fn since_push(&self, timestamp: f64) -> String {
        if timestamp == 0.0 {
            "never".into()
        } else {
            format!("{:+.3}s from the change", timestamp - self.pushed)
        }
    }
}

enum State {
    Certain,
    Undecided,
    Pending,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics(last_synced: f64, last_queued: f64, syncs: f64, sync_seconds: f64) -> SyncMetrics {
        SyncMetrics::parse(&format!(
            "# HELP x\n{LAST_SYNCED} {last_synced}\n{LAST_QUEUED} {last_queued}\n\
             {SYNCS} {syncs}\n{SYNC_SECONDS} {sync_seconds}\nkubeproxy_other 3\n"
        ))
    }

    /// v1.30 with one family's ruleset refused (kubernetes/kubernetes#134024): the other
    /// family's sync moves the shared series as if both had synced; only the counter tells.
    #[test]
    fn a_failed_sync_is_counted_though_the_shared_series_look_synced() {
        let before = metrics(100.0, 100.0, 4.0, 0.4);
        let judge = SyncJudge::after_push(200.0, before, Families::BOTH);
        let mut after = metrics(201.0, 200.0, 6.0, 0.6);
        assert_eq!(judge.failed_syncs(&after), 0.0);
        after.0.get_mut(&None).unwrap().failed_syncs = 1.0;
        assert_eq!(judge.failed_syncs(&after), 1.0);
        let text = format!("{RESTORE_FAILURES} 2\n{SYNCS} 1\n");
        let nftables =
            format!("{NFTABLES_SYNC_FAILURES}{{ip_family=\"IPv4\"}} 1\n{SYNCS}{{ip_family=\"IPv4\"}} 1\n");
        let parsed = SyncMetrics::parse(&nftables);
        assert_eq!(parsed.0[&Some("IPv4".to_string())].failed_syncs, 1.0, "v1.31+ nftables mode's counter");
        assert_eq!(SyncMetrics::parse(&text).0[&None].failed_syncs, 2.0);
    }

    #[test]
    fn kube_proxy_130s_unlabelled_series_and_newer_labelled_ones_parse() {
        let m = metrics(1.7e9, 1.6e9, 3.0, 0.25);
        assert_eq!(
            m.0[&None],
            Gauges {
                last_synced: 1.7e9,
                last_queued: 1.6e9,
                syncs: 3.0,
                sync_seconds: 0.25,
                failed_syncs: 0.0,
                programmed: 0.0,
            }
        );
        let labelled = SyncMetrics::parse(&format!(
            "{LAST_SYNCED}{{ip_family=\"IPv4\"}} 5\n{LAST_SYNCED}{{ip_family=\"IPv6\"}} 6\n\
             {SYNCS}{{ip_family=\"IPv6\"}} 2\n"
        ));
        assert_eq!(labelled.0[&Some("IPv4".into())].last_synced, 5.0);
        assert_eq!(labelled.0[&Some("IPv6".into())].syncs, 2.0);
        assert!(SyncMetrics::parse("garbage\n").0.is_empty());
    }

    /// The flows of a sync wait as kube-proxy v1.30 shows them (times in seconds from 100).
    #[test]
    fn a_push_is_synced_only_when_every_family_synced_after_the_last_queued_change() {
        let t0 = Instant::now();
        let at = |s: f64| t0 + Duration::from_secs_f64(s);
        let before = metrics(90.0, 89.0, 4.0, 0.4);

        // Start-up in dual-stack: the first family's initial sync is not enough.
        let mut j = SyncJudge::at_start(100.0);
        assert!(!j.synced(&SyncMetrics::default(), at(0.0)), "no metrics yet");
        assert!(!j.synced(&metrics(100.3, 100.1, 1.0, 0.05), at(0.3)), "one family of two");
        assert!(!j.synced(&metrics(100.3, 100.1, 1.0, 0.05), at(9.0)), "still one: no grace at start-up");
        assert!(!j.synced(&metrics(100.4, 100.1, 2.0, 0.1), at(9.1)), "two, but the series must settle");
        assert!(!j.synced(&metrics(100.5, 100.1, 3.0, 0.15), at(9.5)), "a third sync moved them");
        assert!(j.synced(&metrics(100.5, 100.1, 3.0, 0.15), at(10.5)), "settled for 1 s");

        // A change queued during the sync that ends after it: kube-proxy syncs again.
        let mut j = SyncJudge::after_push(100.0, before.clone(), Families { ipv4: true, ipv6: false });
        assert!(!j.synced(&before, at(0.0)));
        assert!(!j.synced(&metrics(89.0, 100.01, 4.0, 0.4), at(0.01)), "queued, not synced");
        // Began at 100.05 (ended 100.10 after 0.05 s), but a change was queued at 100.07.
        assert!(!j.synced(&metrics(100.10, 100.07, 5.0, 0.45), at(0.1)), "queued during the sync");
        assert!(j.synced(&metrics(100.20, 100.07, 6.0, 0.5), at(0.2)), "the next sync began after it");

        // Nothing reached this proxy: undecided until the series stand still.
        let mut j = SyncJudge::after_push(100.0, before.clone(), Families::default());
        assert!(j.synced(&before, at(0.0)), "no family reached: nothing to wait for");
        let mut j = SyncJudge::after_push(100.0, before.clone(), Families { ipv4: false, ipv6: true });
        assert!(!j.synced(&before, at(0.0)));
        assert!(!j.synced(&before, at(1.0)));
        assert!(j.synced(&before, at(2.1)), "still nothing queued after the grace");

        // A failed sync counts in the histogram but not as synced.
        let mut j = SyncJudge::after_push(100.0, before.clone(), Families { ipv4: true, ipv6: false });
        assert!(!j.synced(&metrics(90.0, 100.01, 5.0, 0.45), at(0.1)));
        assert!(
            !j.synced(&metrics(90.0, 100.01, 5.0, 0.45), at(5.0)),
            "never synced: pending, not undecided"
        );
    }

    /// kube-proxy v1.30 in dual-stack after a push of one IPv4 slice change at 100: its sync
    /// began before the change was queued by the durations (the timestamp comes before the
    /// cleanup that the duration includes), but the programming histogram counted the change.
    #[test]
    fn a_programmed_slice_change_needs_no_grace() {
        let t0 = Instant::now();
        let at = |s: f64| t0 + Duration::from_secs_f64(s);
        let with_programmed = |m: SyncMetrics, n: f64| {
            let text = format!("{PROGRAMMED} {n}\n");
            let mut m = m;
            m.0.get_mut(&None).unwrap().programmed = SyncMetrics::parse(&text).programmed();
            m
        };
        let before = with_programmed(metrics(90.0, 89.0, 4.0, 0.4), 3.0);
        let ipv4 = Families { ipv4: true, ipv6: false };
        let synced = metrics(100.10, 100.01, 5.0, 0.5);

        let mut without = SyncJudge::after_push(100.0, before.clone(), ipv4);
        assert!(
            !without.synced(&with_programmed(synced.clone(), 4.0), at(0.1)),
            "the durations cannot decide"
        );

        let mut judge = SyncJudge::after_push(100.0, before.clone(), ipv4).with_programming(1);
        assert!(!judge.synced(&with_programmed(synced.clone(), 3.0), at(0.1)), "not yet programmed");
        assert!(judge.synced(&with_programmed(synced.clone(), 4.0), at(0.15)), "programmed and synced");

        let mut unended = SyncJudge::after_push(100.0, before.clone(), ipv4).with_programming(1);
        let running = with_programmed(metrics(100.10, 100.01, 4.0, 0.4), 4.0);
        assert!(!unended.synced(&running, at(0.1)), "programmed, but the sync has not ended");

        let mut two = SyncJudge::after_push(100.0, before, ipv4).with_programming(2);
        assert!(!two.synced(&with_programmed(synced, 4.0), at(0.1)), "one of two changes programmed");
    }

    #[test]
    fn labelled_series_are_judged_family_by_family() {
        let t0 = Instant::now();
        let series = |v4: (f64, f64, f64), v6: (f64, f64, f64)| {
            SyncMetrics::parse(&format!(
                "{LAST_SYNCED}{{ip_family=\"IPv4\"}} {}\n{LAST_QUEUED}{{ip_family=\"IPv4\"}} {}\n{SYNCS}{{ip_family=\"IPv4\"}} {}\n\
                 {SYNC_SECONDS}{{ip_family=\"IPv4\"}} 0.01\n\
                 {LAST_SYNCED}{{ip_family=\"IPv6\"}} {}\n{LAST_QUEUED}{{ip_family=\"IPv6\"}} {}\n{SYNCS}{{ip_family=\"IPv6\"}} {}\n\
                 {SYNC_SECONDS}{{ip_family=\"IPv6\"}} 0.01\n",
                v4.0, v4.1, v4.2, v6.0, v6.1, v6.2
            ))
        };
        let before = series((90.0, 89.0, 1.0), (90.0, 89.0, 1.0));
        let mut j = SyncJudge::after_push(100.0, before, Families::BOTH);
        assert!(!j.synced(&series((100.2, 100.1, 2.0), (90.0, 100.1, 1.0)), t0));
        assert!(j.synced(&series((100.2, 100.1, 2.0), (100.3, 100.1, 2.0)), t0));

        // The programming count stays unlabelled beside labelled sync series: it is no
        // family of its own that would have to sync.
        let mut with_programmed = series((100.2, 100.1, 2.0), (100.3, 100.1, 2.0));
        with_programmed.0.insert(None, Gauges { programmed: 4.0, ..Gauges::default() });
        let before = series((90.0, 89.0, 1.0), (90.0, 89.0, 1.0));
        let mut j = SyncJudge::after_push(100.0, before, Families::BOTH);
        assert!(j.synced(&with_programmed, t0));

        // At start-up, each family's own first sync is certain at once: no settling; but
        // a family without a series yet may not have begun.
        let mut j = SyncJudge::at_start(100.0);
        let only_ipv4 = SyncMetrics::parse(&format!(
            "{LAST_SYNCED}{{ip_family=\"IPv4\"}} 100.2\n{LAST_QUEUED}{{ip_family=\"IPv4\"}} 100.1\n\
             {SYNCS}{{ip_family=\"IPv4\"}} 1\n{SYNC_SECONDS}{{ip_family=\"IPv4\"}} 0.01\n"
        ));
        assert!(!j.synced(&only_ipv4, t0), "no IPv6 series yet");
        assert!(!j.synced(&series((100.2, 100.1, 1.0), (0.0, 100.1, 0.0)), t0), "IPv6 has not synced");
        assert!(j.synced(&series((100.2, 100.1, 1.0), (100.3, 100.1, 1.0)), t0), "both have, once each");
    }
}
