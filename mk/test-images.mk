# Container images of the test peers for the pod e2e suite, which loads them into a kubelet's
# containerd (imagePullPolicy: Never); included from the main Makefile. Built FROM scratch by
# tests/images/build.sh out of what `make runtime-peers` and `npm ci` installed (no registry is
# reachable here, so there is no base image to pull); see docs/e2e.md.
#   make test-images   localhost/kagent-adk:$(RUNTIME_VERSION) and localhost/hitl-mcp-peers:test
# RUNTIME_VERSION picks the venv (tests/kagent-runtime/.venv-RUNTIME_VERSION); ENGINE is podman
# or docker, whichever is installed (podman first) unless set.

RUNTIME_VERSION ?= 0.7.4
ENGINE ?= $(firstword $(shell command -v podman || command -v docker))

.PHONY: test-images

# The venv and node_modules are made in the recipe: PEERS_STAMP is set in the Makefile after
# mk/*.mk are included, so it is still empty where a prerequisite list would read it.
test-images:
	$(MAKE) $(RUNTIME_DIR)/.venv-$(RUNTIME_VERSION)/.installed $(PEERS_STAMP)
	ENGINE=$(ENGINE) tests/images/build.sh kagent-adk $(RUNTIME_VERSION)
	ENGINE=$(ENGINE) tests/images/build.sh mcp-peers
