//! Controller costs against an in-process mock API server:
//! - CPU time of one Agent reconcile when everything must be applied and when nothing changed
//!   (with no ApprovalRequests cached, and with 10 000 of other Agents, as in a cold start over
//!   10 000 Agents), and the API writes each makes (printed);
//! - resident memory per Agent held in the reflector cache (printed).
//!
//! `cargo bench --bench controller`

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use criterion::{Criterion, criterion_group};
use hitl_operator::api::{Agent, ApprovalRequest};
use hitl_operator::apiserver::applied::applied_by_us;
use hitl_operator::controller::agent::reconcile;
use hitl_operator::controller::compact::{CachedAgent, CachedRequest};
use hitl_operator::controller::rendered::{RenderedKind, Summaries};
use hitl_operator::controller::{
    CacheSync, Context, Metrics, RequestsByAgent, Stores, SystemClock,
};
use hitl_operator::render::objects::{GateOwner, binding_key_secret};
use hitl_operator::render::refs::RefStore;
use hitl_operator::render::{AgentObjects, RenderOptions, render_agent};
use http::{Method, Request, Response};
use kube::Client;
use kube::client::Body;
use kube::runtime::reflector::{self, Lookup, Store};
use kube::runtime::watcher;
use serde_json::{Value, json};

const AGENT: &str = r#"
apiVersion: kagent.dev/v1alpha2
kind: Agent
metadata: {name: a, namespace: ns, uid: agent-uid, generation: 1}
spec:
  declarative:
    systemMessage: You manage files.
    tools:
      - type: McpServer
        mcpServer:
          name: fs
          toolNames: [read_file, write_file, list_directory, delete_file]
          requireApproval: [delete_file, write_file]
"#;
const MODEL_CONFIG: &str = r#"
apiVersion: kagent.dev/v1alpha2
kind: ModelConfig
metadata: {name: default-model-config, namespace: ns}
spec: {provider: OpenAI, model: gpt-4o, apiKeySecret: openai, apiKeySecretKey: key}
"#;
const SERVER: &str = r#"
apiVersion: kagent.dev/v1alpha2
kind: RemoteMCPServer
metadata: {name: fs, namespace: ns}
spec: {url: "http://fs.ns:8080/mcp"}
"#;

fn yaml<T: serde::de::DeserializeOwned>(text: &str) -> T {
    serde_saphyr::from_str(text).unwrap()
}

/// What the mock API server saw.
#[derive(Default)]
struct Seen {
    reads: AtomicUsize,
    writes: AtomicUsize,
    last_status: Mutex<Option<Value>>,
}

/// Answers every request: reads with 404 (the references are cached), applies echoed back.
///
/// Not `hitl_test_kit::mock`: its `ApiMock` parses every request body into JSON and builds a
/// `Call` (the URI as a string, the headers) before the test sees it, work this answerer does
/// not do on the timed path (an Event's body is never parsed here); the figures in
/// docs/controller.md (Benchmarks) were measured with this answerer.
async fn serve(
    mut handle: tower_test::mock::Handle<Request<Body>, Response<Body>>,
    seen: Arc<Seen>,
) {
    let agent: Value = yaml(AGENT);
    while let Some((request, send)) = handle.next_request().await {
        let method = request.method().clone();
        let path = request.uri().path().to_string();
        let body = request.into_body().collect_bytes().await.unwrap();
        let answer = if method == Method::GET {
            // An object the caches lack does not exist yet.
            seen.reads.fetch_add(1, Ordering::Relaxed);
            let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                "reason": "NotFound", "code": 404, "message": "not found"});
            send.send_response(
                Response::builder()
                    .status(404)
                    .body(Body::from(serde_json::to_vec(&status).unwrap()))
                    .unwrap(),
            );
            continue;
        } else {
            seen.writes.fetch_add(1, Ordering::Relaxed);
            if path.ends_with("/status") {
                let body: Value = serde_json::from_slice(&body).unwrap();
                *seen.last_status.lock().unwrap() = Some(body["status"].clone());
                agent.clone()
            } else if path.contains("/events") {
                json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e"}, "eventTime": null})
            } else {
                serde_json::from_slice(&body).unwrap()
            }
        };
        send.send_response(Response::new(Body::from(
            serde_json::to_vec(&answer).unwrap(),
        )));
    }
}

fn store_of<K: Lookup<DynamicType = ()> + Clone + 'static>(objects: Vec<K>) -> Store<K> {
    let (reader, mut writer) = reflector::store();
    writer.apply_watcher_event(&watcher::Event::Init);
    for object in objects {
        writer.apply_watcher_event(&watcher::Event::InitApply(object));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    reader
}

/// The cache of rendered `objects`, each as it is after our apply of it.
fn rendered_store_of<K: RenderedKind>(objects: Vec<K>) -> Summaries<K> {
    Summaries::listed(objects.into_iter().map(applied_by_us))
}

fn rendered(agent: &Agent) -> AgentObjects {
    let mut refs = RefStore::default();
    refs.insert_model_config(yaml(MODEL_CONFIG));
    refs.insert_remote_mcp_server(yaml(SERVER));
    render_agent(agent, &refs, &RenderOptions::default())
        .unwrap()
        .objects
}

/// `n` pending ApprovalRequests, one for each of the Agents `agent-0` … in namespace `ns`.
fn requests_of_other_agents(n: usize) -> Vec<ApprovalRequest> {
    (0..n)
        .map(|i| {
            serde_json::from_value(json!({
                "apiVersion": "kagent.dev/v1alpha2",
                "kind": "ApprovalRequest",
                "metadata": {"name": format!("request-{i}"), "namespace": "ns", "uid": format!("uid-{i}")},
                "spec": {
                    "agentRef": {"name": format!("agent-{i}")},
                    "toolServer": {"kind": "RemoteMCPServer", "name": "fs", "namespace": "ns"},
                    "toolName": "delete_file",
                    "argumentsSha256": format!("{i:064}"),
                    "argumentsBytes": 2,
                    "requestedBy": format!("system:serviceaccount:ns:agent-{i}"),
                    "expiresAt": "2099-01-01T00:00:00Z",
                },
                "status": {"phase": "Pending"},
            }))
            .unwrap()
        })
        .collect()
}

/// A context on a fresh mock API server; `cached` fills the owned-object caches, `requests`
/// the cache of ApprovalRequests.
fn context(
    agent: &Agent,
    cached: Option<&AgentObjects>,
    requests: Vec<ApprovalRequest>,
) -> (Arc<Context>, Arc<Seen>) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let seen = Arc::new(Seen::default());
    tokio::spawn(serve(handle, seen.clone()));
    let client = Client::new(service, "default");
    let objects = cached.cloned();
    let requests: Vec<_> = requests.into_iter().map(CachedRequest::new).collect();
    let stores = Stores {
        agents: store_of(vec![CachedAgent::new(agent.clone())]),
        requests_by_agent: RequestsByAgent::listed(&requests),
        approvals: store_of(requests),
        deployments: rendered_store_of(objects.iter().map(|o| o.deployment.clone()).collect()),
        services: rendered_store_of(objects.iter().map(|o| o.service.clone()).collect()),
        secrets: rendered_store_of(
            objects
                .iter()
                .flat_map(|o| {
                    [
                        o.secret.clone(),
                        binding_key_secret(&GateOwner::agent(agent), &[7; 32]),
                    ]
                })
                .collect(),
        ),
        service_accounts: rendered_store_of(
            objects
                .iter()
                .filter_map(|o| o.service_account.clone())
                .collect(),
        ),
        roles: rendered_store_of(objects.iter().filter_map(|o| o.role.clone()).collect()),
        role_bindings: rendered_store_of(
            objects
                .iter()
                .filter_map(|o| o.role_binding.clone())
                .collect(),
        ),
        network_policies: rendered_store_of(vec![]),
        namespaces: store_of(vec![]),
        notifiers: store_of(vec![]),
        model_configs: store_of(vec![yaml(MODEL_CONFIG)]),
        remote_mcp_servers: store_of(vec![yaml(SERVER)]),
        tool_gates: store_of(Vec::new()),
        scope: None,
    };
    let ctx = Context::new(
        client,
        Arc::new(SystemClock),
        Arc::new(Metrics::default()),
        RenderOptions::default(),
        stores,
        CacheSync::default(),
        None,
    );
    (Arc::new(ctx), seen)
}

fn reconcile_benches(c: &mut Criterion) {
    // One thread for the reconciler and the mock API server: no cross-thread wake-ups, so the
    // time measured is CPU time.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _guard = runtime.enter();
    let fresh: Agent = yaml(AGENT);
    let objects = rendered(&fresh);

    // Baseline: the pure renderer alone, which every reconcile runs once.
    let mut refs = RefStore::default();
    refs.insert_model_config(yaml(MODEL_CONFIG));
    refs.insert_remote_mcp_server(yaml(SERVER));
    let options = RenderOptions::default();
    c.bench_function("render_agent alone (baseline)", |b| {
        b.iter(|| render_agent(&fresh, &refs, &options).unwrap())
    });

    // Everything to apply: empty caches, no status.
    let (ctx, seen) = context(&fresh, None, vec![]);
    let agent = Arc::new(CachedAgent::new(fresh.clone()));
    runtime
        .block_on(reconcile(agent.clone(), ctx.clone()))
        .unwrap();
    let writes = seen.writes.swap(0, Ordering::Relaxed);
    println!("writes per reconcile, all changed: {writes}");
    assert_eq!(
        writes, 9,
        "6 applies, the binding key, the status and an Event"
    );
    c.bench_function("agent reconcile (apply 6 objects + status)", |b| {
        b.to_async(&runtime)
            .iter(|| reconcile(agent.clone(), ctx.clone()))
    });

    // Nothing to do: caches hold the rendered objects, the Agent holds its status.
    for (label, requests) in [
        ("agent reconcile (no-op)", 0),
        (
            "agent reconcile (no-op, 10 000 requests of other Agents cached)",
            10_000,
        ),
    ] {
        no_op_reconcile(c, &runtime, label, &fresh, &objects, requests);
    }
}

/// Benchmarks a reconcile of `fresh` that finds nothing to change, `requests` ApprovalRequests
/// of other Agents cached.
fn no_op_reconcile(
    c: &mut Criterion,
    runtime: &tokio::runtime::Runtime,
    label: &str,
    fresh: &Agent,
    objects: &AgentObjects,
    requests: usize,
) {
    let (ctx, seen) = context(fresh, Some(objects), requests_of_other_agents(requests));
    runtime
        .block_on(reconcile(
            Arc::new(CachedAgent::new(fresh.clone())),
            ctx.clone(),
        ))
        .unwrap();
    let mut settled = fresh.clone();
    settled.status =
        Some(serde_json::from_value(seen.last_status.lock().unwrap().clone().unwrap()).unwrap());
    let settled = Arc::new(CachedAgent::new(settled));
    seen.writes.store(0, Ordering::Relaxed);
    seen.reads.store(0, Ordering::Relaxed);
    runtime
        .block_on(reconcile(settled.clone(), ctx.clone()))
        .unwrap();
    let (writes, reads) = (
        seen.writes.load(Ordering::Relaxed),
        seen.reads.load(Ordering::Relaxed),
    );
    println!("writes per reconcile, {label}: {writes}; reads: {reads}");
    assert_eq!(
        (writes, reads),
        (0, 0),
        "{label}: everything is cached and current"
    );
    c.bench_function(label, |b| {
        b.to_async(runtime)
            .iter(|| reconcile(settled.clone(), ctx.clone()))
    });
}

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches(" kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map_or(0, |kb| kb * 1024)
}

/// Resident memory added by caching `n` Agents in a reflector store, as the controller caches them.
fn rss_per_agent(n: usize) {
    let template: Agent = yaml(AGENT);
    let before = rss_bytes();
    let (reader, mut writer) = reflector::store::<CachedAgent>();
    writer.apply_watcher_event(&watcher::Event::Init);
    for i in 0..n {
        let mut agent = template.clone();
        agent.metadata.name = Some(format!("agent-{i}"));
        agent.metadata.uid = Some(format!("uid-{i}"));
        writer.apply_watcher_event(&watcher::Event::InitApply(CachedAgent::new(agent)));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    let after = rss_bytes();
    println!(
        "RSS with {n} Agents cached: +{} KiB ({} bytes/Agent), total {} MiB",
        (after - before) / 1024,
        (after - before) / n as u64,
        after / (1024 * 1024)
    );
    drop(reader);
}

/// Heap memory taken by indexing `n` ApprovalRequests, each of its own Agent, by the Agent
/// that made them (the index the controller keeps beside its cache of requests). Counted as
/// malloc's bytes in use, not resident memory: the index reuses what building the requests
/// freed.
fn heap_per_indexed_request(n: usize) {
    let requests: Vec<_> = requests_of_other_agents(n)
        .into_iter()
        .map(CachedRequest::new)
        .collect();
    let before = heap_in_use();
    let index = RequestsByAgent::listed(&requests);
    let after = heap_in_use();
    assert_eq!(index.pending("ns", "agent-0"), 1);
    println!(
        "heap with {n} requests indexed by Agent: +{} KiB ({} bytes/request)",
        (after - before) / 1024,
        (after - before) / n,
    );
}

/// glibc malloc's bytes in use.
#[allow(unsafe_code, reason = "glibc's mallinfo2 has no safe binding")]
fn heap_in_use() -> usize {
    // SAFETY: mallinfo2 only reads malloc's counters.
    unsafe { libc::mallinfo2() }.uordblks
}

criterion_group!(benches, reconcile_benches);

fn main() {
    rss_per_agent(10_000);
    heap_per_indexed_request(10_000);
    benches();
    Criterion::default().configure_from_args().final_summary();
}
