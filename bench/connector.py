"""The connector cases: the source alone (into ``noop``), the sink alone (from a generated
DataFrame), a source → transform → sink stage, and the end-to-end latency through a running stage.

Rates come from Spark's own progress: the rows of the batches after the first non-empty one,
over the span from the end of that first batch to the end of the last, so that a new query's
cold start is not counted, as the raw clients' connection set-up is not (the first batch's size
and duration are reported beside). Each function raises on any failure; the caller records the reason.
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import pika

from bench.broker import QueueMonitor, make_body, stream_port

__all__ = [
    "BODY_SCHEMA",
    "ConnRun",
    "connector_missing",
    "dump_jfr",
    "run_latency_probe",
    "run_sink",
    "run_source",
    "run_stage",
    "start_spark",
]

BODY_SCHEMA = "id long, ts double, type string, customer string, amount double, currency string, note string"
_PROBE_TIMEOUT_S = 120.0


class ConnectorBenchError(RuntimeError):
    """A connector case did not deliver what it should have (count mismatch, timeout, query error)."""


@dataclass
class ConnRun:
    """One measured connector run."""

    count: int
    start: float
    end: float
    series: list[tuple[float, int]] = field(default_factory=list)
    batch_ms: list[float] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.count / max(self.end - self.start, 1e-9)


def connector_missing() -> dict[str, str]:
    """Which connector roles are not installed yet: role → reason (empty when all are there)."""
    import importlib

    missing = {}
    for role, module in (("source", "pyspark_safebunny.microbatch_reader"), ("sink", "pyspark_safebunny.writer")):
        try:
            importlib.import_module(module)
        except ImportError as exc:
            missing[role] = f"{module} is not installed ({exc}); run `make install` once it has landed"
    try:
        from pyspark_safebunny.microbatch_reader import create_microbatch_reader  # noqa: F401
        importlib.import_module("pyspark_safebunny.stream_queue_reader")
    except ImportError as exc:
        missing["stream source"] = f"pyspark_safebunny.stream_queue_reader is not installed ({exc})"
    return missing


def start_spark(workdir: Path, delta_jars: str | None = None):  # type: ignore[no-untyped-def]
    """A local[2] session tuned for the benchmark (no UI, long progress history), with
    :func:`safebunny.spark.conf.local_checkpoint_conf` (the benchmark's checkpoints are on local disk;
    ``bench.bench_source`` switches it off per query to compare with Spark's default). ``delta_jars``: a folder of
    Delta Spark's jars (``make delta-jars``): tables by name on Delta Spark, with the ``.venv-delta`` interpreter."""
    import os

    from pyspark.sql import SparkSession

    from safebunny.spark.conf import local_checkpoint_conf

    java_opts = f"-Djava.io.tmpdir={workdir}"
    jfr = os.environ.get("SAFEBUNNY_BENCH_JFR")
    if jfr:  # bench/profile.py --jfr: a Flight Recording of the driver JVM, dumped by dump_jfr()
        java_opts += (f" -XX:FlightRecorderOptions=repository={jfr}.repository"
                      " -XX:StartFlightRecording=name=bench,settings=profile")
    spark = (SparkSession.builder.master("local[2]").appName("safebunny-bench")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.streaming.numRecentProgressUpdates", "100000")
             .config("spark.sql.warehouse.dir", str(workdir / "warehouse"))
             .config("spark.driver.extraJavaOptions", java_opts)
             .config(map=local_checkpoint_conf()))
    if delta_jars:
        import glob

        spark = (spark.config("spark.jars", ",".join(sorted(glob.glob(os.path.join(delta_jars, "*.jar")))))
                 .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
                 .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
                 # Delta rebuilds a table's state after each commit in this many tasks (50 by default): on local[2]
                 # the first read after a commit took 4.7-10 s with 50 and 1.1-4.3 s with 2 (docs/performance.md),
                 # as spark.sql.shuffle.partitions is 2 above
                 .config("spark.databricks.delta.snapshotPartitions", "2"))
    spark = spark.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        import safebunny

        if hasattr(safebunny, "register"):
            safebunny.register(spark)
    except Exception:  # noqa: BLE001 - auto-registration covers it when register is absent or fails
        pass
    return spark


def dump_jfr() -> str | None:
    """Write the driver JVM's Flight Recording to ``$SAFEBUNNY_BENCH_JFR`` (before Spark stops); says what it did."""
    import os
    import subprocess

    from bench.memory import classify, psutil

    target = os.environ.get("SAFEBUNNY_BENCH_JFR")
    if not target:
        return None
    for proc in psutil.Process().children(recursive=True):
        try:
            if classify(proc.cmdline()) == "driver_jvm":
                out = subprocess.run(["jcmd", str(proc.pid), "JFR.dump", "name=bench", f"filename={target}"],
                                     capture_output=True, text=True, timeout=120, check=False)
                return (out.stdout or out.stderr).strip().splitlines()[-1] if (out.stdout or out.stderr) else ""
        except (psutil.Error, OSError, subprocess.SubprocessError) as exc:
            return f"could not dump the Flight Recording: {exc}"
    return "no driver JVM found to dump a Flight Recording from"


def _epoch(ts: str) -> float:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def phases(progress: list[Any]) -> dict[str, float]:
    """Median milliseconds of each phase Spark reports (latestOffset, addBatch, walCommit, ...) over the
    non-empty batches: where a micro-batch spends its time."""
    per: dict[str, list[float]] = {}
    for p in progress:
        if int(p.numInputRows) > 0:
            for k, v in (p.durationMs or {}).items():
                per.setdefault(k, []).append(float(v))
    return {k: statistics.median(v) for k, v in sorted(per.items(), key=lambda kv: -statistics.median(kv[1]))}


@dataclass
class _Batches:
    rows: int  # all rows of the non-empty batches
    series: list[tuple[float, int]]  # cumulative, for the plot
    durations: list[float]  # ms of every non-empty batch
    spans: list[tuple[float, float, int]]  # (start, end, rows) of every non-empty batch


def _from_progress(progress: list[Any]) -> _Batches:
    """The non-empty batches of a query's progress."""
    rows, series, durations, spans = 0, [], [], []
    for p in progress:
        n = int(p.numInputRows)
        if n <= 0:
            continue
        start = _epoch(p.timestamp)
        duration = float(p.batchDuration)
        end = start + duration / 1000.0
        if not series:
            series.append((start, 0))
        rows += n
        series.append((end, rows))
        durations.append(duration)
        spans.append((start, end, n))
    return _Batches(rows, series, durations, spans)


def _steady_run(b: _Batches, progress: list[Any]) -> ConnRun:
    """The rate in steady state: the first non-empty batch (a new query's cold start: the reader process,
    the Python workers and their connections start within it) is left out when later batches exist; its
    size and duration are kept in ``extra``."""
    if not b.spans:
        raise ConnectorBenchError("the query ran no batch with rows")
    steady = b.spans[1:] if len(b.spans) >= 2 else b.spans
    start = b.spans[0][1] if len(b.spans) >= 2 else b.spans[0][0]
    count = sum(n for _, _, n in steady)
    extra = {"phases_ms_p50": phases(progress), "batches": len(b.spans),
             "first_batch": {"rows": b.spans[0][2], "ms": b.durations[0]},
             "rate_from": "batches after the first" if len(b.spans) >= 2 else "the only batch (includes cold start)"}
    return ConnRun(count, start, steady[-1][1], b.series, b.durations, extra=extra)


def _await(query: Any, timeout_s: float, what: str) -> None:
    if not query.awaitTermination(timeout_s):
        query.stop()
        raise ConnectorBenchError(f"{what} did not finish within {timeout_s:.0f} s")
    if query.exception() is not None:
        raise ConnectorBenchError(f"{what} failed: {str(query.exception()).splitlines()[0][:300]}")


def _reader(spark: Any, uri: str, queue: str, queue_type: str, mmpt: int | None, partitions: int, workdir: Path,
            extra: dict[str, str] | None = None) -> Any:
    """The source's DataFrame; ``mmpt`` None leaves ``maxMessagesPerTrigger`` at its default."""
    r = (spark.readStream.format("safebunny").option("uri", uri).option("queue", queue)
         .option("queueType", queue_type))
    if mmpt is not None:
        r = r.option("maxMessagesPerTrigger", str(mmpt))
    if queue_type == "stream":
        r = (r.option("startingOffsets", "earliest").option("minPartitions", str(partitions))
             .option("streamPort", str(stream_port())))
    else:
        r = r.option("journalLocation", str(workdir / f"journal-{uuid.uuid4().hex[:8]}"))
    for k, v in (extra or {}).items():
        r = r.option(k, v)
    return r.load()


def _drained(query: Any, n: int, timeout_s: float, role: str, what: str, queue: str) -> ConnRun:
    """Wait for an ``availableNow`` query, check it read ``n`` rows, and return its steady-state run."""
    _await(query, timeout_s, what)
    progress = query.recentProgress
    batches = _from_progress(progress)
    if batches.rows != n:
        raise ConnectorBenchError(f"the {role} read {batches.rows} rows from {queue!r}, expected {n}")
    return _steady_run(batches, progress)


def run_source(spark: Any, uri: str, queue: str, queue_type: str, n: int, mmpt: int | None, workdir: Path,
               partitions: int = 1, timeout_s: float = 600.0) -> ConnRun:
    """Drain ``n`` messages into Spark's ``noop`` sink with ``availableNow``."""
    df = _reader(spark, uri, queue, queue_type, mmpt, partitions, workdir)
    query = (df.writeStream.format("noop").option("checkpointLocation", str(workdir / f"ck-{uuid.uuid4().hex[:8]}"))
             .trigger(availableNow=True).start())
    return _drained(query, n, timeout_s, "source", f"the source query on {queue!r}", queue)


def _generated(spark: Any, n: int, partitions: int = 2) -> Any:
    from pyspark.sql import functions as F  # noqa: N812

    return spark.range(0, n, 1, numPartitions=partitions).select(F.to_json(F.struct(
        F.col("id"), (F.unix_micros(F.current_timestamp()) / 1e6).alias("ts"), F.lit("OrderPlaced").alias("type"),
        F.format_string("customer-%05d", F.col("id") % 997).alias("customer"),
        ((F.col("id") % 10000) / 100.0).alias("amount"), F.lit("EUR").alias("currency"),
        F.lit("x" * 76).alias("note"))).cast("binary").alias("value"),
        F.concat(F.lit("m-"), F.col("id").cast("string")).alias("messageId"))


def run_sink(spark: Any, uri: str, queue: str, queue_type: str, n: int, timeout_s: float = 600.0) -> ConnRun:
    """Write ``n`` generated ~200-byte JSON rows to ``queue`` with a batch ``df.write``.

    Classic and quorum queues: the rate is taken from the queue's depth (last empty sample to
    first full one). Streams report no depth; there it comes from the broker's chunk timestamps.
    """
    df = _generated(spark, n)
    writer = (df.write.format("safebunny").option("uri", uri).option("exchange", "").option("routingKey", queue)
              .mode("append"))
    if queue_type == "stream":
        from bench.raw import stream_write_span

        t0 = time.time()
        writer.save()
        t1 = time.time()
        span = stream_write_span(uri, queue, n)
        return ConnRun(span.count, span.start, span.end, span.series,
                       extra={"rate_from": "the stream's chunk timestamps", "save_wall_s": round(t1 - t0, 3)})
    with QueueMonitor(uri, queue, interval=0.1) as mon:
        t0 = time.time()
        writer.save()
        t1 = time.time()
        deadline = time.monotonic() + 10
        while (not mon.samples or mon.samples[-1][1] < n) and time.monotonic() < deadline:
            time.sleep(0.05)
    span = mon.fill_span(n)
    if span is None:
        depth = mon.samples[-1][1] if mon.samples else "?"
        raise ConnectorBenchError(f"the sink's queue {queue!r} holds {depth} messages, expected {n}")
    series = [(t, c) for t, c in mon.samples if span[0] <= t <= span[1]]
    return ConnRun(n, span[0], span[1], series,
                   extra={"rate_from": "queue depth", "save_wall_s": round(t1 - t0, 3)})


def _stage_frame(spark: Any, uri: str, in_queue: str, queue_type: str, mmpt: int, workdir: Path,
                 partitions: int = 1, extra: dict[str, str] | None = None) -> Any:
    from pyspark.sql import functions as F  # noqa: N812

    src = _reader(spark, uri, in_queue, queue_type, mmpt, partitions, workdir, extra)
    parsed = src.select(F.from_json(F.col("value").cast("string"), BODY_SCHEMA).alias("m"),
                        F.col("messageId"), F.col("correlationId"))
    return parsed.select(F.to_json(F.struct(F.col("m.*"), F.lit("priced").alias("stage"))).cast("binary")
                         .alias("value"), F.col("messageId").alias("causationId"), F.col("correlationId"))


def _stage_writer(df: Any, uri: str, out_queue: str, workdir: Path) -> Any:
    return (df.writeStream.format("safebunny").option("uri", uri).option("exchange", "")
            .option("routingKey", out_queue).option("checkpointLocation", str(workdir / f"ck-{uuid.uuid4().hex[:8]}")))


def run_stage(spark: Any, uri: str, in_queue: str, out_queue: str, queue_type: str, n: int, mmpt: int,
              workdir: Path, partitions: int = 1, timeout_s: float = 600.0) -> ConnRun:
    """Source → from_json/to_json → sink, draining ``n`` messages with ``availableNow``."""
    df = _stage_frame(spark, uri, in_queue, queue_type, mmpt, workdir, partitions)
    query = _stage_writer(df, uri, out_queue, workdir).trigger(availableNow=True).start()
    return _drained(query, n, timeout_s, "stage", f"the stage query {in_queue!r} → {out_queue!r}", in_queue)


def paced_publish(uri: str, queue: str, n: int, rate: float, stop: threading.Event) -> None:
    """Publish ``n`` messages at about ``rate`` msg/s, each carrying its send time (with confirms)."""
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    ch = conn.channel()
    ch.confirm_delivery()
    props = pika.BasicProperties(delivery_mode=2, content_type="application/json")
    t0 = time.monotonic()
    burst = max(1, int(rate / 100))  # 100 bursts per second
    try:
        sent = 0
        while sent < n and not stop.is_set():
            due = t0 + sent / rate
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)  # pacing the load, not synchronisation
            for _ in range(min(burst, n - sent)):
                ch.basic_publish("", queue, make_body(sent), props)
                sent += 1
    finally:
        conn.close()


def collect_latencies(uri: str, queue: str, n: int, timeout_s: float,
                      ready: threading.Event | None = None) -> list[float]:
    """Consume ``n`` messages from ``queue``; each latency is arrival time minus the body's ``ts``."""
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=1000)
    out: list[float] = []

    def on_message(channel: Any, method: Any, props: Any, body: bytes) -> None:
        now = time.time()
        out.append((now - orjson.loads(body)["ts"]) * 1000.0)
        if len(out) % 100 == 0 or len(out) == n:
            channel.basic_ack(method.delivery_tag, multiple=True)

    ch.basic_consume(queue, on_message)
    if ready is not None:
        ready.set()
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < n and time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.2)
    finally:
        conn.close()
    return out


def run_latency_probe(uri: str, in_queue: str, out_queue: str, n: int, rate: float,
                      start_stage: Any, stop_stage: Any) -> ConnRun:
    """Start a stage (``start_stage()``), feed it ``n`` messages at ``rate`` msg/s, and time each one
    from publish to arrival on ``out_queue``; ``stop_stage()`` returns a dict that may hold the stage's
    ``batch_ms`` and ``phases_ms_p50``."""
    start_stage()
    got: list[float] = []
    ready = threading.Event()
    stop = threading.Event()
    collector = threading.Thread(target=lambda: got.extend(collect_latencies(uri, out_queue, n, _PROBE_TIMEOUT_S,
                                                                             ready)), daemon=True)
    collector.start()
    ready.wait(30)
    t0 = time.time()
    try:
        paced_publish(uri, in_queue, n, rate, stop)
        collector.join(_PROBE_TIMEOUT_S)
    finally:
        stop.set()
        stage = stop_stage() or {}
    t1 = time.time()
    if len(got) < n:
        raise ConnectorBenchError(f"only {len(got)} of {n} messages came through the stage within "
                                  f"{_PROBE_TIMEOUT_S:.0f} s")
    extra = {"rate_offered": rate}
    if stage.get("phases_ms_p50"):
        extra["phases_ms_p50"] = stage["phases_ms_p50"]
    return ConnRun(n, t0, t1, [(t0, 0), (t1, n)], stage.get("batch_ms", []), got, extra=extra)


def spark_stage_controls(spark: Any, uri: str, in_queue: str, out_queue: str, workdir: Path,
                         mmpt: int = 10_000) -> tuple[Any, Any]:
    """(start, stop) for a continuously running connector stage with the default trigger."""
    holder: dict[str, Any] = {}

    def start() -> None:
        df = _stage_frame(spark, uri, in_queue, "classic", mmpt, workdir)
        query = _stage_writer(df, uri, out_queue, workdir).start()
        holder["q"] = query
        deadline = time.monotonic() + 60
        while not query.recentProgress and time.monotonic() < deadline:  # first (empty) batch ran: it is reading
            if query.exception() is not None:
                raise ConnectorBenchError(f"the latency stage failed: {str(query.exception()).splitlines()[0]}")
            time.sleep(0.1)

    def stop() -> dict[str, Any]:
        query = holder.get("q")
        if query is None:
            return {}
        deadline = time.monotonic() + 10
        while query.status.get("isTriggerActive") and time.monotonic() < deadline:
            time.sleep(0.05)  # let the running batch finish, so stopping does not abort a write
        progress = query.recentProgress
        query.stop()
        return {"batch_ms": _from_progress(progress).durations, "phases_ms_p50": phases(progress)}

    return start, stop
