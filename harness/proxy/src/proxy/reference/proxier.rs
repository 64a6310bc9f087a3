//! One proxier per IP family, as kube-proxy runs one for each family under its
//! `metaproxier` (pkg/proxy/metaproxier/meta_proxier.go) whenever the host has both iptables
//! and ip6tables, which every node namespace has. Each proxier has the life of
//! pkg/proxy/iptables/proxier.go (nftables' is the same):
//! - not initialized until both Services and EndpointSlices have been listed; the end of each
//!   list syncs directly (`OnServiceSynced`, `OnEndpointSlicesSynced`), which does nothing
//!   until both are in: so one initial sync, not queued;
//! - after that, an event that leaves the family with pending changes (the change trackers
//!   of servicechangetracker.go and endpointslicecache.go) calls `Sync()`: the change is
//!   queued (healthz `QueuedUpdate`, the queued-timestamp metric) and the runner runs the
//!   sync when its rate limit allows (`runner`);
//! - a Node whose labels changed queues a sync too, initialized or not (`OnNodeAdd`);
//! - a sync (`syncProxyRules`) programs the family's view of the cluster, records its
//!   duration, and on success observes the programming latency of each slice change it wrote
//!   (from the change's `last-change-trigger-time`), reports `Updated` and the last-synced
//!   metric, then clears stale UDP conntrack entries; on failure it retries after the sync
//!   period.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::{Node as K8sNode, Service as K8sService};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use tokio::sync::mpsc;

use super::convert;
use super::healthz::{Moment, ProxierHealth};
use super::informer::Key;
use super::metrics::Metrics;
use super::runner::Runner;
use crate::model::{Cluster, IpFamily, Node, Service};
use crate::proxy::{NodeProgrammer, NodeState, conntrack_cleanup};
use crate::topology::NodeHandle;

/// The EndpointSlice label naming its Service.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// `v1.EndpointsLastChangeTriggerTime`.
const TRIGGER_TIME: &str = "endpoints.kubernetes.io/last-change-trigger-time";

/// A handler call of kube-proxy's `proxy.Provider`, as the metaproxier passes it to the
/// proxier of one family.
#[derive(Debug, Clone)]
pub enum Event {
    /// `OnServiceAdd` (`old` none), `OnServiceUpdate`, `OnServiceDelete` (`new` none).
    Service {
        old: Option<Arc<K8sService>>,
        new: Option<Arc<K8sService>>,
    },
    ServicesSynced,
    /// `OnEndpointSliceAdd`/`Update`, or `Delete` (`remove`).
    Slice {
        slice: Arc<EndpointSlice>,
        remove: bool,
    },
    SlicesSynced,
    /// `OnNodeAdd`/`OnNodeUpdate`.
    Node(Arc<K8sNode>),
    /// `OnNodeDelete`.
    NodeDeleted(Arc<K8sNode>),
}

/// The proxier of a slice's `addressType` (`metaProxier.OnEndpointSliceAdd`); `None` for
/// FQDN and anything else kube-proxy does not support.
pub(crate) fn family_of_slice(slice: &EndpointSlice) -> Option<IpFamily> {
    IpFamily::parse_k8s(&slice.address_type)
}

/// What a handler call leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    Nothing,
    /// `Sync()`: queue a sync through the runner.
    Queue,
    /// Call `syncProxyRules` directly (the end of a first list).
    SyncNow,
}

/// A slice port: name, port, protocol, app protocol.
type PortData = (Option<String>, Option<i32>, Option<String>, Option<String>);

/// What `newEndpointSliceData` keeps of a slice (pkg/proxy/endpointslicecache.go): whether
/// a slice event changes anything is judged on this.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SliceData {
    /// Sorted.
    ports: Vec<PortData>,
    /// Sorted by first address.
    endpoints: Vec<EndpointData>,
    remove: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct EndpointData {
    addresses: Vec<String>,
    node_name: Option<String>,
    zone: Option<String>,
    /// `hints.forZones` (TopologyAwareHints is on by default in v1.30).
    zone_hints: Vec<String>,
    ready: bool,
    serving: bool,
    terminating: bool,
}

impl SliceData {
    fn of(slice: &EndpointSlice, remove: bool) -> SliceData {
        let mut ports: Vec<_> = slice
            .ports
            .iter()
            .flatten()
            .map(|p| (p.name.clone(), p.port, p.protocol.clone(), p.app_protocol.clone()))
            .collect();
        ports.sort();
        let mut endpoints: Vec<EndpointData> = if remove {
            Vec::new()
        } else {
            slice
                .endpoints
                .iter()
                .map(|e| {
                    let c = e.conditions.as_ref();
                    let mut zone_hints: Vec<String> = e
                        .hints
                        .as_ref()
                        .and_then(|h| h.for_zones.as_ref())
                        .into_iter()
                        .flatten()
                        .map(|z| z.name.clone())
                        .collect();
                    zone_hints.sort();
                    zone_hints.dedup();
                    EndpointData {
                        addresses: e.addresses.clone(),
                        node_name: e.node_name.clone(),
                        zone: e.zone.clone(),
                        zone_hints,
                        ready: c.and_then(|c| c.ready).unwrap_or(true),
                        serving: c.and_then(|c| c.serving).unwrap_or(true),
                        terminating: c.and_then(|c| c.terminating).unwrap_or(false),
                    }
                })
                .collect()
        };
        endpoints.sort_by(|a, b| a.addresses.first().cmp(&b.addresses.first()));
        SliceData { ports, endpoints, remove }
    }
}

/// A slice's place in the tracker: its Service, and its own name.
type SliceKey = (Key, String);

/// One family's proxier, without its runner: what it has been told, and what is pending.
#[derive(Debug)]
pub struct State {
    family: IpFamily,
    hostname: String,
    /// The objects as the handlers last saw them: what a sync programs.
    services: BTreeMap<Key, Arc<K8sService>>,
    slices: BTreeMap<Key, Arc<EndpointSlice>>,
    /// `ServiceChangeTracker.items`: per Service, its view before the pending changes and now.
    service_changes: BTreeMap<Key, (Option<Service>, Option<Service>)>,
    /// The `EndpointSliceCache`'s applied and pending slice data.
    slices_applied: BTreeMap<SliceKey, SliceData>,
    slices_pending: BTreeMap<SliceKey, SliceData>,
    services_synced: bool,
    slices_synced: bool,
    /// `nodeLabels`: `None` is Go's nil map.
    node_labels: Option<BTreeMap<String, String>>,
    /// `EndpointsChangeTracker.lastChangeTriggerTimes`, per Service, and the tracker's start:
    /// older trigger times are not the proxy's to measure.
    trigger_times: BTreeMap<(String, String), Vec<SystemTime>>,
    tracker_started: SystemTime,
}

impl State {
    pub fn new(family: IpFamily, hostname: &str) -> State {
        State {
            family,
            hostname: hostname.to_string(),
            services: BTreeMap::new(),
            slices: BTreeMap::new(),
            service_changes: BTreeMap::new(),
            slices_applied: BTreeMap::new(),
            slices_pending: BTreeMap::new(),
            services_synced: false,
            slices_synced: false,
            node_labels: None,
            trigger_times: BTreeMap::new(),
            tracker_started: SystemTime::now(),
        }
    }

    /// `isInitialized`.
    pub(crate) fn initialized(&self) -> bool {
        self.services_synced && self.slices_synced
    }

    /// The Service as this family's proxier keeps it (`serviceToServiceMap`): none for one it
    /// skips, or one without a cluster IP of the family.
    fn service_view(&self, object: Option<&Arc<K8sService>>) -> Option<Service> {
        convert::service(object?)?.family_view(self.family)
    }

    /// One handler call.
    pub fn handle(&mut self, event: Event) -> Next {
        let queue_if = |pending: bool, initialized: bool| {
            if pending && initialized { Next::Queue } else { Next::Nothing }
        };
        match event {
            Event::Service { old, new } => {
                let Some(object) = new.as_ref().or(old.as_ref()) else { return Next::Nothing };
                let key = super::informer::key(&**object);
                let before = self.service_view(old.as_ref());
                let now = self.service_view(new.as_ref());
                let change = self.service_changes.entry(key.clone()).or_insert((before, None));
                change.1 = now;
                if change.0 == change.1 {
                    self.service_changes.remove(&key);
                }
                match new {
                    Some(s) => self.services.insert(key, s),
                    None => self.services.remove(&key),
                };
                queue_if(!self.service_changes.is_empty(), self.initialized())
            }
            Event::Slice { slice, remove } => {
                if family_of_slice(&slice) != Some(self.family) {
                    return Next::Nothing;
                }
                let changed = self.slice_changed(&slice, remove);
                let key = super::informer::key(&*slice);
                if remove {
                    self.slices.remove(&key);
                } else {
                    self.slices.insert(key, slice);
                }
                queue_if(changed, self.initialized())
            }
            Event::ServicesSynced => {
                self.services_synced = true;
                Next::SyncNow
            }
            Event::SlicesSynced => {
                self.slices_synced = true;
                Next::SyncNow
            }
            Event::Node(node) => {
                if !self.is_this_node(&node) || self.node_labels == node.metadata.labels {
                    return Next::Nothing;
                }
                self.node_labels = Some(node.metadata.labels.clone().unwrap_or_default());
                Next::Queue
            }
            Event::NodeDeleted(node) => {
                if !self.is_this_node(&node) {
                    return Next::Nothing;
                }
                self.node_labels = None;
                Next::Queue
            }
        }
    }

    fn is_this_node(&self, node: &K8sNode) -> bool {
        let name = node.metadata.name.as_deref().unwrap_or("");
        if name != self.hostname {
            eprintln!(
                "reference-proxy: {}: a watch event for node {name}, not this node {}",
                self.family, self.hostname
            );
        }
        name == self.hostname
    }

    /// `EndpointsChangeTracker.EndpointSliceUpdate`: whether the slice differs from what is
    /// pending or applied for it (a removal of one never seen changes nothing).
    fn slice_changed(&mut self, slice: &EndpointSlice, remove: bool) -> bool {
        let labels = slice.metadata.labels.as_ref();
        let Some(service) = labels.and_then(|l| l.get(SERVICE_NAME_LABEL)).filter(|s| !s.is_empty()) else {
            eprintln!(
                "reference-proxy: EndpointSlice {:?} has no {SERVICE_NAME_LABEL} label",
                slice.metadata.name
            );
            return false;
        };
        let (namespace, name) = super::informer::key(slice);
        let key = ((namespace.clone(), service.clone()), name);
        let data = SliceData::of(slice, remove);
        let changed = match (self.slices_pending.get(&key), self.slices_applied.get(&key)) {
            (Some(pending), _) => *pending != data,
            (None, Some(applied)) => *applied != data,
            (None, None) => !remove,
        };
        if changed {
            // A deletion's trigger time is that of the slice's last update, not of the
            // deletion: kube-proxy forgets the Service's times instead.
            let service = key.0.clone();
            if remove {
                self.trigger_times.remove(&service);
            } else if let Some(t) = trigger_time(slice).filter(|t| *t > self.tracker_started) {
                self.trigger_times.entry(service).or_default().push(t);
            }
            self.slices_pending.insert(key, data);
        }
        changed
    }

    /// `checkoutTriggerTimes`: the trigger times of the changes a sync is about to program.
    fn checkout_trigger_times(&mut self) -> Vec<SystemTime> {
        std::mem::take(&mut self.trigger_times).into_values().flatten().collect()
    }

    /// What a sync programs (every Service, this family's slices, in name order), with the
    /// pending changes marked applied.
    pub fn checkout(&mut self) -> (Vec<K8sService>, Vec<EndpointSlice>) {
        self.service_changes.clear();
        for (key, data) in std::mem::take(&mut self.slices_pending) {
            if data.remove {
                self.slices_applied.remove(&key);
            } else {
                self.slices_applied.insert(key, data);
            }
        }
        let services = self.services.values().map(|s| (**s).clone()).collect();
        let slices = self.slices.values().map(|s| (**s).clone()).collect();
        (services, slices)
    }
}

/// `getLastChangeTriggerTime`: the annotation as RFC 3339 (Go's `time.RFC3339Nano` parse);
/// none when absent or unreadable (kube-proxy logs the latter).
fn trigger_time(slice: &EndpointSlice) -> Option<SystemTime> {
    let value = slice.metadata.annotations.as_ref()?.get(TRIGGER_TIME)?;
    match value.parse::<k8s_openapi::jiff::Timestamp>() {
        Ok(t) => Some(SystemTime::from(t)),
        Err(e) => {
            eprintln!("reference-proxy: error while parsing {TRIGGER_TIME} {value:?}: {e}");
            None
        }
    }
}

/// What both families' proxiers share.
pub struct Settings {
    pub programmer: Box<dyn NodeProgrammer>,
    pub node: NodeHandle,
    /// What the programmer keeps of the node (its health check servers), shared by both
    /// families' proxiers as kube-proxy's one service health server is.
    pub node_state: Mutex<NodeState>,
    /// The node as the model has it, from its Node object at start-up (kube-proxy reads the
    /// node's IPs once, `getNodeIPs`).
    pub model_node: Node,
    pub flags: convert::Flags,
    pub conntrack_cleanup: bool,
    pub min_sync_period: Duration,
    /// The runner's max interval: an hour in iptables mode (its periodic check of its canary
    /// chains is left out), the sync period in nftables mode.
    pub max_interval: Duration,
    pub sync_period: Duration,
    pub health: Arc<Mutex<ProxierHealth>>,
    pub metrics: Arc<Mutex<Metrics>>,
}

/// One family's proxier, running.
pub struct Proxier {
    state: State,
    settings: Arc<Settings>,
    runner: Runner,
    /// The family's view as last programmed, to tell what a change leaves stale.
    applied: Option<Cluster>,
}

impl Proxier {
    pub fn new(family: IpFamily, settings: Arc<Settings>, hostname: &str) -> Proxier {
        let runner = Runner::new(settings.min_sync_period, settings.max_interval, Instant::now());
        Proxier { state: State::new(family, hostname), settings, runner, applied: None }
    }

    fn family(&self) -> IpFamily {
        self.state.family
    }

    fn health(&self) -> std::sync::MutexGuard<'_, ProxierHealth> {
        self.settings.health.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn metrics(&self) -> std::sync::MutexGuard<'_, Metrics> {
        self.settings.metrics.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `SyncLoop`, then the runner's `Loop`, handling the events as they come. Ends when the
    /// events do.
    pub async fn run(mut self, mut events: mpsc::UnboundedReceiver<Event>) {
        // "Update healthz timestamp at beginning in case Sync() never succeeds", and
        // synthesize a queued time.
        let now = Moment::now();
        self.health().updated(self.family(), now);
        self.metrics().set_last_queued(now.wall);
        self.runner = Runner::new(self.settings.min_sync_period, self.settings.max_interval, Instant::now());
        loop {
            let deadline = tokio::time::Instant::from_std(self.runner.deadline());
            tokio::select! {
                event = events.recv() => {
                    let Some(event) = event else { return };
                    match self.state.handle(event) {
                        Next::Nothing => {}
                        Next::Queue => {
                            self.queue();
                            self.try_run();
                        }
                        Next::SyncNow => {
                            self.sync();
                            self.runner.apply_retry(Instant::now());
                        }
                    }
                }
                () = tokio::time::sleep_until(deadline) => self.try_run(),
            }
        }
    }

    /// `Sync()`, before the runner is asked.
    fn queue(&self) {
        let now = Moment::now();
        self.health().queued_update(self.family(), now);
        self.metrics().set_last_queued(now.wall);
    }

    /// The runner's `tryRun`.
    fn try_run(&mut self) {
        if self.runner.try_run(Instant::now()) {
            self.sync();
            self.runner.ran(Instant::now());
        }
    }

    /// `syncProxyRules`: the duration histogram observes the whole sync, the conntrack
    /// cleanup after the timestamp included, as kube-proxy's deferred `Observe` does; so its
    /// count moves only once the cleanup is done.
    fn sync(&mut self) {
        if !self.state.initialized() {
            return;
        }
        let started = Instant::now();
        self.sync_rules();
        self.metrics().observe(started.elapsed());
    }

    fn sync_rules(&mut self) {
        let family = self.family();
        let (services, slices) = self.state.checkout();
        let trigger_times = self.state.checkout_trigger_times();
        let view = match self.program(&services, &slices) {
            Ok(view) => view,
            Err(e) => {
                self.metrics().count_restore_failure();
                eprintln!(
                    "reference-proxy: {family}: sync failed, retrying in {:?}: {e:#}",
                    self.settings.sync_period
                );
                self.runner.retry_after(self.settings.sync_period, Instant::now());
                return;
            }
        };
        let now = Moment::now();
        for t in trigger_times {
            self.metrics().observe_programming(now.wall.duration_since(t).unwrap_or_default());
        }
        self.health().updated(family, now);
        self.metrics().set_last_synced(now.wall);
        let Some(view) = view else {
            eprintln!("reference-proxy: {family}: synced (the cluster has no {family}: nothing to program)");
            return;
        };
        eprintln!("reference-proxy: {family}: synced {} services", view.services.len());
        // As kube-proxy, after the sync is reported: stale UDP entries (everything is new at
        // the first sync); a failure is logged, not retried.
        if self.settings.conntrack_cleanup {
            let none = Cluster { services: Vec::new(), ..view.clone() };
            let deletions = conntrack_cleanup::stale(self.applied.as_ref().unwrap_or(&none), &view);
            let netns = &self.settings.node.netns;
            if let Err(e) = tokio::task::block_in_place(|| conntrack_cleanup::delete(netns, &deletions)) {
                eprintln!("reference-proxy: {family}: {e:#}");
            }
        }
        self.applied = Some(view);
    }

    /// Programs the family's view of the objects; `None` when the cluster has no such family
    /// (no cluster CIDR of it, or the node no address of it): there is nothing the model can
    /// program then (kube-proxy would write the family's empty base chains).
    fn program(&self, services: &[K8sService], slices: &[EndpointSlice]) -> Result<Option<Cluster>> {
        let s = &self.settings;
        let cluster = convert::cluster(s.model_node.clone(), services, slices, &s.flags)?;
        let Some(view) = convert::family_view(&cluster, self.family()) else { return Ok(None) };
        let mut node_state = s.node_state.lock().unwrap_or_else(|e| e.into_inner());
        tokio::task::block_in_place(|| s.programmer.program_node(&view, &s.node, &mut node_state))
            .with_context(|| format!("programming node {}", s.node.name))?;
        Ok(Some(view))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use IpFamily::{V4, V6};
    use serde_json::json;

    fn service(name: &str, ips: &[&str], port: i32) -> Arc<K8sService> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"namespace": "default", "name": name},
                "spec": {"clusterIP": ips[0], "clusterIPs": ips, "ports": [{"port": port, "protocol": "TCP"}]}
            }))
            .unwrap(),
        )
    }

    fn slice(name: &str, service: &str, family: IpFamily, ip: &str, ready: bool) -> Arc<EndpointSlice> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"namespace": "default", "name": name, "labels": {SERVICE_NAME_LABEL: service}},
                "addressType": family.as_k8s(),
                "endpoints": [{"addresses": [ip], "conditions": {"ready": ready}}],
                "ports": [{"port": 8080, "protocol": "TCP"}]
            }))
            .unwrap(),
        )
    }

    fn node(labels: serde_json::Value) -> Arc<K8sNode> {
        Arc::new(serde_json::from_value(json!({"metadata": {"name": "node-a", "labels": labels}})).unwrap())
    }

    /// Both families' proxiers, listed (initialized) and their initial sync done.
    fn listed() -> (State, State) {
        let mut states = (State::new(V4, "node-a"), State::new(V6, "node-a"));
        for s in [&mut states.0, &mut states.1] {
            assert_eq!(s.handle(Event::ServicesSynced), Next::SyncNow);
            assert!(!s.initialized(), "not before the slices are listed too");
            assert_eq!(s.handle(Event::SlicesSynced), Next::SyncNow);
            assert!(s.initialized());
            s.checkout();
        }
        states
    }

    /// `EndpointSliceUpdate`'s trigger times: those of changes made after the tracker started,
    /// forgotten on a deletion, handed to the next sync once.
    #[test]
    fn only_changes_triggered_after_start_are_measured() {
        let stamped = |ip: &str, at: SystemTime| {
            let mut s = (*slice("web-1", "web", V4, ip, true)).clone();
            let t = k8s_openapi::jiff::Timestamp::try_from(at).unwrap().to_string();
            s.metadata.annotations = Some([(TRIGGER_TIME.to_string(), t)].into());
            Arc::new(s)
        };
        let (mut v4, _) = listed();
        let before_start = v4.tracker_started - Duration::from_secs(5);
        let after_start = v4.tracker_started + Duration::from_millis(5);
        assert_eq!(
            v4.handle(Event::Slice { slice: stamped("10.0.0.1", before_start), remove: false }),
            Next::Queue
        );
        assert!(v4.checkout_trigger_times().is_empty(), "older than the tracker");
        assert_eq!(
            v4.handle(Event::Slice { slice: stamped("10.0.0.2", after_start), remove: false }),
            Next::Queue
        );
        assert_eq!(
            v4.handle(Event::Slice { slice: stamped("10.0.0.2", after_start), remove: false }),
            Next::Nothing
        );
        assert_eq!(v4.checkout_trigger_times(), [after_start], "one change, one time");
        assert!(v4.checkout_trigger_times().is_empty(), "handed out once");
        v4.handle(Event::Slice { slice: stamped("10.0.0.3", after_start), remove: false });
        v4.handle(Event::Slice { slice: stamped("10.0.0.3", after_start), remove: true });
        assert!(v4.checkout_trigger_times().is_empty(), "a deletion forgets the Service's times");
    }

    /// The metaproxier's dispatch: Services to both proxiers, slices to their family's.
    fn dispatch(states: &mut (State, State), event: Event) -> (Next, Next) {
        match &event {
            Event::Slice { slice, .. } => match family_of_slice(slice) {
                Some(V4) => (states.0.handle(event), Next::Nothing),
                Some(V6) => (Next::Nothing, states.1.handle(event)),
                None => (Next::Nothing, Next::Nothing),
            },
            _ => (states.0.handle(event.clone()), states.1.handle(event)),
        }
    }

    #[test]
    fn a_service_queues_a_sync_only_in_the_families_it_has_a_cluster_ip_of() {
        let mut s = listed();
        let v4 = service("web", &["10.96.0.10"], 80);
        let (q, none) = (Next::Queue, Next::Nothing);
        assert_eq!(dispatch(&mut s, Event::Service { old: None, new: Some(v4.clone()) }), (q, none));
        let dual = service("dual", &["10.96.0.11", "fd00:10:96::11"], 80);
        assert_eq!(dispatch(&mut s, Event::Service { old: None, new: Some(dual.clone()) }), (q, q));
        // Each family's sync takes every Service; the model's family view drops the others.
        assert_eq!(s.1.checkout().0.len(), 2);
        s.0.checkout();
        // The same object again changes nothing.
        assert_eq!(
            dispatch(&mut s, Event::Service { old: Some(dual.clone()), new: Some(dual.clone()) }),
            (none, none)
        );
        // A change and its undoing before a sync leave nothing pending.
        let changed = service("dual", &["10.96.0.11", "fd00:10:96::11"], 81);
        assert_eq!(
            dispatch(&mut s, Event::Service { old: Some(dual.clone()), new: Some(changed.clone()) }),
            (q, q)
        );
        assert_eq!(
            dispatch(&mut s, Event::Service { old: Some(changed), new: Some(dual.clone()) }),
            (none, none)
        );
        // Deleting an IPv4-only Service is IPv4's business.
        assert_eq!(dispatch(&mut s, Event::Service { old: Some(v4), new: None }), (q, none));
        assert_eq!(s.0.checkout().0.len(), 1);
    }

    #[test]
    fn a_slice_goes_to_the_proxier_of_its_address_type() {
        let mut s = listed();
        let (q, none) = (Next::Queue, Next::Nothing);
        let a = slice("web-a", "web", V4, "10.244.1.5", true);
        assert_eq!(dispatch(&mut s, Event::Slice { slice: a.clone(), remove: false }), (q, none));
        let b = slice("web-b", "web", V6, "fd00:10:244:1::5", true);
        assert_eq!(dispatch(&mut s, Event::Slice { slice: b.clone(), remove: false }), (none, q));
        assert_eq!(s.0.checkout().1.len(), 1);
        assert_eq!(s.1.checkout().1.len(), 1);
        // Unchanged against what was applied: nothing; a condition flips: a sync.
        assert_eq!(dispatch(&mut s, Event::Slice { slice: a.clone(), remove: false }), (none, none));
        let not_ready = slice("web-a", "web", V4, "10.244.1.5", false);
        assert_eq!(dispatch(&mut s, Event::Slice { slice: not_ready, remove: false }), (q, none));
        // Until the sync, the change stays pending: every further event queues again.
        assert_eq!(dispatch(&mut s, Event::Slice { slice: a.clone(), remove: false }), (q, none));
        s.0.checkout();
        assert_eq!(dispatch(&mut s, Event::Slice { slice: a.clone(), remove: true }), (q, none));
        assert!(s.0.checkout().1.is_empty());
        // Removing what was never there, and FQDN slices, change nothing.
        assert_eq!(dispatch(&mut s, Event::Slice { slice: a, remove: true }), (none, none));
        let mut fqdn = (*slice("web-c", "web", V4, "example.com", true)).clone();
        fqdn.address_type = "FQDN".into();
        assert_eq!(dispatch(&mut s, Event::Slice { slice: Arc::new(fqdn), remove: false }), (none, none));
    }

    #[test]
    fn nothing_queues_before_both_lists_are_in_but_a_node_with_new_labels_does() {
        let mut s = (State::new(V4, "node-a"), State::new(V6, "node-a"));
        let (q, none) = (Next::Queue, Next::Nothing);
        let web = service("web", &["10.96.0.10", "fd00:10:96::10"], 80);
        assert_eq!(dispatch(&mut s, Event::Service { old: None, new: Some(web) }), (none, none));
        assert_eq!(dispatch(&mut s, Event::ServicesSynced), (Next::SyncNow, Next::SyncNow));
        let a = slice("web-a", "web", V4, "10.244.1.5", true);
        assert_eq!(dispatch(&mut s, Event::Slice { slice: a, remove: false }), (none, none));
        // `OnNodeAdd` queues whenever the labels differ from the last seen, initialized or not.
        let labelled = node(json!({"kubernetes.io/hostname": "node-a"}));
        assert_eq!(dispatch(&mut s, Event::Node(labelled.clone())), (q, q));
        assert_eq!(dispatch(&mut s, Event::Node(labelled.clone())), (none, none));
        let other: Arc<K8sNode> =
            Arc::new(serde_json::from_value(json!({"metadata": {"name": "node-b"}})).unwrap());
        assert_eq!(dispatch(&mut s, Event::Node(other)), (none, none));
        assert_eq!(dispatch(&mut s, Event::NodeDeleted(labelled)), (q, q));
        // The first sync has everything that came before.
        assert_eq!(dispatch(&mut s, Event::SlicesSynced), (Next::SyncNow, Next::SyncNow));
        let (services, slices) = s.0.checkout();
        assert_eq!((services.len(), slices.len()), (1, 1));
        assert_eq!(s.1.checkout().1.len(), 0);
    }
}
