"""Reproduction loop for Spark's "Task serialization failed: Illegal size N of collection" with several
streaming queries of one SparkSession planning and replaying batches at once.

    python -m bench.illegal_size --source pyds --queries 3 --iterations 200 --replay --out /tmp/illegal

Each iteration starts ``--queries`` availableNow queries side by side, each from its own checkpoint (so from
the second iteration on, each restarts where it stopped), waits for all, and records any failure with its
whole message (Spark's abort message carries the Java stack trace). ``--replay`` deletes each query's last
commit file before the next start, so every start replays its last batch from the offset log, as a restart
after a crash does. Sources: ``pyds`` (a minimal Python data source with no broker, in this file, registered with
``spark.dataSource.register``), ``static`` (the same source as a ``pyspark_*`` module Spark finds by itself,
as it finds safebunny: written to a temporary directory put on ``PYTHONPATH``),
``rate`` (Spark's ``rate-micro-batch``), ``safebunny`` (``format("safebunny")`` on RabbitMQ queues of
``--uri``, filled before each iteration), ``saga`` (a three-step saga's step queries, started with
``safebunny.saga.run.runner.start_query`` as ``drain`` does, on orders started before each iteration).
``--sink`` is what the foreachBatch function does with the batch: ``arrow`` (``toArrow``, as a saga step
does), ``count``, or ``none``. Run it with ``-m`` from the repository root (``bench/profile.py`` would hide
the standard library's ``profile`` module from a script run by path).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from typing import Any

#: a minimal streaming source with no broker, as a ``pyspark_*`` module: Spark's own lookup finds its
#: ``DefaultSource`` (``static``) as it finds safebunny's; ``RegisteredSource`` is the same reader, for
#: ``spark.dataSource.register`` (``pyds``)
PROBE_MODULE = "pyspark_illegal_size_probe"
PROBE_SOURCE = """
import time

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow


class Range(InputPartition):
    def __init__(self, start, end):
        self.start, self.end = start, end


class CountingReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    # offsets count wall-clock tenths of a second: every start has new rows to read

    def initialOffset(self):
        return {"n": 0}

    def prepareForTriggerAvailableNow(self):
        self.target = int(time.time() * 10) % 1_000_000_000

    def latestOffset(self, start, limit):
        return {"n": max(start["n"], getattr(self, "target", int(time.time() * 10) % 1_000_000_000))}

    def partitions(self, start, end):
        return [Range(start["n"], min(end["n"], start["n"] + 50))]

    def read(self, partition):
        for i in range(partition.start, partition.end):
            yield (i, f"v{i}")

    def commit(self, end):
        pass


class BatchReader(DataSourceReader):
    def read(self, partition):
        yield (0, "v0")


class DefaultSource(DataSource):
    @classmethod
    def name(cls):
        return "illegal_size_static"

    def schema(self):
        return "id long, value string"

    def streamReader(self, schema):
        return CountingReader()

    def reader(self, schema):
        return BatchReader()


class RegisteredSource(DefaultSource):
    @classmethod
    def name(cls):
        return "illegal_size_registered"
"""


def _probe_module(work: str) -> None:
    """Write the probe source's module and put its folder on ``PYTHONPATH`` (the JVM, started next, and its
    Python workers inherit it) and on this process's ``sys.path``."""
    folder = os.path.join(work, "modules", PROBE_MODULE)
    os.makedirs(folder)
    with open(os.path.join(folder, "__init__.py"), "w") as fh:
        fh.write(PROBE_SOURCE)
    parent = os.path.dirname(folder)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (parent, os.environ.get("PYTHONPATH")) if p)
    sys.path.insert(0, parent)


def _session(args: argparse.Namespace) -> Any:
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(args.master).appName("illegal-size")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    if args.source == "pyds":
        import importlib

        spark.dataSource.register(importlib.import_module(PROBE_MODULE).RegisteredSource)
    return spark


def _frame(spark: Any, args: argparse.Namespace, q: int, queues: list[str], work: str) -> Any:
    if args.source in ("pyds", "static"):
        name = "illegal_size_registered" if args.source == "pyds" else "illegal_size_static"
        return spark.readStream.format(name).load()
    if args.source == "rate":
        return (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 20)
                .option("numPartitions", 1).load())
    return (spark.readStream.format("safebunny").option("uri", args.uri).option("queue", queues[q])
            .option("queueType", "classic").option("journalLocation", os.path.join(work, f"journal{q}"))
            .option("maxMessagesPerTrigger", "20").load())


def _function(args: argparse.Namespace) -> Any:
    def run(df: Any, batch_id: int) -> None:
        if args.sink == "arrow":
            df.toArrow()
        elif args.sink == "count":
            df.count()

    return run


#: the keys PythonStreamingSourceRunner.init puts into its function's envVars (Spark 4.x)
RUNNER_KEYS = ("SPARK_LOCAL_DIRS", "SPARK_AUTH_SOCKET_TIMEOUT", "SPARK_BUFFER_SIZE", "SPARK_PYTHON_RUNTIME")


def _shared_env(spark: Any, args: argparse.Namespace) -> Any:
    """The envVars map (a Scala ``mutable.HashMap`` behind a Java wrapper) of the Python function of the source
    Spark found by itself: one per JVM, shared by every query and task of that format; None for the others."""
    name = {"static": "illegal_size_static", "safebunny": "safebunny", "saga": "safebunny"}.get(args.source)
    if name is None:
        return None
    return spark._jsparkSession.sessionState().dataSourceManager().lookupDataSource(name).dataSourceCls().envVars()


def _map_state(env: Any) -> tuple[int, int]:
    """(the size the map reports, the entries its iterator yields): they differ once two threads raced in put."""
    return env.size(), sum(1 for _ in env.keySet())


def _fresh_map(env: Any, pythonpath: str) -> None:
    """The map as a driver that just started has it: PYTHONPATH only."""
    env.underlying().clear()
    env.put("PYTHONPATH", pythonpath)


def _batch_loop(spark: Any, args: argparse.Namespace, stop: threading.Event, outcomes: Counter[str],
                tag: str) -> None:
    """Batch reads of the same format one after another until ``stop``: Spark jobs whose tasks carry the
    shared map, serialised by the DAGScheduler while the iterations' streaming queries start."""
    name = "illegal_size_static" if args.source == "static" else "safebunny"
    n = 0
    while not stop.is_set():
        n += 1
        try:
            if args.first_alone:
                from safebunny.spark import first_stream

                with first_stream.guarded(spark):
                    spark.read.format(name).load().count()
            else:
                spark.read.format(name).load().count()
            outcomes["batch-ok"] += 1
        except Exception as exc:  # noqa: BLE001 - recorded
            text = str(exc)
            kind = "batch-illegal-size" if "Illegal size" in text else "batch-other"
            outcomes[kind] += 1
            path = os.path.join(args.out, f"{kind}-{tag}-{n}.txt")
            with open(path, "w") as fh:
                fh.write(text)
            print(f"batch read {n}: {kind} -> {path}", flush=True)


def _poke_map(env: Any, stop: threading.Event) -> None:
    """Take the source runner's keys out of the shared map and put them back, over and over: the change of
    size a new driver's first streaming query makes once, here from a thread of this process (py4j)."""
    while not stop.is_set():
        for key in RUNNER_KEYS:
            env.remove(key)
        for key in RUNNER_KEYS:
            env.put(key, "x")


def _start(spark: Any, writer: Any, args: argparse.Namespace) -> Any:
    if args.first_alone:
        from safebunny.spark import first_stream

        return first_stream.start(spark, writer)
    return writer.start()


def _drop_last_commit(checkpoint: str) -> None:
    commits = os.path.join(checkpoint, "commits")
    if not os.path.isdir(commits):
        return
    ids = sorted(int(f) for f in os.listdir(commits) if f.isdigit())
    if ids:
        os.remove(os.path.join(commits, str(ids[-1])))
        crc = os.path.join(commits, f".{ids[-1]}.crc")
        if os.path.exists(crc):
            os.remove(crc)


def _publish(args: argparse.Namespace, queues: list[str], n: int) -> None:
    import pika

    conn = pika.BlockingConnection(pika.URLParameters(args.uri))
    ch = conn.channel()
    for queue in queues:
        ch.queue_declare(queue, durable=True)
        for i in range(n):
            ch.basic_publish("", queue, f"m{i}".encode(),
                             pika.BasicProperties(message_id=uuid.uuid4().hex, delivery_mode=2))
    conn.close()


def _delete(args: argparse.Namespace, queues: list[str]) -> None:
    import pika

    conn = pika.BlockingConnection(pika.URLParameters(args.uri))
    ch = conn.channel()
    for queue in queues:
        ch.queue_delete(queue)
    conn.close()


def _saga(args: argparse.Namespace, tag: str, work: str) -> Any:
    import safebunny

    saga = safebunny.Saga(f"illegal-size-{tag}", uri=args.uri, root=os.path.join(work, "saga"),
        settings=safebunny.SagaSettings(retry=safebunny.Retry(delays=("1s",)), batch_size=20))

    @saga.step("stock", consumes="OrderPlaced", from_node="orders", schema="orderId string, qty int",
               produces=["StockReserved"])
    def reserve(orders: Any, ctx: Any) -> Any:
        ok = orders.select("messageId", "orderId", "qty")
        return safebunny.Outcome(effects=[safebunny.append(ok, os.path.join(work, "reservations"))],
                                 emits=[safebunny.emit(ok, type="StockReserved")])

    @saga.step("shipping", consumes="StockReserved", from_node="stock", schema="orderId string",
               produces=["Shipped"])
    def ship(reserved: Any, ctx: Any) -> Any:
        ok = reserved.select("messageId", "orderId")
        return safebunny.Outcome(effects=[safebunny.append(ok, os.path.join(work, "shipments"))],
                                 emits=[safebunny.emit(ok, type="Shipped")])

    @saga.step("billing", consumes="Shipped", from_node="shipping", schema="orderId string")
    def bill(shipped: Any, ctx: Any) -> Any:
        return safebunny.Outcome(effects=[safebunny.append(shipped.select("messageId", "orderId"),
                                                           os.path.join(work, "bills"))])

    saga.declare()
    return saga


def _saga_queries(spark: Any, saga: Any, args: argparse.Namespace) -> list[Any]:
    from safebunny.saga.run.queries import start_query

    queries = []
    for step in saga.units():
        if args.replay:
            _drop_last_commit(saga.config.layout.checkpoint(step.unit_label))
        queries.append(start_query(spark, saga, step, None))
    return queries


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", choices=["pyds", "static", "rate", "safebunny", "saga"], default="pyds")
    parser.add_argument("--sink", choices=["arrow", "count", "none"], default="arrow")
    parser.add_argument("--queries", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--replay", action="store_true")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--uri", default="amqp://guest:guest@127.0.0.1:5672/%2F")
    parser.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "illegal-size"))
    parser.add_argument("--stop-on-first", action="store_true")
    parser.add_argument("--batch-loop", action="store_true",
                        help="run batch reads of the same format in a loop on another thread meanwhile (static only)")
    parser.add_argument("--poke-map", action="store_true",
                        help="change the shared map's size from a thread of this process meanwhile, as a first "
                             "source runner does (with --batch-loop: the DAGScheduler's task serialisation meets it)")
    parser.add_argument("--first-alone", action="store_true",
                        help="start the queries through safebunny.spark.first_stream.start and run the batch reads in "
                             "first_stream.guarded (the guard), a new driver's state again at each --fresh-map")
    parser.add_argument("--fresh-map", action="store_true",
                        help="before each iteration, take the keys Spark's streaming source runner adds out of the "
                             "static source's shared envVars map again, as in a driver that just started")
    args = parser.parse_args()

    os.makedirs(args.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="illegal-size-")
    _probe_module(work)
    spark = _session(args)
    tag = uuid.uuid4().hex[:8]
    queues = [f"illegal-size-{tag}-{q}" for q in range(args.queries)]
    saga = _saga(args, tag, work) if args.source == "saga" else None
    env = _shared_env(spark, args)
    pythonpath = env.get("PYTHONPATH") if env is not None else None
    outcomes: Counter[str] = Counter()
    corrupt = False
    started = time.monotonic()
    stop = threading.Event()
    if args.batch_loop:
        threading.Thread(target=_batch_loop, args=(spark, args, stop, outcomes, tag), daemon=True).start()
    if args.poke_map and env is not None:
        threading.Thread(target=_poke_map, args=(env, stop), daemon=True).start()
    try:
        for it in range(args.iterations):
            if args.source == "safebunny":
                _publish(args, queues, 20)
            if args.source == "saga":
                orders = spark.createDataFrame([(f"o{it}-{i}", 1 + i % 3) for i in range(40)],
                                               "orderId string, qty int")
                saga.start(orders, node="orders", type="OrderPlaced", business_key="orderId")
            # a corrupt map is left for one iteration: its tasks serialise it (the failure and its trace)
            if args.fresh_map and env is not None and not corrupt:
                _fresh_map(env, pythonpath)
                if args.first_alone:
                    from safebunny.spark import first_stream

                    first_stream._done = False
            queries = _saga_queries(spark, saga, args) if args.source == "saga" else []
            for q in range(args.queries if args.source != "saga" else 0):
                checkpoint = os.path.join(work, f"cp{q}")
                if args.replay:
                    _drop_last_commit(checkpoint)
                writer = (_frame(spark, args, q, queues, work).writeStream.foreachBatch(_function(args))
                          .option("checkpointLocation", checkpoint).queryName(f"illegal-size-{q}")
                          .trigger(availableNow=True))
                queries.append(_start(spark, writer, args))
            for q, query in enumerate(queries):
                try:
                    query.awaitTermination()
                except Exception:  # noqa: BLE001, S110 - read back through exception()
                    pass
                error = query.exception()
                if error is None:
                    outcomes["ok"] += 1
                    continue
                text = str(error.desc) if hasattr(error, "desc") else str(error)
                kind = "illegal-size" if "Illegal size" in text else "other"
                outcomes[kind] += 1
                path = os.path.join(args.out, f"{kind}-{tag}-{it}-{q}.txt")
                with open(path, "w") as fh:
                    fh.write(f"{error!s}\n\n{getattr(error, 'stackTrace', '')}\n")
                print(f"iteration {it} query {q}: {kind} -> {path}", flush=True)
            if env is not None and not args.poke_map:
                size, entries = _map_state(env)
                if size != entries and corrupt:  # the iteration that ran on it is over
                    _fresh_map(env, pythonpath)
                    corrupt = False
                elif size != entries:
                    outcomes["corrupt-map"] += 1
                    print(f"iteration {it}: the shared envVars map says {size} entries, its iterator yields "
                          f"{entries}: {sorted(env.keySet())}", flush=True)
                    corrupt = True
            if not queries:
                time.sleep(1.0)
            if it % 10 == 9:
                print(f"iteration {it + 1}: {dict(outcomes)} ({time.monotonic() - started:.0f} s; "
                      f"threads {threading.active_count()})", flush=True)
            if args.stop_on_first and outcomes["illegal-size"]:
                break
    finally:
        stop.set()
        if args.source == "safebunny":
            _delete(args, queues)
        if saga is not None:
            import safebunny

            safebunny.topology.delete(saga)
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"done: {dict(outcomes)} in {time.monotonic() - started:.0f} s "
          f"(source={args.source} sink={args.sink} queries={args.queries} replay={args.replay})", flush=True)
    return 1 if outcomes["illegal-size"] or outcomes["batch-illegal-size"] else 0


if __name__ == "__main__":
    sys.exit(main())
