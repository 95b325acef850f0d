VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install demo test lint

install:  ## create the virtual environment and install cone with its test tools (+ Debian's chromium for the page test)
	command -v chromium >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium)
	python3.11 -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -e '.[dev]'

demo:  ## the main job
	$(VENV)/bin/cone demo

test:  ## the whole test suite (the command CI runs)
	$(PY) -m pytest

lint:
	$(VENV)/bin/ruff check .
