# hitl-operator: common tasks. `make test` is what CI runs (see .ci/run).
CARGO ?= cargo
IMAGE ?= ghcr.io/hitl-operator/hitl-operator:$(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)

.PHONY: build test lint fmt crds render bench image e2e

build:
	$(CARGO) build --release --bins

## Unit, golden, schema/CEL, compatibility and integration tests.
test:
	$(CARGO) test --all-targets --no-fail-fast

lint:
	$(CARGO) fmt --check
	$(CARGO) clippy --all-targets -- -D warnings

fmt:
	$(CARGO) fmt

## Regenerate crds/ from the Rust types (a test fails when they drift).
crds:
	$(CARGO) run -q -- crds --output-dir crds

## Render the examples offline (no cluster needed).
render:
	$(CARGO) run -q -- render -f examples/

bench:
	$(CARGO) bench --bench render

image:
	docker build -t $(IMAGE) .
