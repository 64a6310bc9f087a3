//! The embedded API server spoken to by kube's client over real HTTP (LIST, WATCH,
//! resourceVersions, selectors, paging, bookmarks, events), and the API-server adapter proved
//! end to end with `packetproof reference-proxy` on every node (needs root: skipped without it
//! unless PACKETPROOF_REQUIRE_PRIVILEGES=1).
//!
//! The server tests talk over loopback inside a namespace of their own when run as root (so
//! not even a conntrack entry lands in the machine's namespace), and over the test's own
//! loopback otherwise. Timings are printed (`--nocapture`), never asserted.

use std::future::Future;
use std::net::TcpListener;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Service};
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::{Api, Client, ResourceExt};
use packetproof::apiserver::{ApiServer, Kind};
use packetproof::proxy::apiserver::{ApiServerProxy, objects::node_object};
use packetproof::proxy::kube_proxy_config::Mode;
use packetproof::proxy::reference::PROXY_LABEL_SELECTOR;
use packetproof::proxy::{Env, Proxy, State};
use packetproof::results::Outcome;
use packetproof::runner::{self, RunOptions};
use packetproof::topology::Topology;
use packetproof::topology::netns::{self, Netns};
use serde_json::{Value, json};

fn service(name: &str, labels: Value) -> Value {
    json!({
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 80, "protocol": "TCP"}]},
    })
}

static NEXT_NAMESPACE: AtomicU32 = AtomicU32::new(0);

/// Removes the namespace on every path out.
struct Removed(Netns);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = self.0.remove();
    }
}

/// Runs `test` on a runtime whose threads all live in a fresh namespace (with root), so the
/// server's and the client's sockets are made there; without root, in the test's own.
fn in_namespace<F, Fut>(test: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.worker_threads(2).enable_all();
    let namespace = packetproof::privileges::preflight().is_none().then(|| {
        let n = NEXT_NAMESPACE.fetch_add(1, Ordering::Relaxed);
        let ns = Removed(Netns::create(&format!("{}api-{n}", netns::process_prefix())).unwrap());
        ns.0.exec("ip", &["link", "set", "lo", "up"], None).unwrap();
        ns
    });
    if let Some(ns) = &namespace {
        let path = ns.0.path();
        builder.on_thread_start(move || {
            let file = std::fs::File::open(&path).expect("opening the test namespace");
            nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)
                .expect("entering the test namespace");
        });
    }
    let runtime = builder.build().unwrap();
    // Spawned, not blocked on: the test runs on the runtime's threads, inside the namespace.
    let outcome = runtime.block_on(runtime.spawn(test()));
    drop(runtime);
    drop(namespace);
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// A server on loopback, and a kube client for it.
fn serve() -> (ApiServer, Client) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let server = ApiServer::serve(listener, &tokio::runtime::Handle::current()).unwrap();
    let uri = format!("http://{}", server.addr()).parse().unwrap();
    let client = Client::try_from(kube::Config::new(uri)).unwrap();
    (server, client)
}

fn names<K: ResourceExt>(items: &[K]) -> Vec<String> {
    items.iter().map(|o| o.name_any()).collect()
}

#[test]
fn list_selects_pages_and_reports_its_resource_version() {
    in_namespace(|| async {
        let (server, client) = serve();
        let store = server.store();
        store
            .replace(
                Kind::Service,
                vec![
                    service("a", json!({})),
                    service("b", json!({"service.kubernetes.io/headless": ""})),
                    service("c", json!({"service.kubernetes.io/service-proxy-name": "other"})),
                    service("d", json!({"app": "web"})),
                ],
            )
            .unwrap();
        let api: Api<Service> = Api::all(client.clone());
        let list = api.list(&ListParams::default().labels(PROXY_LABEL_SELECTOR)).await.unwrap();
        assert_eq!(names(&list.items), ["a", "d"]);
        assert_eq!(list.metadata.resource_version, Some(store.resource_version().to_string()));
        assert_eq!(names(&api.list(&ListParams::default().labels("app=web")).await.unwrap().items), ["d"]);

        // Paging: one item per page, the rest behind `continue`.
        let first = api.list(&ListParams::default().labels(PROXY_LABEL_SELECTOR).limit(1)).await.unwrap();
        assert_eq!(names(&first.items), ["a"]);
        let token = first.metadata.continue_.clone().expect("a continue token");
        assert_eq!(first.metadata.remaining_item_count, Some(1));
        let second = api
            .list(&ListParams::default().labels(PROXY_LABEL_SELECTOR).limit(1).continue_token(&token))
            .await
            .unwrap();
        assert_eq!(names(&second.items), ["d"]);
        assert!(second.metadata.continue_.as_deref().unwrap_or("").is_empty());
        assert_eq!(second.metadata.resource_version, first.metadata.resource_version);

        // Nodes: GET by name, LIST by field selector.
        let node = |name: &str| {
            node_object(&packetproof::model::Node {
                name: name.into(),
                ips: packetproof::model::PerFamily::single("192.168.50.11".parse().unwrap()),
                secondary_ips: vec![],
                pod_cidrs: packetproof::model::PerFamily::single("10.244.1.0/24".parse().unwrap()),
                zone: None,
            })
        };
        store.replace(Kind::Node, vec![node("node-a"), node("node-b")]).unwrap();
        let nodes: Api<Node> = Api::all(client.clone());
        assert_eq!(nodes.get("node-a").await.unwrap().name_any(), "node-a");
        match nodes.get("node-z").await {
            Err(kube::Error::Api(status)) => assert_eq!(status.code, 404),
            other => panic!("expected 404, got {other:?}"),
        }
        let picked = nodes.list(&ListParams::default().fields("metadata.name=node-b")).await.unwrap();
        assert_eq!(names(&picked.items), ["node-b"]);
        // Nodes are selected by what kube-apiserver selects them by, and by nothing else.
        let cordoned = nodes.list(&ListParams::default().fields("spec.unschedulable=true")).await.unwrap();
        assert!(cordoned.items.is_empty());
        assert!(nodes.list(&ListParams::default().fields("spec.podCIDR=10.244.1.0/24")).await.is_err());

        // Events are accepted unread, whatever their encoding.
        let post = |path: &str| {
            axum::http::Request::post(path)
                .header("content-type", "application/vnd.kubernetes.protobuf")
                .body(vec![0x6b, 0x38, 0x73, 0x00])
                .unwrap()
        };
        let echoed =
            client.request_text(post("/apis/events.k8s.io/v1/namespaces/default/events")).await.unwrap();
        assert_eq!(echoed.as_bytes(), [0x6b, 0x38, 0x73, 0x00]);
        client.request_text(post("/api/v1/namespaces/default/events")).await.unwrap();
        let log = store.request_log();
        assert!(log.contains("GET /api/v1/nodes/node-z -> 404"), "{log}");
        assert!(log.contains("POST /apis/events.k8s.io/v1/namespaces/default/events -> 201"), "{log}");
        server.stop().await;
    })
}

#[test]
fn watch_replays_changes_after_a_resource_version_and_sends_bookmarks() {
    in_namespace(|| async {
        let (server, client) = serve();
        let store = server.store().clone();
        store.replace(Kind::Service, vec![service("a", json!({}))]).unwrap();
        let api: Api<Service> = Api::all(client);
        let listed = api.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();

        // From "0": the current objects first.
        let params = WatchParams::default().labels(PROXY_LABEL_SELECTOR).timeout(20);
        let mut from_zero = api.watch(&params, "0").await.unwrap().boxed();
        match from_zero.try_next().await.unwrap() {
            Some(WatchEvent::Added(s)) => assert_eq!(s.name_any(), "a"),
            other => panic!("expected ADDED a, got {other:?}"),
        }

        let mut stream = api.watch(&params, &listed).await.unwrap().boxed();
        // Changes after the list: one of them to a Service the selector leaves out.
        store.apply(Kind::Service, service("e", json!({}))).unwrap();
        store.apply(Kind::Service, service("h", json!({"service.kubernetes.io/headless": ""}))).unwrap();
        let mut modified = service("e", json!({}));
        modified["spec"]["ports"][0]["port"] = 81.into();
        store.apply(Kind::Service, modified).unwrap();
        assert!(store.delete(Kind::Service, "default/e"));
        // Labelled away from this proxy and back: it leaves the selection, then enters it again.
        store
            .apply(Kind::Service, service("a", json!({"service.kubernetes.io/service-proxy-name": "x"})))
            .unwrap();
        store.apply(Kind::Service, service("a", json!({}))).unwrap();

        let mut seen = Vec::new();
        let mut versions = Vec::new();
        let mut bookmark = None;
        while bookmark.is_none() {
            let event =
                tokio::time::timeout(Duration::from_secs(10), stream.try_next()).await.unwrap().unwrap();
            match event.expect("the watch ended early") {
                WatchEvent::Added(s) => {
                    versions.push(s.resource_version().unwrap());
                    seen.push(format!("ADDED {}", s.name_any()))
                }
                WatchEvent::Modified(s) => {
                    versions.push(s.resource_version().unwrap());
                    seen.push(format!(
                        "MODIFIED {} port {}",
                        s.name_any(),
                        s.spec.unwrap().ports.unwrap()[0].port
                    ))
                }
                WatchEvent::Deleted(s) => {
                    versions.push(s.resource_version().unwrap());
                    seen.push(format!("DELETED {}", s.name_any()))
                }
                WatchEvent::Bookmark(b) => bookmark = Some(b.metadata.resource_version),
                WatchEvent::Error(e) => panic!("watch error {e:?}"),
            }
        }
        assert_eq!(seen, ["ADDED e", "MODIFIED e port 81", "DELETED e", "DELETED a", "ADDED a"]);
        let numbers: Vec<u64> = versions.iter().map(|v| v.parse().unwrap()).collect();
        assert!(numbers.windows(2).all(|w| w[0] < w[1]), "resourceVersions {numbers:?}");
        assert!(numbers[0] > listed.parse::<u64>().unwrap());
        // The bookmark says how far the watch has come: past every change, the hidden one too.
        assert_eq!(bookmark, Some(store.resource_version().to_string()));

        // timeoutSeconds ends a watch by itself.
        let mut short = api
            .watch(&WatchParams::default().timeout(1), &store.resource_version().to_string())
            .await
            .unwrap()
            .boxed();
        let ended = tokio::time::timeout(Duration::from_secs(10), async {
            while short.try_next().await.unwrap().is_some() {}
        });
        ended.await.expect("a watch with timeoutSeconds=1 still runs");
        server.stop().await;
    })
}

#[test]
fn kubes_reflector_follows_the_store() {
    in_namespace(|| async {
        use kube::runtime::{WatchStreamExt, reflector, watcher};
        let (server, client) = serve();
        let store = server.store().clone();
        store.replace(Kind::Service, vec![service("a", json!({})), service("b", json!({}))]).unwrap();
        let (reader, writer) = reflector::store::<Service>();
        let config = watcher::Config::default().labels(PROXY_LABEL_SELECTOR).page_size(1);
        let follow = reflector::reflector(writer, watcher(Api::all(client), config)).applied_objects();
        let task = tokio::spawn(follow.for_each(|_| futures::future::ready(())));
        reader.wait_until_ready().await.unwrap();
        store.replace(Kind::Service, vec![service("b", json!({})), service("c", json!({}))]).unwrap();
        store
            .apply(Kind::Service, service("x", json!({"service.kubernetes.io/service-proxy-name": "other"})))
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mut now: Vec<String> = reader.state().iter().map(|s| s.name_any()).collect();
            now.sort();
            if now == ["b", "c"] {
                break;
            }
            assert!(Instant::now() < deadline, "the reflector holds {now:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        task.abort();
        server.stop().await;
    })
}

/// Whether privileged tests run here; panics when they must and cannot.
fn privileged() -> bool {
    packetproof::privileges::scenarios_can_run()
}

/// The reference proxy from the binary cargo built for these tests, with `flags`.
fn reference(mode: Mode, flags: &[&str]) -> ApiServerProxy {
    ApiServerProxy::reference_at(Path::new(env!("CARGO_BIN_EXE_packetproof")), mode, flags).unwrap()
}

fn reference_proxy() -> ApiServerProxy {
    reference(Mode::Iptables, &[])
}

fn scenario(name: &str) -> packetproof::model::Scenario {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios").join(name);
    packetproof::admission::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

// Every scenario passes through both reference proxies in `tests/scenarios.rs` (the suite's
// trials `… [reference-proxy-iptables]` and `… [reference-proxy-nftables]`).

/// A live step replaces a UDP Service's only endpoint: the reference proxy clears the
/// conntrack entry that still points at the old one, and with `--no-conntrack-cleanup` the
/// same scenario fails (the check can fail).
#[test]
fn stale_udp_conntrack_entries_are_cleared_after_a_step() {
    if !privileged() {
        return;
    }
    let live = scenario("live-stale-udp-conntrack.yaml");
    let report = runner::run(&live, &reference_proxy(), &RunOptions::default()).unwrap();
    assert!(report.passed(), "{report:#?}");
    let broken = reference(Mode::Iptables, &["--no-conntrack-cleanup"]);
    let report = runner::run(&live, &broken, &RunOptions::default()).unwrap();
    let Outcome::Judged(verdicts) = &report.outcome else { panic!("not judged: {report:#?}") };
    let failed: Vec<&str> = verdicts.iter().filter(|v| !v.passed()).map(|v| v.probe.name.as_str()).collect();
    assert_eq!(failed, ["endpoint-replaced: after"], "only the probe after the step may fail: {report:#?}");
}

/// The `apiserver` adapter with a command template and no sync metrics: syncs are told by the
/// node's rules moving and settling, on start and after a live step.
#[test]
fn a_proxy_without_sync_metrics_is_waited_for_by_its_rules() {
    if !privileged() {
        return;
    }
    let command = format!(
        "{} reference-proxy --config {{config}} --netns {{netns}} --service-cidr {{serviceCIDR}}",
        env!("CARGO_BIN_EXE_packetproof")
    );
    let options = json!({"command": command, "metricsPort": null});
    let proxy = ApiServerProxy::from_options(&options).unwrap();
    let report =
        runner::run(&scenario("live-stale-udp-conntrack.yaml"), &proxy, &RunOptions::default()).unwrap();
    assert!(report.passed(), "{report:#?}");
}

/// The reference proxy answers `/healthz` as kube-proxy v1.30 does: 200 with `lastUpdated` =
/// now from start-up, before any sync. Here it can never sync (its API server does not exist),
/// yet healthz says what the adapter's old wait took for "synced after the push"; its metrics
/// show no sync, and the adapter's judge waits.
#[test]
fn healthz_says_fresh_before_any_sync_so_only_the_metrics_tell_a_sync() {
    if !privileged() {
        return;
    }
    use packetproof::proxy::apiserver::sync::{SyncJudge, SyncMetrics, http_get, unix_now};
    use packetproof::proxy::kube_proxy_config::{Mode, NodeSettings, kube_proxy_configuration};

    let cluster = scenario("hairpin.yaml").cluster;
    let node = Removed(Netns::create(&format!("{}healthz", netns::process_prefix())).unwrap());
    node.0.exec("ip", &["link", "set", "lo", "up"], None).unwrap();
    let dir = std::env::temp_dir().join(format!("pp-healthz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // An API server that serves the Node (the proxy waits for its addresses before it starts
    // healthz, as kube-proxy's getNodeIPs) and never answers a list: the proxy never syncs.
    let api = node.0.run(|| TcpListener::bind("127.0.0.1:6443")).unwrap().unwrap();
    let node_json = node_object(&cluster.nodes[0]).to_string();
    std::thread::spawn(move || {
        for stream in api.incoming().flatten() {
            let node_json = node_json.clone();
            std::thread::spawn(move || answer_only_the_node(stream, &node_json));
        }
    });
    let kubeconfig = dir.join("kubeconfig");
    let server = "127.0.0.1:6443".parse().unwrap();
    std::fs::write(&kubeconfig, packetproof::proxy::apiserver::kubeconfig(server)).unwrap();
    let (healthz, metrics) = ("127.0.0.1:10256".parse().unwrap(), "127.0.0.1:10249".parse().unwrap());
    let settings = NodeSettings {
        kubeconfig: kubeconfig.to_str().unwrap(),
        node: &cluster.nodes[0].name,
        cluster_cidr: &cluster.pod_cidr.to_string(),
        healthz: Some(healthz),
        metrics: Some(metrics),
    };
    let config = dir.join("config.yaml");
    let text = kube_proxy_configuration(&cluster, Mode::Iptables, &Default::default(), &settings);
    std::fs::write(&config, text.to_string()).unwrap();
    let pushed = unix_now();
    let mut child = node
        .0
        .command(env!("CARGO_BIN_EXE_packetproof"))
        .args(["reference-proxy", "--config", config.to_str().unwrap(), "--netns", node.0.name()])
        .args(["--service-cidr", &cluster.service_cidr.to_string()])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let body = (0..400)
        .find_map(|_| {
            std::thread::sleep(Duration::from_millis(50));
            http_get(&node.0, healthz, "/healthz").ok().filter(|b| !b.is_empty())
        })
        .expect("healthz never answered");
    let answer: Value = serde_json::from_str(&body).unwrap();
    // The old wait: lastUpdated at or after the push means synced. It is "now" itself.
    assert_eq!(answer["lastUpdated"], answer["currentTime"], "{body}");
    // The metrics server may start a moment after healthz (seen refused on a loaded machine).
    let text = (0..400)
        .find_map(|_| {
            let text = http_get(&node.0, metrics, "/metrics").ok();
            if text.is_none() {
                std::thread::sleep(Duration::from_millis(50));
            }
            text
        })
        .expect("metrics never answered");
    let seen = SyncMetrics::parse(&text);
    let rules = String::from_utf8(node.0.exec("iptables-save", &[], None).unwrap().stdout).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!rules.contains("KUBE-SERVICES"), "the node was programmed after all:\n{rules}");
    let mut judge = SyncJudge::at_start(pushed);
    assert!(!judge.synced(&seen, Instant::now()), "the metrics judge took {seen:?} for a sync");
}

/// Answers `GET /api/v1/nodes/…` with `node_json`; holds any other request unanswered.
fn answer_only_the_node(mut stream: std::net::TcpStream, node_json: &str) {
    use std::io::{BufRead, BufReader, Write};
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let mut header = String::new();
        while reader.read_line(&mut header).is_ok_and(|n| n > 2) {
            header.clear();
        }
        if !request_line.starts_with("GET /api/v1/nodes/") {
            std::thread::sleep(Duration::from_secs(3600));
            return;
        }
        let reply = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{node_json}",
            node_json.len()
        );
        if stream.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

/// Processes whose command line names `netns` (the reference proxy is given `--netns`).
fn processes_in(netns: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let words: Vec<String> =
                cmdline.split(|&b| b == 0).map(|w| String::from_utf8_lossy(w).into_owned()).collect();
            if words.iter().any(|w| w == netns) {
                found.push(words.join(" "));
            }
        }
    }
    found
}

#[test]
fn an_update_reaches_every_node_and_stop_ends_every_proxy() {
    if !privileged() {
        return;
    }
    let proxy = reference_proxy();
    let scenario = scenario("pod-to-clusterip-cross-node.yaml");
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let topology = runtime.block_on(Topology::build(&scenario.cluster)).unwrap();
    let env = Env { topology: &topology, runtime: runtime.handle().clone(), source: &scenario.source };
    let state = State { cluster: &scenario.cluster, objects: &scenario.objects };

    let started = Instant::now();
    let mut running = proxy.start(&state, &env).unwrap();
    eprintln!("reference-proxy: first sync on {} nodes after {:?}", topology.nodes.len(), started.elapsed());
    let service = &scenario.cluster.services[0];
    let vip = service.cluster_ip().to_string();
    for node in &topology.nodes {
        let rules = running.dump_node(node).unwrap();
        assert!(rules.contains(&vip), "node {} lacks {vip}:\n{rules}", node.name);
        assert!(!processes_in(node.netns.name()).is_empty());
    }

    // A step: the Service and its slices go away.
    let mut cluster = scenario.cluster.clone();
    cluster.services.retain(|s| s.name != service.name);
    let mut objects = scenario.objects.clone();
    objects.services.retain(|s| s.metadata.name.as_deref() != Some(&service.name));
    objects.endpoint_slices.retain(|s| {
        s.metadata.labels.as_ref().and_then(|l| l.get("kubernetes.io/service-name")) != Some(&service.name)
    });
    let changed = Instant::now();
    running.update(&State { cluster: &cluster, objects: &objects }).unwrap();
    eprintln!("reference-proxy: update applied on every node after {:?}", changed.elapsed());
    for node in &topology.nodes {
        let rules = running.dump_node(node).unwrap();
        assert!(!rules.contains(&vip), "node {} still has {vip}:\n{rules}", node.name);
    }
    let logs = running.artifacts();
    let (requests, proxy_logs): (Vec<_>, Vec<_>) =
        logs.iter().partition(|(name, _)| name.starts_with("apiserver"));
    assert_eq!(proxy_logs.len(), topology.nodes.len());
    assert!(proxy_logs.iter().all(|(_, text)| String::from_utf8_lossy(text).contains("synced")), "{logs:?}");
    let requests = String::from_utf8_lossy(&requests[0].1);
    assert!(requests.contains("watch=true"), "{requests}");

    running.stop().unwrap();
    for node in &topology.nodes {
        assert_eq!(processes_in(node.netns.name()), Vec::<String>::new());
    }
    drop(runtime);
    topology.teardown().unwrap();
}

/// A bad adapter configuration fails the scenario with a message naming the cause, within a
/// bounded time, and leaves no process behind. (Its namespaces go with the topology on the
/// error path, as every run's do; other tests of this binary run beside it, so a count of
/// this process's namespaces proves nothing here: `host_untouched` checks that.)
#[test]
fn a_bad_proxy_configuration_fails_clearly_in_bounded_time_and_leaves_nothing() {
    if !privileged() {
        return;
    }
    let scenario = scenario("kube-dns-udp.yaml");
    let cases = [
        (
            json!({"command": "/nonexistent/kube-proxy --kubeconfig={kubeconfig}"}),
            "No such file or directory",
        ),
        (json!({"command": "sh -c exit-3-is-not-a-command"}), "log ends"),
        (json!({"command": "sleep 1000", "syncTimeoutSeconds": 3}), "never changed"),
    ];
    for (options, cause) in cases {
        let proxy = ApiServerProxy::from_options(&options).unwrap();
        let started = Instant::now();
        let error = runner::run(&scenario, &proxy, &RunOptions::default()).expect_err("a setup error");
        let message = format!("{error:#}");
        assert!(message.contains(cause), "{options}: {message}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(15),
            "{options}: took {:?}",
            started.elapsed()
        );
        let sleeping = processes_in("1000").into_iter().filter(|p| p.starts_with("sleep")).count();
        assert_eq!(sleeping, 0, "{options}: the proxy process outlived the run");
    }
}

/// A proxy that runs but cannot apply its rules (its metrics count failed syncs, as a real
/// kube-proxy v1.30.3's do in nftables mode under kubernetes#134024) fails its scenario, with
/// its log kept as evidence: that is the proxy failing, not the input or the machine. Here the
/// reference proxy cannot find `iptables-restore`.
#[test]
fn a_proxy_that_cannot_apply_its_rules_fails_the_scenario_with_its_log() {
    if !privileged() {
        return;
    }
    let command = format!(
        "env PATH=/nonexistent {} reference-proxy --config {{config}} --netns {{netns}} --service-cidr {{serviceCIDR}}",
        env!("CARGO_BIN_EXE_packetproof")
    );
    let proxy = ApiServerProxy::from_options(&json!({ "command": command })).unwrap();
    let artifacts = std::env::temp_dir().join(format!("pp-proxy-failed-{}", std::process::id()));
    let options = RunOptions { artifacts: Some(artifacts.clone()), ..RunOptions::default() };
    let report =
        runner::run(&scenario("kube-dns-udp.yaml"), &proxy, &options).expect("judged, not a setup error");
    let Outcome::ProxyFailed(reason) = &report.outcome else { panic!("{report:#?}") };
    assert!(reason.contains("failed to apply"), "{reason}");
    assert!(report.failed() && !report.passed(), "{report:#?}");
    let dir = report.artifacts.clone().expect("evidence kept");
    let logs: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".log"))
        .collect();
    let _ = std::fs::remove_dir_all(&artifacts);
    assert!(!logs.is_empty(), "no proxy log in {}", dir.display());
}

/// What kube-proxy v1.31-v1.36 ask for (cmd/kube-proxy/app/server.go of each release): v1.32+
/// leaves out headless Services with a field selector, v1.31-v1.32 read ServiceCIDRs as
/// v1beta1 and v1.33+ as v1, v1.35+ stream their lists (client-go's `WatchListClient`); what
/// the server does not serve is recorded as a refusal, with the reason.
#[test]
fn current_kube_proxies_requests_are_served_and_the_rest_refused_with_the_reason() {
    in_namespace(|| async {
        let (server, client) = serve();
        let store = server.store().clone();
        let mut headless = service("headless", json!({}));
        headless["spec"]["clusterIP"] = "None".into();
        store.replace(Kind::Service, vec![service("a", json!({})), headless]).unwrap();
        let cidr = json!({"metadata": {"name": "kubernetes"}, "spec": {"cidrs": ["10.96.0.0/12"]}});
        store.replace(Kind::ServiceCidr, vec![cidr]).unwrap();
        let api: Api<Service> = Api::all(client.clone());

        let not_headless = api.list(&ListParams::default().fields("spec.clusterIP!=None")).await.unwrap();
        assert_eq!(names(&not_headless.items), ["a"]);

        for version in ["v1alpha1", "v1beta1", "v1"] {
            let request = axum::http::Request::get(format!("/apis/networking.k8s.io/{version}/servicecidrs"))
                .body(Vec::new())
                .unwrap();
            let list: Value = serde_json::from_str(&client.request_text(request).await.unwrap()).unwrap();
            assert_eq!(list["apiVersion"], format!("networking.k8s.io/{version}"));
            assert_eq!(list["items"][0]["apiVersion"], format!("networking.k8s.io/{version}"));
            assert_eq!(list["items"][0]["spec"]["cidrs"][0], "10.96.0.0/12");
        }

        // A streamed list: the current objects, the bookmark that ends them, then changes.
        let mut params = WatchParams::default().timeout(20);
        params.send_initial_events = true;
        params.bookmarks = true;
        let mut stream = api.watch(&params, "").await.unwrap().boxed();
        let mut initial = Vec::new();
        loop {
            match stream.try_next().await.unwrap() {
                Some(WatchEvent::Added(s)) => initial.push(s.name_any()),
                Some(WatchEvent::Bookmark(b)) => {
                    assert_eq!(
                        b.metadata.annotations.get("k8s.io/initial-events-end").map(String::as_str),
                        Some("true")
                    );
                    break;
                }
                other => panic!("expected the initial events, got {other:?}"),
            }
        }
        assert_eq!(initial, ["a", "headless"]);
        store.apply(Kind::Service, service("c", json!({}))).unwrap();
        match stream.try_next().await.unwrap() {
            Some(WatchEvent::Added(s)) => assert_eq!(s.name_any(), "c"),
            other => panic!("expected ADDED c, got {other:?}"),
        }
        assert!(store.refusals().is_empty(), "{:?}", store.refusals());

        // What the real server refuses too, and what this one does not serve.
        assert!(api.list(&ListParams::default().fields("spec.nodeName=x")).await.is_err());
        let unserved =
            axum::http::Request::get("/apis/networking.k8s.io/v1/ipaddresses").body(Vec::new()).unwrap();
        assert!(client.request_text(unserved).await.is_err());
        let refusals = store.refusals();
        assert_eq!(refusals.len(), 2, "{refusals:?}");
        assert_eq!(refusals[0].code, 400);
        assert!(refusals[0].reason.contains("field label not supported: spec.nodeName"), "{refusals:?}");
        assert_eq!(
            (refusals[1].code, refusals[1].request.as_str()),
            (404, "GET /apis/networking.k8s.io/v1/ipaddresses")
        );
        assert!(refusals[1].reason.contains("does not serve this path"), "{refusals:?}");
        assert!(refusals.iter().all(|r| r.client.is_some_and(|ip| ip.is_loopback())), "{refusals:?}");
    });
}
