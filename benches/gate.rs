//! Benchmark: an ungated `tools/call` through the gate vs straight to the same upstream (an
//! in-process Rust MCP stub), at 1, 8 and 32 concurrent clients, with a plain TCP relay as a
//! second baseline: the least any proxy running as its own process adds. Prints p50/p99
//! latency and throughput of each path and the gate's ratios, measured in the same run.
//!
//! The load generator, the upstream, the relay and the gate each run on a thread and runtime of
//! their own, like separate processes. The run has two passes: first the threads go wherever
//! the kernel puts them; then all of them are pinned to one CPU, which takes the cost of waking
//! an idle CPU (large on virtual machines) out of the figures and leaves the work each hop does.
//!
//! Run: `cargo bench --bench gate` (set `GATE_BENCH_REQUESTS` to change requests per client).

#[path = "../tests/gate/stub.rs"]
mod stub;

use std::sync::Arc;
use std::time::{Duration, Instant};

use hitl_operator::api::agent::{ApprovalMode, ToolServerKind};
use hitl_operator::api::approval_request::PolicyKind;
use hitl_operator::api::remote_mcp_server::McpProtocol;
use hitl_operator::contract::agent_config::McpParams;
use hitl_operator::contract::binding_key::BindingKey;
use hitl_operator::contract::gate_config::{
    AgentIdentity, DEFAULT_MAX_OPEN_REQUESTS, GateApproval, GateConfig, GateServer,
};
use hitl_operator::gate::decision::SystemClock;
use hitl_operator::gate::freeze::{FreezeState, FreezeWatch};
use hitl_operator::gate::server;

/// Alternating rounds of the three paths per concurrency level.
const ROUNDS: usize = 10;

const BODY: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hello","n":42}}}"#;

/// Latencies and busy time of one path, pooled over rounds.
#[derive(Default)]
struct Samples {
    latencies: Vec<Duration>,
    elapsed: Duration,
}

/// p50 and p99 latency, and requests per second.
struct Stats {
    p50: Duration,
    p99: Duration,
    rps: f64,
}

impl Samples {
    fn add(&mut self, (latencies, elapsed): (Vec<Duration>, Duration)) {
        self.latencies.extend(latencies);
        self.elapsed += elapsed;
    }

    fn stats(mut self) -> Stats {
        self.latencies.sort();
        let n = self.latencies.len();
        let pct = |p: f64| self.latencies[((n as f64 * p) as usize).min(n - 1)];
        Stats {
            p50: pct(0.50),
            p99: pct(0.99),
            rps: n as f64 / self.elapsed.as_secs_f64(),
        }
    }
}

/// Runs `clients` concurrent clients, each sending `n` sequential requests to `url` over the
/// shared pool of `http` (a connection each); returns every latency and the wall time.
async fn load(
    http: &reqwest::Client,
    url: &str,
    clients: usize,
    n: usize,
) -> (Vec<Duration>, Duration) {
    let url: Arc<str> = url.into();
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let (http, url) = (http.clone(), url.clone());
            tokio::spawn(async move {
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

/// Starts a plain TCP relay to the upstream at `upstream_url` and returns the same URL through
/// the relay: two more socket hops and a copy, nothing else.
async fn start_relay(upstream_url: &str) -> String {
    let url = reqwest::Url::parse(upstream_url).unwrap();
    let target = url.socket_addrs(|| None).unwrap()[0];
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let relay_url = format!("http://{}{}", listener.local_addr().unwrap(), url.path());
    tokio::spawn(async move {
        loop {
            let (mut inbound, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let mut outbound = tokio::net::TcpStream::connect(target).await.unwrap();
                for s in [&inbound, &outbound] {
                    s.set_nodelay(true).unwrap();
                }
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            });
        }
    });
    relay_url
}

fn gate_config(upstream: &str) -> GateConfig {
    GateConfig {
        callers: None,
        agent: AgentIdentity {
            kind: PolicyKind::Agent,
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
            grant_max_ttl_seconds: None,
            max_open_requests: DEFAULT_MAX_OPEN_REQUESTS,
            escalation: None,
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
                // Limits set, so their timers are part of the cost measured.
                timeout: Some(30.into()),
                sse_read_timeout: Some(300.into()),
                terminate_on_close: None,
            },
            tools: vec!["echo".into(), "delete".into()],
            require_approval: vec!["delete".into()],
            allowed_headers: vec![],
            rules: vec![],
            trust_tool_annotations: false,
            accepted_tools: Default::default(),
        }],
    }
}

/// Runs `serve` on a single-threaded runtime on a thread of its own, as a separate process
/// would (`hitl-operator gate` runs on one too), pinned to `cpu` if given; returns what `serve`
/// reports once it is listening.
fn on_own_thread<T: Send + 'static, F: std::future::Future<Output = T> + 'static>(
    name: &str,
    cpu: Option<core_affinity::CoreId>,
    serve: impl FnOnce() -> F + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    let thread = std::thread::Builder::new().name(name.into());
    thread
        .spawn(move || {
            pin(cpu);
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                tx.send(serve().await).unwrap();
                std::future::pending::<()>().await
            })
        })
        .unwrap();
    rx.recv().unwrap()
}

fn pin(cpu: Option<core_affinity::CoreId>) {
    if let Some(cpu) = cpu {
        assert!(core_affinity::set_for_current(cpu), "cannot pin to {cpu:?}");
    }
}

/// The URLs of the three paths to the same upstream.
struct Paths {
    direct: String,
    relay: String,
    gate: String,
}

/// Starts the upstream, the relay and the gate, each on a thread of its own.
fn start(cpu: Option<core_affinity::CoreId>) -> Paths {
    let direct = on_own_thread("upstream", cpu, stub::start);
    let upstream = direct.clone();
    let relay = on_own_thread(
        "relay",
        cpu,
        move || async move { start_relay(&upstream).await },
    );
    let upstream = direct.clone();
    let gate = on_own_thread("gate", cpu, move || async move {
        // The kube client is never used: ungated calls do not touch the apiserver.
        let kube = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap()))
            .unwrap();
        let (router, _) = server::build(
            &gate_config(&upstream),
            BindingKey::from_bytes(&[7; 32]).unwrap(),
            kube,
            Arc::new(SystemClock),
            "bench".into(),
            server::PROGRESS_EVERY,
            FreezeWatch::fixed(FreezeState::Clear),
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
    });
    Paths {
        direct,
        relay,
        gate,
    }
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// One pass over 1, 8 and 32 clients; prints a table.
async fn pass(paths: &Paths, n: usize) {
    let http = reqwest::Client::builder()
        .tcp_nodelay(true)
        .no_proxy()
        .build()
        .unwrap();
    // Warm up every path (connections, allocator, caches).
    for url in [&paths.direct, &paths.relay, &paths.gate] {
        load(&http, url, 8, n / 10 + 1).await;
    }
    println!(
        "{:>7} | {:>22} | {:>22} | {:>22} | {:>15} {:>7} | {:>9} {:>9}",
        "", "direct", "TCP relay", "gate", "gate / direct", "", "gate adds", "p50 over"
    );
    println!(
        "{:>7} | {:>7} {:>7} {:>6} | {:>7} {:>7} {:>6} | {:>7} {:>7} {:>6} | {:>7} {:>7} {:>7} | {:>9} {:>9}",
        "clients",
        "p50 µs",
        "p99 µs",
        "krps",
        "p50 µs",
        "p99 µs",
        "krps",
        "p50 µs",
        "p99 µs",
        "krps",
        "p50",
        "p99",
        "thru",
        "direct µs",
        "relay µs"
    );
    for clients in [1, 8, 32] {
        let per_round = ((n * 4 / clients).clamp(10, n) / ROUNDS).max(1);
        // Alternate short rounds so load from elsewhere on the machine hits every path.
        let mut samples: [Samples; 3] = Default::default();
        for _ in 0..ROUNDS {
            for (s, url) in samples
                .iter_mut()
                .zip([&paths.direct, &paths.relay, &paths.gate])
            {
                s.add(load(&http, url, clients, per_round).await);
            }
        }
        let [d, r, g] = samples.map(Samples::stats);
        println!(
            "{:>7} | {:>7.1} {:>7.1} {:>6.1} | {:>7.1} {:>7.1} {:>6.1} | {:>7.1} {:>7.1} {:>6.1} | {:>6.2}x {:>6.2}x {:>6.2}x | {:>9.1} {:>9.1}",
            clients,
            us(d.p50),
            us(d.p99),
            d.rps / 1e3,
            us(r.p50),
            us(r.p99),
            r.rps / 1e3,
            us(g.p50),
            us(g.p99),
            g.rps / 1e3,
            us(g.p50) / us(d.p50),
            us(g.p99) / us(d.p99),
            g.rps / d.rps,
            us(g.p50) - us(d.p50),
            us(g.p50) - us(r.p50),
        );
    }
}

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    // `cargo bench` passes `--bench`; under `cargo test` the bench only smoke-tests itself.
    let full = std::env::args().any(|a| a == "--bench");
    let n: usize = std::env::var("GATE_BENCH_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if full { 4000 } else { 40 });
    let first_cpu = core_affinity::get_core_ids().and_then(|ids| ids.first().copied());
    println!("ungated tools/call, {n} requests per client, in-process Rust MCP stub upstream");
    for (title, cpu) in [
        ("threads placed by the kernel", None),
        ("all threads pinned to one CPU", first_cpu),
    ] {
        println!("\n{title}");
        let paths = start(cpu);
        pin(cpu);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(pass(&paths, n));
    }
}
