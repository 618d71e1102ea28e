# safebunny: every target creates or reuses .venv and installs what it needs.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
export SPARK_LOCAL_IP ?= 127.0.0.1
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))

.PHONY: venv install test test-unit test-integration test-e2e lint demo bench bench-full shim notebooks clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel

venv: $(PY)

# A real (non-editable) install, as a user gets: Spark's data-source lookup (pkgutil) sees it,
# and every run of a target sees the code as it is now.
install: $(PY)
	$(PIP) install -q ".[test,bench]" 2>&1 | { grep -v "^WARNING: Location" || true; }
	$(PIP) install -q --no-deps --force-reinstall . 2>&1 | { grep -v "^WARNING: Location" || true; }
	$(PY) -c "import safebunny, pyspark_safebunny"

test: install
	$(PY) -m pytest tests -q -p no:cacheprovider --durations=25

test-unit: install
	$(PY) -m pytest tests/unit -q

test-integration: install
	$(PY) -m pytest tests/integration -q

test-e2e: install
	$(PY) -m pytest tests/e2e -q

lint: install
	$(VENV)/bin/ruff check .

demo: install
	$(PY) -m safebunny.demo

bench: install
	$(PY) -m bench.run --quick
	$(PY) -m bench.saga_latency --seconds 20 --warmup 5

bench-full: install
	$(PY) -m bench.run --full
	$(PY) -m bench.saga_latency --seconds 45 --warmup 10 --rounds 3
	$(PY) -m bench.bench_step --rounds 3
	$(PY) -m bench.saga_drivers

# Run the Databricks notebooks under notebooks/ locally (also part of make test).
notebooks: install
	$(PY) -m pytest tests/e2e/test_notebooks.py -q

# Build (or find in the cache) the JVM shim's jar offline and print its path.
shim: install
	$(PY) scala_shim/build_offline.py

clean:
	rm -rf build dist *.egg-info .pytest_cache .ruff_cache
