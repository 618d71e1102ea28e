"""Shared fixtures: one real broker per run, self-cleaning queues, one local SparkSession.

Tiers: ``tests/unit`` needs nothing; ``tests/integration`` (marker ``integration``) needs
the broker; ``tests/e2e`` (marker ``e2e``) needs the broker and Spark; ``tests/delta_spark`` (marked ``e2e`` too)
needs them and Delta Spark, and runs only in ``make test-delta``. Markers are added from the folder, so a test cannot
forget its tier.
"""

from __future__ import annotations

import json
import os
import re
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

sys.path.insert(0, str(Path(__file__).parent))

from brokers import Broker, acquire_broker, acquire_stream_broker  # noqa: E402
from jvm_archive import RESULT_ENV, ArchiveRun, SharedArchive, archive_options  # noqa: E402
from leaks import broker_objects, left_behind  # noqa: E402
from spark_home import use_shadow_spark_home  # noqa: E402

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


#: fixtures that start something costly once per process that uses them (a throwaway broker, a compile), and the
#: xdist group of the tests that use them: under ``make test``'s two workers those tests run on one worker, so it
#: starts once (a test is otherwise a unit of its own, and the two workers would each start it)
#: (the stream broker's: the drivers group, which test_stream_crash is in)
SHARED_FIXTURE_GROUPS = {"management_broker": "management-broker", "short_timeout_broker": "short-timeout-broker",
                         "offline_jar": "offline-jar", "stream_broker": "stream-broker"}


def _drivers_unit(item: pytest.Item) -> str:
    """The xdist group of a test in a drivers file: its module when the module starts something once for its tests
    (a module-scoped fixture: a kill matrix, a shared JVM), else the test alone, so the two workers share the drivers
    tests and a long file is not one worker's tail."""
    defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    if any(d and d[-1].scope == "module" for d in defs.values()):
        return f"drivers:{Path(str(item.fspath)).name}"
    return f"drivers:{item.nodeid}"


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if not item.get_closest_marker("xdist_group"):
            fixtures = getattr(item, "fixturenames", ())
            group = next((g for name, g in SHARED_FIXTURE_GROUPS.items() if name in fixtures), None)
            if group:
                item.add_marker(pytest.mark.xdist_group(group))
        parts = Path(str(item.fspath)).parts
        group = item.get_closest_marker("xdist_group")
        # the Delta Spark tier's tests are drivers tests too (most run drivers of their own; all run Delta Spark)
        if (group.args[:1] == ("drivers",)) if group else "delta_spark" in parts:
            item.add_marker(pytest.mark.xdist_group(_drivers_unit(item)))
        if "integration" in parts:
            item.add_marker(pytest.mark.integration)
        elif "e2e" in parts or "delta_spark" in parts:
            if "delta_spark" in parts and not os.environ.get("SAFEBUNNY_TEST_DELTA_JARS"):
                raise pytest.UsageError("tests/delta_spark needs Delta Spark's jars and pyspark 4.2.0: run `make "
                                        "test-delta` (SAFEBUNNY_TEST_DELTA_JARS names the jars' folder)")
            item.add_marker(pytest.mark.integration)
            item.add_marker(pytest.mark.e2e)
    # tier by tier: unit, integration, then Spark's (they fail fast, and run beside the making of the run's JVM
    # archive, which the first Spark test waits for). Among Spark's, the files whose tests run drivers as processes of
    # their own (crash, takeover, log and cluster tests: ``pytestmark`` xdist group "drivers") go first: they are the
    # longest units, and :func:`_drivers_unit` splits them so that under ``make test``'s two workers both take them
    # and neither is left with a long tail of them.

    def tier(item: pytest.Item) -> int:
        if not item.get_closest_marker("integration"):
            return 0
        if not item.get_closest_marker("e2e"):
            return 1
        group = item.get_closest_marker("xdist_group")
        return 2 if group and str(group.args[0]).startswith("drivers") else 3

    items.sort(key=tier)


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
    the run (its tests are one xdist group: SHARED_FIXTURE_GROUPS)."""
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


class Admin:
    """Broker-side helpers for tests: declare, publish, read back, count."""

    def __init__(self, uri: str) -> None:
        import pika

        self.uri = uri
        self.connection = pika.BlockingConnection(pika.URLParameters(uri))
        self.channel = self.connection.channel()

    def _ch(self):  # type: ignore[no-untyped-def]
        """The channel, on a new connection when the broker dropped this one: a blocking connection sends no
        heartbeats while the test waits for a driver, so after a few idle minutes the broker resets it."""
        import pika

        try:
            self.connection.process_data_events(0)
        except pika.exceptions.AMQPError:
            pass
        if self.connection.is_closed:
            self.connection = pika.BlockingConnection(pika.URLParameters(self.uri))
            self.channel = self.connection.channel()
        elif self.channel.is_closed:
            self.channel = self.connection.channel()
        return self.channel

    def declare_queue(self, name: str, kind: str = "classic", arguments: dict | None = None) -> str:
        args = dict(arguments or {})
        if kind != "classic":
            args["x-queue-type"] = kind
        self._ch().queue_declare(name, durable=True, arguments=args)
        return name

    def publish(self, queue: str, bodies: list[bytes], properties: list | None = None,
                exchange: str = "") -> None:
        import pika

        ch = self._ch()
        ch.confirm_delivery()
        for i, body in enumerate(bodies):
            props = properties[i] if properties else pika.BasicProperties(delivery_mode=2)
            ch.basic_publish(exchange, queue, body, props, mandatory=False)

    def ready(self, queue: str) -> int:
        """Messages ready in ``queue`` (a passive declare; unacked messages are not counted)."""
        return self._ch().queue_declare(queue, passive=True).method.message_count

    def get_all(self, queue: str, limit: int = 1_000_000) -> list:
        """Take every ready message off ``queue`` (acked); returns (method, properties, body)."""
        out = []
        ch = self._ch()
        while len(out) < limit:
            method, props, body = ch.basic_get(queue, auto_ack=True)
            if method is None:
                break
            out.append((method, props, body))
        return out

    def delete_queue(self, name: str) -> None:
        try:
            self._ch().queue_delete(name)
        except Exception:
            pass

    def delete_exchange(self, name: str) -> None:
        try:
            self._ch().exchange_delete(name)
        except Exception:
            pass

    def close(self) -> None:
        try:
            self.connection.close()
        except Exception:
            pass


def wait_until(condition, timeout: float = 60.0, what: str = "condition", every: float = 0.1) -> None:  # type: ignore[no-untyped-def]
    """Poll ``condition()`` until it is true; fail naming ``what`` after ``timeout`` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


def run_drivers(commands: list[tuple[list[str], dict[str, str]]], timeout: float, at_once: int = 2) -> list:
    """Run each ``(argv, env)`` as a process of its own (a new session, so a kill point's ``kill -9`` ends only
    it), at most ``at_once`` at a time; their ``CompletedProcess`` results in the order given. A kill matrix's
    drivers are independent (own queues, folders and checkpoints), and a crash driver spends much of its life
    starting a JVM and waiting on the broker: two at a time by default."""
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    def run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:  # type: ignore[type-arg]
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, start_new_session=True)

    with ThreadPoolExecutor(max(1, at_once)) as pool:
        return [f.result() for f in [pool.submit(run, argv, env) for argv, env in commands]]


def restart_in_one_driver(driver: Path, uri: str, scenarios: list[dict], env: dict[str, str] | None = None) -> Any:
    """One process of the driver script ``driver`` that restarts every scenario (each killed in a driver of its
    own before: :func:`run_drivers`) one after another, from ``SAFEBUNNY_TEST_SCENARIOS``: one Spark session
    start for all of a kill matrix's restarts. Its ``CompletedProcess``. ``env``: more of its environment."""
    import subprocess

    env = {**{k: v for k, v in os.environ.items() if k != "SAFEBUNNY_CRASH_AT"}, **(env or {})}
    env["SAFEBUNNY_TEST_SCENARIOS"] = json.dumps(scenarios)
    return subprocess.run([sys.executable, str(driver), uri], env=env, capture_output=True, text=True,
                          timeout=120 + 120 * len(scenarios), start_new_session=True)


def publish_numbered(uri: str, queue: str, n: int, start: int = 0, body=None, **props) -> None:  # type: ignore[no-untyped-def]
    """Publish ``n`` persistent messages with ids ``m<start>..``, confirmed; ``body(i)`` makes bodies."""
    import pika

    conn = pika.BlockingConnection(pika.URLParameters(uri))
    ch = conn.channel()
    ch.confirm_delivery()
    for i in range(start, start + n):
        payload = body(i) if body else f"m{i}".encode()
        ch.basic_publish("", queue, payload, pika.BasicProperties(message_id=f"m{i}", delivery_mode=2, **props))
    conn.close()


def queue_totals(broker: Broker, queue: str) -> tuple[int, int]:
    """``(ready, unacked)`` of ``queue`` as the broker counts them (rabbitmqctl)."""
    if broker.ctl is None:
        raise RuntimeError(f"queue_totals needs rabbitmqctl access to {broker.origin}")
    out = broker.ctl("list_queues", "-q", "--no-table-headers", "name", "messages_ready", "messages_unacknowledged")
    for line in out.splitlines():
        cols = line.split()
        if cols and cols[0] == queue:
            return int(cols[1]), int(cols[2])
    raise KeyError(queue)


def queue_reader(uri: str, queue: str, journal: str, **extra: str):  # type: ignore[no-untyped-def]
    """The reader of a classic queue as Spark builds it (options parsed, schema derived), for tests that drive
    ``latestOffset``/``partitions``/``read``/``commit`` themselves."""
    from pyspark_safebunny.queue_reader import SafeBunnyQueueReader
    from pyspark_safebunny.schema import schema_for
    from safebunny.options.source import parse_source_options

    options = parse_source_options({"uri": uri, "queue": queue, "queueType": "classic", "journalLocation": journal,
                                    **extra})
    return SafeBunnyQueueReader(options, schema_for(options.include_headers, True))


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


@pytest.fixture(scope="module")
def volume(tmp_path_factory):  # type: ignore[no-untyped-def]
    """A FUSE folder under /Volumes that behaves as a Unity Catalog volume (no rename, no hard link; tests/
    volume_mount.py), unmounted after the module; skipped, saying why, where FUSE, libfuse2 or fusepy is missing."""
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
