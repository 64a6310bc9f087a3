//! An embedded Kubernetes API server, just enough for service proxies that watch the API
//! (kube-proxy v1.30 to v1.36, or `packetproof reference-proxy`): Nodes, Services,
//! EndpointSlices and ServiceCIDRs over JSON, LIST and WATCH with resourceVersions, label and
//! field selectors, bookmarks and paging. kube has no server side, so this is axum. What it
//! refuses is recorded ([`Store::refusals`]), for the adapter to report as the cause.
//!
//! The harness changes the [`Store`]; every change becomes watch events.

mod http;
mod response;
pub mod selector;
pub mod store;
mod writes;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use store::{Kind, Refusal, Store};

/// A running server. Stopping it ends every watch, then the connections.
pub struct ApiServer {
    store: Arc<Store>,
    addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl ApiServer {
    /// Serves on `listener` (already bound, in whatever namespace it was made) on `runtime`.
    pub fn serve(listener: std::net::TcpListener, runtime: &tokio::runtime::Handle) -> Result<ApiServer> {
        Self::serve_store(listener, runtime, Arc::new(Store::default()))
    }

    /// Serves `store` on `listener`: one store can be served on several listeners (in
    /// different namespaces).
    pub(crate) fn serve_store(
        listener: std::net::TcpListener,
        runtime: &tokio::runtime::Handle,
        store: Arc<Store>,
    ) -> Result<ApiServer> {
        let addr = listener.local_addr().context("reading the API server's address")?;
        listener.set_nonblocking(true).context("making the API server's socket non-blocking")?;
        let (shutdown, stopped) = oneshot::channel::<()>();
        let app = http::router(Arc::clone(&store));
        let closing = Arc::clone(&store);
        let task = {
            let _in_runtime = runtime.enter();
            let listener = tokio::net::TcpListener::from_std(listener)
                .context("handing the API server's socket to tokio")?;
            runtime.spawn(async move {
                // With the client's address, for the refusals' record.
                let app = app.into_make_service_with_connect_info::<SocketAddr>();
                let served = axum::serve(listener, app).with_graceful_shutdown(async move {
                    let _ = stopped.await;
                    // Watches end when the store closes; then graceful shutdown can finish.
                    closing.close();
                });
                if let Err(e) = served.await {
                    eprintln!("packetproof: API server on {addr}: {e}");
                }
            })
        };
        Ok(ApiServer { store, addr, shutdown: Some(shutdown), task: Some(task) })
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Ends watches, lets requests in flight finish (a few seconds at most), and stops.
    pub async fn stop(mut self) {
        self.signal_stop();
        if let Some(task) = self.task.take() {
            let abort = task.abort_handle();
            if tokio::time::timeout(Duration::from_secs(3), task).await.is_err() {
                abort.abort();
            }
        }
    }

    fn signal_stop(&mut self) {
        self.store.close();
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.signal_stop();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
