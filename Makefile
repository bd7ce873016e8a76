# gpufleet — two commands from a fresh Debian machine with Python 3.11:
#   make run    set up and run the main job (simulate the bundled openb trace, write an HTML report)
#   make test   set up and run the whole test suite, with ruff and mypy
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck unit bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV) || { echo "python3 -m venv failed: on Debian, apt-get install python3-venv"; exit 1; }
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/gpufleet simulate --trace openb --elastic --report reports/openb-default.html

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest -q -n 2

test: lint typecheck unit

bench: $(STAMP)
	$(BIN)/python benchmarks/placement_throughput.py
	$(BIN)/python benchmarks/philly_replay.py

clean:
	rm -rf $(VENV) reports .pytest_cache .mypy_cache .ruff_cache
