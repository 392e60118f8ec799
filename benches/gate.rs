//! Benchmark: an ungated `tools/call` through the gate vs straight to the same upstream (an
//! in-process Rust MCP stub), at 1, 8 and 32 concurrent clients. Prints p50/p99 latency and
//! throughput for both, and the gate/direct ratios, measured in the same run.
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

const BODY: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hello","n":42}}}"#;

struct Stats {
    p50: Duration,
    p99: Duration,
    rps: f64,
}

/// Runs `clients` concurrent clients, each sending `n` sequential requests to `url`.
async fn load(url: &str, clients: usize, n: usize) -> Stats {
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
    let elapsed = started.elapsed();
    all.sort();
    let pct = |p: f64| all[((all.len() as f64 * p) as usize).min(all.len() - 1)];
    Stats {
        p50: pct(0.50),
        p99: pct(0.99),
        rps: all.len() as f64 / elapsed.as_secs_f64(),
    }
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

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    // `cargo bench` passes `--bench`; under `cargo test` the bench only smoke-tests itself.
    let full = std::env::args().any(|a| a == "--bench");
    let n: usize = std::env::var("GATE_BENCH_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if full { 4000 } else { 20 });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let upstream = stub::start().await;
        // The kube client is never used: ungated calls do not touch the apiserver.
        let kube = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap();
        let (router, _) = server::build(
            &gate_config(&upstream),
            kube,
            Arc::new(SystemClock),
            "bench".into(),
            server::PROGRESS_EVERY,
        )
        .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let gate = format!(
            "http://{}{}",
            listener.local_addr().unwrap(),
            GateServer::route_for("bench", "stub")
        );
        use axum::serve::ListenerExt;
        tokio::spawn(async move { axum::serve(listener.tap_io(server::nodelay), router).await.unwrap() });

        // Warm up both paths (connections, allocator, caches).
        load(&upstream, 8, n / 10 + 1).await;
        load(&gate, 8, n / 10 + 1).await;

        println!("ungated tools/call, {n} requests per client, in-process Rust MCP stub upstream");
        println!(
            "{:>7} | {:>10} {:>10} {:>9} | {:>10} {:>10} {:>9} | {:>8} {:>8} {:>9} {:>10}",
            "clients", "direct p50", "p99", "req/s", "gate p50", "p99", "req/s", "p50 x", "p99 x", "thru x", "added p50"
        );
        for clients in [1, 8, 32] {
            let per_client = (n / clients.max(1) * 4).max(10).min(n);
            // Interleave to share drift between both sides.
            let d1 = load(&upstream, clients, per_client / 2).await;
            let g1 = load(&gate, clients, per_client / 2).await;
            let d2 = load(&upstream, clients, per_client / 2).await;
            let g2 = load(&gate, clients, per_client / 2).await;
            let avg = |a: &Stats, b: &Stats| Stats {
                p50: (a.p50 + b.p50) / 2,
                p99: (a.p99 + b.p99) / 2,
                rps: (a.rps + b.rps) / 2.0,
            };
            let (d, g) = (avg(&d1, &d2), avg(&g1, &g2));
            let us = |x: Duration| x.as_secs_f64() * 1e6;
            println!(
                "{:>7} | {:>8.1}µs {:>8.1}µs {:>9.0} | {:>8.1}µs {:>8.1}µs {:>9.0} | {:>8.2} {:>8.2} {:>9.2} {:>8.1}µs",
                clients,
                us(d.p50),
                us(d.p99),
                d.rps,
                us(g.p50),
                us(g.p99),
                g.rps,
                us(g.p50) / us(d.p50),
                us(g.p99) / us(d.p99),
                g.rps / d.rps,
                us(g.p50) - us(d.p50),
            );
        }
    });
}
