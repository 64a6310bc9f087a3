//! The API server's HTTP surface: GET of a Node, LIST and WATCH of Nodes, Services,
//! EndpointSlices and ServiceCIDRs (in each version some kube-proxy release reads), event
//! writes (accepted unread), and the discovery documents clients ask for. JSON only: clients
//! that prefer protobuf (kube-proxy) accept JSON answers. Every request answered with an error
//! is recorded as a refusal ([`Store::refusals`]): a proxy that asked for what this server
//! does not serve is told apart from one that never synced.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::Request as HttpRequest;
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use futures::SinkExt;
use serde_json::{Value, json};

use super::response::{Refused, json_response, status};
use super::selector::{FieldSelector, Selector};
use super::store::{Event, Kind, Store};

/// How often a quiet watch that allows bookmarks gets one.
const BOOKMARK_EVERY: Duration = Duration::from_secs(1);
/// A watch without `timeoutSeconds` ends after this, as the real server's default range does.
const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(1800);

type Params = Query<HashMap<String, String>>;

pub(crate) fn router(store: Arc<Store>) -> Router {
    super::writes::routes(Router::new())
        .route("/version", get(version))
        .route("/api", get(api_versions))
        .route("/apis", get(api_groups))
        .route("/api/v1/nodes", get(|s, q| collection(s, q, Kind::Node, None)))
        .route("/api/v1/nodes/{name}", get(get_node))
        .route("/api/v1/services", get(|s, q| collection(s, q, Kind::Service, None)))
        .route(
            "/api/v1/namespaces/{ns}/services",
            get(|s, Path(ns): Path<String>, q| collection(s, q, Kind::Service, Some(ns))),
        )
        .route(
            "/apis/discovery.k8s.io/v1/endpointslices",
            get(|s, q| collection(s, q, Kind::EndpointSlice, None)),
        )
        .route(
            "/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices",
            get(|s, Path(ns): Path<String>, q| collection(s, q, Kind::EndpointSlice, Some(ns))),
        )
        // v1.30 reads ServiceCIDRs as v1alpha1 behind its gate, v1.31-v1.32 as v1beta1, v1.33+
        // as v1 (cmd/kube-proxy/app/server.go `NewServiceCIDRConfig` of each release).
        .route(
            "/apis/networking.k8s.io/v1alpha1/servicecidrs",
            get(|s, q| served_as(s, q, Kind::ServiceCidr, "networking.k8s.io/v1alpha1")),
        )
        .route(
            "/apis/networking.k8s.io/v1beta1/servicecidrs",
            get(|s, q| served_as(s, q, Kind::ServiceCidr, "networking.k8s.io/v1beta1")),
        )
        .route(
            "/apis/networking.k8s.io/v1/servicecidrs",
            get(|s, q| served_as(s, q, Kind::ServiceCidr, "networking.k8s.io/v1")),
        )
        // Events are written by proxies (often as protobuf) and never read back: accept them
        // without decoding.
        .route("/apis/events.k8s.io/v1/namespaces/{ns}/events", any(event_written))
        .route("/apis/events.k8s.io/v1/namespaces/{ns}/events/{name}", any(event_written))
        .route("/api/v1/namespaces/{ns}/events", any(event_written))
        .route("/api/v1/namespaces/{ns}/events/{name}", any(event_written))
        .fallback(|| async {
            status(StatusCode::NOT_FOUND, "NotFound", "the server does not serve this path")
        })
        .layer(middleware::from_fn_with_state(Arc::clone(&store), log_request))
        .with_state(store)
}

/// Records every request and its status in the store's log (what a proxy asked for, and
/// what this server could not answer, is the first thing to read when a proxy will not sync),
/// and every error answer as a refusal, with the client that asked and the reason.
async fn log_request(State(store): State<Arc<Store>>, request: HttpRequest, next: Next) -> Response {
    let line = format!("{} {}", request.method(), request.uri());
    let client = request.extensions().get::<ConnectInfo<std::net::SocketAddr>>().map(|c| c.0.ip());
    let response = next.run(request).await;
    let code = response.status().as_u16();
    store.log(format!("{line} -> {code}"));
    if code >= 400 {
        let reason = response.extensions().get::<Refused>().map_or_else(String::new, |r| r.0.clone());
        store.refuse(crate::apiserver::store::Refusal { client, request: line, code, reason });
    }
    response
}

async fn version() -> Response {
    json_response(
        StatusCode::OK,
        &json!({"major": "1", "minor": "30", "gitVersion": "v1.30.0-packetproof", "platform": "linux/amd64"}),
    )
}

async fn api_versions() -> Response {
    json_response(
        StatusCode::OK,
        &json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}),
    )
}

async fn api_groups() -> Response {
    let version = |name: &str, v: &str| json!({"groupVersion": format!("{name}/{v}"), "version": v});
    let group = |name: &str, versions: &[&str]| {
        let all: Vec<Value> = versions.iter().map(|v| version(name, v)).collect();
        json!({"name": name, "versions": all, "preferredVersion": version(name, versions[0])})
    };
    json_response(
        StatusCode::OK,
        &json!({"kind": "APIGroupList", "apiVersion": "v1",
                "groups": [group("discovery.k8s.io", &["v1"]), group("events.k8s.io", &["v1"]),
                           group("networking.k8s.io", &["v1", "v1beta1", "v1alpha1"])]}),
    )
}

/// An event write, answered with what was sent in the encoding it was sent in (the created
/// object, as the real server answers), never decoded: kube-proxy writes protobuf.
async fn event_written(headers: axum::http::HeaderMap, body: axum::body::Bytes) -> Response {
    let content_type = headers.get(header::CONTENT_TYPE).cloned();
    let content_type = content_type.unwrap_or(header::HeaderValue::from_static("application/json"));
    let body = if body.is_empty() { axum::body::Bytes::from_static(b"{}") } else { body };
    (StatusCode::CREATED, [(header::CONTENT_TYPE, content_type)], body).into_response()
}

async fn get_node(State(store): State<Arc<Store>>, Path(name): Path<String>) -> Response {
    match store.get(Kind::Node, &name) {
        Some(node) => json_response(StatusCode::OK, &node),
        None => status(StatusCode::NOT_FOUND, "NotFound", &format!("nodes \"{name}\" not found")),
    }
}

/// What a LIST or WATCH request asks for.
struct Request {
    kind: Kind,
    /// The version the objects are served in (the stored one, or another the path names).
    api_version: &'static str,
    namespace: Option<String>,
    labels: Selector,
    fields: FieldSelector,
}

impl Request {
    fn selects(&self, object: &Value) -> bool {
        let in_namespace =
            self.namespace.as_deref().is_none_or(|ns| object["metadata"]["namespace"].as_str() == Some(ns));
        in_namespace && self.labels.matches_labels(object) && self.fields.matches(object)
    }

    /// `object` in the version the request asked for: a kind served in several versions
    /// whose fields do not differ between them (ServiceCIDR) changes only its `apiVersion`.
    fn served<'o>(&self, object: &'o Value) -> std::borrow::Cow<'o, Value> {
        if object["apiVersion"].as_str() == Some(self.api_version) {
            return std::borrow::Cow::Borrowed(object);
        }
        let mut o = object.clone();
        o["apiVersion"] = self.api_version.into();
        std::borrow::Cow::Owned(o)
    }

    /// How a watch with this selection sees a change, as the real server sends it: an object
    /// that enters the selection is ADDED, one that leaves it DELETED; `None` if unseen.
    fn seen_as(&self, event: &Event) -> Option<&'static str> {
        let now = self.selects(&event.object);
        let before = event.previous.as_ref().map(|p| self.selects(p));
        match (event.change, before, now) {
            ("MODIFIED", Some(false), true) => Some("ADDED"),
            ("MODIFIED", Some(true), false) => Some("DELETED"),
            (_, _, true) => Some(event.change),
            _ => None,
        }
    }
}

async fn collection(state: State<Arc<Store>>, q: Params, kind: Kind, ns: Option<String>) -> Response {
    serve_collection(state, q, kind, kind.api_version(), ns)
}

/// A cluster-scoped collection served in `api_version`.
async fn served_as(state: State<Arc<Store>>, q: Params, kind: Kind, api_version: &'static str) -> Response {
    serve_collection(state, q, kind, api_version, None)
}

fn serve_collection(
    State(store): State<Arc<Store>>,
    Query(q): Params,
    kind: Kind,
    api_version: &'static str,
    ns: Option<String>,
) -> Response {
    let parsed = (|| -> anyhow::Result<Request> {
        let labels = Selector::parse(q.get("labelSelector").map_or("", String::as_str))?;
        let fields = FieldSelector::parse(kind, q.get("fieldSelector").map_or("", String::as_str))?;
        Ok(Request { kind, api_version, namespace: ns, labels, fields })
    })();
    let request = match parsed {
        Ok(r) => r,
        Err(e) => return status(StatusCode::BAD_REQUEST, "BadRequest", &format!("{e:#}")),
    };
    let flag = |name: &str| q.get(name).is_some_and(|v| v == "true" || v == "1");
    let streaming = flag("sendInitialEvents");
    if streaming {
        // As kube-apiserver validates it (apimachinery's internalversion/validation
        // `ValidateListOptions`): a streamed list is a watch, from NotOlderThan, with bookmarks.
        let refusal = if !flag("watch") {
            Some("sendInitialEvents is forbidden for list")
        } else if q.get("resourceVersionMatch").map(String::as_str) != Some("NotOlderThan") {
            Some("sendInitialEvents requires resourceVersionMatch=NotOlderThan")
        } else if !flag("allowWatchBookmarks") {
            Some("sendInitialEvents requires setting allowWatchBookmarks=true")
        } else {
            None
        };
        if let Some(message) = refusal {
            return status(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", message);
        }
    }
    if flag("watch") {
        let from = match q.get("resourceVersion").map(String::as_str) {
            // A streamed list starts with the current state, whatever version it is not older than.
            _ if streaming => None,
            None | Some("") | Some("0") => None,
            Some(text) => match text.parse::<u64>() {
                Ok(rv) => Some(rv),
                Err(_) => {
                    return status(
                        StatusCode::BAD_REQUEST,
                        "BadRequest",
                        &format!("bad resourceVersion {text:?}"),
                    );
                }
            },
        };
        let timeout = q
            .get("timeoutSeconds")
            .and_then(|t| t.parse().ok())
            .map_or(DEFAULT_WATCH_TIMEOUT, Duration::from_secs);
        let bookmarks = flag("allowWatchBookmarks");
        return watch(store, request, Watch { from, bookmarks, streaming, timeout });
    }
    list(&store, &request, &q)
}

/// A page of the collection: `limit` items after the `continue` token's key, all at the
/// resourceVersion of the first page.
fn list(store: &Store, request: &Request, q: &HashMap<String, String>) -> Response {
    let (first_page, after) = match q.get("continue").filter(|c| !c.is_empty()) {
        None => (None, None),
        Some(token) => match decode_continue(token) {
            Some((rv, key)) => (Some(rv), Some(key)),
            None => return status(StatusCode::BAD_REQUEST, "BadRequest", "malformed continue token"),
        },
    };
    let limit = q.get("limit").and_then(|l| l.parse::<usize>().ok()).filter(|&l| l > 0);
    let (current, page, remaining) =
        store.list_page(request.kind, after.as_deref(), limit, |o| request.selects(o));
    let rv = first_page.unwrap_or(current);
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if remaining > 0
        && let Some((last, _)) = page.last()
    {
        metadata["continue"] = encode_continue(rv, last).into();
        metadata["remainingItemCount"] = remaining.into();
    }
    let body = json!({
        "kind": format!("{}List", request.kind.kind()),
        "apiVersion": request.api_version,
        "metadata": metadata,
        "items": page.iter().map(|(_, o)| request.served(o)).collect::<Vec<_>>(),
    });
    json_response(StatusCode::OK, &body)
}

fn encode_continue(rv: u64, key: &str) -> String {
    data_encoding::BASE64URL_NOPAD.encode(format!("{rv}\n{key}").as_bytes())
}

fn decode_continue(token: &str) -> Option<(u64, String)> {
    let bytes = data_encoding::BASE64URL_NOPAD.decode(token.as_bytes()).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (rv, key) = text.split_once('\n')?;
    Some((rv.parse().ok()?, key.to_string()))
}

fn watch_line(change: &str, object: &Value) -> String {
    let mut line = json!({"type": change, "object": object}).to_string();
    line.push('\n');
    line
}

/// A bookmark's object: the kind, and nothing of it but the resourceVersion.
fn bookmark_object(request: &Request, rv: u64) -> Value {
    json!({
        "kind": request.kind.kind(), "apiVersion": request.api_version,
        "metadata": {"resourceVersion": rv.to_string()},
    })
}

fn bookmark(request: &Request, rv: u64) -> String {
    watch_line("BOOKMARK", &bookmark_object(request, rv))
}

/// How a watch runs, from its parameters.
struct Watch {
    /// The resourceVersion to replay changes after; `None`: first every current object.
    from: Option<u64>,
    /// BOOKMARK events on quiet seconds (`allowWatchBookmarks`).
    bookmarks: bool,
    /// A streamed list (`sendInitialEvents=true`, the `WatchListClient` gate, on by default
    /// in client-go from v1.35): the current objects end with a bookmark annotated
    /// `k8s.io/initial-events-end`, which the client waits for before its cache counts as
    /// synced (client-go tools/cache/reflector.go `watchList`).
    streaming: bool,
    timeout: Duration,
}

/// The annotation of the bookmark that ends a streamed list's initial events.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// A stream of newline-delimited watch events: without a resourceVersion (or with `0`, or a
/// streamed list), first every current object as ADDED (a streamed list then its end
/// bookmark); then every change after it; a BOOKMARK on quiet seconds when allowed; until the
/// timeout, the client leaves or the server stops.
fn watch(store: Arc<Store>, request: Request, how: Watch) -> Response {
    let Watch { from, bookmarks, streaming, timeout } = how;
    let (mut tx, rx) = futures::channel::mpsc::channel::<Result<String, Infallible>>(16);
    tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut changed = store.subscribe();
        changed.borrow_and_update();
        let mut last = match from {
            Some(rv) => rv,
            None => {
                let (rv, items, _) = store.list_page(request.kind, None, None, |o| request.selects(o));
                for (_, o) in &items {
                    if tx.send(Ok(watch_line("ADDED", &request.served(o)))).await.is_err() {
                        return;
                    }
                }
                if streaming {
                    let mut end = bookmark_object(&request, rv);
                    end["metadata"]["annotations"] = json!({INITIAL_EVENTS_END: "true"});
                    if tx.send(Ok(watch_line("BOOKMARK", &end))).await.is_err() {
                        return;
                    }
                }
                rv
            }
        };
        loop {
            changed.borrow_and_update();
            let (rv, events) = store.events_after(request.kind, last);
            for e in &events {
                let Some(change) = request.seen_as(e) else { continue };
                if tx.send(Ok(watch_line(change, &request.served(&e.object)))).await.is_err() {
                    return;
                }
            }
            last = last.max(rv);
            if store.is_closed() {
                return;
            }
            tokio::select! {
                r = changed.changed() => if r.is_err() { return },
                _ = tokio::time::sleep_until(deadline) => return,
                _ = tokio::time::sleep(BOOKMARK_EVERY) => {
                    if bookmarks && tx.send(Ok(bookmark(&request, last))).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(rx))
        .expect("a static response builds")
}
