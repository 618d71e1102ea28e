"""A Spark Connect client for the Connect tests: ``python connect_client.py URL SCENARIO AMQP_URI WORKDIR``.

It runs in its own process (a Connect session switches pyspark's functions to Connect mode for the whole
process) against the test run's Connect server (the ``connect_url`` fixture), and prints one line
``RESULT <json>`` for the test to check. Scenarios: ``step``, ``saga``, ``sql``, ``notebook`` (notebook 02 with
the trigger widget at ``availableNow``), ``serverless``. The last two run with Databricks serverless's trigger
rule (``serverless.refuse_processing_time``: only availableNow queries start).
"""

import json
import os
import sys
import uuid
from pathlib import Path

import pika
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import safebunny
from safebunny.delta.delta_rs import DeltaRsTarget
from safebunny.saga.run.drain import waiting
from safebunny.spark.exceptions import is_worker_start_timeout

url, scenario, uri, workdir = sys.argv[1:5]
spark = SparkSession.builder.remote(url).create()
assert type(spark).__module__.startswith("pyspark.sql.connect"), type(spark)


def drain_queue(queue):
    connection = pika.BlockingConnection(pika.URLParameters(uri))
    channel = connection.channel()
    ids = []
    while True:
        method, props, _ = channel.basic_get(queue, auto_ack=True)
        if method is None:
            break
        ids.append(props.message_id)
    channel.queue_delete(queue)
    connection.close()
    return ids


def step_scenario():
    """A step with an append effect and an emit, its input duplicated within a run and across two runs."""
    safebunny.register(spark)
    safebunny.activate(spark)
    queue, out = f"sbt-connect-{uuid.uuid4().hex[:8]}", f"sbt-connect-out-{uuid.uuid4().hex[:8]}"
    connection = pika.BlockingConnection(pika.URLParameters(uri))
    for name in (queue, out):
        connection.channel().queue_declare(name, durable=True)
    connection.close()
    first = spark.createDataFrame([(f"m{i}", json.dumps({"n": i})) for i in range(12)] +
                                  [(f"m{i}", json.dumps({"n": i})) for i in range(4)], "messageId string, value string")
    safebunny.publish(first, uri=uri, exchange="", routingKey=queue)
    effects = os.path.join(workdir, "effects")
    step = safebunny.Step(node="connect", inbox=os.path.join(workdir, "inbox"), settings=safebunny.StepSettings(
        connection=safebunny.ConnectionSettings(uri)))

    def handle(messages, ctx):
        rows = messages.select("messageId", F.get_json_object(F.col("value").cast("string"), "$.n").alias("n"))
        return safebunny.Outcome(effects=[safebunny.append(rows, effects)],
                                 emits=[safebunny.emit(rows.select("messageId", F.col("n").alias("value")),
                                                       type="Done", exchange="", routing_key=out)])

    def run(tries: int = 3):
        source = safebunny.read_stream(spark, uri=uri, queue=queue, journalLocation=os.path.join(workdir, "journal"))
        try:
            query = (source.writeStream.foreachBatch(step.foreach_batch(handle))
                     .option("checkpointLocation", os.path.join(workdir, "checkpoint"))
                     .trigger(availableNow=True).start())
        except Exception as exc:
            # the server's Python process for foreachBatch must connect back within Spark's fixed 10 s; a loaded
            # machine misses it before the query exists (nothing ran): start it again, as Saga.run does
            if tries <= 1 or not is_worker_start_timeout(exc):
                raise
            print(f"connect client: the query did not start ({exc.__class__.__name__}); starting it again",
                  file=sys.stderr)
            return run(tries - 1)
        query.awaitTermination(300)
        assert query.exception() is None, query.exception()

    run()
    safebunny.publish(first.limit(3), uri=uri, exchange="", routingKey=queue)  # again, after the first run
    run()  # the same checkpoint: a restart
    rows = DeltaRsTarget(effects).read()
    return {"effects": sorted(rows.column("messageId").to_pylist()), "emitted": drain_queue(out),
            "left": len(drain_queue(queue))}


def _orders_saga(name, with_qty=False, **settings):
    """The two-step saga of the saga scenarios: stock reserves (a Delta append and an emit per order), shipping
    ships (a Delta append); ``with_qty`` adds the orders' ``qty int`` column."""
    saga = safebunny.Saga(name, uri=uri, root=os.path.join(workdir, "saga"), settings=safebunny.SagaSettings(
        retry=safebunny.Retry(delays=("1s",)), **settings))
    columns = ["messageId", "orderId", *(["qty"] if with_qty else [])]

    @saga.step("stock", consumes="OrderPlaced", from_node="orders",
               schema="orderId string, qty int" if with_qty else "orderId string", produces=["StockReserved"])
    def reserve(orders, ctx):
        ok = orders.select(*columns)
        return safebunny.Outcome(effects=[safebunny.append(ok, os.path.join(workdir, "reservations"))],
                                 emits=[safebunny.emit(ok, type="StockReserved")])

    @saga.step("shipping", consumes="StockReserved", from_node="stock", schema="orderId string")
    def ship(reserved, ctx):
        return safebunny.Outcome(effects=[safebunny.append(reserved.select("messageId", "orderId"),
                                                           os.path.join(workdir, "shipments"))])

    return saga


def saga_scenario():
    """A two-step saga started twice and drained, then watched: status, trace, poison, redrive, pause."""
    name = f"sbt-connect-{uuid.uuid4().hex[:8]}"
    # a batch of stock's with more than 10 emits publishes them from the executors (the driver path is the step
    # scenario's)
    saga = _orders_saga(name, with_qty=True, batch_size=40, executor_publish_rows=10)

    try:
        orders = spark.createDataFrame([(f"o{i}", 1 + i % 3) for i in range(30)], "orderId string, qty int")
        saga.start(orders, node="orders", type="OrderPlaced", business_key="orderId")
        saga.start(orders.limit(6), node="orders", type="OrderPlaced", business_key="orderId")
        rounds = saga.drain(spark, timeout=300, restarts=6)  # a loaded test machine: see drain
        saga.start(orders.limit(4), node="orders", type="OrderPlaced", business_key="orderId")
        saga.drain(spark, timeout=300, restarts=6)  # the same checkpoints again
        status = [s.to_dict() for s in saga.status()]
        until = saga.pause("stock", "OrderPlaced", 60)
        paused = [s.breaker for s in saga.status()]
        saga.resume("stock", "OrderPlaced")
        from safebunny.cli import access

        cli = access.status(saga)  # what `safebunny status` prints
        return {
            "rounds": rounds,
            "reservations": sorted(DeltaRsTarget(os.path.join(workdir, "reservations")).read()
                                   .column("orderId").to_pylist()),
            "shipments": sorted(DeltaRsTarget(os.path.join(workdir, "shipments")).read().column("orderId").to_pylist()),
            "status": status, "paused": paused, "until": until, "cli": cli,
            "trace": [t.to_dict()["node"] for t in saga.trace("o7")],
            "poison": saga.poison("stock", "OrderPlaced", spark).count(),
            "redrive": saga.redrive("stock", "OrderPlaced"),
            "waiting": waiting(saga),
            # the stored reports of the server-side steps: how each batch's emits went out
            "published_from": sorted({r.published_from for s in saga.steps for r in saga.reports_of(s)} - {""}),
            # each batch with messages was read from its journal file on the server's driver, Spark's read beside
            "journal_read": [("spark_read" in r.phases) for s in saga.steps for r in saga.reports_of(s) if r.received],
        }
    finally:
        safebunny.topology.delete(saga)


def sql_scenario():
    """The SQL id functions over Connect against the shared vectors: the shim's jar (what ``register`` picks
    when the server takes it) and the Python UDFs (what it falls back to)."""
    import safebunny.spark.shim

    vectors = json.loads(Path(__file__).parents[1].joinpath("vectors", "message_ids.json").read_text())
    rows = [(v["causation_id"], v["node"], v["message_type"], v["index"], v["expected"])
            for v in vectors["message_ids"]]
    spark.createDataFrame(rows, "c string, node string, t string, i int, expected string") \
        .createOrReplaceTempView("vectors")
    keys = [(v["business_key"], v["expected"]) for v in vectors["correlation_ids"]]
    spark.createDataFrame(keys, "k string, expected string").createOrReplaceTempView("keys")
    out = {}
    for implementation in ("auto", "python"):
        how = safebunny.spark.shim.register(spark, implementation=implementation)
        got = spark.sql("SELECT c, node, t, i, expected, safebunny_message_id(c, node, t, i) AS id FROM vectors")
        corr = spark.sql("SELECT k, expected, safebunny_correlation_id(k) AS id FROM keys").collect()
        out[implementation] = {
            "how": how,
            "message_ids": [(r.id, r.expected, safebunny.message_id(r.c, r.node, r.t, r.i)) for r in got.collect()],
            "correlation_ids": [(r.id, r.expected, safebunny.correlation_id_for(r.k)) for r in corr],
            "null": spark.sql("SELECT safebunny_message_id(NULL, 'a', 'b', 0) AS id").first().id}
    return out


def notebook_scenario():
    sys.path.insert(0, str(Path(__file__).parents[1]))
    from serverless import refuse_processing_time

    from notebook_runner import run_notebook

    refuse_processing_time()
    path = Path(__file__).parents[2] / "notebooks" / "02_exactly_once_saga.py"
    namespace = run_notebook(path, spark, {"uri": uri, "workdir": workdir, "trigger": "availableNow"})
    safebunny.topology.delete(namespace["saga"])
    return {"ran": True}


def serverless_scenario():
    """A two-step saga run with ``saga.run(spark, trigger="availableNow")`` under serverless's trigger rule,
    its metrics served by ``SagaMetrics`` twice: with PySpark's listener, and without (the status log's)."""
    import time
    import urllib.request

    from serverless import refuse_processing_time

    from safebunny.saga import SagaMetrics

    refuse_processing_time()
    name = f"sbt-serverless-{uuid.uuid4().hex[:8]}"
    saga = _orders_saga(name)

    try:
        refused = saga.run(spark, trigger="1 second")  # what serverless says to a processing-time trigger
        refusals = sorted({type(q.exception()).__name__ for q in refused.queries.values()})
        refused.stop()
        metrics = SagaMetrics(saga, port=0).start(spark)  # PySpark 4's listener: its events reach this process
        durable = SagaMetrics(saga, port=0, listener=False).start(spark)  # where a listener cannot reach it
        running = saga.run(spark, trigger="availableNow")
        orders = spark.createDataFrame([(f"o{i}",) for i in range(12)], "orderId string")
        saga.start(orders, node="orders", type="OrderPlaced", business_key="orderId")
        saga.start(orders.limit(3), node="orders", type="OrderPlaced", business_key="orderId")  # duplicates
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            done = {s.node: s.processed for s in saga.status()}
            done["stock received"] = sum(s.received for s in saga.status() if s.node == "stock")
            if done == {"stock": 12, "shipping": 12, "stock received": 15}:
                break
            time.sleep(1)
        scraped = {}
        for kind, server in (("listener", metrics), ("durable", durable)):
            with urllib.request.urlopen(server.url, timeout=60) as response:
                scraped[kind] = [ln for ln in response.read().decode().splitlines() if ln and not ln.startswith("#")]
        rounds, listeners = dict(running.rounds), [m.listener is not None for m in (metrics, durable)]
        running.stop()
        metrics.stop()
        durable.stop()
        return {"refusals": refusals, "done": done, "rounds": rounds, "listeners": listeners,
                "given_up": sorted(running.given_up), "metrics": scraped,
                "shipments": sorted(DeltaRsTarget(os.path.join(workdir, "shipments")).read()
                                    .column("orderId").to_pylist()),
                "waiting": waiting(saga)}
    finally:
        safebunny.topology.delete(saga)


result = {"step": step_scenario, "saga": saga_scenario, "sql": sql_scenario, "notebook": notebook_scenario,
          "serverless": serverless_scenario}[scenario]()
print("RESULT " + json.dumps(result), flush=True)
spark.stop()
