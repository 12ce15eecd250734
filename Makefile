# Each target builds .venv from the pinned requirements on first use, so a fresh clone needs nothing else.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STACK ?= dev
OUT ?= out/$(STACK)

.PHONY: render check check-stacks test test-all bench golden

$(VENV)/.installed: requirements.txt requirements-dev.txt requirements-sarif.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	$(VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps -r requirements-sarif.txt
	touch $@

render: $(VENV)/.installed  ## render one stack offline: manifests.yaml, graph.json, policy.json
	$(PY) -m gpustack render --stack $(STACK) --out $(OUT)

check: $(VENV)/.installed  ## strict schema + policy check of one stack
	$(PY) -m gpustack check --stack $(STACK)

check-stacks: $(VENV)/.installed  ## check every stack in stacks/ (two processes, one per core, each compiling the schema validators once)
	@a=$$(mktemp); b=$$(mktemp); i=0; one=; two=; \
	  for f in stacks/Pulumi.*.yaml; do s=$${f#stacks/Pulumi.}; s=$${s%.yaml}; \
	    if [ $$((i % 2)) -eq 0 ]; then one="$$one --stack $$s"; else two="$$two --stack $$s"; fi; i=$$((i + 1)); done; \
	  PYTHONDONTWRITEBYTECODE= $(PY) -m gpustack check $$one > $$a & first=$$!; \
	  PYTHONDONTWRITEBYTECODE= $(PY) -m gpustack check $$two > $$b; second=$$?; wait $$first; status=$$?; \
	  cat $$a $$b | grep -E '^[A-Za-z0-9_.-]+: (PASS|FAIL) |^(schema|apiserver|policy) '; rm -f $$a $$b; \
	  [ $$status -eq 0 ] && [ $$second -eq 0 ]

# Machines that set PYTHONDONTWRITEBYTECODE would compile the program's modules again in every process the tests
# start (workers, git-ref renders, real CLI runs); the byte-code caches are git-ignored.
test: $(VENV)/.installed  ## the test suite (what CI runs): every check, each on its representative stacks
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -n 2

test-all: $(VENV)/.installed  ## the test suite plus the matrix cases: every check on every stack it applies to
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -n 2 -m ""

bench: $(VENV)/.installed
	$(PY) benchmarks/render.py
	$(PY) benchmarks/upgrade.py

golden: $(VENV)/.installed  ## rewrite tests/golden after an intended change
	$(PY) tests/regenerate_golden.py
