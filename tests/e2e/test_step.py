"""safebunny.Step against a real broker, a real SparkSession and real Delta tables (delta-rs)."""

from __future__ import annotations

import json

import pyspark.sql.functions as F
import pytest

import safebunny
from helpers import publish_numbered, queue_totals, wait_until
from safebunny.delta.delta_rs import DeltaRsTarget


def _orders(i: int) -> bytes:
    return json.dumps({"orderId": f"o{i}", "amount": i}).encode()


def _run(spark, uri, queue, checkpoint, journal, fn, batch=100):
    df = (spark.readStream.format("safebunny").option("uri", uri).option("queue", queue)
          .option("queueType", "classic").option("journalLocation", journal)
          .option("maxMessagesPerTrigger", str(batch)).load())
    q = df.writeStream.foreachBatch(fn).option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    q.awaitTermination(300)
    assert q.exception() is None, q.exception()
    return q


def _table(path):
    t = DeltaRsTarget(path).read()
    return [] if t is None else t.to_pylist()


def _parsed(orders):
    return orders.select("messageId", F.get_json_object(F.col("value").cast("string"), "$.orderId").alias("orderId"),
                         F.get_json_object(F.col("value").cast("string"), "$.amount").cast("int").alias("amount"))


def test_step_applies_each_message_once_and_emits_derived_ids(spark, broker, amqp_uri, make_queue, admin, tmp_path):
    queue, out = make_queue(), make_queue(suffix="-out")
    publish_numbered(amqp_uri, queue, 250, body=_orders, correlation_id="c-1")
    publish_numbered(amqp_uri, queue, 30, body=_orders, correlation_id="c-1")  # the same 30 ids again
    invoices, inbox = str(tmp_path / "invoices"), str(tmp_path / "inbox")
    step = safebunny.Step(node="billing", inbox=inbox, settings=safebunny.StepSettings(
            connection=safebunny.ConnectionSettings(amqp_uri)))

    def bill(orders, ctx):
        assert ctx.node == "billing" and ctx.epoch
        inv = _parsed(orders)
        return safebunny.Outcome(effects=[safebunny.append(inv, invoices)],
                                 emits=[safebunny.emit(inv.select("messageId", "orderId"), type="InvoiceRequested",
                                                       exchange="", routing_key=out)])

    q = _run(spark, amqp_uri, queue, str(tmp_path / "ck"), str(tmp_path / "journal"), step.foreach_batch(bill))
    rows = _table(invoices)
    assert sorted(r["messageId"] for r in rows) == sorted(f"m{i}" for i in range(250))
    got = admin.get_all(out)
    assert len(got) >= 250
    ids = {p.message_id for _, p, _ in got}
    assert ids == {safebunny.message_id(f"m{i}", "billing", "InvoiceRequested", 0) for i in range(250)}
    first = next(p for _, p, _ in got)
    assert first.correlation_id == "c-1" and first.headers["x-causation-id"].startswith("m")
    assert json.loads(next(b for _, _, b in got))["orderId"].startswith("o")
    wait_until(lambda: queue_totals(broker, queue) == (0, 0), what="source queue drained and acked")
    reports = list(step.reports)
    assert sum(r.duplicates for r in reports) == 30
    inbox_rows = _table(inbox)
    assert len(inbox_rows) == 250 and {r["status"] for r in inbox_rows} == {"done"}
    assert {r["epoch"] for r in inbox_rows} == {str(q.id)}

    # a new checkpoint over the same queue (a new epoch): old messages come again and are dropped
    publish_numbered(amqp_uri, queue, 40, body=_orders)
    _run(spark, amqp_uri, queue, str(tmp_path / "ck2"), str(tmp_path / "journal2"), step.foreach_batch(bill))
    assert len(_table(invoices)) == 250
    assert len(admin.get_all(out)) == 0


def test_failing_rows_are_isolated_recorded_and_handed_over(spark, broker, amqp_uri, make_queue, tmp_path):
    queue = make_queue()
    publish_numbered(amqp_uri, queue, 30, body=_orders)  # one batch: each sub-job of the isolation is a Spark job
    effects, inbox = str(tmp_path / "effects"), str(tmp_path / "inbox")
    handed = []
    step = safebunny.Step(node="fragile", inbox=inbox, settings=safebunny.StepSettings(
        connection=safebunny.ConnectionSettings(amqp_uri), on_failed=lambda rows, ctx: handed.extend(rows)))

    @F.udf("int")
    def picky(amount):
        if amount % 15 == 7:
            raise ValueError(f"cannot bill amount {amount}")
        return amount

    def handle(orders, ctx):
        return safebunny.Outcome(effects=[safebunny.append(
            _parsed(orders).withColumn("amount", picky("amount")), effects)])

    _run(spark, amqp_uri, queue, str(tmp_path / "ck"), str(tmp_path / "journal"), step.foreach_batch(handle), batch=30)
    bad = {f"m{i}" for i in range(30) if i % 15 == 7}
    assert sorted(r["messageId"] for r in _table(effects)) == sorted({f"m{i}" for i in range(30)} - bad)
    assert {f.message_id for f in handed} == bad
    assert all("cannot bill amount" in f.reason and f.row["value"] for f in handed)
    failed = [r for r in _table(inbox) if r["status"] == "failed"]
    assert {r["messageId"] for r in failed} == bad and all("cannot bill" in r["reason"] for r in failed)
    wait_until(lambda: queue_totals(broker, queue) == (0, 0), what="queue drained and acked")


def test_row_handler_retries_in_place_and_fails_rows_without_failing_the_batch(spark, amqp_uri, make_queue, tmp_path):
    queue, out = make_queue(), make_queue(suffix="-out")
    publish_numbered(amqp_uri, queue, 40, body=_orders)
    calls: dict[str, int] = {}
    payments = str(tmp_path / "payments")
    step = safebunny.Step(node="payment", inbox=str(tmp_path / "inbox"), settings=safebunny.StepSettings(
        connection=safebunny.ConnectionSettings(amqp_uri), row_retries=2))

    def charge(msg, ctx):
        calls[msg["messageId"]] = calls.get(msg["messageId"], 0) + 1
        order = json.loads(msg["value"])
        if order["amount"] % 10 == 3 and ctx.attempt == 1:
            raise TimeoutError("payment service timed out")  # succeeds on the in-place retry
        if order["amount"] == 13:
            raise RuntimeError("card declined for good")
        return safebunny.Outcome(effects=[safebunny.append({"orderId": order["orderId"]}, payments)],
                                 emits=[safebunny.emit({"orderId": order["orderId"]}, type="PaymentCharged",
                                                       routing_key=out)])

    _run(spark, amqp_uri, queue, str(tmp_path / "ck"), str(tmp_path / "journal"), step.foreach_batch(charge, rows=True))
    paid = sorted(r["messageId"] for r in _table(payments))
    assert paid == sorted(f"m{i}" for i in range(40) if i != 13)
    assert calls["m13"] == 3 and calls["m3"] == 2 and calls["m4"] == 1
    report = list(step.reports)
    assert sum(r.failed for r in report) == 1 and sum(r.emitted for r in report) == 39


def test_effect_without_message_id_names_the_dataframe(spark, amqp_uri, make_queue, tmp_path):
    queue = make_queue()
    publish_numbered(amqp_uri, queue, 5, body=_orders)
    step = safebunny.Step(node="sloppy", inbox=str(tmp_path / "inbox"), settings=safebunny.StepSettings(
            connection=safebunny.ConnectionSettings(amqp_uri)))

    def handle(orders, ctx):
        return safebunny.Outcome(effects=[safebunny.append(orders.select("value"), str(tmp_path / "t"))])

    df = (spark.readStream.format("safebunny").option("uri", amqp_uri).option("queue", queue)
          .option("queueType", "classic").option("journalLocation", str(tmp_path / "journal")).load())
    q = (df.writeStream.foreachBatch(step.foreach_batch(handle)).option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(availableNow=True).start())
    with pytest.raises(Exception) as err:
        q.awaitTermination(120)
    assert "effect #0 (append into" in str(err.value) and "no 'messageId' column" in str(err.value)
