//! `packetproof reference-proxy`: a small service proxy that behaves like kube-proxy v1.30 on
//! every surface the `apiserver` adapter reads, built on the built-in rule generators. It
//! reads kube-proxy's configuration file (`config`), watches its Node, Services and
//! EndpointSlices as kube-proxy's informers do (`informer`), runs one proxier per IP family
//! as kube-proxy's metaproxier does (`proxier`, paced by `runner`), each converting the
//! objects to the model (`convert`) and programming its family of the node namespace,
//! clearing stale UDP conntrack entries after each sync (`proxy::conntrack_cleanup`). It
//! serves `/healthz` and `/livez` (`healthz`) and the sync metrics (`metrics`) as kube-proxy
//! does. It proves the API-server adapter without downloading kube-proxy.

mod config;
pub(crate) mod convert;
mod healthz;
mod informer;
mod metrics;
mod proxier;
mod runner;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use futures::StreamExt;
use ipnet::IpNet;
use k8s_openapi::api::core::v1::{Node as K8sNode, Service as K8sService};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::sync::mpsc::UnboundedSender;

use self::config::Config;
use self::informer::{Change, Informer};
use self::proxier::{Event, Proxier, Settings};
use crate::model::{IpFamily, ProxyConfig};
use crate::proxy::NodeProgrammer;
use crate::proxy::kube_proxy_config::Mode;
use crate::topology::{Netns, NodeHandle};

/// kube-proxy's selector: Services (and their slices) that another proxy owns, or that are
/// headless, are not ours.
pub const PROXY_LABEL_SELECTOR: &str =
    "!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name";

/// The iptables runner's max interval (pkg/proxy/iptables/proxier.go `NewProxier`: "time.Hour
/// is arbitrary"); nftables' is its sync period.
const IPTABLES_MAX_INTERVAL: Duration = Duration::from_secs(3600);

/// The command line: kube-proxy's `--config` and `--hostname-override`, and what only the
/// reference proxy needs.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// kube-proxy's configuration file: a KubeProxyConfiguration of
    /// kubeproxy.config.k8s.io/v1alpha1, JSON or YAML. Settings the reference proxy does not
    /// model are refused.
    #[arg(long)]
    pub config: PathBuf,
    /// The Node to follow, over the file's `hostnameOverride` (as kube-proxy's flag).
    #[arg(long)]
    pub hostname_override: Option<String>,
    /// The network namespace to program: a name under /run/netns, or a path
    /// (`/proc/self/ns/net`: the one it was started in).
    #[arg(long)]
    pub netns: String,
    /// The service CIDR, or one per family comma-separated (the model needs it; kube-proxy
    /// v1.30 is not told).
    #[arg(long, value_delimiter = ',')]
    pub service_cidr: Vec<IpNet>,
    /// Leave stale UDP conntrack entries alone (a deliberately broken proxy, for a mutant test).
    #[arg(long)]
    pub no_conntrack_cleanup: bool,
    /// Program the node with a catalogued mutant of the built-in generator (a deliberately
    /// broken proxy, e.g. installed as a cluster's proxy to show a run catches it).
    #[arg(long, value_parser = |s: &str| s.parse::<crate::proxy::Mutant>())]
    pub mutant: Option<crate::proxy::Mutant>,
}

/// Runs the proxy until it is killed.
pub fn main(args: Args) -> Result<()> {
    healthz::mark_start();
    let config = config::load(&args.config, args.hostname_override.as_deref())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(run(args, config))
}

/// The built-in generator of a mode, which writes what kube-proxy's mode writes.
fn programmer(mode: Mode, mutant: Option<crate::proxy::Mutant>) -> Box<dyn NodeProgrammer> {
    match mode {
        Mode::Iptables => Box::new(crate::proxy::iptables::BuiltinIptables { mutant }),
        Mode::Nftables => Box::new(crate::proxy::nftables::BuiltinNftables { mutant, ..Default::default() }),
        Mode::Ipvs => Box::new(crate::proxy::ipvs::BuiltinIpvs { mutant }),
    }
}

async fn run(args: Args, config: Config) -> Result<()> {
    let netns = if args.netns.starts_with('/') {
        Netns::open_path(std::path::Path::new(&args.netns))?
    } else {
        Netns::open(&args.netns)?
    };
    let kubeconfig = kube::config::Kubeconfig::read_from(&config.kubeconfig)
        .with_context(|| format!("reading {}", config.kubeconfig.display()))?;
    let client_config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .context("configuring the API client")?;
    let client = Client::try_from(client_config).context("building the API client")?;

    let object = node_object(&client, &config.hostname, config.cluster_cidrs.first()).await?;
    let primary = convert::primary_family(&object, config.cluster_cidrs.first())?;
    let model_node = convert::node(&object, primary)?;

    let health = Arc::new(Mutex::new(healthz::ProxierHealth::new(config.health_timeout)));
    let metrics = Arc::new(Mutex::new(metrics::Metrics::default()));
    serve(&netns, config.healthz_bind_address, healthz::router(Arc::clone(&health)), "healthz")?;
    serve(&netns, config.metrics_bind_address, metrics::router(Arc::clone(&metrics)), "metrics")?;

    let settings = Arc::new(Settings {
        programmer: programmer(config.mode, args.mutant),
        node: NodeHandle { name: config.hostname.clone(), netns },
        model_node,
        flags: convert::Flags {
            cluster_cidrs: config.cluster_cidrs.clone(),
            service_cidrs: args.service_cidr.clone(),
            proxy: ProxyConfig {
                masquerade_all: config.masquerade_all,
                node_port_addresses: config.node_port_addresses.clone(),
                localhost_node_ports: config.localhost_node_ports,
                service_traffic_distribution: config.service_traffic_distribution,
                detect_local: config.detect_local.clone(),
                cluster_cidrs: Some(config.cluster_cidrs.clone()),
            },
        },
        conntrack_cleanup: !args.no_conntrack_cleanup,
        min_sync_period: config.min_sync_period,
        max_interval: match config.mode {
            Mode::Iptables => IPTABLES_MAX_INTERVAL,
            // The IPVS proxier's runner, too, runs at least every syncPeriod.
            Mode::Nftables | Mode::Ipvs => config.sync_period,
        },
        sync_period: config.sync_period,
        node_state: Mutex::new(crate::proxy::NodeState::default()),
        health: Arc::clone(&health),
        metrics,
    });

    // The metaproxier: a proxier per family, whatever families the cluster has.
    let mut proxiers: BTreeMap<IpFamily, UnboundedSender<Event>> = BTreeMap::new();
    let mut loops = Vec::new();
    for family in [IpFamily::V4, IpFamily::V6] {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        proxiers.insert(family, tx);
        loops.push(tokio::spawn(Proxier::new(family, Arc::clone(&settings), &config.hostname).run(rx)));
    }
    let proxiers = Arc::new(proxiers);
    let to_both = |proxiers: &BTreeMap<IpFamily, UnboundedSender<Event>>, event: Event| {
        for tx in proxiers.values() {
            let _ = tx.send(event.clone());
        }
    };

    let selected = || watcher::Config::default().labels(PROXY_LABEL_SELECTOR);
    let services = Arc::clone(&proxiers);
    watch(Api::<K8sService>::all(client.clone()), selected(), move |change| {
        let event = match change {
            Change::Upsert { old, new } => Event::Service { old, new: Some(new) },
            Change::Delete(old) => Event::Service { old: Some(old), new: None },
            Change::Synced => Event::ServicesSynced,
        };
        to_both(&services, event);
    });
    let slices = Arc::clone(&proxiers);
    watch(Api::<EndpointSlice>::all(client.clone()), selected(), move |change| {
        let (slice, remove) = match change {
            Change::Upsert { new, .. } => (new, false),
            Change::Delete(old) => (old, true),
            Change::Synced => return to_both(&slices, Event::SlicesSynced),
        };
        match proxier::family_of_slice(&slice) {
            Some(family) => {
                let _ = slices[&family].send(Event::Slice { slice, remove });
            }
            None => {
                eprintln!("reference-proxy: EndpointSlice address type not supported: {}", slice.address_type)
            }
        }
    });
    let nodes = Arc::clone(&proxiers);
    let draining = config.draining_terminating_nodes;
    let node_field = format!("metadata.name={}", config.hostname);
    watch(Api::<K8sNode>::all(client), watcher::Config::default().fields(&node_field), move |change| {
        let (node, event) = match change {
            Change::Upsert { new, .. } => (Arc::clone(&new), Event::Node(new)),
            Change::Delete(old) => (Arc::clone(&old), Event::NodeDeleted(old)),
            Change::Synced => return,
        };
        // `NodeEligibleHandler`, registered before the proxier's handler.
        if draining {
            health.lock().unwrap_or_else(|e| e.into_inner()).sync_node(&node);
        }
        to_both(&nodes, event);
    });
    eprintln!("reference-proxy: watching the API for node {} ({} mode)", config.hostname, config.mode.name());

    let (ended, _, _) = futures::future::select_all(loops).await;
    ended.context("a proxier failed")?;
    bail!("a proxier stopped")
}

/// The Node at start-up, as `getNodeIPs` (cmd/kube-proxy/app/server.go) polls for it: six
/// tries over about 31 s. Where kube-proxy would then go on with loopback addresses, the
/// reference proxy, which needs the node's addresses and pod CIDR for its model, gives up.
async fn node_object(client: &Client, name: &str, cluster_cidr: Option<&IpNet>) -> Result<K8sNode> {
    let api = Api::<K8sNode>::all(client.clone());
    let mut delay = Duration::from_secs(1);
    let mut last = String::new();
    for attempt in 0..6 {
        if attempt > 0 {
            tokio::time::sleep(delay).await;
            delay *= 2;
        }
        match api.get_opt(name).await {
            Ok(Some(node)) => {
                match convert::primary_family(&node, cluster_cidr).and_then(|p| convert::node(&node, p)) {
                    Ok(_) => return Ok(node),
                    Err(e) => last = format!("{e:#}"),
                }
            }
            Ok(None) => last = "not found".into(),
            Err(e) => last = e.to_string(),
        }
        eprintln!("reference-proxy: node {name}: {last}");
    }
    bail!("node {name}: {last}; the reference proxy needs its addresses and pod CIDR")
}

/// Serves `app` on `addr`, bound inside the node's namespace, on the current runtime.
fn serve(netns: &Netns, addr: SocketAddr, app: axum::Router, what: &'static str) -> Result<()> {
    let listener = netns
        .run(move || std::net::TcpListener::bind(addr))?
        .with_context(|| format!("binding {what} to {addr}"))?;
    listener.set_nonblocking(true).with_context(|| format!("making the {what} socket non-blocking"))?;
    let listener = tokio::net::TcpListener::from_std(listener)
        .with_context(|| format!("handing the {what} socket to tokio"))?;
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            eprintln!("reference-proxy: {what}: {e}");
        }
    });
    Ok(())
}

/// Follows one kind through an [`Informer`], handing each change to `handle` in order.
fn watch<K>(api: Api<K>, config: watcher::Config, mut handle: impl FnMut(Change<K>) + Send + 'static)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let mut informer = Informer::default();
    let stream = watcher(api, config).default_backoff();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(event) => informer.handle(event).into_iter().for_each(&mut handle),
                Err(e) => eprintln!("reference-proxy: watch: {e}"),
            }
        }
    });
}
