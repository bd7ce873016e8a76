# gpufleet — two commands from a fresh Debian machine with Python 3.11:
#   make run    set up and run the main job: `gpufleet up` (API server + scheduler, SQLite store, local GPUs;
#               8 virtual A100-80GB GPUs when the machine has no NVIDIA driver)
#   make test   set up (PostgreSQL and promtool from Debian's packages when missing) and run the whole test
#               suite, with ruff and mypy
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run simulate test lint typecheck unit bench system-deps clean

# GPUs for `make run`: discovered with NVML where a driver exists, else declared (override: make run GPUS=4xH100)
GPUS ?= $(shell command -v nvidia-smi >/dev/null 2>&1 || echo 8xA100-80GB)
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV) || { echo "python3 -m venv failed: on Debian, apt-get install python3-venv"; exit 1; }
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/gpufleet up --jobs-as-server $(if $(GPUS),--gpus $(GPUS))

simulate: $(STAMP)
	$(BIN)/gpufleet simulate --trace openb --elastic --report reports/openb-default.html

# The test suite starts a real PostgreSQL and checks metrics with promtool: install them if absent.
system-deps:
	@if ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then \
	  echo "installing postgresql and prometheus (promtool) from Debian's packages"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends postgresql prometheus >/dev/null; \
	fi

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP) system-deps
	$(BIN)/pytest -q -n 2

test: lint typecheck unit

bench: $(STAMP)
	$(BIN)/python benchmarks/placement_throughput.py
	$(BIN)/python benchmarks/philly_replay.py
	$(BIN)/python benchmarks/api_submit.py

clean:
	rm -rf $(VENV) reports .pytest_cache .mypy_cache .ruff_cache
