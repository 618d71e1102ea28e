"""A step's large batches publish their emits from the executors through the sink (real broker, the shared
SparkSession, real Delta tables): the same messages as the driver would publish, each once, the password out of
the plans; a publish the broker refuses is retried, then fails the batch before its inbox marker."""

from __future__ import annotations

import json
import uuid

import pyarrow as pa
import pyspark.sql.functions as F

import safebunny
from helpers import publish_numbered, queue_totals, wait_until
from safebunny.delta.delta_rs import DeltaRsTarget
from safebunny.exactly_once.emits.routed_rows import build_publish_rows


def _orders(i: int) -> bytes:
    return json.dumps({"orderId": f"o{i}", "amount": i}).encode()


def _query(spark, uri, queue, tmp_path, fn, batch, wait=True):
    df = (spark.readStream.format("safebunny").option("uri", uri).option("queue", queue)
          .option("queueType", "classic").option("journalLocation", str(tmp_path / "journal"))
          .option("maxMessagesPerTrigger", str(batch)).load())
    q = (df.writeStream.foreachBatch(fn).option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(availableNow=True).start())
    if wait:
        try:
            q.awaitTermination(300)
        except Exception:  # noqa: BLE001 - a failed query: the test reads q.exception()
            pass
    return q


def _billing(invoices, out):
    def bill(orders, ctx):
        inv = orders.select("messageId", F.get_json_object(F.col("value").cast("string"), "$.orderId").alias("orderId"))
        return safebunny.Outcome(effects=[safebunny.append(inv, invoices)],
                                 emits=[safebunny.emit(inv, type="InvoiceRequested", exchange="", routing_key=out)])
    return bill


def _safebunny_writes(spark, failed=False):
    """What Spark's SQL status store keeps of every write through the sink (or of those that failed):
    description, details, plan, configs."""
    store = spark._jsparkSession.sharedState().statusStore().executionsList()
    out = []
    for i in range(store.size()):
        ex = store.apply(i)
        plan = ex.physicalPlanDescription()
        if "AppendData safebunny" in plan and (not failed or ex.errorMessage().isDefined()):
            out.append("\n".join([ex.description(), ex.details(), plan, str(ex.modifiedConfigs())]))
    return out


def test_a_large_batch_is_published_from_the_executors_with_the_driver_ids(spark, broker, amqp_uri, make_queue,
                                                                            admin, tmp_path):
    assert ":guest@" in amqp_uri  # a password inside the URI, which must not reach a plan
    n, queue, out = 100, make_queue(), make_queue(suffix="-out")
    publish_numbered(amqp_uri, queue, n, body=_orders, correlation_id="c-1")
    writes_before = len(_safebunny_writes(spark))
    invoices, inbox = str(tmp_path / "invoices"), str(tmp_path / "inbox")
    # batches of 40, 40 and 20: the two over the threshold of 30 from the executors, the last from the driver
    step = safebunny.Step(node="billing", inbox=inbox, settings=safebunny.StepSettings(
        connection=safebunny.ConnectionSettings(amqp_uri), executor_publish_rows=30, executor_partition_rows=20))
    q = _query(spark, amqp_uri, queue, tmp_path, step.foreach_batch(_billing(invoices, out)), batch=40)
    assert q.exception() is None, q.exception()

    reports = sorted(step.reports, key=lambda r: r.batch_id)
    assert [(r.emitted, r.published_from, r.publish_partitions) for r in reports if r.emitted] == [
        (40, "executors", 2), (40, "executors", 2), (20, "driver", 1)]
    writes = _safebunny_writes(spark)[writes_before:]
    assert len(writes) == 2, "one write through the sink per executor-published batch"
    assert not any(":guest@" in w or "guest:guest" in w for w in writes), writes

    got = admin.get_all(out)
    assert len(got) == n, "each emit published once (no failure, so no copy)"
    arrived = {(p.message_id, p.correlation_id, p.headers["x-causation-id"], p.type, m.routing_key, body)
               for m, p, body in got}
    causes = pa.table({"messageId": [f"m{i}" for i in range(n)], "orderId": [f"o{i}" for i in range(n)]})
    rows, _ = build_publish_rows(causes, node="billing", message_type="InvoiceRequested", exchange="",
                                 routing_key=out, correlation_of={f"m{i}": "c-1" for i in range(n)}, what="test")
    want = {(r["messageId"], r["correlationId"], r["causationId"], r["type"], r["routingKey"], r["value"])
            for r in rows.to_pylist()}
    assert arrived == want, "the executors publish exactly what the driver path would"
    assert sorted(r["messageId"] for r in DeltaRsTarget(invoices).read().to_pylist()) == sorted(causes["messageId"]
                                                                                            .to_pylist())
    wait_until(lambda: queue_totals(broker, queue) == (0, 0), what="source queue drained and acked")


def test_a_refused_executor_publish_is_republished_with_the_same_ids(spark, amqp_uri, make_queue, admin, tmp_path):
    """Every emit comes back unroutable until its queue exists; the queue is declared once a write through the
    sink has failed, and the batch's next attempt publishes the same messages, then marks the inbox."""
    queue, out = make_queue(), make_queue(suffix="-out")
    admin.delete_queue(out)  # the fixture deletes it again at the end
    publish_numbered(amqp_uri, queue, 20, body=_orders)
    writes_before = len(_safebunny_writes(spark, failed=True))
    inbox = str(tmp_path / "inbox")
    step = safebunny.Step(node="billing", inbox=inbox, settings=safebunny.StepSettings(
        connection=safebunny.ConnectionSettings(amqp_uri), executor_publish_rows=5, publish_retry_seconds=300))
    q = _query(spark, amqp_uri, queue, tmp_path, step.foreach_batch(_billing(str(tmp_path / "invoices"), out)),
               batch=20, wait=False)
    try:
        wait_until(lambda: len(_safebunny_writes(spark, failed=True)) > writes_before or not q.isActive,
                   timeout=300, what="a failed write through the sink")
        admin.declare_queue(out)
        q.awaitTermination(300)
    finally:
        q.stop()
    assert q.exception() is None, q.exception()
    (report,) = [r for r in step.reports if r.emitted]
    assert (report.published_from, report.emitted) == ("executors", 20) and report.publish_attempts >= 2
    got = {p.message_id for _, p, _ in admin.get_all(out)}
    assert got == {safebunny.message_id(f"m{i}", "billing", "InvoiceRequested", 0) for i in range(20)}
    assert DeltaRsTarget(inbox).read().num_rows == 20


def test_a_refused_executor_publish_fails_the_batch_before_its_marker(spark, amqp_uri, make_queue, tmp_path):
    queue, nowhere = make_queue(), f"sbt-nowhere-{uuid.uuid4().hex[:8]}"  # no queue: every emit comes back
    publish_numbered(amqp_uri, queue, 20, body=_orders)
    inbox = str(tmp_path / "inbox")
    step = safebunny.Step(node="billing", inbox=inbox, settings=safebunny.StepSettings(
        connection=safebunny.ConnectionSettings(amqp_uri), executor_publish_rows=5, publish_retry_seconds=0))
    q = _query(spark, amqp_uri, queue, tmp_path, step.foreach_batch(_billing(str(tmp_path / "invoices"), nowhere)),
               batch=20)
    error = safebunny.error_of(q.exception())
    assert isinstance(error, safebunny.SafeBunnyPublishError), q.exception()
    text = str(error)
    assert "could not publish its batch's 20 emitted messages from the executors (1 attempt(s)" in text, text
    assert "unroutable" in text and nowhere in text and "before its inbox marker" in text, text
    assert ":guest@" not in str(q.exception())
    assert DeltaRsTarget(inbox).read() is None, "nothing marked in the inbox"
    assert not step.reports, "the batch did not finish"
