# kagent's own agent runtime as a pinned test peer; included from the main Makefile.
#   make runtime-peers   a venv per runtime version under tests/kagent-runtime/ (.venv-VERSION),
#                        each from its requirements-VERSION.txt, installed with --no-deps so the
#                        pins are exactly the ones written there
# Python 3.13, the version kagent's agent image runs: pyenv's, else the system's (pyenv's shims
# are skipped: they fail unless 3.13 is the selected version). Set RUNTIME_PYTHON
# to use another interpreter; without one the target fails (the tests need the runtime).

RUNTIME_DIR := tests/kagent-runtime
RUNTIME_VERSIONS := 0.7.4 0.10.4
RUNTIME_PYTHON ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.13*/bin/python3.13 /usr/local/bin/python3.13 /usr/bin/python3.13))
RUNTIME_STAMPS := $(foreach v,$(RUNTIME_VERSIONS),$(RUNTIME_DIR)/.venv-$(v)/.installed)

.PHONY: runtime-peers

$(RUNTIME_DIR)/.venv-%/.installed: $(RUNTIME_DIR)/requirements-%.txt
	@test -n "$(RUNTIME_PYTHON)" || { echo "runtime-peers: no Python 3.13 (kagent's agent image runs 3.13): install it or set RUNTIME_PYTHON" >&2; exit 1; }
	rm -rf $(RUNTIME_DIR)/.venv-$*
	$(RUNTIME_PYTHON) -m venv $(RUNTIME_DIR)/.venv-$*
	$(RUNTIME_DIR)/.venv-$*/bin/pip install --quiet --disable-pip-version-check --no-deps -r $<
	$(RUNTIME_DIR)/.venv-$*/bin/pip check
	touch $@

## kagent-adk 0.7.4 (the chart's default agentImage) and 0.10.4 (the newest release), pinned.
runtime-peers: $(RUNTIME_STAMPS)
