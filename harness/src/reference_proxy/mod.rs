//! `packetproof reference-proxy`: a small service proxy that watches the Kubernetes API like
//! kube-proxy does (its Node, Services and EndpointSlices through kube's watcher and
//! reflector), converts them to the model (`convert`), programs its node namespace with the
//! built-in generator, clears stale UDP conntrack entries (`proxy::conntrack_cleanup`), and reports
//! `lastUpdated` on `/healthz`. It proves the API-server adapter without downloading
//! kube-proxy.

pub mod convert;
mod healthz;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use futures::StreamExt;
use ipnet::IpNet;
use k8s_openapi::api::core::v1::{Node as K8sNode, Service as K8sService};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::sync::Notify;

use crate::model::{Cluster, ProxyConfig};
use crate::proxy::{NodeProgrammer, conntrack_cleanup};
use crate::topology::{Netns, NodeHandle};

/// kube-proxy's selector: Services (and their slices) that another proxy owns, or that are
/// headless, are not ours.
pub const PROXY_LABEL_SELECTOR: &str =
    "!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name";
/// Changes closer together than this are applied in one sync.
const DEBOUNCE: Duration = Duration::from_millis(100);

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    Iptables,
    Nftables,
}

/// The command line, kube-proxy's flag names where they exist.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The kubeconfig naming the API server (plain HTTP).
    #[arg(long)]
    pub kubeconfig: PathBuf,
    /// The Node to follow (kube-proxy's `--hostname-override`).
    #[arg(long)]
    pub node: String,
    /// The network namespace (under /run/netns) to program.
    #[arg(long)]
    pub netns: String,
    /// Which kube-proxy mode's rules to write (the built-in generators').
    #[arg(long, value_enum)]
    pub mode: Mode,
    /// The cluster's pod CIDR, or one per family comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    pub cluster_cidr: Vec<IpNet>,
    /// The service CIDR, or one per family comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub service_cidr: Vec<IpNet>,
    /// Where `/healthz` answers (inside the namespace).
    #[arg(long)]
    pub healthz_bind_address: Option<SocketAddr>,
    /// Masquerade all traffic to cluster IPs, even from pods.
    #[arg(long)]
    pub masquerade_all: bool,
    /// Node ports answer only on node addresses inside these CIDRs.
    #[arg(long, value_delimiter = ',')]
    pub nodeport_addresses: Vec<IpNet>,
    /// Node ports on 127.0.0.1 (iptables mode).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub iptables_localhost_nodeports: bool,
    /// Leave stale UDP conntrack entries alone (a deliberately broken proxy, for a mutant test).
    #[arg(long)]
    pub no_conntrack_cleanup: bool,
}

/// Runs the proxy until it is killed.
pub fn main(args: Args) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(run(args))
}

/// The built-in generator of a mode, which writes what kube-proxy's mode writes.
fn programmer(mode: Mode) -> Box<dyn NodeProgrammer> {
    match mode {
        Mode::Iptables => Box::new(crate::proxy::iptables::BuiltinIptables::default()),
        Mode::Nftables => Box::new(crate::proxy::nftables::BuiltinNftables::default()),
    }
}

async fn run(args: Args) -> Result<()> {
    let programmer = programmer(args.mode);
    let netns = Netns::open(&args.netns)?;
    let node_handle = NodeHandle { name: args.node.clone(), netns: netns.clone() };
    let flags = convert::Flags {
        cluster_cidrs: args.cluster_cidr.clone(),
        service_cidrs: args.service_cidr.clone(),
        proxy: ProxyConfig {
            masquerade_all: args.masquerade_all,
            node_port_addresses: args.nodeport_addresses.clone(),
            localhost_node_ports: args.iptables_localhost_nodeports,
        },
    };
    let primary = crate::model::IpFamily::of_net(&flags.cluster_cidrs[0]);

    let synced = Arc::new(Mutex::new(None::<SystemTime>));
    if let Some(addr) = args.healthz_bind_address {
        let listener = netns
            .run(move || std::net::TcpListener::bind(addr))?
            .with_context(|| format!("binding healthz to {addr}"))?;
        healthz::serve(listener, Arc::clone(&synced))?;
    }

    let kubeconfig = kube::config::Kubeconfig::read_from(&args.kubeconfig)
        .with_context(|| format!("reading {}", args.kubeconfig.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .context("configuring the API client")?;
    let client = Client::try_from(config).context("building the API client")?;

    let changed = Arc::new(Notify::new());
    let node_field = format!("metadata.name={}", args.node);
    let nodes =
        follow(Api::<K8sNode>::all(client.clone()), watcher::Config::default().fields(&node_field), &changed);
    let selected = || watcher::Config::default().labels(PROXY_LABEL_SELECTOR);
    let services = follow(Api::<K8sService>::all(client.clone()), selected(), &changed);
    let slices = follow(Api::<EndpointSlice>::all(client), selected(), &changed);
    for ready in
        [nodes.wait_until_ready().await, services.wait_until_ready().await, slices.wait_until_ready().await]
    {
        ready.context("the watch ended before its first list")?;
    }
    eprintln!("reference-proxy: watching the API for node {}", args.node);

    let mut applied: Option<Cluster> = None;
    loop {
        // What `/healthz` reports as `lastUpdated`: a change made at or before this moment had
        // the whole debounce window to arrive over the watches, so the snapshot below has it.
        // (The snapshot's own time would be too late: a change made just before it may still be
        // on the wire, and an adapter waiting for a sync after its change would be misled.)
        let started = SystemTime::now() - DEBOUNCE;
        let node = nodes.state().into_iter().find(|n| n.metadata.name.as_deref() == Some(&args.node));
        let wanted = match node {
            // Like kube-proxy, wait for the Node to appear (a change wakes the loop).
            None => Err(anyhow::anyhow!("node {} not found yet", args.node)),
            Some(node) => desired(&node, primary, &services, &slices, &flags),
        };
        let synced_now = wanted.and_then(|cluster| {
            let cleanup = !args.no_conntrack_cleanup;
            tokio::task::block_in_place(|| {
                sync_node(programmer.as_ref(), &node_handle, &cluster, applied.as_ref(), cleanup)
            })?;
            Ok(cluster)
        });
        match synced_now {
            Ok(cluster) => {
                eprintln!("reference-proxy: synced {} services", cluster.services.len());
                applied = Some(cluster);
                *synced.lock().unwrap_or_else(|e| e.into_inner()) = Some(started);
            }
            Err(e) => eprintln!("reference-proxy: not synced: {e:#}"),
        }
        changed.notified().await;
        tokio::time::sleep(DEBOUNCE).await;
    }
}

/// The model of what the stores hold now, objects in name order.
fn desired(
    node: &K8sNode,
    primary: crate::model::IpFamily,
    services: &Store<K8sService>,
    slices: &Store<EndpointSlice>,
    flags: &convert::Flags,
) -> Result<Cluster> {
    let by_name = |o: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        (o.namespace.clone(), o.name.clone())
    };
    let mut svcs: Vec<K8sService> = services.state().iter().map(|s| (**s).clone()).collect();
    svcs.sort_by_key(|s| by_name(&s.metadata));
    let mut eps: Vec<EndpointSlice> = slices.state().iter().map(|s| (**s).clone()).collect();
    eps.sort_by_key(|s| by_name(&s.metadata));
    convert::cluster(convert::node(node, primary)?, &svcs, &eps, flags)
}

/// Follows one kind into a store; every change wakes the sync loop.
fn follow<K>(api: Api<K>, config: watcher::Config, changed: &Arc<Notify>) -> Store<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, config).default_backoff());
    let changed = Arc::clone(changed);
    tokio::spawn(stream.for_each(move |event| {
        if let Err(e) = event {
            eprintln!("reference-proxy: watch: {e}");
        }
        changed.notify_one();
        futures::future::ready(())
    }));
    reader
}

/// Programs the node, then (unless disabled) deletes the UDP conntrack entries the change
/// made stale (everything is new at the first sync, as in kube-proxy).
fn sync_node(
    programmer: &dyn NodeProgrammer,
    node: &NodeHandle,
    cluster: &Cluster,
    before: Option<&Cluster>,
    cleanup: bool,
) -> Result<()> {
    programmer.program_node(cluster, node).with_context(|| format!("programming node {}", node.name))?;
    if cleanup {
        let none = Cluster { services: Vec::new(), ..cluster.clone() };
        let deletions = conntrack_cleanup::stale(before.unwrap_or(&none), cluster);
        conntrack_cleanup::delete(&node.netns, &deletions)?;
    }
    Ok(())
}
