//! Test harness for the gate: the kit's fake apiserver, a counting proxy in front of the real MCP
//! server, the real MCP peers from npm, and an in-process gate.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, Response, Uri};
use axum::serve::ListenerExt;
use hitl_operator::api::agent::{ApprovalMode, ToolServerKind};
use hitl_operator::api::approval_request::PolicyKind;
use hitl_operator::api::remote_mcp_server::McpProtocol;
use hitl_operator::contract::agent_config::McpParams;
use hitl_operator::contract::binding_key::BindingKey;
use hitl_operator::contract::gate_config::{
    AgentIdentity, CallerPolicy, DEFAULT_MAX_OPEN_REQUESTS, GateApproval, GateConfig, GateServer,
};
use hitl_operator::gate::decision::SystemClock;
pub use hitl_operator::gate::freeze::{FreezeState, FreezeWatch};
use hitl_operator::gate::server;
use serde_json::Value;

pub use hitl_test_kit::{FakeApi, eventually};

/// Directory of the npm MCP peers.
pub fn peers_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp-peers")
}

/// Fails the test unless the npm peers are installed: a test that could not run must never
/// count as passed. `make test` installs them (`npm ci --prefix tests/mcp-peers`).
pub fn require_peers() {
    let installed = ["server-everything", "sdk"].iter().all(|package| {
        peers_dir()
            .join("node_modules/@modelcontextprotocol")
            .join(package)
            .is_dir()
    });
    assert!(
        installed,
        "tests/mcp-peers/node_modules is missing: run `make test` (or `npm ci --prefix tests/mcp-peers`)"
    );
}

/// Captured logs of the whole test binary.
pub fn logs() -> String {
    String::from_utf8_lossy(
        &LOGS
            .get()
            .map(|l| l.lock().unwrap().clone())
            .unwrap_or_default(),
    )
    .into()
}

static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();

#[derive(Clone)]
struct LogWriter(Arc<Mutex<Vec<u8>>>);
impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Installs the TLS provider and a tracing subscriber that captures every log line.
pub fn init() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let buf = LOGS.get_or_init(Arc::default).clone();
        tracing_subscriber::fmt()
            .with_writer(move || LogWriter(buf.clone()))
            .with_env_filter("debug,hitl_operator=trace")
            .with_ansi(false)
            .init();
    });
}

/// A free port on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The real `@modelcontextprotocol/server-everything`, killed on drop.
pub struct Everything {
    _child: tokio::process::Child,
    /// Its port.
    pub port: u16,
}

impl Everything {
    /// Starts it in `streamableHttp` or `sse` mode and waits until it accepts connections.
    pub async fn start(mode: &str) -> Self {
        let (child, port) = start_peer(&[
            "node_modules/@modelcontextprotocol/server-everything/dist/index.js",
            mode,
        ])
        .await;
        Self {
            _child: child,
            port,
        }
    }
}

/// `recorder.mjs`: an MCP server with read_file, write_file and delete_file that records
/// every call it runs; killed on drop.
pub struct Recorder {
    _child: tokio::process::Child,
    /// `http://127.0.0.1:port`.
    pub url: String,
}

impl Recorder {
    /// Starts it and waits until it accepts connections.
    pub async fn start() -> Self {
        let (child, port) = start_peer(&["recorder.mjs"]).await;
        Self {
            _child: child,
            url: format!("http://127.0.0.1:{port}"),
        }
    }

    /// The calls that ran, in order: `{tool, args, ...}`.
    pub async fn calls(&self) -> Vec<Value> {
        reqwest::Client::builder()
            .no_proxy()
            .build()
            .unwrap()
            .get(format!("{}/calls", self.url))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }
}

/// Runs `node ARGS` in tests/mcp-peers with `PORT` set and waits until it accepts
/// connections.
async fn start_peer(args: &[&str]) -> (tokio::process::Child, u16) {
    spawn_listening(&format!("the MCP peer {args:?}"), |port| {
        let mut command = tokio::process::Command::new("node");
        command
            .args(args)
            .env("PORT", port.to_string())
            .current_dir(peers_dir());
        command
    })
    .await
}

/// Spawns the `command` made for a free port and waits until it accepts connections on it;
/// retries on another port if the chosen one was taken in the meantime. `what` names it in
/// the panic when it never starts.
pub async fn spawn_listening(
    what: &str,
    command: impl Fn(u16) -> tokio::process::Command,
) -> (tokio::process::Child, u16) {
    for _ in 0..5 {
        let port = free_port();
        let mut child = command(port)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("{what} cannot run: {e}"));
        let mut up = false;
        for _ in 0..400 {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                // Still alive a moment later: the port is its own, not another test's.
                tokio::time::sleep(Duration::from_millis(200)).await;
                up = child.try_wait().unwrap().is_none();
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if up {
            return (child, port);
        }
    }
    panic!("{what} did not start");
}

/// A request seen by [`Counter`]: (method, `x-upstream-token`, `mcp-session-id`).
pub type Seen = (String, String, Option<String>);

/// A request body as it reached the upstream, with its `Content-Type`.
pub type Received = (Option<String>, Bytes);

/// A proxy in front of the upstream counting `tools/call` requests by tool name.
#[derive(Clone)]
pub struct Counter {
    calls: Arc<Mutex<BTreeMap<String, usize>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
    bodies: Arc<Mutex<Vec<Received>>>,
    credentials: Arc<Mutex<Vec<String>>>,
    connections: Arc<std::sync::atomic::AtomicUsize>,
    target: String,
    http: reqwest::Client,
    /// Base URL of the proxy.
    pub url: String,
}

impl Counter {
    /// Starts a counting proxy to `target` (`http://127.0.0.1:port`).
    pub async fn start(target: String) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = Self {
            calls: Arc::default(),
            seen: Arc::default(),
            bodies: Arc::default(),
            credentials: Arc::default(),
            connections: Arc::default(),
            target,
            http: reqwest::Client::builder().no_proxy().build().unwrap(),
            url: format!("http://{}", listener.local_addr().unwrap()),
        };
        let app = Router::new().fallback(forward).with_state(c.clone());
        let connections = c.connections.clone();
        let listener = listener.tap_io(move |_| {
            connections.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        });
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        c
    }

    /// Every request as (method, `x-upstream-token` header, `mcp-session-id` header).
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// The `Content-Type` and body of every request with a body, as they reached the upstream.
    pub fn bodies(&self) -> Vec<Received> {
        self.bodies.lock().unwrap().clone()
    }

    /// Every `Authorization` and `Proxy-Authorization` header that reached the upstream, as
    /// `name: value`.
    pub fn credentials(&self) -> Vec<String> {
        self.credentials.lock().unwrap().clone()
    }

    /// How many TCP connections the gate opened to the upstream.
    pub fn connections(&self) -> usize {
        self.connections.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// How many times `tool` reached the upstream.
    pub fn count(&self, tool: &str) -> usize {
        self.calls.lock().unwrap().get(tool).copied().unwrap_or(0)
    }
}

async fn forward(
    State(c): State<Counter>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response<Body> {
    let header = |n: &str| headers.get(n).map(|v| v.to_str().unwrap().to_string());
    c.seen.lock().unwrap().push((
        method.to_string(),
        headers
            .get_all("x-upstream-token")
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect::<Vec<_>>()
            .join(","),
        header("mcp-session-id"),
    ));
    for name in ["authorization", "proxy-authorization"] {
        for value in headers.get_all(name) {
            c.credentials
                .lock()
                .unwrap()
                .push(format!("{name}: {}", value.to_str().unwrap()));
        }
    }
    if !body.is_empty() {
        c.bodies
            .lock()
            .unwrap()
            .push((header("content-type"), body.clone()));
    }
    if let Ok(v) = serde_json::from_slice::<Value>(&body)
        && v["method"] == "tools/call"
    {
        let name = v["params"]["name"].as_str().unwrap_or_default().to_string();
        *c.calls.lock().unwrap().entry(name).or_default() += 1;
    }
    let url = format!(
        "{}{}",
        c.target,
        uri.path_and_query().map(|p| p.as_str()).unwrap_or("/")
    );
    let mut h = headers.clone();
    h.remove("host");
    h.remove("content-length");
    let resp = c
        .http
        .request(method, url)
        .headers(h)
        .body(body)
        .send()
        .await
        .unwrap();
    let mut out = Response::builder().status(resp.status());
    for (k, v) in resp.headers() {
        if k != "content-length" && k != "transfer-encoding" && k != "connection" {
            out = out.header(k, v);
        }
    }
    out.body(Body::from_stream(resp.bytes_stream())).unwrap()
}

/// A gate server entry.
pub fn server(
    name: &str,
    protocol: McpProtocol,
    url: &str,
    tools: &[&str],
    gated: &[&str],
) -> GateServer {
    GateServer {
        namespace: "tools".into(),
        name: name.into(),
        kind: ToolServerKind::RemoteMCPServer,
        protocol,
        route: GateServer::route_for("tools", name),
        params: McpParams {
            url: url.into(),
            headers: [("X-Upstream-Token".to_string(), "configured".to_string())].into(),
            timeout: None,
            sse_read_timeout: None,
            terminate_on_close: None,
        },
        tools: tools.iter().map(|s| s.to_string()).collect(),
        require_approval: gated.iter().map(|s| s.to_string()).collect(),
        allowed_headers: vec![],
        rules: vec![],
        trust_tool_annotations: false,
        accepted_tools: Default::default(),
    }
}

/// A gate configuration for agent `team/agent-a`.
pub fn config(servers: Vec<GateServer>, timeout: f64, wait: f64) -> GateConfig {
    GateConfig {
        callers: None,
        agent: AgentIdentity {
            kind: Default::default(),
            namespace: "team".into(),
            name: "agent-a".into(),
            uid: "agent-uid".into(),
            service_account: "agent-a".into(),
        },
        approval: GateApproval {
            mode: ApprovalMode::Gate,
            timeout_seconds: timeout,
            wait_timeout_seconds: wait,
            ttl_after_finished_seconds: 86400.0,
            grant_max_ttl_seconds: None,
            max_open_requests: DEFAULT_MAX_OPEN_REQUESTS,
            escalation: None,
        },
        listen: "127.0.0.1:0".into(),
        metrics_listen: "127.0.0.1:0".into(),
        servers,
    }
}

/// The audience of the shared gates the tests start.
pub const GATE_AUDIENCE: &str = "hitl-gate.team";

/// A shared gate's configuration (ToolGate `team/shared`): callers must bear a token for
/// [`GATE_AUDIENCE`], any verified caller may call.
pub fn shared_config(servers: Vec<GateServer>, timeout: f64, wait: f64) -> GateConfig {
    let mut config = config(servers, timeout, wait);
    config.agent = AgentIdentity {
        kind: PolicyKind::ToolGate,
        namespace: "team".into(),
        name: "shared".into(),
        uid: "toolgate-uid".into(),
        service_account: "shared-gate".into(),
    };
    config.callers = Some(CallerPolicy {
        audiences: vec![GATE_AUDIENCE.into()],
        users: vec![],
        groups: vec![],
        max_calls_per_minute: None,
    });
    config
}

/// An ApprovalGrant by alice, for an hour, of agent-a's calls of `tool` on the server
/// `tools/<server>` in MCP session `session` only.
pub fn session_grant(name: &str, server: &str, tool: &str, session: &str) -> Value {
    let expires = (jiff::Timestamp::now() + jiff::SignedDuration::from_hours(1)).to_string();
    serde_json::json!({
        "apiVersion": "kagent.dev/v1alpha2", "kind": "ApprovalGrant",
        "metadata": {"name": name, "namespace": "team"},
        "spec": {"agentRef": {"name": "agent-a"},
            "toolServer": {"kind": "RemoteMCPServer", "name": server, "namespace": "tools"},
            "toolName": tool, "sessionId": session, "expiresAt": expires,
            "reason": "this conversation", "grantedBy": "alice"},
    })
}

/// The binding key of the gates the tests start.
pub fn test_key() -> BindingKey {
    BindingKey::from_bytes(&[7; 32]).expect("32 bytes make a key")
}

/// Builds a gate with `config`, talking to `api`, without starting it: why it refused to
/// start, or `None` when it would have started.
pub fn build_error(config: &GateConfig, api: &FakeApi) -> Option<String> {
    server::build(
        config,
        test_key(),
        api.client(),
        Arc::new(SystemClock),
        "gate-pod-0".into(),
        server::PROGRESS_EVERY,
        FreezeWatch::fixed(FreezeState::Clear),
    )
    .err()
    .map(|e| e.to_string())
}

/// A running in-process gate.
pub struct Gate {
    /// `http://127.0.0.1:port`.
    pub url: String,
    /// `http://127.0.0.1:port` of /healthz and /metrics.
    pub metrics_url: String,
}

impl Gate {
    /// Starts the gate with `config`, talking to `api`, its Agent not frozen.
    pub async fn start(config: &GateConfig, api: &FakeApi) -> Self {
        Self::start_with_freeze(config, api, FreezeWatch::fixed(FreezeState::Clear)).await
    }

    /// Starts the gate with `config`, talking to `api`, seeing its Agent's freeze in `freeze`.
    pub async fn start_with_freeze(
        config: &GateConfig,
        api: &FakeApi,
        freeze: FreezeWatch,
    ) -> Self {
        let (router, metrics) = server::build(
            config,
            test_key(),
            api.client(),
            Arc::new(SystemClock),
            "gate-pod-0".into(),
            Duration::from_millis(200),
            freeze,
        )
        .unwrap();
        let mcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let health = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", mcp.local_addr().unwrap());
        let metrics_url = format!("http://{}", health.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(mcp, router).await.unwrap() });
        tokio::spawn(async move {
            axum::serve(health, server::metrics_router(metrics))
                .await
                .unwrap()
        });
        Self { url, metrics_url }
    }

    /// URL of a tool server's route.
    pub fn route(&self, name: &str) -> String {
        format!("{}{}", self.url, GateServer::route_for("tools", name))
    }

    /// The metrics text.
    pub async fn metrics(&self) -> String {
        reqwest::Client::builder()
            .no_proxy()
            .build()
            .unwrap()
            .get(format!("{}/metrics", self.metrics_url))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }
}

/// Runs the SDK client (`client.mjs`) with `ops` and returns one JSON value per operation.
pub async fn client(url: &str, transport: &str, ops: Value) -> Vec<Value> {
    client_with(url, transport, ops, serde_json::json!({})).await
}

/// [`client`] with client options (see client.mjs).
pub async fn client_with(url: &str, transport: &str, ops: Value, options: Value) -> Vec<Value> {
    let out = tokio::process::Command::new("node")
        .arg("client.mjs")
        .arg(url)
        .arg(transport)
        .arg(ops.to_string())
        .arg(options.to_string())
        .current_dir(peers_dir())
        .kill_on_drop(true)
        .output()
        .await
        .expect("node runs");
    assert!(
        out.status.success(),
        "client failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A `client.mjs` operation calling `name` with `args`.
pub fn call(name: &str, args: Value) -> Value {
    serde_json::json!({"op": "call", "name": name, "args": args})
}

/// The text of a tool result, and whether it is an error.
pub fn result_text(v: &Value) -> (String, bool) {
    let r = &v["result"];
    assert!(r.is_object(), "no result: {v}");
    let text = r["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    (text, r["isError"] == true)
}
