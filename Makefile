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

.PHONY: venv broker-package broker browser fuse install test-runtime test-compat install-delta delta-jars test-delta bench-delta test test-unit test-integration test-e2e lint demo bench bench-full shim shim-jar notebooks clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel

venv: $(PY)

# Debian's rabbitmq-server when no broker answers and it is missing (tools/broker.sh): the tests start a throwaway
# broker from it, the demo starts the machine's own.
broker-package:
	tools/broker.sh install

# the package, and the machine's broker started when nothing answers on 127.0.0.1:5672 (tests that list connections
# with rabbitmqctl need it there; a throwaway broker is only the fixtures' fallback)
broker:
	tools/broker.sh start

# Debian's headless Chromium and its driver, for the saga page's browser test (tests/e2e/test_view_browser.py).
browser:
	tools/apt_install.sh /usr/bin/chromium=chromium /usr/bin/chromedriver=chromium-driver

# Debian's libfuse2, which fusepy loads: tests/volume_mount.py mounts a FUSE folder that behaves as a Unity Catalog
# volume (no rename, no hard link) for tests/delta_spark/test_saga_on_volume.py.
fuse:
	tools/apt_install.sh /usr/lib/$$(uname -m)-linux-gnu/libfuse.so.2=libfuse2

# A real (non-editable) install, as a user gets: Spark's data-source lookup (pkgutil) sees it,
# and every run of a target sees the code as it is now.
# build/ goes first: setuptools copies the package there and keeps what it copied, so a module deleted or
# moved in the checkout would still be installed from it. pip reinstalls a package given by its folder even at
# the same version (no --force-reinstall needed). The install is redone when a file of the package changed since
# the last one (a module added or removed changes its folder's time), not by every target: CI's make shim-jar
# after make test found it done.
PACKAGE_FILES := setup.py pyproject.toml README.md $(shell find python connector -not -path '*/__pycache__*' \
	-not -name '*.pyc' 2>/dev/null)

install: $(VENV)/.installed

$(VENV)/.installed: $(PY) $(PACKAGE_FILES)
	rm -rf build
	$(PIP) install -q ".[spark,test,bench]" 2>&1 | { grep -v "^WARNING: Location" || true; }
	$(PY) -c "import safebunny, pyspark_safebunny"
	touch $@

# The Databricks Runtime 19 tier: one venv on the runtime's Spark line, pyspark 4.2.0 (Delta 4.4.0 is built for it),
# with safebunny installed into it without an extra, as `%pip install safebunny` on a runtime does: it must leave
# that PySpark as it is (checked in install-delta). Two test sets run there: COMPAT_TESTS, the Spark-facing e2e tests
# of the main suite (source, sink, step, Spark Connect), and DELTA_TESTS, tables by name on real Delta Spark.
# `make test-runtime` runs both in one pytest on two xdist workers, as `make test` does (each worker one JVM of its own;
# the drivers tests split as tests/conftest.py says); test-compat and test-delta run one set each.
COMPAT_TESTS ?= tests/unit/test_spark_version.py \
	tests/e2e/test_registration.py::test_format_resolves_without_register_in_a_fresh_jvm \
	tests/e2e/test_sink.py::test_batch_write_publishes_every_row_with_ids_and_properties \
	tests/e2e/test_sink.py::test_a_retried_task_republishes_the_same_ids \
	tests/e2e/test_sink.py::test_streaming_write_commits_after_confirms \
	tests/e2e/test_sink.py::test_a_replayed_micro_batch_republishes_the_same_ids \
	tests/e2e/test_queue_source.py::test_available_now_reads_every_message_once_over_several_batches \
	tests/e2e/test_queue_source.py::test_continuous_query_acks_while_idle_and_holds_messages_unacked_during_a_batch \
	tests/e2e/test_queue_source.py::test_lag_is_reported_in_progress_and_no_password_in_plans_or_progress \
	tests/e2e/test_step.py::test_step_applies_each_message_once_and_emits_derived_ids \
	tests/e2e/test_step.py::test_row_handler_retries_in_place_and_fails_rows_without_failing_the_batch \
	tests/e2e/test_journal_read.py::test_the_journal_read_gives_what_spark_reads \
	tests/e2e/test_connect.py::test_a_step_over_connect_applies_and_emits_each_message_once \
	tests/e2e/test_connect.py::test_a_saga_over_connect_started_twice_drains_exactly_once

# The Delta Spark tier: tables by name (the Databricks path) on real Delta Spark. Delta's jars come from Maven
# Central through Maven (tests/delta_spark/pom.xml) into a cache folder outside the repository, reused when present.
# Only Delta's own artifacts (io.delta, io.unitycatalog) are copied: Spark's jars bring every other dependency, in
# newer versions. The Python package and the jars have one version: delta-spark 4.4.1 on PyPI has no
# delta-spark_4.2_2.13:4.4.1 jar on Maven Central (only 4.4.0), so its configure_spark_with_delta_pip would ask for a
# jar that does not exist.
VENV_DELTA ?= .venv-delta
DELTA_PYSPARK ?= 4.2.0
DELTA_VERSION ?= 4.4.0
DELTA_JARS ?= $(HOME)/.cache/safebunny/delta-jars/$(DELTA_VERSION)
PYD := $(VENV_DELTA)/bin/python
DELTA_TESTS ?= tests/delta_spark

$(PYD):
	$(PYTHON) -m venv $(VENV_DELTA)
	$(PYD) -m pip install -q --upgrade pip setuptools wheel

install-delta: $(VENV_DELTA)/.installed-$(DELTA_PYSPARK)-$(DELTA_VERSION) delta-jars fuse

$(VENV_DELTA)/.installed-$(DELTA_PYSPARK)-$(DELTA_VERSION): $(PYD) $(PACKAGE_FILES)
	rm -rf build
	$(PYD) -m pip install -q "pyspark[sql,connect]==$(DELTA_PYSPARK)" "delta-spark==$(DELTA_VERSION)" "pandas<3" \
		"pytest>=8,<9.2" pytest-timeout "pytest-xdist>=3" hypothesis "fusepy>=3" 2>&1 | { grep -v "^WARNING: Location" || true; }
	$(PYD) -m pip install -q . 2>&1 | { grep -v "^WARNING: Location" || true; }
	$(PYD) -c "import pyspark, delta, safebunny, pyspark_safebunny; v = pyspark.__version__; \
		assert v == '$(DELTA_PYSPARK)', f'installing safebunny replaced PySpark $(DELTA_PYSPARK) with {v}'"
	touch $@

# Maven resolves io.delta:delta-spark_4.2_2.13 and copies its runtime closure's Delta artifacts; a folder that has
# the delta-spark jar already is reused (no network).
delta-jars:
	@if ls $(DELTA_JARS)/delta-spark_*-$(DELTA_VERSION).jar >/dev/null 2>&1; then echo "delta jars: $(DELTA_JARS)"; \
	else mkdir -p $(DELTA_JARS).tmp && mvn -q -B -f tests/delta_spark/pom.xml dependency:copy-dependencies \
		-Ddelta.version=$(DELTA_VERSION) -DincludeScope=runtime -DincludeGroupIds=io.delta,io.unitycatalog \
		-DoutputDirectory=$(abspath $(DELTA_JARS)).tmp && rm -rf $(DELTA_JARS) && mv $(DELTA_JARS).tmp $(DELTA_JARS) \
		&& echo "delta jars fetched: $$(ls $(DELTA_JARS) | tr '\n' ' ')"; fi

DELTA_ENV = SAFEBUNNY_TEST_DELTA_JARS=$(abspath $(DELTA_JARS)) SAFEBUNNY_TEST_JVM_ARCHIVE=0 \
	PYSPARK_PYTHON=$(abspath $(PYD)) PYSPARK_DRIVER_PYTHON=$(abspath $(PYD))

# CI's run leaves out two tests whose volume variants in test_saga_on_volume.py run the same drivers with more of the
# saga by name (its inbox too, its root on a volume); `make test-delta` runs them.
RUNTIME_SUPERSEDED := --deselect tests/delta_spark/test_drivers_by_name.py --deselect \
	tests/delta_spark/test_random_kills_by_name.py

test-runtime: install-delta broker-package
	$(DELTA_ENV) $(PYD) -m pytest $(COMPAT_TESTS) $(DELTA_TESTS) $(RUNTIME_SUPERSEDED) -n 2 --dist loadgroup -q \
		-p no:cacheprovider --durations=20

test-compat: install-delta broker-package
	$(DELTA_ENV) $(PYD) -m pytest $(COMPAT_TESTS) -q -p no:cacheprovider --durations=10

test-delta: install-delta broker-package
	$(DELTA_ENV) $(PYD) -m pytest $(DELTA_TESTS) -q -p no:cacheprovider --durations=15

test: install broker browser
	$(PY) -m pytest tests -n 2 --dist loadgroup -q -p no:cacheprovider --durations=60

test-unit: install
	$(PY) -m pytest tests/unit -q

test-integration: install
	$(PY) -m pytest tests/integration -q

test-e2e: install
	$(PY) -m pytest tests/e2e -q

lint: install
	$(VENV)/bin/ruff check .

demo: install broker-package
	$(PY) -m safebunny.demo

bench: install
	$(PY) -m bench.run --quick
	$(PY) -m bench.saga_latency --seconds 20 --warmup 5

# the step and the saga with tables by name on Delta Spark, beside the raw stage loop and the plain hops of the same
# run, and a saga's first drain on the default path in a fresh process: each bench writes its result (a failed one
# does not stop the others); the last line prints every target of tables by name with its ratio and "met" or "not met"
BENCH_DELTA_ENV = PYSPARK_PYTHON=$(abspath $(PYD)) PYSPARK_DRIVER_PYTHON=$(abspath $(PYD))
bench-delta: install-delta broker-package
	-$(BENCH_DELTA_ENV) $(PYD) -m bench.bench_step --by-name --delta-jars $(abspath $(DELTA_JARS)) --n 30000 --rounds 2
	-$(BENCH_DELTA_ENV) $(PYD) -m bench.saga_latency --by-name --delta-jars $(abspath $(DELTA_JARS)) --seconds 20 \
		--warmup 5
	-$(BENCH_DELTA_ENV) $(PYD) -m bench.saga_drain --by-name --delta-jars $(abspath $(DELTA_JARS)) --orders 100000 \
		--rounds 1
	-$(BENCH_DELTA_ENV) $(PYD) -m bench.shards_by_name --delta-jars $(abspath $(DELTA_JARS)) --shards 4 --orders 20000
	-$(BENCH_DELTA_ENV) $(PYD) -m bench.first_drain --orders 20000 --rounds 2
	$(PYD) -m bench.by_name_targets

bench-full: install
	$(PY) -m bench.run --full
	$(PY) -m bench.saga_latency --seconds 45 --warmup 10 --rounds 3
	$(PY) -m bench.bench_step --rounds 3
	$(PY) -m bench.saga_drain --orders 20000,100000 --rounds 2
	$(PY) -m bench.saga_drivers
	$(PY) -m bench.shard_overhead

# Run the Databricks notebooks under notebooks/ locally (also part of make test).
notebooks: install
	$(PY) -m pytest tests/e2e/test_notebooks.py -q

# Build (or find in the cache) the JVM shim's jar offline and print its path (no network: pyspark's Scala compiler).
shim: install
	$(PY) scala_shim/build_offline.py

# The JVM shim's jar as build.sbt builds it (tools/sbt: sbt's launcher and every dependency from Maven Central,
# cached under ~/.cache/safebunny/sbt, nothing in the checkout), then the id vectors on THAT jar: SelfTest over
# tests/vectors/message_ids.json, and tests/e2e/test_shim.py with the functions registered from it in Spark
# (SAFEBUNNY_SHIM_JAR; the offline-build tests of that file run in `make test`). Needs a broker, as the e2e tier does.
SHIM_JAR := target/scala-2.13/safebunny-shim_2.13-0.1.0.jar
shim-jar: install
	rm -f $(SHIM_JAR)
	time tools/sbt package
	$(PY) scala_shim/self_test.py $(SHIM_JAR)
	SAFEBUNNY_SHIM_JAR=$(abspath $(SHIM_JAR)) SAFEBUNNY_TEST_JVM_ARCHIVE=0 $(PY) -m pytest tests/e2e/test_shim.py \
		-k "not offline and not wrong_vector and not concurrent" -q -p no:cacheprovider

clean:
	rm -rf build dist *.egg-info .pytest_cache .ruff_cache
