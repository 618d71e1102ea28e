"""Shared fixtures: one real broker per run, self-cleaning queues, one local SparkSession.

Tiers: ``tests/unit`` needs nothing; ``tests/integration`` (marker ``integration``) needs
the broker; ``tests/e2e`` (marker ``e2e``) needs the broker and Spark; ``tests/delta_spark`` (marked ``e2e`` too)
needs them and Delta Spark, and runs only in ``make test-delta``. Markers are added from the folder, so a test cannot
forget its tier.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

sys.path.insert(0, str(Path(__file__).parent))

from brokers import Broker, acquire_broker, acquire_stream_broker  # noqa: E402
from helpers import Admin  # noqa: E402
from jvm_archive import RESULT_ENV, ArchiveRun, SharedArchive, archive_options  # noqa: E402
from leaks import broker_objects, left_behind  # noqa: E402
from spark_home import use_shadow_spark_home  # noqa: E402
from xdist_units import mark_and_order  # noqa: E402

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
# Python workers import pyspark from site-packages with cached bytecode, not compiled again from pyspark.zip
# (tests/spark_home.py: 3x faster worker starts, and the JVM's fixed 10 s wait for one is met at load)
use_shadow_spark_home()
# Every Spark driver JVM of the run (the shared session, and the driver scripts the crash, takeover and log tests
# start as processes of their own, which inherit this) compiles with C1 only and collects with one thread:
# on 2 loaded cores a driver starts in about half the time (26 s -> 12 s, docs/operations.md), and no test is
# long enough for C2's faster code to pay back its compile threads. spark-class adds SPARK_SUBMIT_OPTS to the
# driver's JVM options; a value set by the caller is kept.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")

# Hypothesis' per-example deadline (200 ms) is a timing assertion, and on 2 loaded cores a pure test's example can
# take longer: the suite asserts what the code computes, never how fast (bench/ measures speed)
settings.register_profile("safebunny", deadline=None)
settings.load_profile("safebunny")
# The Delta Spark tier (tests/delta_spark, ``make test-delta``) runs only in its own venv, with the Delta jars that
# ``make delta-jars`` fetched (SAFEBUNNY_TEST_DELTA_JARS): elsewhere (``make test``) it is not collected at all (never
# collected and skipped).
collect_ignore = [] if os.environ.get("SAFEBUNNY_TEST_DELTA_JARS") else ["delta_spark"]

_BROKER: Broker | None = None
_JVM_ARCHIVE: ArchiveRun | SharedArchive | None = None
_STREAM_BROKER: Broker | None = None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mark_and_order(items)


def pytest_collection_finish(session: pytest.Session) -> None:
    global _BROKER, _JVM_ARCHIVE
    if any(item.get_closest_marker("integration") for item in session.items):
        _BROKER = acquire_broker()
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        line = f"safebunny tests use {_BROKER.origin}: {_BROKER.uri.replace('guest:guest', 'guest:***')}"
        if hasattr(session.config, "workeroutput"):  # an xdist worker: the controller prints it at the end
            session.config.workeroutput["safebunny_brokers"] = [line]
        elif reporter is not None:
            reporter.write_line(line, bold=True)
        else:
            print(line)
    if any(item.get_closest_marker("e2e") for item in session.items) and _archive_wanted():
        if os.environ.get(RESULT_ENV):  # an xdist worker: the controller makes the run's one archive
            _JVM_ARCHIVE = SharedArchive(os.environ[RESULT_ENV])
        else:
            _JVM_ARCHIVE = ArchiveRun(os.environ["SPARK_SUBMIT_OPTS"])  # tests/jvm_archive.py: drivers start faster


def _archive_wanted() -> bool:
    return ("SharedArchiveFile" not in os.environ["SPARK_SUBMIT_OPTS"]
            and os.environ.get("SAFEBUNNY_TEST_JVM_ARCHIVE", "1") != "0")


def _share_archive(config: pytest.Config) -> None:
    """On an xdist controller whose run reaches Spark's tests: start the run's one JVM archive before the workers
    start (they inherit :data:`RESULT_ENV` and wait for it, tests/jvm_archive.py)."""
    global _JVM_ARCHIVE
    if (hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None)
            or config.option.collectonly or not _archive_wanted()):
        return
    spark_tiers = [Path(__file__).parent / tier for tier in ("e2e", "delta_spark")]
    paths = [Path(str(arg).split("::")[0]).resolve() for arg in config.args]
    if any(p == t or p in t.parents or t in p.parents for p in paths for t in spark_tiers):
        _JVM_ARCHIVE = ArchiveRun(os.environ["SPARK_SUBMIT_OPTS"])
        os.environ[RESULT_ENV] = str(_JVM_ARCHIVE.share())


_ARCHIVE_LINE: str | None = None  # what became of the archive, once the first Spark test waited for it


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before the first Spark test (and its fixtures): the run's JVM archive, once its driver has made it."""
    global _ARCHIVE_LINE
    if _JVM_ARCHIVE is None or _ARCHIVE_LINE is not None or not item.get_closest_marker("e2e"):
        return
    path, said = _JVM_ARCHIVE.wait()
    if path is not None:
        os.environ["SPARK_SUBMIT_OPTS"] += f" {archive_options(path)}"
    _ARCHIVE_LINE = f"safebunny tests: {said}"



@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):  # type: ignore[no-untyped-def]
    """After a test of the shared session and its fixtures' teardown: a streaming query still running there was
    left behind by the test. It would poll its source on every trigger for the rest of the run (CPU the other
    tests need on 2 cores), so it is stopped, and a warning in the run's summary names the test."""
    yield
    if "spark" not in getattr(item, "fixturenames", ()):
        return
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is None:
        return
    for query in session.streams.active:
        warnings.warn(f"{item.nodeid} left streaming query {query.name or query.id} running; stopped it",
                      stacklevel=1)
        with contextlib.suppress(Exception):
            query.stop()

def pytest_unconfigure(config: pytest.Config) -> None:
    if _JVM_ARCHIVE is not None:
        _JVM_ARCHIVE.remove()
    if _STREAM_BROKER is not None and _STREAM_BROKER is not _BROKER:
        _STREAM_BROKER.stop()
    if _BROKER is not None:
        _BROKER.stop()


@pytest.fixture(scope="session")
def stream_broker() -> Broker:
    """A broker with the stream plugin: the run's broker when it has one, else a throwaway one (said once)."""
    global _STREAM_BROKER
    if _BROKER is None:
        pytest.fail("the stream_broker fixture is only for tests under tests/integration or tests/e2e")
    if _STREAM_BROKER is None:
        _STREAM_BROKER = acquire_stream_broker(_BROKER)
    return _STREAM_BROKER


_WORKER_LINES: list[str] = []  # the brokers each xdist worker used, as it said when it ended


_BEFORE: set[str] | None = None  # the local broker's queues and exchanges when the run began (tests/leaks.py)


def pytest_sessionstart(session: pytest.Session) -> None:
    global _BEFORE
    if not hasattr(session.config, "workerinput"):  # the controller (or a run without xdist)
        _BEFORE = broker_objects()


def pytest_sessionfinish(session: pytest.Session) -> None:
    left = left_behind(_BEFORE) if not hasattr(session.config, "workerinput") else []
    if left:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        line = f"safebunny tests left {len(left)} broker objects behind on 127.0.0.1:5672: {', '.join(left)}"
        (reporter.write_line(line, red=True) if reporter is not None else print(line))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if _STREAM_BROKER is not None and hasattr(session.config, "workeroutput"):
        session.config.workeroutput.setdefault("safebunny_brokers", []).append(
            f"safebunny stream tests used {_STREAM_BROKER.origin}")


class _WorkerLines:
    """xdist's hook, on the controller: what each worker said of its brokers. A plugin registered only where
    xdist is installed (``make test-runtime``'s venv has no xdist, and pytest refuses a hook it does not know)."""

    @staticmethod
    def pytest_testnodedown(node, error) -> None:  # type: ignore[no-untyped-def]
        _WORKER_LINES.extend(line for line in getattr(node, "workeroutput", {}).get("safebunny_brokers", [])
                             if line not in _WORKER_LINES)


def pytest_configure(config: pytest.Config) -> None:
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_WorkerLines(), "safebunny-worker-lines")
        _share_archive(config)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _ARCHIVE_LINE is not None:
        terminalreporter.write_line(_ARCHIVE_LINE, bold=True)
    elif isinstance(_JVM_ARCHIVE, ArchiveRun) and os.environ.get(RESULT_ENV):  # the controller that shared it
        said = SharedArchive(os.environ[RESULT_ENV], timeout=0).wait()[1]
        terminalreporter.write_line(f"safebunny tests: {said}", bold=True)
    for line in _WORKER_LINES:
        terminalreporter.write_line(line, bold=True)
    if _STREAM_BROKER is not None:
        terminalreporter.write_line(f"safebunny stream tests used {_STREAM_BROKER.origin}", bold=True)


@pytest.fixture(scope="session")
def management_broker() -> Iterator:
    """A throwaway broker with the management plugin on a free loopback port (``.management_port``), statistics
    every 500 ms: the machine's broker runs without the plugin, and the tests do not change its plugins. One for
    the run (its tests are one xdist group: xdist_units.SHARED_FIXTURE_GROUPS)."""
    from brokers import ThrowawayBroker, free_port

    port = free_port()
    broker = ThrowawayBroker(plugins=("rabbitmq_management",), extra_config=(
        f"management.tcp.port = {port}", "management.tcp.ip = 127.0.0.1", "collect_statistics_interval = 500"))
    broker.management_port = port  # type: ignore[attr-defined]
    broker.start()
    yield broker
    broker.destroy()


@pytest.fixture(scope="session")
def short_timeout_broker() -> Iterator:
    """A throwaway broker whose ``consumer_timeout`` is 2 s, checked every 500 ms (the channel tick; 60 s by
    default), shared by the tests about overdue acks."""
    from brokers import ThrowawayBroker

    broker = ThrowawayBroker(plugins=(), extra_config=("consumer_timeout = 2000",),
                             advanced_config="[{rabbit, [{channel_tick_interval, 500}]}].").start()
    yield broker
    broker.destroy()


def use_stream_broker() -> tuple:
    """Module-level overrides of ``broker`` and ``amqp_uri`` for test modules about stream queues:
    ``broker, amqp_uri = use_stream_broker()``; every fixture built on them follows."""

    @pytest.fixture(scope="module", name="broker")
    def _broker(stream_broker: Broker) -> Broker:
        return stream_broker

    @pytest.fixture(scope="module", name="amqp_uri")
    def _amqp_uri(stream_broker: Broker) -> str:
        return stream_broker.uri

    return _broker, _amqp_uri


@pytest.fixture(scope="module")
def stream_port(broker: Broker) -> int:
    """The stream protocol port of the module's ``broker`` (with :func:`use_stream_broker`, the stream broker);
    fails when the stream plugin does not answer there."""
    from urllib.parse import urlsplit

    from safebunny.streams.stream_source import stream_protocol_answers

    port = broker.stream_port or 5552
    host = urlsplit(broker.uri).hostname
    if not stream_protocol_answers(host, port):
        pytest.fail(f"the stream plugin does not answer on {host}:{port}: rabbitmq-plugins enable rabbitmq_stream")
    return port


@pytest.fixture(scope="session")
def broker() -> Broker:
    if _BROKER is None:
        pytest.fail("the broker fixture is only for tests under tests/integration or tests/e2e")
    return _BROKER


@pytest.fixture(scope="session")
def amqp_uri(broker: Broker) -> str:
    return broker.uri


@pytest.fixture
def admin(amqp_uri: str) -> Iterator[Admin]:
    a = Admin(amqp_uri)
    yield a
    a.close()


def _name_for(request: pytest.FixtureRequest) -> str:
    base = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name).strip("-")[:60]
    return f"sbt-{base}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> str:
    """A broker-object name derived from the test's id, unique per run."""
    return _name_for(request)


@pytest.fixture
def make_queue(admin: Admin, request: pytest.FixtureRequest) -> Iterator:
    """Factory: ``make_queue(kind="classic", arguments=None)`` declares a durable queue named
    after the test and deletes it when the test ends."""
    created: list[str] = []

    def make(kind: str = "classic", arguments: dict | None = None, suffix: str = "") -> str:
        name = _name_for(request) + suffix
        admin.declare_queue(name, kind, arguments)
        created.append(name)
        return name

    yield make
    for name in created:
        admin.delete_queue(name)


@pytest.fixture
def make_exchange(admin: Admin, request: pytest.FixtureRequest) -> Iterator:
    """Factory: ``make_exchange(kind="topic")`` declares a durable exchange, deleted at the end."""
    created: list[str] = []

    def make(kind: str = "topic") -> str:
        name = _name_for(request) + "-x"
        admin._ch().exchange_declare(name, kind, durable=True)
        created.append(name)
        return name

    yield make
    for name in created:
        admin.delete_exchange(name)


@pytest.fixture(scope="session")
def s3_bucket() -> Iterator[str]:
    """``s3://<bucket>`` on a ``moto_server`` of this session (tests/object_store.py)."""
    from object_store import moto_store

    with moto_store() as bucket:
        yield bucket


@pytest.fixture
def s3_root(s3_bucket: str, request: pytest.FixtureRequest) -> str:
    """A prefix of its own under the session's S3 bucket."""
    return f"{s3_bucket}/{_name_for(request)}"


#: the small saga the command-line tests load by file path
CLI_SAGA_FILE = Path(__file__).parent / "e2e" / "cli_saga.py"


@pytest.fixture
def cli_env(amqp_uri: str, tmp_path: Path, unique_name: str, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """The environment tests/e2e/cli_saga.py reads (a saga of the test's own under ``tmp_path``); its topology
    is deleted at the end."""
    monkeypatch.setenv("SAFEBUNNY_URI", amqp_uri)
    monkeypatch.setenv("CLI_SAGA_NAME", unique_name)
    monkeypatch.setenv("CLI_SAGA_ROOT", str(tmp_path))
    monkeypatch.setenv("CLI_SAGA_FIX", str(tmp_path / "fixed"))
    monkeypatch.delenv("SAFEBUNNY_PASSWORD", raising=False)
    yield tmp_path
    from safebunny import topology
    from safebunny.cli.locate import load_saga

    topology.delete(load_saga(str(CLI_SAGA_FILE)))


@pytest.fixture(scope="session")
def spark(tmp_path_factory):  # type: ignore[no-untyped-def]
    """One local SparkSession for the run: ``local[2,3]`` (2 cores, a failed task is tried 3 times).

    Its checkpoints are local, so it uses :func:`safebunny.spark.conf.use_local_checkpoints`.
    """
    from pyspark.sql import SparkSession

    from safebunny.spark.conf import use_local_checkpoints

    session = (
        use_local_checkpoints(SparkSession.builder.master("local[2,3]"))
        .appName("safebunny-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.streaming.stopTimeout", "30s")
    )
    if os.environ.get("SAFEBUNNY_TEST_DELTA_JARS"):  # the Delta Spark tier: Delta's extension and catalog
        from delta_session import with_delta

        session = with_delta(session, os.environ["SAFEBUNNY_TEST_DELTA_JARS"],
                             warehouse=str(tmp_path_factory.mktemp("warehouse")))
    session = session.getOrCreate()
    yield session
    session.stop()


@pytest.fixture
def volume(tmp_path_factory):  # type: ignore[no-untyped-def]
    """A FUSE folder under /Volumes that behaves as a Unity Catalog volume (no rename, no hard link; tests/
    volume_mount.py), unmounted after the test; skipped, saying why, where FUSE, libfuse2 or fusepy is missing.
    One mount a test (it starts in well under a second), so its log of refused calls is that test's alone and the
    volume tests, each minutes of drivers, are units of their own that the two xdist workers share."""
    from volume_mount import mount, why_not

    reason = why_not()
    if reason:
        pytest.skip(f"no FUSE volume: {reason}")
    with mount(tmp_path_factory.mktemp("volume")) as mounted:
        yield mounted


@pytest.fixture
def database(spark, unique_name):  # type: ignore[no-untyped-def]
    """A database of the shared session's catalog for one test of the Delta Spark tier (its tables are managed
    Delta tables), dropped after."""
    name = "sb_" + re.sub(r"[^a-z0-9]+", "_", unique_name.lower())[-40:]
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {name}")
    yield name
    spark.sql(f"DROP DATABASE IF EXISTS {name} CASCADE")


@pytest.fixture
def default_redaction(spark):  # type: ignore[no-untyped-def]
    """The shared session with Spark's default ``spark.sql.redaction.options.regex`` for one test (an earlier test's
    ``safebunny.register`` or ``hide_uri_in_plans`` may have added ``uri`` to it, which would hide the URI a test
    reads in a plan); the setting is put back afterwards."""
    key = "spark.sql.redaction.options.regex"
    before = spark.conf.get(key, None)
    spark.conf.set(key, "(?i)url")
    yield spark
    if before is None:
        spark.conf.unset(key)
    else:
        spark.conf.set(key, before)


@pytest.fixture(scope="session")
def connect_url(spark):  # type: ignore[no-untyped-def]
    """A Spark Connect server for the run, in the JVM of the shared ``spark`` session (no second JVM, no
    second 20 s start): ``sc://127.0.0.1:<port>``. Connect clients run in their own processes
    (``tests/e2e/connect_client.py``): a Connect session in this process would switch pyspark's functions to
    Connect mode for every later test."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    context = spark.sparkContext._jsc.sc()
    context.conf().set("spark.connect.grpc.binding.address", "127.0.0.1")
    context.conf().set("spark.connect.grpc.binding.port", str(port))
    service = spark._jvm.org.apache.spark.sql.connect.service.SparkConnectService
    service.start(context)
    yield f"sc://127.0.0.1:{port}"
    service.stop(getattr(service, "stop$default$1")(), getattr(service, "stop$default$2")())
