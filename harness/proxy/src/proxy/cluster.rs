//! The cluster's own proxy, whatever it is, judged through the cluster's own API server: the
//! scenario's Services (selectorless, so the cluster's EndpointSlice controller leaves them
//! alone) and EndpointSlices are written there with server-side apply, labelled as
//! packetproof's, and removed at the end (after success, failure, a panic, and Ctrl-C). After
//! every write packetproof waits until the proxy on every node has applied it, by kube-proxy's
//! sync metrics on the node's 127.0.0.1 (the `apiserver` adapter's judgement,
//! `apiserver/sync`), or for a proxy without them by its rules settling.
//!
//! Used with nodes that already exist (`run --node NAME=REF`): `--proxy cluster
//! --proxy-option kubeconfig=FILE --profile kube-proxy-iptables`.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};

use super::apiserver::sync::{self, Families, SyncJudge, SyncMetrics};
use super::{Env, Proxy, Running, State};
use crate::apiserver::Kind;
use crate::model::Profile;
use crate::topology::NodeHandle;
use crate::topology::existing::{Additions, Undo};
use crate::topology::journal;

pub const NAME: &str = "cluster";
/// The label every object packetproof writes carries; objects without it are never changed.
const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
const OWNER: &str = "packetproof";
/// Which run wrote an object (the process id), for finding leftovers of a killed run.
const RUN_LABEL: &str = "packetproof.dev/run";
/// The field manager of packetproof's server-side applies.
const FIELD_MANAGER: &str = "packetproof";
const DEFAULT_SYNC_TIMEOUT: Duration = Duration::from_secs(60);
/// Without sync metrics: as the `apiserver` adapter (kube-proxy's min-sync-period is 1 s).
const QUIET: Duration = Duration::from_millis(1500);
const UNCHANGED_AFTER: Duration = Duration::from_secs(5);
const OPTIONS: &[&str] = &["kubeconfig", "profile", "metricsPort", "syncTimeoutSeconds"];

/// The proxy a cluster already runs, reached through its API server.
#[derive(Debug, Clone)]
pub struct ClusterProxy {
    kubeconfig: PathBuf,
    profile: Profile,
    /// Where each node's proxy serves kube-proxy's `/metrics` on 127.0.0.1 (kind: 10249);
    /// none: wait for the node's rules to settle.
    metrics_port: Option<u16>,
    sync_timeout: Duration,
}

impl ClusterProxy {
    pub fn new(kubeconfig: PathBuf, profile: Profile) -> ClusterProxy {
        ClusterProxy {
            kubeconfig,
            profile,
            metrics_port: Some(super::apiserver::DEFAULT_METRICS_PORT),
            sync_timeout: DEFAULT_SYNC_TIMEOUT,
        }
    }

    /// Options: `kubeconfig` (a path; default env KUBECONFIG), `profile` (what the cluster's
    /// proxy is judged by; default `kubernetes`), `metricsPort` (a number, or null for
    /// none; default 10249), `syncTimeoutSeconds`.
    pub fn from_options(options: &Value) -> Result<ClusterProxy> {
        super::options::refuse_unknown(NAME, options, OPTIONS)?;
        let kubeconfig = match options.get("kubeconfig") {
            Some(Value::String(path)) => PathBuf::from(path),
            Some(other) => bail!("option `kubeconfig` must be a path, not {other}"),
            None => std::env::var_os("KUBECONFIG").map(PathBuf::from).with_context(|| {
                format!("proxy {NAME} needs the cluster's kubeconfig: option `kubeconfig` or env KUBECONFIG")
            })?,
        };
        let profile = super::options::profile(options, Profile::KUBERNETES)?;
        let mut proxy = ClusterProxy::new(kubeconfig, profile);
        match options.get("metricsPort") {
            None => {}
            Some(Value::Null) => proxy.metrics_port = None,
            Some(v) => {
                proxy.metrics_port = Some(
                    v.as_u64()
                        .and_then(|p| u16::try_from(p).ok())
                        .context("option `metricsPort` must be a port number or null")?,
                )
            }
        }
        if let Some(v) = options.get("syncTimeoutSeconds") {
            proxy.sync_timeout =
                Duration::from_secs(v.as_u64().context("option `syncTimeoutSeconds` must be a number")?);
        }
        Ok(proxy)
    }

    fn client(&self, runtime: &tokio::runtime::Handle) -> Result<Client> {
        let path = self.kubeconfig.clone();
        runtime.block_on(async move {
            let kubeconfig = kube::config::Kubeconfig::read_from(&path)
                .with_context(|| format!("reading the kubeconfig {}", path.display()))?;
            let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .with_context(|| format!("configuring the API client from {}", path.display()))?;
            Client::try_from(config).context("building the API client")
        })
    }
}

impl Proxy for ClusterProxy {
    fn name(&self) -> &str {
        NAME
    }

    fn profile(&self) -> Profile {
        self.profile
    }

    fn start<'a>(&'a self, state: &State<'_>, env: &Env<'a>) -> Result<Box<dyn Running + 'a>> {
        let client = self.client(&env.runtime)?;
        env.runtime.block_on(super::cluster_settings::require_same(&client, state.cluster))?;
        let written: Arc<Mutex<BTreeMap<Key, Value>>> = Arc::default();
        // On Ctrl-C (or a drop without stop) the objects go; the nodes' proxies then clean up.
        let additions = Additions::default();
        let (hook_client, hook_runtime, hook_written) =
            (client.clone(), env.runtime.clone(), Arc::clone(&written));
        additions.push(Undo::Hook(Box::new(move || {
            let keys: Vec<Key> =
                hook_written.lock().unwrap_or_else(|e| e.into_inner()).keys().cloned().collect();
            hook_runtime.block_on(async move {
                for key in keys.iter().rev() {
                    delete(&hook_client, key).await?;
                }
                Ok(())
            })
        })));
        let mut running = ClusterRunning {
            proxy: self,
            client,
            runtime: env.runtime.clone(),
            nodes: env.topology.nodes.clone(),
            written,
            additions: Some(additions),
        };
        running.push(desired(state)?)?;
        Ok(Box::new(running))
    }
}

/// One object packetproof wrote.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    kind: Kind,
    namespace: String,
    name: String,
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}/{}", self.kind.kind(), self.namespace, self.name)
    }
}

/// The scenario's objects as packetproof writes them: without what the server sets, without
/// a selector (the cluster's controllers must not write slices for them), labelled as its own.
fn desired(state: &State<'_>) -> Result<BTreeMap<Key, Value>> {
    let mut out = BTreeMap::new();
    let services = state.objects.services.iter().map(|s| serde_json::to_value(s).map(|v| (Kind::Service, v)));
    let slices = state
        .objects
        .endpoint_slices
        .iter()
        .map(|s| serde_json::to_value(s).map(|v| (Kind::EndpointSlice, v)));
    for item in services.chain(slices) {
        let (kind, mut object) = item.context("encoding the scenario's objects")?;
        object["apiVersion"] = kind.api_version().into();
        object["kind"] = kind.kind().into();
        let meta = object["metadata"].as_object_mut().context("an object without metadata")?;
        for server_set in
            ["resourceVersion", "uid", "creationTimestamp", "managedFields", "generation", "selfLink"]
        {
            meta.remove(server_set);
        }
        let namespace = meta.get("namespace").and_then(Value::as_str).unwrap_or("default").to_string();
        meta.insert("namespace".into(), namespace.clone().into());
        let name = meta.get("name").and_then(Value::as_str).context("an object without a name")?.to_string();
        let labels = meta.entry("labels").or_insert_with(|| json!({}));
        labels[MANAGED_BY] = OWNER.into();
        labels[RUN_LABEL] = std::process::id().to_string().into();
        if kind == Kind::Service {
            if let Some(spec) = object["spec"].as_object_mut() {
                spec.remove("selector");
            }
        } else {
            labels["endpointslice.kubernetes.io/managed-by"] = "packetproof.dev".into();
        }
        out.insert(Key { kind, namespace, name }, object);
    }
    Ok(out)
}

/// The IP families whose proxier the objects reach (a Service: its cluster IPs; a slice: its
/// address type), as the metaproxier dispatches them.
fn families<'v>(objects: impl Iterator<Item = &'v Value>) -> Families {
    let mut families = Families::default();
    for object in objects {
        let mut add = |ip: &str| match ip.parse::<IpAddr>() {
            Ok(IpAddr::V4(_)) => families.ipv4 = true,
            Ok(IpAddr::V6(_)) => families.ipv6 = true,
            Err(_) => {}
        };
        match object["addressType"].as_str() {
            Some("IPv4") => add("0.0.0.0"),
            Some("IPv6") => add("::"),
            _ => {
                let spec = &object["spec"];
                let ips =
                    spec["clusterIPs"].as_array().cloned().unwrap_or_else(|| vec![spec["clusterIP"].clone()]);
                ips.iter().filter_map(Value::as_str).for_each(add);
            }
        }
    }
    families
}

fn is_ours(labels: Option<&BTreeMap<String, String>>) -> bool {
    labels.and_then(|l| l.get(MANAGED_BY)).is_some_and(|v| v == OWNER)
}

/// Creates or updates one object, refusing one that exists and is not packetproof's.
async fn apply(client: &Client, key: &Key, object: &Value, new: bool) -> Result<()> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let what = || format!("writing {key} into the cluster");
    match key.kind {
        Kind::Service => {
            let api: Api<Service> = Api::namespaced(client.clone(), &key.namespace);
            if new
                && let Some(found) = api.get_opt(&key.name).await.with_context(what)?
                && !is_ours(found.metadata.labels.as_ref())
            {
                bail!("{key} exists in the cluster and is not packetproof's: refusing to change it");
            }
            let mut body = object.clone();
            let status = body.as_object_mut().and_then(|o| o.remove("status"));
            api.patch(&key.name, &params, &Patch::Apply(&body)).await.with_context(what)?;
            if let Some(status) = status.filter(|s| !s["loadBalancer"]["ingress"].is_null()) {
                let body = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": key.name}, "status": status});
                api.patch_status(&key.name, &params, &Patch::Apply(&body)).await.with_context(what)?;
            }
        }
        Kind::EndpointSlice => {
            let api: Api<EndpointSlice> = Api::namespaced(client.clone(), &key.namespace);
            if new
                && let Some(found) = api.get_opt(&key.name).await.with_context(what)?
                && !is_ours(found.metadata.labels.as_ref())
            {
                bail!("{key} exists in the cluster and is not packetproof's: refusing to change it");
            }
            api.patch(&key.name, &params, &Patch::Apply(object)).await.with_context(what)?;
        }
        Kind::Node | Kind::ServiceCidr => {
            bail!("packetproof writes only Services and EndpointSlices into a cluster")
        }
    }
    Ok(())
}

/// Deletes one object packetproof wrote; one already gone is fine.
/// Deletes an object a run killed outright wrote (from its journal: `packetproof cleanup`).
pub fn delete_leftover(kubeconfig: &std::path::Path, kind: &str, namespace: &str, name: &str) -> Result<()> {
    let kind =
        [Kind::Service, Kind::EndpointSlice].into_iter().find(|k| k.kind() == kind).with_context(|| {
            format!("a journal names an object of kind {kind:?}, which packetproof never writes")
        })?;
    let key = Key { kind, namespace: namespace.to_string(), name: name.to_string() };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting a runtime to delete leftover objects")?;
    let proxy = ClusterProxy::new(kubeconfig.to_path_buf(), Profile::KUBERNETES);
    let client = proxy.client(runtime.handle())?;
    runtime.block_on(delete(&client, &key))
}

async fn delete(client: &Client, key: &Key) -> Result<()> {
    let params = DeleteParams::default();
    let result = match key.kind {
        Kind::Service => Api::<Service>::namespaced(client.clone(), &key.namespace)
            .delete(&key.name, &params)
            .await
            .map(|_| ()),
        Kind::EndpointSlice => Api::<EndpointSlice>::namespaced(client.clone(), &key.namespace)
            .delete(&key.name, &params)
            .await
            .map(|_| ()),
        Kind::Node | Kind::ServiceCidr => Ok(()),
    };
    match result {
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        other => other.with_context(|| format!("deleting {key} from the cluster")),
    }
}

struct ClusterRunning<'a> {
    proxy: &'a ClusterProxy,
    client: Client,
    runtime: tokio::runtime::Handle,
    nodes: Vec<NodeHandle>,
    /// What the cluster holds of packetproof's, as written.
    written: Arc<Mutex<BTreeMap<Key, Value>>>,
    /// Undoes the writes on drop and Ctrl-C; forgotten after a clean stop.
    additions: Option<Additions>,
}

impl ClusterRunning<'_> {
    fn written(&self) -> std::sync::MutexGuard<'_, BTreeMap<Key, Value>> {
        self.written.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn metrics_addr(&self) -> Option<SocketAddr> {
        self.proxy.metrics_port.map(|p| SocketAddr::new(IpAddr::from([127, 0, 0, 1]), p))
    }

    /// Makes the cluster hold exactly `wanted` of packetproof's objects, then waits until
    /// every node's proxy applied the change.
    fn push(&mut self, wanted: BTreeMap<Key, Value>) -> Result<()> {
        let current = self.written().clone();
        let removed: Vec<(Key, Value)> = current
            .iter()
            .filter(|(k, _)| !wanted.contains_key(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let changed: Vec<(Key, Value)> = wanted
            .iter()
            .filter(|(k, v)| current.get(k) != Some(v))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if removed.is_empty() && changed.is_empty() {
            return Ok(());
        }
        let families = families(removed.iter().chain(&changed).map(|(_, v)| v));
        let before: Vec<SyncMetrics> = match self.metrics_addr() {
            Some(addr) => self
                .nodes
                .iter()
                .map(|n| {
                    sync::http_get(&n.netns, addr, "/metrics")
                        .map(|b| SyncMetrics::parse(&b))
                        .unwrap_or_default()
                })
                .collect(),
            None => Vec::new(),
        };
        let baselines: Vec<String> = match self.metrics_addr() {
            Some(_) => Vec::new(),
            None => self.nodes.iter().map(|n| rules(n).unwrap_or_default()).collect(),
        };
        // Written down before they are written, for a run killed outright (`cleanup` removes them).
        if let Some(additions) = &self.additions {
            for (key, _) in changed.iter().filter(|(k, _)| !current.contains_key(k)) {
                additions.write_down(&journal::Entry::ApiObject {
                    kubeconfig: self.proxy.kubeconfig.clone(),
                    kind: key.kind.kind().to_string(),
                    namespace: key.namespace.clone(),
                    name: key.name.clone(),
                });
            }
        }
        let pushed = sync::unix_now();
        let client = self.client.clone();
        let written = Arc::clone(&self.written);
        self.runtime.block_on(async move {
            // Slices before their Services on the way out, Services first on the way in.
            for (key, _) in removed.iter().rev() {
                delete(&client, key).await?;
                written.lock().unwrap_or_else(|e| e.into_inner()).remove(key);
            }
            for (key, object) in &changed {
                // Recorded first: an interrupt during the write still removes it.
                let new = written
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(key.clone(), object.clone())
                    .is_none();
                if let Err(e) = apply(&client, key, object, new).await {
                    if new {
                        written.lock().unwrap_or_else(|e| e.into_inner()).remove(key);
                    }
                    return Err(e);
                }
            }
            anyhow::Ok(())
        })?;
        let deadline = Instant::now() + self.proxy.sync_timeout;
        // Every node's wait at once (`sync::wait_all`): each node's grace overlaps the others'.
        let mut waits: Vec<Box<dyn sync::NodeWait + '_>> = Vec::new();
        for (i, node) in self.nodes.iter().enumerate() {
            waits.push(match self.metrics_addr() {
                Some(addr) => {
                    let judge = SyncJudge::after_push(pushed, before[i].clone(), families);
                    Box::new(sync::MetricsWait::new(&node.netns, addr, judge, || Ok(())))
                }
                None => Box::new(sync::StableWait::new(
                    &baselines[i],
                    QUIET,
                    Some(UNCHANGED_AFTER),
                    move || rules(node),
                    || Ok(()),
                )),
            });
        }
        let mut waits: Vec<&mut dyn sync::NodeWait> = waits.iter_mut().map(|w| &mut **w as _).collect();
        sync::wait_all(&mut waits, deadline).map_err(|(i, e)| {
            e.context(format!(
                "waiting for the cluster's proxy on node {} to apply packetproof's objects",
                self.nodes[i].name
            ))
        })
    }
}

fn rules(node: &NodeHandle) -> Result<String> {
    super::apiserver::dump(&node.netns)
}

impl Running for ClusterRunning<'_> {
    fn update(&mut self, state: &State<'_>) -> Result<()> {
        self.push(desired(state)?)
    }

    fn dump_node(&self, node: &NodeHandle) -> Result<String> {
        rules(node)
    }

    /// Removes every object it wrote and waits until the nodes' proxies applied that, so the
    /// nodes are as they were.
    fn stop(mut self: Box<Self>) -> Result<()> {
        self.push(BTreeMap::new())?;
        if let Some(additions) = self.additions.take() {
            additions.forget();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn objects_are_written_selectorless_labelled_and_without_server_fields() {
        let text =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios/hairpin.yaml"))
                .unwrap();
        let scenario = packetproof::admission::load_str(&text, Path::new("hairpin.yaml")).unwrap();
        let state = State { cluster: &scenario.cluster, objects: &scenario.objects };
        let objects = desired(&state).unwrap();
        let service = objects.iter().find(|(k, _)| k.kind == Kind::Service).unwrap();
        assert_eq!(service.0.to_string(), "Service default/web");
        assert!(service.1["spec"].get("selector").is_none());
        assert_eq!(service.1["metadata"]["labels"][MANAGED_BY], OWNER);
        assert_eq!(service.1["apiVersion"], "v1");
        let slice = objects.iter().find(|(k, _)| k.kind == Kind::EndpointSlice).unwrap();
        assert_eq!(slice.1["metadata"]["labels"]["kubernetes.io/service-name"], "web");
        assert!(slice.1["metadata"].get("resourceVersion").is_none());
        assert_eq!(families(objects.values()), Families { ipv4: true, ipv6: false });
    }

    #[test]
    fn options_name_the_kubeconfig_and_the_profile() {
        let p = ClusterProxy::from_options(
            &json!({"kubeconfig": "/k", "profile": "kube-proxy-nftables", "metricsPort": null}),
        )
        .unwrap();
        assert_eq!(
            (p.kubeconfig.as_path(), p.profile, p.metrics_port),
            (Path::new("/k"), Profile::KUBE_PROXY_NFTABLES, None)
        );
        assert!(ClusterProxy::from_options(&json!({"kubeconfig": "/k", "command": "x"})).is_err());
        assert!(ClusterProxy::from_options(&json!({"kubeconfig": 3})).is_err());
    }
}
