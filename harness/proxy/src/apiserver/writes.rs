//! Writes of Services and EndpointSlices, as a client of a real cluster makes them: GET of one
//! object, server-side apply (PATCH, the whole object), apply to a Service's `status`
//! subresource, and DELETE. Enough for packetproof's own `cluster` proxy to use this server as
//! a cluster's API server (the stand-in cluster of the existing-nodes test).

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, patch};
use serde_json::{Value, json};

use super::response::{json_response, status};
use super::store::{Kind, Store};

pub fn routes(router: Router<Arc<Store>>) -> Router<Arc<Store>> {
    router
        .route(
            "/api/v1/namespaces/{ns}/services/{name}",
            get(|s, p| one(s, p, Kind::Service))
                .patch(|s, p, b| apply(s, p, b, Kind::Service))
                .delete(|s, p| delete(s, p, Kind::Service)),
        )
        .route("/api/v1/namespaces/{ns}/services/{name}/status", patch(apply_status))
        .route(
            "/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices/{name}",
            get(|s, p| one(s, p, Kind::EndpointSlice))
                .patch(|s, p, b| apply(s, p, b, Kind::EndpointSlice))
                .delete(|s, p| delete(s, p, Kind::EndpointSlice)),
        )
}

fn not_found(kind: Kind, name: &str) -> Response {
    let what = format!("{}s", kind.kind().to_lowercase());
    status(StatusCode::NOT_FOUND, "NotFound", &format!("{what} \"{name}\" not found"))
}

async fn one(
    State(store): State<Arc<Store>>,
    Path((ns, name)): Path<(String, String)>,
    kind: Kind,
) -> Response {
    match store.get(kind, &format!("{ns}/{name}")) {
        Some(object) => json_response(StatusCode::OK, &object),
        None => not_found(kind, &name),
    }
}

/// Server-side apply of a whole object: stored as sent, keeping the identity the server gave it.
async fn apply(
    State(store): State<Arc<Store>>,
    Path((ns, name)): Path<(String, String)>,
    body: Bytes,
    kind: Kind,
) -> Response {
    let mut object: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return status(StatusCode::BAD_REQUEST, "BadRequest", &format!("not a JSON object: {e}")),
    };
    if object["metadata"]["name"].as_str() != Some(name.as_str()) {
        return status(StatusCode::BAD_REQUEST, "BadRequest", "metadata.name differs from the path");
    }
    object["metadata"]["namespace"] = ns.clone().into();
    let key = format!("{ns}/{name}");
    let existing = store.get(kind, &key);
    if let Some(old) = &existing {
        object["metadata"]["uid"] = old["metadata"]["uid"].clone();
        if object.get("status").is_none() && old.get("status").is_some() {
            object["status"] = old["status"].clone();
        }
    }
    if let Err(e) = store.apply(kind, object) {
        return status(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", &format!("{e:#}"));
    }
    let code = if existing.is_some() { StatusCode::OK } else { StatusCode::CREATED };
    json_response(code, &store.get(kind, &key).unwrap_or(json!({})))
}

/// Apply to a Service's status: only `status` changes.
async fn apply_status(
    State(store): State<Arc<Store>>,
    Path((ns, name)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let key = format!("{ns}/{name}");
    let Some(mut object) = store.get(Kind::Service, &key) else { return not_found(Kind::Service, &name) };
    let sent: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return status(StatusCode::BAD_REQUEST, "BadRequest", &format!("not a JSON object: {e}")),
    };
    object["status"] = sent["status"].clone();
    if let Err(e) = store.apply(Kind::Service, object) {
        return status(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", &format!("{e:#}"));
    }
    json_response(StatusCode::OK, &store.get(Kind::Service, &key).unwrap_or(json!({})))
}

async fn delete(
    State(store): State<Arc<Store>>,
    Path((ns, name)): Path<(String, String)>,
    kind: Kind,
) -> Response {
    let key = format!("{ns}/{name}");
    match store.get(kind, &key) {
        Some(object) => {
            store.delete(kind, &key);
            json_response(StatusCode::OK, &object)
        }
        None => not_found(kind, &name),
    }
}
