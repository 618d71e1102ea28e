"""A step's batch read on the driver from the source's journal (``exactly_once.collect.journal_read``) against
Spark's own read of it (real broker, real SparkSession, real Delta inbox):

- for every batch of a query, the journal read gives the table ``toArrow()`` gives: the same schema, the same rows
  in the same order (headers, a message without an id, properties, duplicates included), and an empty batch is
  read as empty without a Spark job;
- a ``Step`` told its journal and checkpoint applies each message once, and Spark's progress still counts every
  row (``numInputRows``: Spark's read runs beside the step);
- a batch whose range the offset log cannot give (the entry gone) is collected by Spark as before.
"""

from __future__ import annotations

import datetime as dt
import os

import pika

import safebunny
from helpers import publish_numbered
from safebunny.delta.delta_rs import DeltaRsTarget
from safebunny.exactly_once.collect.journal_read import JournalRead


def _publish_mixed(uri: str, queue: str, n: int) -> None:
    """``n`` messages with headers, timestamps, a repeated id and one without an id."""
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    ch = conn.channel()
    ch.confirm_delivery()
    for i in range(n):
        props = pika.BasicProperties(
            message_id=None if i == 3 else f"m{i % (n - 2)}", correlation_id=f"c{i}", type="T", delivery_mode=2,
            headers={"x-n": i, "x-causation-id": f"cause{i}"} if i % 2 else None, content_type="application/json",
            timestamp=int(dt.datetime(2026, 11, 28, tzinfo=dt.timezone.utc).timestamp()) + i)
        ch.basic_publish("", queue, f'{{"n": {i}}}'.encode(), props)
    conn.close()


def _stream(spark, uri, queue, journal, batch):  # type: ignore[no-untyped-def]
    return (spark.readStream.format("safebunny").option("uri", uri).option("queue", queue)
            .option("queueType", "classic").option("journalLocation", journal).option("includeHeaders", "true")
            .option("maxMessagesPerTrigger", str(batch)).load())


def test_the_journal_read_gives_what_spark_reads(spark, amqp_uri, make_queue, tmp_path) -> None:  # type: ignore[no-untyped-def]
    queue, journal, checkpoint = make_queue(), str(tmp_path / "journal"), str(tmp_path / "ck")
    _publish_mixed(amqp_uri, queue, 45)
    reader = JournalRead(journal, checkpoint)
    seen: list[tuple[int, int, int]] = []
    mismatches: list[str] = []

    def compare(df, batch_id):  # type: ignore[no-untyped-def]
        read = reader.read(df.sparkSession, df, "epoch", batch_id)
        assert read is not None, f"batch {batch_id}: the journal read fell back to Spark"
        table, spark_read = read
        spark_read.wait()
        expected = df.toArrow()
        if table.schema != expected.schema or not table.equals(expected):
            mismatches.append(f"batch {batch_id}: {table.schema} / {expected.schema}; "
                              f"{table.slice(0, 2).to_pylist()} / {expected.slice(0, 2).to_pylist()}")
        seen.append((batch_id, table.num_rows, spark_read.expected))

    q = (_stream(spark, amqp_uri, queue, journal, 10).writeStream.foreachBatch(compare)
         .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    q.awaitTermination(300)
    assert q.exception() is None, q.exception()
    assert not mismatches, mismatches
    assert sum(n for _, n, _ in seen) == 45 and all(n == e for _, n, e in seen)
    assert [n for _, n, _ in seen if n] == [10, 10, 10, 10, 5]  # the offset log's ranges cover each message once


def test_a_step_reads_its_journal_and_spark_still_counts_the_rows(spark, amqp_uri, make_queue, tmp_path) -> None:  # type: ignore[no-untyped-def]
    queue, journal, checkpoint = make_queue(), str(tmp_path / "journal"), str(tmp_path / "ck")
    publish_numbered(amqp_uri, queue, 120)
    publish_numbered(amqp_uri, queue, 20)  # m0..m19 again: duplicates
    effects = str(tmp_path / "effects")
    step = safebunny.Step("reader", str(tmp_path / "inbox"), safebunny.StepSettings(
        connection=safebunny.ConnectionSettings(amqp_uri), checkpoint=checkpoint, journal=journal))

    def handle(df, ctx):  # type: ignore[no-untyped-def]
        return safebunny.Outcome(effects=[safebunny.append(df.select("messageId"), effects)])

    q = (_stream(spark, amqp_uri, queue, journal, 50).writeStream.foreachBatch(step.foreach_batch(handle))
         .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    q.awaitTermination(300)
    assert q.exception() is None, q.exception()
    rows = DeltaRsTarget(effects).read().to_pylist()
    assert sorted(r["messageId"] for r in rows) == sorted(f"m{i}" for i in range(120))
    assert sum(p.numInputRows for p in q.recentProgress) == 140
    with_rows = [r for r in step.reports if r.received]
    assert with_rows and all("spark_read" in r.phases for r in with_rows)
    assert sum(r.received for r in step.reports) == 140


def test_a_batch_the_offset_log_cannot_name_is_collected_by_spark(spark, amqp_uri, make_queue, tmp_path) -> None:  # type: ignore[no-untyped-def]
    queue, journal, checkpoint = make_queue(), str(tmp_path / "journal"), str(tmp_path / "ck")
    publish_numbered(amqp_uri, queue, 30)
    step = safebunny.Step("fallback", str(tmp_path / "inbox"), safebunny.StepSettings(
        connection=safebunny.ConnectionSettings(amqp_uri), checkpoint=checkpoint, journal=journal))
    offsets = tmp_path / "ck" / "offsets"

    def handle(df, ctx):  # type: ignore[no-untyped-def]
        return None

    def hide_the_start(df, batch_id):  # type: ignore[no-untyped-def]
        step._journal._ends.clear()  # noqa: SLF001 - nothing remembered, as in a process started again
        if batch_id > 0:  # the previous entry gone, as if Spark had purged it
            os.replace(offsets / str(batch_id - 1), tmp_path / f"hidden-{batch_id - 1}")
        try:
            step.process(df, batch_id, handle)
        finally:
            if batch_id > 0:
                os.replace(tmp_path / f"hidden-{batch_id - 1}", offsets / str(batch_id - 1))

    q = (_stream(spark, amqp_uri, queue, journal, 10).writeStream.foreachBatch(hide_the_start)
         .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    q.awaitTermination(300)
    assert q.exception() is None, q.exception()
    reports = [r for r in step.reports if r.received]
    assert sum(r.received for r in reports) == 30
    # batch 0 starts at 0 (read from the journal); the rest had no start in the log and Spark collected them
    assert "spark_read" in reports[0].phases and not any("spark_read" in r.phases for r in reports[1:])


def test_a_frame_made_from_the_batch_is_collected_by_spark_before_any_effect(spark, amqp_uri, make_queue,
                                                                               tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The journal file stands only for the micro-batch itself: a filtered frame handed to a Step with a journal is
    collected by Spark (checked before anything is read), so only its rows are applied and the batch succeeds."""
    queue, journal, checkpoint = make_queue(), str(tmp_path / "journal"), str(tmp_path / "ck")
    publish_numbered(amqp_uri, queue, 30)
    effects = str(tmp_path / "effects")
    step = safebunny.Step("filtered", str(tmp_path / "inbox"), safebunny.StepSettings(
        connection=safebunny.ConnectionSettings(amqp_uri), checkpoint=checkpoint, journal=journal))

    def handle(df, ctx):  # type: ignore[no-untyped-def]
        return safebunny.Outcome(effects=[safebunny.append(df.select("messageId"), effects)])

    def odd_only(df, batch_id):  # type: ignore[no-untyped-def]
        step.process(df.where("cast(substring(messageId, 2) as int) % 2 = 1"), batch_id, handle)

    q = (_stream(spark, amqp_uri, queue, journal, 10).writeStream.foreachBatch(odd_only)
         .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    q.awaitTermination(300)
    assert q.exception() is None, q.exception()
    rows = DeltaRsTarget(effects).read().to_pylist()
    assert sorted(r["messageId"] for r in rows) == sorted(f"m{i}" for i in range(1, 30, 2))
    reports = [r for r in step.reports if r.received]
    assert sum(r.received for r in reports) == 15
    assert reports and not any("spark_read" in r.phases for r in reports), [r.phases for r in reports]
