# hitl-operator: common tasks. `make test` is what CI runs (see .ci/run).
CARGO ?= cargo
IMAGE ?= ghcr.io/hitl-operator/hitl-operator:$(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)

.PHONY: build test lint fmt crds render bench bench-memory bench-e2e image image-dockerfile e2e peers

.DEFAULT_GOAL := build

-include mk/*.mk

build:
	$(CARGO) build --release --bins

# The real MCP server and client from npm that the gate tests run against, pinned by the lockfile.
PEERS_STAMP := tests/mcp-peers/node_modules/.installed
$(PEERS_STAMP): tests/mcp-peers/package-lock.json
	npm ci --prefix tests/mcp-peers --no-audit --no-fund
	touch $@
# The official MCP Python SDK (revision 2026-07-28) the gate tests also run against, pinned by
# tests/mcp-peers-py/requirements.txt, in a venv of its own (tests/gate/python_peers.rs).
PY_PEERS_PYTHON ?= python3
PY_PEERS_VENV := tests/mcp-peers-py/.venv
PY_PEERS_STAMP := $(PY_PEERS_VENV)/.installed
$(PY_PEERS_STAMP): tests/mcp-peers-py/requirements.txt
	test -x $(PY_PEERS_VENV)/bin/python || $(PY_PEERS_PYTHON) -m venv $(PY_PEERS_VENV)
	$(PY_PEERS_VENV)/bin/pip install --quiet --disable-pip-version-check -r tests/mcp-peers-py/requirements.txt
	touch $@
peers: $(PEERS_STAMP) $(PY_PEERS_STAMP)

# playwright-core, which drives Chromium in the inbox's browser test (tests/inbox.rs).
UI_STAMP := tests/ui/node_modules/.installed
$(UI_STAMP): tests/ui/package-lock.json
	npm ci --prefix tests/ui --no-audit --no-fund
	touch $@

## Unit, golden, schema/CEL, compatibility, integration, browser and Helm chart tests. Installs
## the pinned npm and Python MCP peers, kagent's agent runtime (mk/runtime.mk), playwright-core
## and the chart tests' Python venv first, so every test runs (the browser test also needs
## Debian's `chromium`; .ci/run installs it).
test: $(PEERS_STAMP) $(PY_PEERS_STAMP) $(RUNTIME_STAMPS) $(UI_STAMP) $(CHART_STAMP)
	$(CARGO) test --workspace --all-targets --no-fail-fast
	$(MAKE) chart-pytest

lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

## Regenerate crds/ and the chart's copy from the Rust types (tests fail when they drift).
crds:
	$(CARGO) run -q -- crds --output-dir crds
	$(CARGO) run -q -- crds --output-dir charts/hitl-operator/files/crds

## Render the examples offline (no cluster needed).
render:
	$(CARGO) run -q -- render -f examples/

bench:
	$(CARGO) bench

## The operator's image from this checkout, offline: the release binaries and the libraries they
## load, FROM scratch, non-root (image/build.sh), tagged $(IMAGE), the chart's default image.
## Uses podman or docker, whichever is installed; needs no container registry. Its CA bundle is
## the certifi wheel pinned in image/ca-bundle.env, downloaded once from PyPI with pip.
image: build
	IMAGE=$(IMAGE) image/build.sh

## The same image by the published recipe (Dockerfile: Rust toolchain and distroless base pulled
## from their registries); needs a Docker or podman engine with registry access.
image-dockerfile:
	$(or $(shell command -v podman || command -v docker),docker) build -t $(IMAGE) .

## Controller memory and cold start at N Agents on the cluster in KUBECONFIG (release build).
N ?= 1000
bench-memory:
	$(CARGO) build --release --bin hitl-operator
	bash tests/e2e/controller-memory.sh $(N)

## The user's path, measured as ratios (docs/performance.md): decision -> execution against a
## plain PATCH and the controller at N Agents on the cluster in KUBECONFIG (SKIP without one),
## ungated calls through the gate against the real npm server direct (and through the
## references: a bare hyper relay, and nginx as an HTTP and a TCP relay if installed). Release
## build. Then a cold start over COLD unrendered Agents: apiserver requests per Agent by verb.
## With a cluster, the ungated bench also runs the gate shared by 8 callers (SHARED=1) at 1, 8
## and 64 clients, and the apiserver's cost of GATES idle gates is measured.
APPROVALS ?= 100
GATES ?= 100 1000
COLD ?= 500
bench-e2e: $(PEERS_STAMP)
	$(CARGO) build --release --bins --example bare_relay
	@echo "== decision -> execution ($(APPROVALS) approvals)"
	bash tests/e2e/bench-approval.sh $(APPROVALS)
	@echo "== ungated calls: gate vs direct (and the reference relays)"
	if kubectl version --request-timeout=5s >/dev/null 2>&1; then \
	  SHARED=1 CLIENTS=1,8,64 bash tests/bench/ungated.sh; else bash tests/bench/ungated.sh; fi
	@echo "== the apiserver's cost of idle gates: $(GATES)"
	bash tests/e2e/gate-watches.sh $(GATES)
	@echo "== controller memory and cold start at $(N) Agents"
	bash tests/e2e/controller-memory.sh $(N)
	@echo "== cold start over $(COLD) unrendered Agents: apiserver requests per Agent"
	bash tests/e2e/cold-start.sh $(COLD)
	@echo "== on a node (SKIP without one): the release image in pods; apply -> Ready, decision -> the tool server pod, the gate container's cgroup"
	PATH=$$PWD/target/release:$$PATH HITL_E2E_BIN=target/release/hitl-operator HITL_E2E_POD_APPROVALS=$(APPROVALS) HITL_E2E_POD_ROTATION=0 bash tests/e2e/pods.sh

## End-to-end suites against the cluster in KUBECONFIG (prints SKIP without one); docs/e2e.md.
e2e:
	bash tests/e2e/run.sh
