"""Bad data never wedges, doubles or drops a step (real SparkSession, real Delta tables, a real broker where
messages travel): every message ends applied once, or failed with a reason and handed to ``on_failed``.

Tests that call ``Step.process`` by hand use a fixed epoch and build each micro-batch as a DataFrame, and run
a batch twice to stand for Spark's replay after a restart (the source replays a batch exactly)."""

from __future__ import annotations

import json

import pika
import pytest

import safebunny
from helpers import queue_totals, wait_until
from safebunny.delta.delta_rs import DeltaRsTarget
from safebunny.delta.spark_sql import last_per_key_sql
from safebunny.exactly_once import FailedRow
from safebunny.exactly_once.collect.batch import STAND_IN_PREFIX

SCHEMA = "messageId string, correlationId string, type string, value binary, k string, v int"


def _batch(spark, rows):
    return spark.createDataFrame([(m, "c-" + m, "T", b"{}", k, v) for m, k, v in rows], SCHEMA)


def _table(path):
    t = DeltaRsTarget(path).read()
    return [] if t is None else t.to_pylist()


def _twice(step, df, batch_id, handler, rows=False):
    """The batch, then its replay: both must succeed with the same report."""
    first = step.process(df, batch_id, handler, rows=rows)
    again = step.process(df, batch_id, handler, rows=rows)
    assert (first.processed, first.failed) == (again.processed, again.failed)
    return first


@pytest.mark.parametrize("rows", [False, True], ids=["dataframe", "row"])
def test_a_merge_with_two_messages_for_one_key_keeps_the_last_in_source_order(spark, tmp_path, rows):
    accounts = str(tmp_path / "accounts")
    step = safebunny.Step("acct", str(tmp_path / "inbox"), safebunny.StepSettings(epoch="e1"))

    def upsert(data, ctx):
        if rows:
            return safebunny.Outcome(effects=[safebunny.merge({"k": data["k"], "v": data["v"]}, accounts, on="k")])
        return safebunny.Outcome(effects=[safebunny.merge(data.select("messageId", "k", "v"), accounts, on="k")])

    _twice(step, _batch(spark, [("m1", "A", 1), ("m2", "A", 2)]), 0, upsert, rows)  # a new key, twice
    _twice(step, _batch(spark, [("m3", "B", 3)]), 1, upsert, rows)
    _twice(step, _batch(spark, [("m5", "B", 5), ("m4", "B", 4), ("m6", "B", 6), ("m7", "C", 7)]), 2, upsert, rows)
    assert sorted((r["k"], r["v"], r["messageId"]) for r in _table(accounts)) == [
        ("A", 2, "m2"), ("B", 6, "m6"), ("C", 7, "m7")]


def test_a_failed_message_keeps_no_effect_and_no_emit_so_its_retry_applies_once(spark, amqp_uri, make_queue,
                                                                                admin, tmp_path):
    out = make_queue(suffix="-out")
    ledger = str(tmp_path / "ledger")
    handed: list[FailedRow] = []
    step = safebunny.Step("ledger", str(tmp_path / "inbox"), safebunny.StepSettings(
        connection=safebunny.ConnectionSettings(amqp_uri), epoch="e1",
        on_failed=lambda failed, ctx: handed.extend(failed)))
    calls = {"n": 0}

    def post(df, ctx):
        calls["n"] += 1
        failed = [FailedRow("m9", "credit check said retry later")] if calls["n"] == 1 else []
        rows = df.select("messageId", "k", "v")
        return safebunny.Outcome(effects=[safebunny.append(rows, ledger)],
                                 emits=[safebunny.emit(rows, type="Posted", exchange="", routing_key=out)],
                                 failed=failed)

    report = _twice(step, _batch(spark, [("m8", "X", 8), ("m9", "X", 9)]), 0, post)
    assert (report.processed, report.failed, report.emitted) == (1, 1, 1)
    assert calls["n"] == 1  # the replay took the batch's recorded outcome (m9 failed) and did not run the handler
    assert {f.message_id for f in handed} == {"m9"} and handed[0].reason == "credit check said retry later"
    step.process(_batch(spark, [("m9", "X", 9)]), 1, post)  # the same message back from a retry tier
    assert sorted(r["messageId"] for r in _table(ledger)) == ["m8", "m9"]
    causes = sorted(p.headers["x-causation-id"] for _, p, _ in admin.get_all(out))
    assert causes == ["m8", "m8", "m9"]  # m8's emit published on the batch and on its replay (same id)


def test_a_message_without_an_id_is_handed_over_with_a_reason_and_the_rest_applied(spark, broker, amqp_uri,
                                                                                   make_queue, admin, tmp_path):
    queue = make_queue()
    props = [pika.BasicProperties(message_id=mid, delivery_mode=2) for mid in ("m0", None, "m2")]
    admin.publish(queue, [json.dumps({"n": i}).encode() for i in range(3)], props)
    effects, inbox = str(tmp_path / "effects"), str(tmp_path / "inbox")
    handed: list[FailedRow] = []
    step = safebunny.Step("noid", inbox, safebunny.StepSettings(
        connection=safebunny.ConnectionSettings(amqp_uri), on_failed=lambda failed, ctx: handed.extend(failed)))

    def handle(df, ctx):
        return safebunny.Outcome(effects=[safebunny.append(df.select("messageId", "value"), effects)])

    df = (spark.readStream.format("safebunny").option("uri", amqp_uri).option("queue", queue)
          .option("queueType", "classic").option("journalLocation", str(tmp_path / "journal")).load())
    q = (df.writeStream.foreachBatch(step.foreach_batch(handle)).option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(availableNow=True).start())
    q.awaitTermination(300)
    assert q.exception() is None, q.exception()
    assert sorted(r["messageId"] for r in _table(effects)) == ["m0", "m2"]
    assert len(handed) == 1 and handed[0].message_id.startswith(STAND_IN_PREFIX)
    assert handed[0].error_type == "MalformedMessage" and "no message_id" in handed[0].reason
    assert json.loads(handed[0].row["value"]) == {"n": 1}
    failed = [r for r in _table(inbox) if r["status"] == "failed"]
    assert [r["messageId"] for r in failed] == [handed[0].message_id]
    wait_until(lambda: queue_totals(broker, queue) == (0, 0), what="queue drained and acked")


def test_row_handler_types_come_from_the_table_and_the_batch_and_a_misfit_fails_alone(spark, tmp_path):
    notes, codes = str(tmp_path / "notes"), str(tmp_path / "codes")
    step = safebunny.Step("notes", str(tmp_path / "inbox"), safebunny.StepSettings(epoch="e1"))
    answers = {"m1": (notes, {"k": "a", "note": None}), "m2": (notes, {"k": "b", "note": "hello"}),
               "m3": (codes, {"code": 1}), "m4": (codes, {"code": "A1"}), "m5": (codes, {"code": None}),
               "m6": (codes, {"code": 7})}

    def handle(msg, ctx):
        table, row = answers[msg["messageId"]]
        return safebunny.Outcome(effects=[safebunny.append(row, table)])

    assert _twice(step, _batch(spark, [("m1", "a", 1)]), 0, handle, rows=True).failed == 0  # note: all null
    assert _twice(step, _batch(spark, [("m2", "b", 2)]), 1, handle, rows=True).failed == 0
    assert sorted((r["messageId"], r["note"]) for r in _table(notes)) == [("m1", None), ("m2", "hello")]
    report = _twice(step, _batch(spark, [("m3", "c", 3), ("m4", "d", 4), ("m5", "e", 5)]), 2, handle, rows=True)
    assert (report.processed, report.failed) == (2, 1)
    failed = [r for r in _table(str(tmp_path / "inbox")) if r["status"] == "failed"]
    assert [r["messageId"] for r in failed] == ["m4"] and "code='A1'" in failed[0]["reason"]
    _twice(step, _batch(spark, [("m6", "f", 6)]), 3, handle, rows=True)
    assert sorted((r["messageId"], r["code"]) for r in _table(codes)) == [("m3", 1), ("m5", None), ("m6", 7)]


def test_the_spark_delta_merge_source_keeps_the_last_row_per_key(spark):
    # the statement Spark Delta's merge reads its source through (no Delta needed to run it)
    rows = [("m1", "A", 1, 0), ("m2", "A", 2, 1), ("m3", None, 3, 2), ("m4", None, 4, 3), ("m5", "B", 5, 4)]
    spark.createDataFrame(rows, "messageId string, k string, v int, _safebunnyOrder long") \
        .createOrReplaceTempView("sb_last_per_key")
    got = spark.sql(last_per_key_sql("sb_last_per_key", ["k"], ["messageId", "k", "v"])).collect()
    assert sorted(r["messageId"] for r in got) == ["m2", "m3", "m4", "m5"]
    assert got[0].asDict().keys() == {"messageId", "k", "v"}
