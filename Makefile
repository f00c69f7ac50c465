# Tidemark: `make run` (the main job) and `make test` (the whole suite) work on a fresh Debian
# machine that has python3 and make; `make lint` and `make bench` are for developers.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.tidemark-installed

.PHONY: run test test-v2 test-v2node test-fleet lint bench bench-colocation clean venv image

# Creates the venv; Debian's python3 may lack venv/ensurepip (package python3-venv).
$(VENV)/bin/python:
	@if ! $(PYTHON) -c 'import ensurepip, venv' >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "== installing python3-venv (Debian's python3 ships without venv support)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null; \
	  else \
	    echo "Python venv support is missing: run 'sudo apt-get install python3-venv' (Debian/Ubuntu), then retry." >&2; exit 1; \
	  fi; \
	fi
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install -q --upgrade pip >/dev/null
	$(PY) -m pip install -q -e '.[test]'
	@touch $(STAMP)

venv: $(STAMP)

run: $(STAMP)
	@PATH="$(CURDIR)/$(VENV)/bin:$$PATH" bash hack/run.sh

# Every test, the production-shaped node's lane (realnode_v2, one QEMU VM) last (docs/testing.md).
test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

# Only the cgroup v2 lane (one VM on a v1 host; docs/testing.md); `make test` runs it too.
test-v2: $(STAMP)
	$(PY) -m pytest -m cgroup_v2 tests/integration/cgroup_v2 $(PYTEST_ARGS)

# Only the fleet test (root; about 5 minutes; docs/scale.md): 20 hollow nodes, each with its own agent;
# `make test` runs it too.
test-fleet: $(STAMP)
	$(PY) -m pytest -m fleet tests/integration/fleet $(PYTEST_ARGS)

# Only the production-shaped node's lane (one QEMU VM: systemd, cgroup v2, kubelet's systemd driver;
# docs/testing.md); `make test` runs it too.
test-v2node: $(STAMP)
	$(PY) -m pytest -m realnode_v2 tests/integration $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check tidemark agent scheduler_ext localcluster tests benchmarks
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache

# The one image of both programs (Containerfile) with buildah, cached by content hash; prints the
# docker-archive path (`ctr images import`, `docker load`). docs/install.md: push and apply.
image: $(STAMP)
	@bash hack/image.sh build

bench: $(STAMP)
	$(PY) -m pip install -q -e '.[test,bench]'
	@PATH="$(CURDIR)/$(VENV)/bin:$$PATH" bash benchmarks/run.sh

# The colocation-quality benchmark on the real node (root, cgroup v1; docs/benchmarks-colocation.md): every
# interference kind and arm, 5 interleaved rounds (about an hour); BENCH_ARGS=--quick for the 15-minute run.
bench-colocation: $(STAMP)
	$(PY) -m pip install -q -e '.[test,bench]'
	@PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) benchmarks/bench_colocation.py $(BENCH_ARGS)

# The capacity replay (docs/capacity-prediction.md): the shipped traces through Tidemark's policies and the peers'
# formulas, one table; benchmarks/results/capacity-replay.json and .png. BENCH_ARGS=--sweep adds the profile's sweep.
.PHONY: bench-capacity
bench-capacity: $(STAMP)
	$(PY) -m pip install -q -e '.[test,bench]'
	$(PY) benchmarks/bench_capacity.py --json benchmarks/results/capacity-replay.json \
	  --plot benchmarks/results/capacity-replay.png $(BENCH_ARGS)

# Fleet scale (docs/scale.md; root): kubemark hollow nodes, each with its own agent, against one API server, at
# 20 and 50 nodes by default (BENCH_ARGS="--nodes 20,50,80"); benchmarks/results/fleet.json and fleet.png.
.PHONY: bench-fleet
bench-fleet: $(STAMP)
	$(PY) -m pip install -q -e '.[test,bench]'
	$(PY) benchmarks/bench_fleet.py --nodes 20,50 --json benchmarks/results/fleet.json \
	  --plot benchmarks/results/fleet.png $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
