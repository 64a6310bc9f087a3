//! `/healthz` as kube-proxy serves it: 200 with `lastUpdated` once a sync has happened, 503
//! before. `lastUpdated` is a moment every change made before which is in the rules (see
//! the sync loop), so an adapter that made a change waits for a `lastUpdated` after it.

use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use anyhow::{Context, Result};
use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use k8s_openapi::jiff::Timestamp;

/// Serves on `listener` (bound in the node's namespace) on the current runtime.
pub fn serve(listener: std::net::TcpListener, synced: Arc<Mutex<Option<SystemTime>>>) -> Result<()> {
    listener.set_nonblocking(true).context("making the healthz socket non-blocking")?;
    let listener =
        tokio::net::TcpListener::from_std(listener).context("handing the healthz socket to tokio")?;
    let app = Router::new().route(
        "/healthz",
        get(move || {
            let last = *synced.lock().unwrap_or_else(|e| e.into_inner());
            async move { answer(last) }
        }),
    );
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            eprintln!("reference-proxy: healthz: {e}");
        }
    });
    Ok(())
}

fn stamp(t: SystemTime) -> String {
    Timestamp::try_from(t).map(|t| t.to_string()).unwrap_or_default()
}

fn answer(last: Option<SystemTime>) -> (StatusCode, [(&'static str, &'static str); 1], String) {
    let now = SystemTime::now();
    let (code, updated) = match last {
        Some(t) => (StatusCode::OK, stamp(t)),
        None => (StatusCode::SERVICE_UNAVAILABLE, String::new()),
    };
    let body = serde_json::json!({"lastUpdated": updated, "currentTime": stamp(now)}).to_string();
    (code, [("content-type", "application/json")], body)
}
