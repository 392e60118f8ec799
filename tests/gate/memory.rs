//! The real `hitl-operator gate` binary stays within its container's 128 MiB whatever it is
//! sent (issue 59): its peak resident memory (VmHWM of its process) is held to [`PEAK_BOUND`]
//! while it is fed, concurrently, the shapes whose JSON trees take 25-85 times their bytes —
//! long runs of small numbers, nested one-element arrays to the parser's depth limit, many
//! small objects, objects of many keys, batches of many small messages — as gated
//! `tools/call`s of 4 MiB from an Agent's container and from a ToolGate's caller, and as an
//! upstream's tool lists and call results. Its clients read their answers slowly
//! ([`SLOW_READ`]): before an answer's bytes held its share until hyper had written them out,
//! such readers took the gate's allocated memory to 107 MiB and its peak past the container's
//! limit (158 MiB), where readers that read at once saw 30 MiB.
//!
//! An upstream's event streams are held to the same bound: events of 16 MiB, the most the gate
//! reads, on [`STREAMS`] concurrent streams, Streamable HTTP and HTTP+SSE. Before their bytes
//! were charged to the gate's budget (73177e9) each stream held its event whole: 16 streams
//! took the gate past 250 MiB.
//!
//! Before the bound (main at 77bb91e) one 4 MiB call of `[0,0,…]` held for approval built a
//! tree of hundreds of MiB; a sampler kills the gate past [`KILL_AT`] so that such a run fails
//! without taking the machine's memory.

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::future::join_all;
use hitl_operator::api::remote_mcp_server::McpProtocol;
use hitl_operator::contract::gate_config::GateConfig;
use hitl_operator::gate::memory::MAX_TREE_VALUES;
use serde_json::Value;

use crate::harness::*;

/// The peak resident memory the gate may reach: its container's limit, 128 MiB, less 8 MiB.
/// A debug build's code pages alone are about 48 MiB of it (a release build's far fewer), so
/// [`ANON_BOUND`] is the tight bound; this one says the container is never killed.
const PEAK_BOUND: u64 = 120 << 20;

/// The anonymous memory (what the gate allocated, without the executable's code pages, which
/// a debug build has many of) it may reach: its 40 MiB budget and its own working memory.
const ANON_BOUND: u64 = 64 << 20;

/// Resident memory past which the sampler kills the gate (the run then fails).
const KILL_AT: u64 = 1 << 30;

/// The size of each hostile body: just under the gate's 4 MiB limit, with room for the
/// envelope.
const BODY: usize = (4 << 20) - 4096;

/// A JSON value of the shape `kind`, about `bytes` long.
fn shape(kind: &str, bytes: usize) -> String {
    let repeat = |unit: &str, open: &str, close: &str| {
        let n = (bytes - open.len() - close.len()) / (unit.len() + 1);
        let mut out = String::with_capacity(bytes);
        out.push_str(open);
        for i in 0..n {
            if i > 0 {
                out.push(',');
            }
            out.push_str(unit);
        }
        out.push_str(close);
        out
    };
    match kind {
        // Long runs of small numbers: 2 bytes a value.
        "zeros" => repeat("0", "[", "]"),
        // One-element arrays nested to just under the parser's limit of 128, side by side.
        "nested" => repeat(
            &format!("{}0{}", "[".repeat(120), "]".repeat(120)),
            "[",
            "]",
        ),
        // Many small objects.
        "objects" => repeat(r#"{"a":0}"#, "[", "]"),
        // Many keys in one object.
        "keys" => {
            let n = bytes / 12;
            let keys: Vec<String> = (0..n).map(|i| format!(r#""k{i:07}":0"#)).collect();
            format!("{{{}}}", keys.join(","))
        }
        // Just under the values the gate builds into a tree, the rest of the bytes in strings:
        // the largest tree it builds.
        "under" => {
            let n = MAX_TREE_VALUES - 1000;
            let unit = "x".repeat(bytes / n - 3);
            repeat(&format!(r#""{unit}""#), "[", "]")
        }
        other => panic!("no shape {other}"),
    }
}

const SHAPES: [&str; 5] = ["zeros", "nested", "objects", "keys", "under"];

/// A `tools/call` of `tool` whose arguments hold `value` under `v`.
fn call_body(id: usize, tool: &str, value: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{{"shape":"zeros","v":{value}}}}}}}"#
    )
}

/// A batch of `bytes` of empty messages: `[{},{},…]`.
fn batch_body(bytes: usize) -> String {
    let n = bytes / 3;
    format!("[{}]", vec!["{}"; n].join(","))
}

/// An upstream answering `tools/list` with one real tool and a tail of the shape its
/// `cursor` names, and `tools/call` of `bulk` with a result holding the shape its `shape`
/// argument names; anything else with an empty result.
async fn shapes_upstream() -> String {
    async fn handle(body: Bytes) -> Response {
        let msg: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let id = msg["id"].to_string();
        let answer = match msg["method"].as_str() {
            Some("tools/list") => {
                let kind = msg["params"]["cursor"].as_str().unwrap_or("zeros");
                let tail = shape(kind, BODY);
                let tail = &tail[1..tail.len() - 1];
                let tail = if kind == "keys" {
                    format!(r#"{{"name":"extra",{tail}}}"#)
                } else {
                    tail.to_string()
                };
                format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"result":{{"tools":[{{"name":"echo","inputSchema":{{"type":"object"}}}},{tail}]}}}}"#
                )
            }
            Some("tools/call") => {
                let kind = msg["params"]["arguments"]["shape"]
                    .as_str()
                    .unwrap_or("zeros");
                format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":"ok"}}],"structuredContent":{{"v":{}}}}}}}"#,
                    shape(kind, BODY)
                )
            }
            _ => format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#),
        };
        ([("content-type", "application/json")], answer).into_response()
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let app = Router::new().route("/mcp", post(handle));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

/// The gate binary running `config`, talking to `api`; killed on drop.
struct GateProcess {
    child: tokio::process::Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl GateProcess {
    async fn start(mut config: GateConfig, api: &FakeApi) -> Self {
        let route = config.servers[0].route.clone();
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\nusers:\n- name: u\n  user: {{}}\ncontexts:\n- name: c\n  context:\n    cluster: fake\n    user: u\n    namespace: team\ncurrent-context: c\n",
                api.url
            ),
        )
        .unwrap();
        let (mcp_port, metrics_port) = (free_port(), free_port());
        config.listen = format!("127.0.0.1:{mcp_port}");
        config.metrics_listen = format!("127.0.0.1:{metrics_port}");
        let config_path = dir.path().join("gate.json");
        std::fs::write(&config_path, serde_json::to_vec(&config).unwrap()).unwrap();
        let key_path = dir.path().join("key");
        std::fs::write(&key_path, [7; 32]).unwrap();
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_hitl-operator"))
            .args(["gate", "--config"])
            .arg(&config_path)
            .arg("--binding-key")
            .arg(&key_path)
            .env("KUBECONFIG", &kubeconfig)
            .env("POD_NAME", "memory-gate-0")
            .env("RUST_LOG", "warn")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let http = reqwest::Client::builder().no_proxy().build().unwrap();
        let health = format!("http://127.0.0.1:{metrics_port}/healthz");
        let mut up = false;
        for _ in 0..400 {
            if http.get(&health).send().await.is_ok() {
                up = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(up, "the gate binary did not start");
        Self {
            child,
            url: format!("http://127.0.0.1:{mcp_port}{route}"),
            _dir: dir,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id().expect("the gate is running")
    }
}

/// A field of /proc/PID/status in bytes (`VmHWM`, `VmRSS`), `None` once the process is gone.
fn status_bytes(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib << 10)
}

/// Watches the gate's resident memory until dropped, keeping its peak and killing it past
/// [`KILL_AT`].
struct Sampler {
    peak: Arc<AtomicU64>,
    /// The most anonymous memory seen (the heap: what the gate allocated), and the most
    /// file-backed (mostly the executable's code pages, large in a debug build).
    anon: Arc<AtomicU64>,
    file: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Sampler {
    fn start(pid: u32) -> Self {
        let peak = Arc::new(AtomicU64::new(0));
        let (anon, file) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let (seen, seen_anon, seen_file) = (peak.clone(), anon.clone(), file.clone());
        let task = tokio::spawn(async move {
            while let Some(rss) = status_bytes(pid, "VmHWM:") {
                seen.fetch_max(rss, Ordering::SeqCst);
                seen_anon.fetch_max(status_bytes(pid, "RssAnon:").unwrap_or(0), Ordering::SeqCst);
                seen_file.fetch_max(status_bytes(pid, "RssFile:").unwrap_or(0), Ordering::SeqCst);
                if rss > KILL_AT {
                    let _ = std::process::Command::new("kill")
                        .args(["-KILL", &pid.to_string()])
                        .status();
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        Self {
            peak,
            anon,
            file,
            task,
        }
    }

    fn peak(&self) -> u64 {
        self.peak.load(Ordering::SeqCst)
    }

    fn anon(&self) -> u64 {
        self.anon.load(Ordering::SeqCst)
    }

    /// The most anonymous and file-backed memory sampled, in MiB, as text.
    fn parts(&self) -> String {
        let mib = |a: &AtomicU64| a.load(Ordering::SeqCst) as f64 / (1 << 20) as f64;
        format!(
            "anonymous at most {:.1} MiB, file-backed at most {:.1} MiB",
            mib(&self.anon),
            mib(&self.file)
        )
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// How long a client waits after an answer's headers before it reads the body: a slow
/// reader, whose answer the gate still holds (in its write buffer) after handing it to hyper.
const SLOW_READ: Duration = Duration::from_secs(2);

/// POSTs `body` to `url` (bearing `token`, if any); the status and the body of the answer,
/// read whole after [`SLOW_READ`]. A gate that died gives status 0.
async fn send(url: &str, token: Option<&str>, body: String) -> (u16, String) {
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    let mut request = http
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json");
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    match request.body(body).send().await {
        Ok(resp) => {
            let status = resp.status().as_u16();
            tokio::time::sleep(SLOW_READ).await;
            (status, resp.text().await.unwrap_or_default())
        }
        Err(_) => (0, String::new()),
    }
}

/// Feeds the gate at `url` every hostile shape, concurrently, as `token`'s (if any); returns
/// every answer's status and text.
async fn feed(url: &str, token: Option<&str>) -> Vec<(String, u16, String)> {
    let mut sent = Vec::new();
    // 64 concurrent gated calls of 4 MiB, of every shape.
    for i in 0..64 {
        let kind = SHAPES[i % SHAPES.len()];
        sent.push((
            format!("gated echo of {kind}"),
            call_body(i, "echo", &shape(kind, BODY - 200)),
        ));
    }
    // Batches of many small messages.
    for _ in 0..8 {
        sent.push(("batch of {}".to_string(), batch_body(BODY)));
    }
    // Ungated calls whose results hold the shapes, and tool lists ending in them.
    for (i, kind) in SHAPES.iter().enumerate() {
        for j in 0..4 {
            sent.push((
                format!("ungated bulk answered with {kind}"),
                call_body(1000 + i * 10 + j, "bulk", &format!(r#""{kind}""#))
                    .replace(r#""shape":"zeros""#, &format!(r#""shape":"{kind}""#)),
            ));
            sent.push((
                format!("tools/list ending in {kind}"),
                format!(
                    r#"{{"jsonrpc":"2.0","id":{},"method":"tools/list","params":{{"cursor":"{kind}"}}}}"#,
                    2000 + i * 10 + j
                ),
            ));
        }
    }
    join_all(sent.into_iter().map(|(what, body)| async move {
        let (status, text) = send(url, token, body).await;
        (what, status, text)
    }))
    .await
}

/// What a run must show: the gate alive and answering everything (a call with a tree too
/// large refused naming the limit, the rest answered or refused as busy), and its peak.
fn check(answers: &[(String, u16, String)], idle: u64, sampler: &Sampler, pid: u32, side: &str) {
    let peak = sampler.peak().max(status_bytes(pid, "VmHWM:").unwrap_or(0));
    let refused_for_values = answers
        .iter()
        .filter(|(_, _, text)| text.contains(&format!("more than {MAX_TREE_VALUES} JSON values")))
        .count();
    let mib = |bytes: u64| bytes as f64 / (1 << 20) as f64;
    let count = |status: u16| answers.iter().filter(|(_, s, _)| *s == status).count();
    eprintln!(
        "{side}: the gate's peak resident memory {:.1} MiB ({}; idle {:.1} MiB; bound {} MiB); \
         {} answers: {} HTTP 200, {} HTTP 503 (busy), {} refused for their number of values, \
         {} lost (the gate died)",
        mib(peak),
        sampler.parts(),
        mib(idle),
        PEAK_BOUND >> 20,
        answers.len(),
        count(200),
        count(503),
        refused_for_values,
        count(0),
    );
    for (what, status, text) in answers {
        assert_ne!(*status, 0, "{side}: the gate died answering {what}");
        if *status == 503 {
            assert!(
                text.contains("the approval gate is busy") && text.contains("memory budget"),
                "{side}: {what}: a 503 that does not say why: {text}"
            );
        }
        assert!(
            matches!(status, 200 | 202 | 400 | 413 | 502 | 503),
            "{side}: {what}: HTTP {status}: {}",
            &text[..text.len().min(300)]
        );
    }
    assert!(
        refused_for_values > 0,
        "{side}: no call was refused for its number of values"
    );
    assert!(
        peak <= PEAK_BOUND,
        "{side}: the gate's peak resident memory {} MiB is over {} MiB",
        peak >> 20,
        PEAK_BOUND >> 20
    );
    assert!(
        sampler.anon() <= ANON_BOUND,
        "{side}: the gate's anonymous memory reached {} MiB, over {} MiB",
        sampler.anon() >> 20,
        ANON_BOUND >> 20
    );
}

fn servers(upstream: &str) -> Vec<hitl_operator::contract::gate_config::GateServer> {
    vec![server(
        "shapes",
        McpProtocol::StreamableHttp,
        upstream,
        &["echo", "bulk"],
        &["echo"],
    )]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_agents_gate_stays_within_its_memory_whatever_it_is_sent() {
    init();
    let upstream = shapes_upstream().await;
    let api = FakeApi::start().await;
    let gate = GateProcess::start(config(servers(&upstream), 3600.0, 2.0), &api).await;
    let idle = status_bytes(gate.pid(), "VmHWM:").unwrap();
    let sampler = Sampler::start(gate.pid());
    let answers = feed(&gate.url, None).await;
    check(&answers, idle, &sampler, gate.pid(), "an Agent's gate");
    still_serves(&gate.url, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_shared_gate_stays_within_its_memory_whatever_its_callers_send() {
    init();
    let upstream = shapes_upstream().await;
    let api = FakeApi::start().await;
    api.add_token(
        "bot",
        "system:serviceaccount:apps:bot",
        &["system:serviceaccounts"],
        &[GATE_AUDIENCE],
    );
    let gate = GateProcess::start(shared_config(servers(&upstream), 3600.0, 2.0), &api).await;
    let idle = status_bytes(gate.pid(), "VmHWM:").unwrap();
    let sampler = Sampler::start(gate.pid());
    let answers = feed(&gate.url, Some("bot")).await;
    check(
        &answers,
        idle,
        &sampler,
        gate.pid(),
        "a ToolGate's shared gate",
    );
    still_serves(&gate.url, Some("bot")).await;
}

/// Once the flood is over the gate takes a small gated call as ever: held for approval (and
/// answered as pending when its wait is over), not refused.
async fn still_serves(url: &str, token: Option<&str>) {
    let (status, text) = send(url, token, call_body(9, "echo", r#""small""#)).await;
    assert_eq!(status, 200, "{text}");
    let answer: Value = serde_json::from_str(&text).unwrap();
    let said = answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(said.contains("approval"), "{text}");
    assert!(!said.contains("memory") && !said.contains("busy"), "{text}");
}

/// Concurrent upstream event streams in [`an_upstreams_large_events_stay_within_the_memory`].
const STREAMS: usize = 16;

/// The data of each upstream event: just under the 16 MiB the gate reads of one event.
const EVENT_DATA: usize = (16 << 20) - 4096;

/// The text of a 16 MiB event's result: `x`s, shared by every answer the stub sends.
fn large_text() -> Bytes {
    Bytes::from(vec![b'x'; EVENT_DATA - 200])
}

/// An event answering request `id` with a result of `text`, as three chunks (the text shared).
fn large_event(id: &str, text: &Bytes) -> Vec<Bytes> {
    vec![
        Bytes::from(format!(
            r#"event: message
data: {{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":""#
        )),
        text.clone(),
        Bytes::from_static(b"\"}]}}\n\n"),
    ]
}

/// A Streamable HTTP upstream answering every request with one event of 16 MiB, and an
/// HTTP+SSE upstream (`/sse`) whose stream, after its `endpoint`, carries two such events.
async fn large_events_upstream() -> (String, String) {
    let text = large_text();
    let post_text = text.clone();
    let app = Router::new()
        .route(
            "/mcp",
            post(move |body: Bytes| {
                let text = post_text.clone();
                async move {
                    let msg: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    let chunks = large_event(&msg["id"].to_string(), &text);
                    let stream =
                        futures::stream::iter(chunks.into_iter().map(Ok::<_, std::io::Error>));
                    (
                        [("content-type", "text/event-stream")],
                        axum::body::Body::from_stream(stream),
                    )
                }
            }),
        )
        .route(
            "/sse",
            get(move || {
                let text = text.clone();
                async move {
                    let mut chunks = vec![Bytes::from_static(
                        b"event: endpoint\ndata: /messages?s=1\n\n",
                    )];
                    chunks.extend(large_event("1", &text));
                    chunks.extend(large_event("2", &text));
                    let stream =
                        futures::stream::iter(chunks.into_iter().map(Ok::<_, std::io::Error>));
                    (
                        [("content-type", "text/event-stream")],
                        axum::body::Body::from_stream(stream),
                    )
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("{base}/mcp"), format!("{base}/sse"))
}

/// What a client got of one stream: the whole events' count, and the text of what it got.
struct Got {
    whole: usize,
    text: String,
}

/// Reads a response of events whole, counting the events holding a 16 MiB result.
async fn read_events(resp: reqwest::Response) -> Got {
    let mut whole = 0;
    let mut text = String::new();
    let mut resp = resp;
    let mut pending = Vec::new();
    // How far `pending` was searched for the end of its event, less the byte that may begin it.
    let mut searched = 0;
    loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => pending.extend_from_slice(&chunk),
            Ok(None) => break,
            Err(e) => {
                text.push_str(&format!("[cut: {e}]"));
                break;
            }
        }
        loop {
            let Some(at) = pending[searched..].windows(2).position(|w| w == b"\n\n") else {
                searched = pending.len().saturating_sub(1);
                break;
            };
            let end = searched + at;
            searched = 0;
            let event: Vec<u8> = pending.drain(..end + 2).collect();
            if event.len() > EVENT_DATA - 1024 {
                whole += 1;
            } else {
                text.push_str(&String::from_utf8_lossy(&event));
            }
        }
    }
    text.push_str(&String::from_utf8_lossy(&pending[..pending.len().min(300)]));
    Got { whole, text }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_upstreams_large_events_stay_within_the_memory() {
    init();
    let (streamable, legacy) = large_events_upstream().await;
    let api = FakeApi::start().await;
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(300))
        .build()
        .unwrap();
    // Streamable HTTP: ungated calls answered with one event of 16 MiB each.
    let up = server(
        "events",
        McpProtocol::StreamableHttp,
        &streamable,
        &["bulk"],
        &[],
    );
    let gate = GateProcess::start(config(vec![up], 3600.0, 2.0), &api).await;
    let sampler = Sampler::start(gate.pid());
    let got = join_all((0..STREAMS).map(|i| {
        let (http, url) = (http.clone(), gate.url.clone());
        async move {
            let resp = http
                .post(&url)
                .header("accept", "application/json, text/event-stream")
                .header("content-type", "application/json")
                .body(call_body(i, "bulk", r#""large""#))
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 200);
            read_events(resp).await
        }
    }))
    .await;
    report_events("Streamable HTTP", &got, &sampler, gate.pid());
    // A cut stream told its client why, answering its call.
    for g in got.iter().filter(|g| g.whole == 0) {
        assert!(
            g.text.contains(r#""error""#) && g.text.contains("memory budget (40 MiB)"),
            "a cut answer that does not say why: {}",
            &g.text[..g.text.len().min(600)]
        );
    }
    drop(sampler);
    drop(gate);

    // HTTP+SSE: streams each carrying two events of 16 MiB.
    let up = server("events", McpProtocol::Sse, &legacy, &["bulk"], &[]);
    let gate = GateProcess::start(config(vec![up], 3600.0, 2.0), &api).await;
    let sampler = Sampler::start(gate.pid());
    let got = join_all((0..STREAMS).map(|_| {
        let (http, url) = (http.clone(), gate.url.clone());
        async move {
            let resp = http.get(&url).send().await.unwrap();
            assert_eq!(resp.status(), 200);
            read_events(resp).await
        }
    }))
    .await;
    report_events("HTTP+SSE", &got, &sampler, gate.pid());
    for g in got.iter().filter(|g| g.whole < 2) {
        assert!(
            g.text.contains("[cut"),
            "a stream that neither carried its events nor was cut: {}",
            &g.text[..g.text.len().min(600)]
        );
    }
}

/// Prints what the streams got and the gate's peak, and holds the gate to its bounds, alive,
/// with at least one stream's events carried whole.
fn report_events(side: &str, got: &[Got], sampler: &Sampler, pid: u32) {
    let peak = sampler.peak().max(status_bytes(pid, "VmHWM:").unwrap_or(0));
    let whole: usize = got.iter().map(|g| g.whole).sum();
    let cut = got.iter().filter(|g| g.whole == 0).count();
    eprintln!(
        "{side}: {STREAMS} streams of 16 MiB events: the gate's peak resident memory {:.1} MiB \
         ({}; bound {} MiB); {whole} events carried whole, {cut} streams cut",
        peak as f64 / (1 << 20) as f64,
        sampler.parts(),
        PEAK_BOUND >> 20,
    );
    assert!(
        status_bytes(pid, "VmRSS:").is_some(),
        "{side}: the gate died"
    );
    assert!(whole > 0, "{side}: no event was carried whole");
    assert!(
        peak <= PEAK_BOUND,
        "{side}: the gate's peak resident memory {} MiB is over {} MiB",
        peak >> 20,
        PEAK_BOUND >> 20
    );
    assert!(
        sampler.anon() <= ANON_BOUND,
        "{side}: the gate's anonymous memory reached {} MiB, over {} MiB",
        sampler.anon() >> 20,
        ANON_BOUND >> 20
    );
}
