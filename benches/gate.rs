//! Benchmark: an ungated `tools/call` through the gate vs straight to the same upstream (an
//! in-process Rust MCP stub), at 1, 8 and 32 concurrent clients. Prints p50/p99 latency and
//! throughput for both, and the gate/direct ratios, measured in the same run. The load
//! generator, the upstream and the gate each run on a runtime of their own.
//!
//! Run: `cargo bench --bench gate` (set `GATE_BENCH_REQUESTS` to change requests per client).

#[path = "../tests/common/stub.rs"]
mod stub;

use std::sync::Arc;
use std::time::{Duration, Instant};

use hitl_operator::api::agent::{ApprovalMode, ToolServerKind};
use hitl_operator::api::remote_mcp_server::McpProtocol;
use hitl_operator::gate::config::{AgentIdentity, GateApproval, GateConfig, GateServer};
use hitl_operator::gate::decision::SystemClock;
use hitl_operator::gate::server;
use hitl_operator::render::config::McpParams;

/// Worker threads of the gate's runtime: 0, a single-threaded runtime, as `hitl-operator gate`
/// runs (set 2 to compare with a multi-threaded one).
const GATE_WORKERS: usize = 0;

/// Alternating direct/gate rounds per concurrency level.
const ROUNDS: usize = 10;

const BODY: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hello","n":42}}}"#;

/// Latencies and busy time of one side, pooled over rounds.
#[derive(Default)]
struct Samples {
    latencies: Vec<Duration>,
    elapsed: Duration,
}

impl Samples {
    fn add(&mut self, (latencies, elapsed): (Vec<Duration>, Duration)) {
        self.latencies.extend(latencies);
        self.elapsed += elapsed;
    }

    /// (p50, p99, requests per second).
    fn stats(mut self) -> (Duration, Duration, f64) {
        self.latencies.sort();
        let n = self.latencies.len();
        let pct = |p: f64| self.latencies[((n as f64 * p) as usize).min(n - 1)];
        (pct(0.50), pct(0.99), n as f64 / self.elapsed.as_secs_f64())
    }
}

/// Runs `clients` concurrent clients, each sending `n` sequential requests to `url`; returns
/// every latency and the wall time.
async fn load(url: &str, clients: usize, n: usize) -> (Vec<Duration>, Duration) {
    let url: Arc<str> = url.into();
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move {
                let http = reqwest::Client::builder()
                    .tcp_nodelay(true)
                    .no_proxy()
                    .build()
                    .unwrap();
                let mut lat = Vec::with_capacity(n);
                for _ in 0..n {
                    let t = Instant::now();
                    let resp = http
                        .post(&*url)
                        .header("content-type", "application/json")
                        .header("accept", "application/json, text/event-stream")
                        .header("mcp-session-id", "bench")
                        .body(BODY)
                        .send()
                        .await
                        .unwrap();
                    assert!(resp.status().is_success());
                    let _ = resp.bytes().await.unwrap();
                    lat.push(t.elapsed());
                }
                lat
            })
        })
        .collect();
    let mut all = Vec::with_capacity(clients * n);
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    (all, started.elapsed())
}

fn gate_config(upstream: &str) -> GateConfig {
    GateConfig {
        agent: AgentIdentity {
            namespace: "bench".into(),
            name: "agent".into(),
            uid: String::new(),
            service_account: "agent".into(),
        },
        approval: GateApproval {
            mode: ApprovalMode::Gate,
            timeout_seconds: 3600.0,
            wait_timeout_seconds: 30.0,
            ttl_after_finished_seconds: 86400.0,
        },
        listen: "127.0.0.1:0".into(),
        metrics_listen: "127.0.0.1:0".into(),
        servers: vec![GateServer {
            namespace: "bench".into(),
            name: "stub".into(),
            kind: ToolServerKind::RemoteMCPServer,
            protocol: McpProtocol::StreamableHttp,
            route: GateServer::route_for("bench", "stub"),
            params: McpParams {
                url: upstream.into(),
                headers: [("Authorization".to_string(), "Bearer upstream".to_string())].into(),
                timeout: None,
                sse_read_timeout: None,
                terminate_on_close: None,
            },
            tools: vec!["echo".into(), "delete".into()],
            require_approval: vec!["delete".into()],
            allowed_headers: vec![],
        }],
    }
}

/// Runs `serve` on a runtime of its own, as a separate process would (`workers` = 0: a
/// single-threaded runtime), and returns what it reports once it is listening.
fn on_own_runtime<T: Send + 'static, F: std::future::Future<Output = T> + Send + 'static>(
    workers: usize,
    serve: impl FnOnce() -> F + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = match workers {
            0 => tokio::runtime::Builder::new_current_thread(),
            n => {
                let mut builder = tokio::runtime::Builder::new_multi_thread();
                builder.worker_threads(n);
                builder
            }
        }
        .enable_all()
        .build()
        .unwrap();
        rt.block_on(async move {
            tx.send(serve().await).unwrap();
            std::future::pending::<()>().await
        })
    });
    rx.recv().unwrap()
}

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    // `cargo bench` passes `--bench`; under `cargo test` the bench only smoke-tests itself.
    let full = std::env::args().any(|a| a == "--bench");
    let n: usize = std::env::var("GATE_BENCH_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if full { 4000 } else { 40 });
    // Load generator, upstream and gate each get a runtime, like the agent, the tool server and
    // the sidecar get processes; the gate's is single-threaded as in `hitl-operator gate`.
    let upstream = on_own_runtime(0, stub::start);
    let gate = {
        let upstream = upstream.clone();
        on_own_runtime(GATE_WORKERS, move || async move {
            // The kube client is never used: ungated calls do not touch the apiserver.
            let kube =
                kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap()))
                    .unwrap();
            let (router, _) = server::build(
                &gate_config(&upstream),
                kube,
                Arc::new(SystemClock),
                "bench".into(),
                server::PROGRESS_EVERY,
            )
            .unwrap();
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!(
                "http://{}{}",
                listener.local_addr().unwrap(),
                GateServer::route_for("bench", "stub")
            );
            use axum::serve::ListenerExt;
            tokio::spawn(async move {
                axum::serve(listener.tap_io(server::nodelay), router)
                    .await
                    .unwrap()
            });
            url
        })
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // Warm up both paths (connections, allocator, caches).
        load(&upstream, 8, n / 10 + 1).await;
        load(&gate, 8, n / 10 + 1).await;

        println!("ungated tools/call, {n} requests per client, in-process Rust MCP stub upstream");
        println!(
            "{:>7} | {:>10} {:>10} {:>9} | {:>10} {:>10} {:>9} | {:>8} {:>8} {:>9} {:>10}",
            "clients", "direct p50", "p99", "req/s", "gate p50", "p99", "req/s", "p50 x", "p99 x", "thru x", "added p50"
        );
        for clients in [1, 8, 32] {
            let per_client = (n * 4 / clients).clamp(10, n);
            // Alternate short rounds so load from elsewhere on the machine hits both sides.
            let (mut direct, mut gated) = (Samples::default(), Samples::default());
            for _ in 0..ROUNDS {
                direct.add(load(&upstream, clients, per_client / ROUNDS).await);
                gated.add(load(&gate, clients, per_client / ROUNDS).await);
            }
            let (d, g) = (direct.stats(), gated.stats());
            let us = |x: Duration| x.as_secs_f64() * 1e6;
            println!(
                "{:>7} | {:>8.1}µs {:>8.1}µs {:>9.0} | {:>8.1}µs {:>8.1}µs {:>9.0} | {:>8.2} {:>8.2} {:>9.2} {:>8.1}µs",
                clients,
                us(d.0),
                us(d.1),
                d.2,
                us(g.0),
                us(g.1),
                g.2,
                us(g.0) / us(d.0),
                us(g.1) / us(d.1),
                g.2 / d.2,
                us(g.0) - us(d.0),
            );
        }
    });
}
