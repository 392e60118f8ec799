# Helm chart targets; included from the main Makefile.
#   make chart-test   lint + render + schema tests of charts/hitl-operator with the real Helm engine
#   make chart-pytest the Python half of chart-test (make test runs the Rust half with the rest)
#   make chart-bless  rewrite the checked-in generated copies (chart CRDs, rendered admission policies)

CHART_VENV ?= .venv
CHART_PYTHON ?= python3
CHART_REQUIREMENTS := tests/chart/requirements.txt
CHART_STAMP := $(CHART_VENV)/.chart-requirements.stamp

.PHONY: chart-test chart-pytest chart-bless chart-venv

$(CHART_STAMP): $(CHART_REQUIREMENTS)
	test -x $(CHART_VENV)/bin/python || $(CHART_PYTHON) -m venv $(CHART_VENV)
	$(CHART_VENV)/bin/pip install --quiet --disable-pip-version-check -r $(CHART_REQUIREMENTS)
	touch $@

## The venv with the Helm engine (also used by make e2e to render the chart).
chart-venv: $(CHART_STAMP)

CHART_PYTEST := $(CHART_VENV)/bin/python -m pytest -q tests/chart

chart-test: $(CHART_STAMP)
	$(CARGO) test --test chart_crds --test admission_policy
	$(CHART_PYTEST)

## Only the Python half of chart-test: make test runs chart_crds and admission_policy with every
## other Rust test, once.
chart-pytest: $(CHART_STAMP)
	$(CHART_PYTEST)

chart-bless: $(CHART_STAMP)
	HITL_BLESS=1 $(CARGO) test --test chart_crds
	HITL_BLESS=1 $(CHART_VENV)/bin/python -m pytest -q tests/chart -k rendered_copy
