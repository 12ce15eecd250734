# Each target builds .venv from the pinned requirements on first use, so a fresh clone needs nothing else.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STACK ?= dev
OUT ?= out/$(STACK)

.PHONY: render check check-stacks test test-all bench golden

$(VENV)/.installed: requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	touch $@

render: $(VENV)/.installed  ## render one stack offline: manifests.yaml, graph.json, policy.json
	$(PY) -m gpustack render --stack $(STACK) --out $(OUT)

check: $(VENV)/.installed  ## strict schema + policy check of one stack
	$(PY) -m gpustack check --stack $(STACK)

check-stacks: $(VENV)/.installed  ## check every stack in stacks/ (one process: the schema validators are compiled once)
	@log=$$(mktemp); stacks=$$(for f in stacks/Pulumi.*.yaml; do s=$${f#stacks/Pulumi.}; printf -- '--stack %s ' $${s%.yaml}; done); \
	  $(PY) -m gpustack check $$stacks > $$log; status=$$?; \
	  grep -E '^[A-Za-z0-9_.-]+: (PASS|FAIL) |^(schema|apiserver|policy) ' $$log; rm -f $$log; exit $$status

test: $(VENV)/.installed  ## the test suite (what CI runs): every check, each on its representative stacks
	$(PY) -m pytest -n 2

test-all: $(VENV)/.installed  ## the test suite plus the matrix cases: every check on every stack it applies to
	$(PY) -m pytest -n 2 -m ""

bench: $(VENV)/.installed
	$(PY) benchmarks/render.py
	$(PY) benchmarks/upgrade.py

golden: $(VENV)/.installed  ## rewrite tests/golden after an intended change
	$(PY) tests/regenerate_golden.py
