#!/usr/bin/env bash
# Ungated tools/call through the approval gate against the real MCP peers, no cluster needed:
# starts @modelcontextprotocol/server-everything and `hitl-operator gate` in front of it on free
# loopback ports, then runs tests/bench/ungated.mjs (the official TypeScript SDK client), which
# compares direct and gated echo calls in interleaved rounds at 1 and 8 clients. If nginx is
# installed it also runs as a plain reverse proxy in front of the same server, a reference for
# what any HTTP relay costs on this machine, measured in the same rounds; and, if its stream
# module is there too, as a TCP relay that parses nothing, the floor for any relay on this
# machine (Debian: apt-get install nginx-light libnginx-mod-stream). If built, the bare hyper
# relay of tests/bench/bare_relay.rs runs too: the gate's HTTP stack, checking nothing.
# REFERENCE=none skips every reference.
#
# Builds nothing: HITL_BENCH_BIN is the gate binary (default target/release/hitl-operator),
# HITL_BARE_RELAY_BIN the bare relay (default target/release/examples/bare_relay).
# HITL_BENCH_BEFORE_BIN, if set, is another build of the gate (say, of the commit before a
# change) that runs as one more path, "gate-before", in the same rounds: a regression shows as
# the two gates' ratios apart, measured on the same machine at the same time.
# SHARED=1 adds the gate as a ToolGate runs it, "gate-shared": shared by callers that each send
# a ServiceAccount token for its audience (8 ServiceAccounts, taken in turn by the client
# sessions), verified by the TokenReview of the cluster in KUBECONFIG (needed then; the gate
# caches each token's review), the caller's Authorization never forwarded.
# CALLS (default 2000) calls per path and round, ROUNDS (default 3) rounds per client level,
# CLIENTS (default "1,8") the client levels, TURN (default 25) calls per client session before
# the next path takes its turn. Needs `npm ci --prefix tests/mcp-peers` and Node 20.
# Fails if something does not work; the figures are printed, never asserted on.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=${HITL_BENCH_BIN:-$root/target/release/hitl-operator}
calls=${CALLS:-2000}
rounds=${ROUNDS:-3}
clients=${CLIENTS:-1,8}
everything=$root/tests/mcp-peers/node_modules/@modelcontextprotocol/server-everything/dist/index.js

[[ -x $bin ]] || { echo "ungated bench: no gate binary at $bin (cargo build --release first)" >&2; exit 1; }
[[ -f $everything ]] || { echo "ungated bench: npm peers missing (npm ci --prefix tests/mcp-peers)" >&2; exit 1; }

work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${pids[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$work"
}
shared_ns=
cleanup_shared() {
    cleanup
    [[ -z $shared_ns ]] || kubectl delete namespace "$shared_ns" --wait=false >/dev/null 2>&1 || true
}
trap cleanup_shared EXIT
trap 'exit 130' INT TERM

free_port() {
    node -e 'const s = require("net").createServer().listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });'
}
server_port=$(free_port)
gate_port=$(free_port)
metrics_port=$(free_port)
nginx=
if [[ ${REFERENCE:-nginx} != none ]]; then
    nginx=$(PATH=$PATH:/usr/sbin:/usr/local/sbin command -v nginx || true)
fi

# Ungated calls never reach the apiserver; the gate only needs a client it can build.
cat >"$work/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:9", insecure-skip-tls-verify: true}}]
users: [{name: none, user: {token: none}}]
contexts: [{name: none, context: {cluster: none, user: none, namespace: default}}]
current-context: none
EOF
head -c 32 /dev/urandom >"$work/key"
cat >"$work/gate.json" <<EOF
{
  "agent": {"namespace": "default", "name": "bench", "service_account": "bench"},
  "approval": {"mode": "Gate", "timeout_seconds": 3600, "wait_timeout_seconds": 1,
               "ttl_after_finished_seconds": 86400},
  "listen": "127.0.0.1:$gate_port",
  "metrics_listen": "127.0.0.1:$metrics_port",
  "servers": [{
    "namespace": "default", "name": "everything", "kind": "RemoteMCPServer",
    "protocol": "STREAMABLE_HTTP", "route": "/servers/default/everything/mcp",
    "params": {"url": "http://127.0.0.1:$server_port/mcp", "headers": {}},
    "tools": ["echo", "get-sum"], "require_approval": ["get-sum"]
  }]
}
EOF

# server-everything listens on every interface (it has no option for the address).
PORT=$server_port node "$everything" streamableHttp >"$work/everything.log" 2>&1 &
server_pid=$!
pids+=("$server_pid")
KUBECONFIG=$work/kubeconfig "$bin" gate --config "$work/gate.json" --binding-key "$work/key" \
    >"$work/gate.log" 2>&1 &
gate_pid=$!
pids+=("$gate_pid")

references=()
if [[ -n ${HITL_BENCH_BEFORE_BIN:-} ]]; then
    [[ -x $HITL_BENCH_BEFORE_BIN ]] || { echo "ungated bench: no gate binary at $HITL_BENCH_BEFORE_BIN" >&2; exit 1; }
    before_port=$(free_port)
    before_metrics_port=$(free_port)
    sed -e "s/127.0.0.1:$gate_port/127.0.0.1:$before_port/" \
        -e "s/127.0.0.1:$metrics_port/127.0.0.1:$before_metrics_port/" \
        "$work/gate.json" >"$work/gate-before.json"
    KUBECONFIG=$work/kubeconfig "$HITL_BENCH_BEFORE_BIN" gate --config "$work/gate-before.json" \
        --binding-key "$work/key" >"$work/gate-before.log" 2>&1 &
    pids+=($!)
    references+=(gate-before "http://127.0.0.1:$before_port/servers/default/everything/mcp" "$!")
    echo "reference: $HITL_BENCH_BEFORE_BIN, the gate as built before (gate-before)"
fi
if [[ ${SHARED:-0} == 1 ]]; then
    kubectl version --request-timeout=5s >/dev/null 2>&1 ||
        { echo "ungated bench: SHARED=1 needs a cluster in KUBECONFIG (for TokenReview)" >&2; exit 1; }
    shared_ns=hitl-bench-shared-$(date +%s)
    audience=toolgate.kagent.dev/$shared_ns/bench
    kubectl create namespace "$shared_ns" >/dev/null
    tokens=()
    for i in 1 2 3 4 5 6 7 8; do
        kubectl -n "$shared_ns" create serviceaccount "caller-$i" >/dev/null
        tokens+=("$(kubectl -n "$shared_ns" create token "caller-$i" --audience "$audience" --duration 2h)")
    done
    shared_port=$(free_port)
    shared_metrics_port=$(free_port)
    python3 - "$work/gate.json" "$work/gate-shared.json" "$shared_port" "$shared_metrics_port" "$audience" <<'PY'
import json, sys
source, target, port, metrics, audience = sys.argv[1:]
config = json.load(open(source))
config["agent"]["kind"] = "ToolGate"
config["listen"] = f"127.0.0.1:{port}"
config["metrics_listen"] = f"127.0.0.1:{metrics}"
config["callers"] = {"audiences": [audience]}
json.dump(config, open(target, "w"))
PY
    "$bin" gate --config "$work/gate-shared.json" --binding-key "$work/key" >"$work/gate-shared.log" 2>&1 &
    pids+=($!)
    references+=(gate-shared "http://127.0.0.1:$shared_port/servers/default/everything/mcp" "$!")
    HITL_BENCH_TOKENS=$(python3 -c 'import json, sys; print(json.dumps({"gate-shared": sys.argv[1:]}))' "${tokens[@]}")
    export HITL_BENCH_TOKENS
    echo "reference: the gate shared by 8 callers (gate-shared), TokenReview by $(kubectl config current-context)"
fi
if [[ -n $nginx ]]; then
    # One process (no master, one worker), so its CPU time is the whole proxy's; responses are
    # relayed as they arrive (an MCP event stream must not be buffered), upstream connections
    # kept alive, as the gate does.
    nginx_port=$(free_port)
    mkdir "$work/nginx"
    cat >"$work/nginx/nginx.conf" <<EOF
daemon off;
master_process off;
worker_processes 1;
pid $work/nginx/nginx.pid;
error_log $work/nginx.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $work/nginx/body;
    proxy_temp_path $work/nginx/proxy;
    fastcgi_temp_path $work/nginx/fastcgi;
    uwsgi_temp_path $work/nginx/uwsgi;
    scgi_temp_path $work/nginx/scgi;
    upstream everything { server 127.0.0.1:$server_port; keepalive 64; }
    server {
        listen 127.0.0.1:$nginx_port;
        location = /servers/default/everything/mcp {
            proxy_pass http://everything/mcp;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 1h;
        }
    }
}
EOF
    "$nginx" -p "$work/nginx" -c "$work/nginx/nginx.conf" -e "$work/nginx.log" >>"$work/nginx.log" 2>&1 &
    pids+=($!)
    references+=(nginx "http://127.0.0.1:$nginx_port/servers/default/everything/mcp" "$!")
    echo "reference: $nginx as a plain reverse proxy"

    # The same nginx as a TCP relay: one upstream connection per client connection, bytes copied
    # both ways, nothing parsed. What is left is the extra hop itself (two more sockets, two
    # more wake-ups per call), which no relay can avoid. Its own process, for its own CPU time.
    stream_module=$("$nginx" -V 2>&1 | sed -n 's/.*--modules-path=\([^ ]*\).*/\1/p')/ngx_stream_module.so
    if [[ -f $stream_module ]]; then
        tcp_port=$(free_port)
        mkdir "$work/nginx-tcp"
        cat >"$work/nginx-tcp/nginx.conf" <<EOF
load_module $stream_module;
daemon off;
master_process off;
worker_processes 1;
pid $work/nginx-tcp/nginx.pid;
error_log $work/nginx-tcp.log warn;
events { worker_connections 1024; }
stream { server { listen 127.0.0.1:$tcp_port; proxy_pass 127.0.0.1:$server_port; } }
EOF
        "$nginx" -p "$work/nginx-tcp" -c "$work/nginx-tcp/nginx.conf" -e "$work/nginx-tcp.log" \
            >>"$work/nginx-tcp.log" 2>&1 &
        pids+=($!)
        references+=(nginx-tcp "http://127.0.0.1:$tcp_port/mcp" "$!")
        echo "reference: $nginx as a TCP relay (nginx-tcp)"
    else
        echo "reference: no TCP relay (nginx's stream module not installed)"
    fi
else
    echo "reference: no nginx (not installed, or REFERENCE=none)"
fi

# The gate's own HTTP stack with nothing checked (tests/bench/bare_relay.rs: hyper both ways, on
# one thread, nothing parsed past the HTTP head), when built: what the gate's checks cost on top
# of what relaying with hyper costs.
bare_relay=${HITL_BARE_RELAY_BIN:-$root/target/release/examples/bare_relay}
if [[ ${REFERENCE:-nginx} != none ]]; then
    if [[ -x $bare_relay ]]; then
        bare_port=$(free_port)
        "$bare_relay" "$bare_port" "127.0.0.1:$server_port" >"$work/bare-relay.log" 2>&1 &
        pids+=($!)
        references+=(hyper "http://127.0.0.1:$bare_port/mcp" "$!")
        echo "reference: $bare_relay, the gate's HTTP stack checking nothing (hyper)"
    else
        echo "reference: no bare hyper relay (cargo build --release --example bare_relay)"
    fi
fi

echo "gate $bin, $calls calls per path and round, $rounds rounds, clients $clients, turns of ${TURN:-25} calls per session"
if ! SERVER_PID=$server_pid node --no-warnings "$root/tests/bench/ungated.mjs" \
    "http://127.0.0.1:$server_port/mcp" \
    "http://127.0.0.1:$gate_port/servers/default/everything/mcp" \
    "$gate_pid" "$calls" "$rounds" "$clients" "${references[@]}"; then
    echo "--- server-everything log" >&2
    tail -n 20 "$work/everything.log" >&2
    echo "--- gate log" >&2
    tail -n 20 "$work/gate.log" >&2
    for log in "$work"/nginx*.log "$work"/bare-relay.log "$work"/gate-before.log "$work"/gate-shared.log; do
        [[ -f $log ]] || continue
        echo "--- ${log##*/}" >&2
        tail -n 20 "$log" >&2
    done
    exit 1
fi
