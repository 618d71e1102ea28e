"""safebunny.Step with its inbox and effect tables given by name, on real Delta Spark (the Databricks path):
each message applied once across batches and epochs, a merge's last row per key, the commits' app transactions
and tags as the orphan check reads them, and the inbox's maintenance."""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

import pyspark.sql.functions as F

sys.path.insert(0, str(Path(__file__).parents[1] / "e2e"))

from test_step import _run  # noqa: E402 - the same availableNow run of a step as tests/e2e's

import safebunny  # noqa: E402
from helpers import publish_numbered, queue_totals, wait_until  # noqa: E402
from safebunny.delta.commit_tags import commit_tag  # noqa: E402


def _orders(i: int) -> bytes:
    return json.dumps({"orderId": f"o{i % 40}", "amount": i}).encode()


def _parsed(orders):
    value = F.col("value").cast("string")
    return orders.select("messageId", F.get_json_object(value, "$.orderId").alias("orderId"),
                         F.get_json_object(value, "$.amount").cast("int").alias("amount"))


def test_a_step_on_tables_by_name_applies_each_message_once(spark, broker, amqp_uri, make_queue, admin, database,
                                                            tmp_path):
    queue, out = make_queue(), make_queue(suffix="-out")
    publish_numbered(amqp_uri, queue, 250, body=_orders, correlation_id="c-1")
    publish_numbered(amqp_uri, queue, 30, body=_orders, correlation_id="c-1")  # m0..m29 again, in the third batch
    inbox, invoices, totals = f"{database}.inbox", f"{database}.invoices", f"{database}.totals"
    step = safebunny.Step(node="billing", inbox=inbox, settings=safebunny.StepSettings(
        connection=safebunny.ConnectionSettings(amqp_uri), state=str(tmp_path / "state")))
    assert step.inbox.backend == "spark"

    def bill(orders, ctx):
        inv = _parsed(orders)
        return safebunny.Outcome(
            effects=[safebunny.append(inv, invoices),
                     safebunny.merge(inv.select("messageId", "orderId", "amount"), totals, on=["orderId"])],
            emits=[safebunny.emit(inv.select("messageId", "orderId"), type="InvoiceRequested", exchange="",
                                  routing_key=out)])

    q = _run(spark, amqp_uri, queue, str(tmp_path / "ck"), str(tmp_path / "journal"), step.foreach_batch(bill))
    ids = [f"m{i}" for i in range(250)]
    assert sorted(r.messageId for r in spark.table(invoices).collect()) == sorted(ids)
    # the merge: one row per order, the last message of each key in the source's order
    merged = {r.orderId: r.amount for r in spark.table(totals).collect()}
    assert merged == {f"o{k}": max(i for i in range(250) if i % 40 == k) for k in range(40)}
    assert sum(r.duplicates for r in step.reports) == 30
    got = admin.get_all(out)
    assert {p.message_id for _, p, _ in got} == {safebunny.message_id(i, "billing", "InvoiceRequested", 0)
                                                 for i in ids}
    wait_until(lambda: queue_totals(broker, queue) == (0, 0), what="source queue drained and acked")
    rows = spark.table(inbox).collect()
    assert len(rows) == 250 and {r.status for r in rows} == {"done"} and {r.epoch for r in rows} == {str(q.id)}

    # every effect commit carries its app transaction in userMetadata, which the orphan check reads
    tags = [r.userMetadata for r in spark.sql(f"DESCRIBE HISTORY {invoices}").collect()]
    assert len([t for t in tags if t and t.startswith("safebunny.txn ")]) == 3, tags
    merge_tags = [r.userMetadata for r in spark.sql(f"DESCRIBE HISTORY {totals}").collect()]
    assert all(t and t.startswith("safebunny.txn ") for t in merge_tags), merge_tags

    # a new checkpoint (a new epoch) over the same queue: the old messages come again and are dropped
    publish_numbered(amqp_uri, queue, 40, body=_orders)
    _run(spark, amqp_uri, queue, str(tmp_path / "ck2"), str(tmp_path / "journal2"), step.foreach_batch(bill))
    assert spark.table(invoices).count() == 250 and spark.table(inbox).count() == 250
    assert len(admin.get_all(out)) == 0


def test_the_inbox_by_name_is_maintained(spark, database, tmp_path):
    """maintain() deletes the node's rows older than its window, keeps other nodes' rows, compacts and vacuums."""
    from safebunny.exactly_once.inbox.table import Inbox, InboxRow

    inbox = Inbox(f"{database}.inbox", "billing", state=str(tmp_path / "state"))
    other = Inbox(f"{database}.inbox", "shipping", state=str(tmp_path / "state"))
    old = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    for batch in range(3):
        assert inbox.record([InboxRow(f"old{batch}", None, None)], "e1", batch, now=old)
    other.record([InboxRow("s1", None, None)], "e1", 0, now=old)
    new = old + dt.timedelta(days=30)
    for batch in (3, 4):  # two files in one partition: something to compact
        inbox.record([InboxRow(f"new{batch}", None, None)], "e1", batch, now=new)
    assert inbox.batch_done("e1", 2) and not inbox.batch_done("e1", 5)
    assert inbox.seen(["old0", "new3", "x"], "e2", 0, now=new) == {"new3"}  # old0 is outside the 7-day window
    assert inbox.seen(["new3", "new4"], "e1", 4, now=new) == {"new3"}  # a batch's own rows are not "seen"

    done = inbox.maintain(now=new)
    assert sorted(r.messageId for r in spark.table(f"{database}.inbox").collect()) == ["new3", "new4", "s1"]
    ops = [r.operation for r in spark.sql(f"DESCRIBE HISTORY {database}.inbox").collect()]
    assert "DELETE" in ops and "OPTIMIZE" in ops and "VACUUM END" in ops, ops
    assert done["decisions"] == 0


def test_a_replayed_commit_is_skipped_by_delta_and_read_back_from_the_history(spark, database):
    """What the step relies on, on real Delta Spark: an append or a merge replayed with its app transaction is
    skipped (by Delta, not by us), every commit's tag is in the history, including the commit that created the
    table, and the confs a merge sets are cleared after it."""
    import pyarrow as pa

    from safebunny.delta.spark_commits import TXN_APP_CONF
    from safebunny.delta.spark_delta import SparkDeltaTarget

    rows = pa.table({"messageId": ["m1", "m2", "m3"], "k": ["a", "a", "b"], "v": [1, 2, 3]})
    appended = SparkDeltaTarget(f"{database}.appended", spark, checked=True)
    assert appended.versions({"app": 1}) == {"app": None}
    appended.append(rows, "app", 1)
    appended.append(rows, "app", 1)  # the replay
    assert spark.table(f"{database}.appended").count() == 3
    assert appended.versions({"app": 1, "other": 1}) == {"app": 1, "other": None}
    appended.append(rows, "app", 3)
    assert spark.table(f"{database}.appended").count() == 6 and appended.versions({"app": 3}) == {"app": 3}

    merged = SparkDeltaTarget(f"{database}.merged", spark, checked=True)
    merged.merge(rows, ["k"], "app", 1)  # creates the table: the last row per key
    assert merged.versions({"app": 1}) == {"app": 1}
    later = pa.table({"messageId": ["m4"], "k": ["a"], "v": [4]})
    merged.merge(later, ["k"], "app", 3)
    merged.merge(pa.table({"messageId": ["m5"], "k": ["a"], "v": [5]}), ["k"], "app", 3)  # a replay: skipped
    assert {r.k: r.v for r in spark.table(f"{database}.merged").collect()} == {"a": 4, "b": 3}
    assert merged.versions({"app": 3}) == {"app": 3}
    assert spark.conf.get(TXN_APP_CONF, None) is None
    tags = [r.userMetadata for r in spark.sql(f"DESCRIBE HISTORY {database}.merged").collect()]
    assert sorted(tags) == sorted([commit_tag("app", 1), commit_tag("app", 3)])


def test_a_history_that_cannot_be_read_is_unknown_never_not_applied(spark, database):
    """DESCRIBE HISTORY of a table that is not Delta fails in Spark: the orphan check raises, it never answers
    "not applied" (which would apply an effect twice)."""
    import pytest

    from safebunny.delta.spark_delta import SparkDeltaTarget
    from safebunny.errors import SafeBunnyError

    spark.range(2).write.format("parquet").saveAsTable(f"{database}.plain")
    with pytest.raises(SafeBunnyError, match="Could not read the history"):
        SparkDeltaTarget(f"{database}.plain", spark).versions({"app": 1})


def test_a_history_cut_by_log_cleanup_is_unknown_for_an_older_claim(spark, database):
    """Log cleanup (delta.logRetentionDuration) removes the oldest commits once a checkpoint covers them; here the
    commits before the checkpoint are removed by hand, as cleanup does (its cut-off is whole days of file age). An
    orphan claimed before the history's start may have committed among the removed ones: the check raises. One
    claimed after it is read from what is left."""
    import glob
    import os
    import time

    import pyarrow as pa
    import pytest

    from safebunny.delta.spark_delta import SparkDeltaTarget
    from safebunny.errors import SafeBunnyError

    name = f"{database}.cleaned"
    target = SparkDeltaTarget(name, spark)
    target.append(pa.table({"messageId": ["m1"]}), "gone", 1)  # table version 0: removed below
    for version in range(2, 5):
        target.append(pa.table({"messageId": [f"m{version}"]}), "app", version)  # table versions 1 to 3
    spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ('delta.checkpointInterval' = '2')")  # version 4
    target.append(pa.table({"messageId": ["m5"]}), "later", 1)  # version 5
    target.append(pa.table({"messageId": ["m6"]}), "later", 2)
    log = spark.sql(f"DESCRIBE DETAIL {name}").collect()[0].location.replace("file:", "") + "/_delta_log"
    assert glob.glob(f"{log}/*.checkpoint.parquet")
    for version in range(3):
        for path in glob.glob(f"{log}/{version:020d}.*") + glob.glob(f"{log}/.{version:020d}.*"):
            os.remove(path)
    versions = [r.version for r in spark.sql(f"DESCRIBE HISTORY {name}").collect()]
    assert min(versions) == 3 and spark.table(name).count() == 6

    with pytest.raises(SafeBunnyError, match="log cleanup"):
        target.versions({"gone": 1}, since={"gone": time.time() - 86400})  # its tag (version 0) is gone: unknown
    # "app" 3's own commit (version 2) is gone too, but its later batch's tag (4, at version 3) says it applied
    assert target.versions({"app": 3, "later": 2}, since={"app": time.time() - 86400}) == {"app": 3, "later": 2}
    assert target.versions({"other": 1}, since={"other": time.time() + 3600}) == {"other": None}
    assert target.versions({"gone": 1}) == {"gone": None}  # without a claim's time: the history as it is


def test_the_inbox_by_name_reads_its_rows_through_its_target(spark, database, tmp_path):
    """Inbox.rows and DeltaTarget.read on Spark Delta: by node, by instance, every node, a list of values, a
    projection; nothing (None, an empty inbox) before the table exists."""
    from safebunny.delta.backend import delta_target
    from safebunny.exactly_once.inbox.table import Inbox, InboxRow

    name = f"{database}.inbox_reads"
    inbox = Inbox(name, "billing", state=str(tmp_path / "state"))
    other = Inbox(name, "shipping", state=str(tmp_path / "state"))
    target = delta_target(name, spark)
    assert target.backend == "spark" and target.read() is None and inbox.rows().num_rows == 0
    inbox.record([InboxRow("m1", "c1", None), InboxRow("m2", "c2", None)], "e1", 0)
    other.record([InboxRow("s1", "c1", None)], "e1", 0)
    assert sorted(inbox.rows().column("messageId").to_pylist()) == ["m1", "m2"]
    assert inbox.rows(correlation_id="c1").column("messageId").to_pylist() == ["m1"]
    assert sorted(inbox.rows(all_nodes=True).column("messageId").to_pylist()) == ["m1", "m2", "s1"]
    found = target.read({"messageId": ["m2", "s1"]}, ["messageId", "node"])
    assert found.column_names == ["messageId", "node"]
    assert sorted(found.to_pylist(), key=lambda r: r["messageId"]) == [
        {"messageId": "m2", "node": "billing"}, {"messageId": "s1", "node": "shipping"}]
