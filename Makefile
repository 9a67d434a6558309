# gpufair: the two commands are `make demo` and `make test`; both set up what they need.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
PYTEST_ARGS ?=

.PHONY: setup demo test test-fast gen check-gen lint clean bench

## setup: etcd-server and prometheus (apt), the venv with every Python dependency, buf (npm)
setup: $(VENV)/.installed node_modules/.installed
	@command -v etcd >/dev/null || { echo "installing etcd-server (apt)"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq etcd-server >/dev/null; }
	@command -v prometheus >/dev/null || { echo "installing prometheus (apt; the scrape test runs a real one)"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq prometheus >/dev/null; }

$(VENV)/.installed: requirements.txt requirements-train.txt requirements-dev.txt pyproject.toml setup.py
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -r requirements.txt -r requirements-train.txt -r requirements-dev.txt
	$(BIN)/pip install -q --disable-pip-version-check --no-deps -e .
	@touch $@

node_modules/.installed: package.json package-lock.json
	@if command -v npm >/dev/null; then npm ci --no-audit --no-fund --loglevel=error && touch $@; \
	 else echo "npm not found: buf lint will be skipped (apt-get install npm to enable it)"; fi

## demo: the main job (local stack, three jobs on emulated GPUs, even vs fair)
demo: setup
	$(BIN)/python -m gpufair.demo

## test: lint + generated-code drift check + the whole suite (real etcd, S3, gRPC, torch)
test: setup check-gen lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

## test-fast: everything except tests marked slow
test-fast: setup
	$(BIN)/python -m pytest -m "not slow" $(PYTEST_ARGS)

## gen: regenerate gpufair/api from protos/ and the README's configuration table from gpufair/common/env.py
gen: $(VENV)/.installed
	$(BIN)/python scripts/gen_protos.py
	$(BIN)/python scripts/gen_env_doc.py

check-gen: $(VENV)/.installed
	$(BIN)/python scripts/gen_protos.py --check
	$(BIN)/python scripts/gen_env_doc.py --check

lint: node_modules/.installed
	@if [ -x node_modules/.bin/buf ]; then node_modules/.bin/buf lint && node_modules/.bin/buf format --diff --exit-code && echo "buf lint + format: clean"; \
	 else echo "buf not installed: skipping proto lint"; fi

bench: setup
	@cat bench/README.md

clean:
	rm -rf $(VENV) node_modules .pytest_cache
