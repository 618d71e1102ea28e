"""The sink end to end: real Spark (local[2,3], so a failed task is retried), real broker.

What is published is read back with an independent client (the ``admin`` fixture's pika
connection) and compared field by field.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, MapType, StringType, StructField, StructType

from safebunny.amqp.outgoing import CAUSATION_HEADER, caused_id, content_id
from safebunny.ids import message_id

ALL_COLUMNS = StructType([
    StructField("value", BinaryType()),
    StructField("messageId", StringType()),
    StructField("correlationId", StringType()),
    StructField("causationId", StringType()),
    StructField("headers", MapType(StringType(), StringType())),
    StructField("contentType", StringType()),
    StructField("type", StringType()),
])


def writer(df, uri, **options):
    w = df.write.format("safebunny").mode("append").option("uri", uri)
    for key, value in options.items():
        w = w.option(key, value)
    return w


def wait_ready(admin, queue, count, timeout=30.0):
    deadline = time.monotonic() + timeout
    while admin.ready(queue) < count and time.monotonic() < deadline:
        time.sleep(0.1)
    return admin.ready(queue)


def test_batch_write_publishes_every_row_with_ids_and_properties(spark, amqp_uri, admin, make_queue):
    queue = make_queue()
    rows = [
        (b"explicit", "m-1", "corr-1", None, {"tenant": "t1"}, "application/json", "InvoiceCreated"),
        (b"caused-a", None, None, "order-9", None, None, "InvoiceCreated"),
        (b"caused-b", None, None, "order-9", None, None, "InvoiceCreated"),
        (b"plain", None, None, None, None, None, None),
        (b"plain", None, None, None, None, None, None),
    ]
    df = spark.createDataFrame(rows, ALL_COLUMNS).coalesce(1)
    writer(df, amqp_uri, routingKey=queue, contentType="application/x-default").save()

    messages = admin.get_all(queue)
    assert len(messages) == 5
    got = {body: props for _, props, body in messages}
    plain = [props.message_id for _, props, body in messages if body == b"plain"]
    assert len(set(plain)) == 2  # identical rows, distinct ids
    p = got[b"explicit"]
    assert (p.message_id, p.correlation_id, p.headers, p.content_type, p.type, p.delivery_mode) == (
        "m-1", "corr-1", {"tenant": "t1"}, "application/json", "InvoiceCreated", 2)
    assert p.timestamp and abs(p.timestamp - time.time()) < 600
    a, b = got[b"caused-a"], got[b"caused-b"]
    assert [a.message_id, b.message_id] == [
        caused_id("order-9", queue, "InvoiceCreated", body, None, [], "application/x-default", "InvoiceCreated", "",
                  queue) for body in (b"caused-a", b"caused-b")]
    assert a.correlation_id == "order-9" and a.headers == {CAUSATION_HEADER: "order-9"}
    assert a.content_type == "application/x-default" and a.delivery_mode == 2


def test_identical_rows_get_distinct_ids_and_a_rerun_the_same_ids(spark, amqp_uri, admin, make_queue):
    queue = make_queue()
    df = spark.createDataFrame([("same",)] * 3 + [("other",)], "value string").repartition(2)
    writer(df, amqp_uri, routingKey=queue).save()
    first = admin.get_all(queue)
    writer(df, amqp_uri, routingKey=queue).save()
    second = admin.get_all(queue)
    ids1 = [p.message_id for _, p, _ in first]
    assert len(ids1) == 4 and len(set(ids1)) == 4
    assert all(p.correlation_id == p.message_id for _, p, _ in first)
    assert all(p.content_type == "text/plain; charset=utf-8" for _, p, _ in first)
    assert sorted(ids1) == sorted(p.message_id for _, p, _ in second)


def test_per_row_exchange_and_routing_key_override_the_options(spark, amqp_uri, admin, make_queue, make_exchange):
    q1, q2 = make_queue(suffix="-1"), make_queue(suffix="-2")
    exchange = make_exchange("direct")
    admin._ch().queue_bind(q2, exchange, "to-q2")
    df = spark.createDataFrame([("a", None, None), ("b", exchange, "to-q2"), ("c", "", q1)],
                               "value string, exchange string, routingKey string")
    writer(df, amqp_uri, exchange="", routingKey=q1).save()
    assert sorted(b for _, _, b in admin.get_all(q1)) == [b"a", b"c"]
    assert [b for _, _, b in admin.get_all(q2)] == [b"b"]


def test_bad_column_fails_before_publishing(spark, amqp_uri, admin, make_queue):
    queue = make_queue()
    df = spark.createDataFrame([("a", "x")], "value string, partitionKey string")
    with pytest.raises(Exception) as info:
        writer(df, amqp_uri, routingKey=queue).save()
    text = str(info.value)
    assert "does not accept the column 'partitionKey'" in text and "Accepted columns:" in text
    assert admin.ready(queue) == 0


@pytest.mark.parametrize(
    "options, words",
    [
        ({"routingKey": "q", "maxInFlight": "0"}, ["'maxInFlight'", "at least 1"]),
        ({"routingKey": "q", "confirmTimeout": "5"}, ["Unknown option 'confirmtimeout'",
                                                      "Did you mean 'confirmTimeoutMs'"]),
        ({}, ["needs a routing key"]),
    ],
)
def test_bad_options_fail_before_publishing(spark, amqp_uri, options, words):
    df = spark.createDataFrame([("a",)], "value string")
    with pytest.raises(Exception) as info:
        writer(df, amqp_uri, **options).save()
    for word in words:
        assert word in str(info.value)


def test_overwrite_mode_is_refused(spark, amqp_uri):
    df = spark.createDataFrame([("a",)], "value string")
    with pytest.raises(Exception, match="cannot overwrite"):
        writer(df, amqp_uri, routingKey="q").mode("overwrite").save()


def test_unroutable_fails_the_write_with_exchange_and_routing_key(spark, amqp_uri, make_exchange):
    exchange = make_exchange("topic")
    df = spark.createDataFrame([("a",), ("b",)], "value string")
    with pytest.raises(Exception) as info:
        writer(df, amqp_uri, exchange=exchange, routingKey="nobody.listens").save()
    text = str(info.value)
    assert "returned as unroutable" in text and repr(exchange) in text and "'nobody.listens'" in text


def test_full_reject_publish_queue_fails_the_write(spark, amqp_uri, admin, make_queue):
    queue = make_queue(arguments={"x-max-length": 5, "x-overflow": "reject-publish"})
    df = spark.range(50).selectExpr("cast(id as string) as value").coalesce(1)
    with pytest.raises(Exception) as info:
        writer(df, amqp_uri, routingKey=queue).save()
    assert "nacked" in str(info.value) and repr(queue) in str(info.value)
    assert admin.ready(queue) == 5


def test_missing_exchange_fails_the_write_clearly(spark, amqp_uri, unique_name):
    df = spark.createDataFrame([("a",)], "value string")
    with pytest.raises(Exception) as info:
        writer(df, amqp_uri, exchange=unique_name, routingKey="k").save()
    text = str(info.value)
    assert "404" in text and unique_name in text and "Declare the exchange" in text


def test_a_retried_task_republishes_the_same_ids(spark, amqp_uri, admin, make_queue):
    """Attempt 0 of the task fails after part of its rows were confirmed; attempt 1 publishes all of them.

    The failing UDF waits (polling the broker, with a deadline) until attempt 0 has put at least
    ``published_first`` messages in the queue, so the failure really comes mid-write. Rows are 4 KB
    so that Spark's socket buffers do not hold them back from the writer.
    """
    queue = make_queue()
    n, fail_at, published_first = 200, 150, 40

    @F.udf("string")
    def body(i):
        import time as _time

        import pika as _pika
        from pyspark import TaskContext

        if i == fail_at and TaskContext.get().attemptNumber() == 0:
            conn = _pika.BlockingConnection(_pika.URLParameters(amqp_uri))
            deadline = _time.monotonic() + 60
            while (conn.channel().queue_declare(queue, passive=True).method.message_count < published_first
                   and _time.monotonic() < deadline):
                conn.process_data_events(0.1)
            conn.close()
            raise RuntimeError("injected failure on the first attempt")
        return f"row-{i}-" + "x" * 4000

    df = spark.range(0, n, 1, 1).select(body("id").alias("value"))
    conf = {"spark.sql.execution.arrow.maxRecordsPerBatch": "10",
            "spark.sql.execution.python.udf.maxRecordsPerBatch": "10"}
    old = {k: spark.conf.get(k, None) for k in conf}
    try:
        for key, value in conf.items():
            spark.conf.set(key, value)
        writer(df, amqp_uri, routingKey=queue, maxInFlight="5").save()
    finally:
        for key, value in old.items():
            spark.conf.unset(key) if value is None else spark.conf.set(key, value)
    got = admin.get_all(queue)
    ids_by_body: dict[bytes, set[str]] = {}
    for _, props, b in got:
        ids_by_body.setdefault(b, set()).add(props.message_id)
    assert len(ids_by_body) == n  # every row arrived
    assert all(len(ids) == 1 for ids in ids_by_body.values())  # duplicates carry identical ids
    duplicates = len(got) - n
    assert published_first <= duplicates <= fail_at, f"attempt 0 published {duplicates} rows"
    assert len({p.message_id for _, p, _ in got}) == n


# -- streaming -------------------------------------------------------------------------
def _json_input(tmp_path: Path, rows: list[dict]) -> Path:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "part-0.json").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return folder


def _stream(spark, folder, uri, checkpoint, **options):
    df = spark.readStream.schema("value string, causationId string, type string").json(str(folder))
    w = df.writeStream.format("safebunny").option("uri", uri).option("checkpointLocation", str(checkpoint))
    for key, value in options.items():
        w = w.option(key, value)
    return w.trigger(availableNow=True).start()


def test_streaming_write_commits_after_confirms(spark, amqp_uri, admin, make_queue, tmp_path):
    queue = make_queue()
    rows = [{"value": f"v{i}", "causationId": "c-1" if i < 3 else None, "type": "Step"} for i in range(10)]
    rows.append({"value": "v0", "causationId": None, "type": "Step"})
    checkpoint = tmp_path / "cp"
    query = _stream(spark, _json_input(tmp_path, rows), amqp_uri, checkpoint, routingKey=queue, node="billing")
    query.awaitTermination(120)
    assert query.exception() is None
    assert (checkpoint / "commits" / "0").exists()
    got = admin.get_all(queue)
    assert len(got) == 11
    ids = [p.message_id for _, p, _ in got]
    assert len(set(ids)) == 11
    def caused(i):
        return caused_id("c-1", "billing", "Step", b"v%d" % i, None, [], "text/plain; charset=utf-8", "Step", "",
                         queue)

    got_caused = sorted(p.message_id for _, p, b in got if p.headers and p.headers.get(CAUSATION_HEADER) == "c-1")
    assert got_caused == sorted(caused(i) for i in range(3))
    assert all(p.delivery_mode == 2 and p.type == "Step" for _, p, _ in got)
    # content ids are scoped by the micro-batch id (0) and the partition (one file: partition 0)
    by_body = {}
    for _, p, b in got:
        by_body.setdefault(b, []).append(p.message_id)
    expected = {content_id("batch:0/partition:0", b"v0", None, [], "text/plain; charset=utf-8", "Step", "",
                           queue, k) for k in (0, 1)}
    assert set(by_body[b"v0"]) - {caused(0)} <= expected
    assert by_body[b"v5"] == [content_id("batch:0/partition:0", b"v5", None, [], "text/plain; charset=utf-8",
                                         "Step", "", queue, 0)]


def test_streaming_unroutable_fails_the_query_and_commits_nothing(spark, amqp_uri, make_exchange, tmp_path):
    exchange = make_exchange("topic")
    checkpoint = tmp_path / "cp"
    query = _stream(spark, _json_input(tmp_path, [{"value": "a"}]), amqp_uri, checkpoint, exchange=exchange,
                    routingKey="nobody.listens")
    with pytest.raises(Exception) as info:
        query.awaitTermination(120)
    text = str(info.value)
    assert "returned as unroutable" in text and repr(exchange) in text and "'nobody.listens'" in text
    assert not (checkpoint / "commits" / "0").exists()


def test_streaming_bad_column_fails_at_start(spark, amqp_uri, tmp_path):
    folder = _json_input(tmp_path, [{"value": "a"}])
    df = spark.readStream.schema("value string, key string").json(str(folder))
    with pytest.raises(Exception) as info:
        query = (df.writeStream.format("safebunny").option("uri", amqp_uri).option("routingKey", "q")
                 .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
        query.awaitTermination(120)
    assert "does not accept the column 'key'" in str(info.value)



def test_commit_and_abort_log_the_batch_totals(caplog):
    """The driver-side summaries (called directly: the Python worker's log is not visible here)."""
    from pyspark_safebunny.writer import SafeBunnyStreamWriter, SafeBunnyWriteStats, summarize
    from safebunny.amqp.outgoing import plan_sink
    from safebunny.options.sink import parse_sink_options

    stats = [SafeBunnyWriteStats(0, 0, 10, 10, 0, 0, 0.1), SafeBunnyWriteStats(1, 1, 5, 5, 0, 0, 0.1)]
    assert summarize([*stats, None]) == {"tasks": 3, "succeeded": 2, "published": 15, "confirmed": 15,
                                         "returned": 0, "nacked": 0}
    options = parse_sink_options({"uri": "amqp://guest:guest@127.0.0.1:5672/%2F", "routingKey": "q"})
    w = SafeBunnyStreamWriter(plan_sink(options, {"value": "string"}))
    with caplog.at_level("INFO", logger="safebunny.sink"):
        w.commit(stats, 7)
        w.abort([stats[0], None], 8)
    assert "batch 7 committed: 2/2 tasks succeeded, 15 messages published, 15 confirmed, 0 returned, 0 nacked" in (
        caplog.text)
    assert "batch 8 aborted: 1/2 tasks succeeded, 10 messages published" in caplog.text
    assert "same ids" in caplog.text


def _descends_from_me(pid: int) -> bool:
    import os

    me = os.getpid()
    while pid > 1:
        if pid == me:
            return True
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return False


def _my_publisher_connections(broker) -> list[int]:
    """PIDs of this test run's Spark workers that hold a safebunny publisher connection (rabbitmqctl)."""
    out = broker.ctl("list_connections", "-q", "--no-table-headers", "client_properties")
    marker = '{"process","pid '  # amqp/connection.client_properties
    pids = [int(line.split(marker)[1].split('"')[0]) for line in out.splitlines()
            if marker in line and '/publisher"}' in line]
    return sorted(p for p in pids if _descends_from_me(p))


def test_python_workers_reuse_their_connection_across_tasks(spark, amqp_uri, admin, make_queue, broker):
    if broker.ctl is None:
        pytest.fail(f"this test lists connections with rabbitmqctl, which {broker.origin} does not offer")
    queue = make_queue()
    df = spark.range(0, 80, 1, 4).selectExpr("cast(id as string) as value")
    writer(df, amqp_uri, routingKey=queue, maxInFlight="7").save()
    after_first = _my_publisher_connections(broker)
    for _ in range(2):
        writer(df, amqp_uri, routingKey=queue, maxInFlight="7").save()
    assert admin.ready(queue) == 240
    assert after_first
    # 12 tasks, no new connection (a connection cached by an earlier test may have closed meanwhile)
    assert not Counter(_my_publisher_connections(broker)) - Counter(after_first)


def test_a_replayed_micro_batch_republishes_the_same_ids(spark, amqp_uri, admin, make_queue, make_exchange,
                                                         tmp_path):
    """Batch 0 fails (one routing key unbound) after its routable rows were published; the query is
    restarted from the same checkpoint once the binding exists, Spark replays batch 0, and the
    republished rows carry the ids of the first run."""
    queue = make_queue()
    exchange = make_exchange("direct")
    admin._ch().queue_bind(queue, exchange, "ok")
    folder = tmp_path / "in"
    folder.mkdir()
    rows = [{"value": f"v{i % 4}", "routingKey": "ok" if i < 6 else "later"} for i in range(8)]
    (folder / "part-0.json").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    checkpoint = tmp_path / "cp"

    def run():
        df = spark.readStream.schema("value string, routingKey string").json(str(folder))
        return (df.writeStream.format("safebunny").option("uri", amqp_uri).option("exchange", exchange)
                .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())

    query = run()
    with pytest.raises(Exception, match="'later'"):
        query.awaitTermination(120)
    assert not (checkpoint / "commits" / "0").exists()
    first = admin.get_all(queue)
    assert first and {b for _, _, b in first} <= {b"v0", b"v1", b"v2", b"v3"}
    admin._ch().queue_bind(queue, exchange, "later")
    query = run()
    query.awaitTermination(120)
    assert query.exception() is None and (checkpoint / "commits" / "0").exists()
    second = admin.get_all(queue)
    assert len(second) == 8 and len({p.message_id for _, p, _ in second}) == 8
    replayed = {p.message_id for _, p, _ in second}
    assert {p.message_id for _, p, _ in first} <= replayed  # every id of the failed run comes back, unchanged


# -- Derived ids of several outputs of one cause -------------------------------------------------
def test_s2_outputs_of_one_cause_keep_their_ids_across_a_shuffle_and_a_task_retry(spark, amqp_uri, admin,
                                                                                  make_queue):
    """Six causes with eight outputs each, spread over three partitions by a shuffle (repartition). The first
    attempt of partition 0 publishes part of its rows and fails; its retry sees its rows in reverse order.
    Every output must keep one id (the failed attempt's copies carry the retry's ids), the ids must be the
    content-derived ones whatever the partitioning (a write through one partition gives the same), and
    distinct outputs of one cause never share an id. With the old rule (index = arrival order within the
    task) outputs of one cause in different partitions collided and the reversed retry swapped ids."""
    import pandas as pd

    queue = make_queue()
    pad = "x" * 32_000  # rows bigger than the Python worker's 64 KB output buffer, so they flow before the failure
    rows = [(f"order-{c}/line-{j}/{pad}", f"order-{c}", "InvoiceLine") for c in range(6) for j in range(8)]
    schema = "value string, causationId string, type string"

    def _browse_for(uri: str, queue: str, wanted: set[bytes], timeout: float) -> bool:
        """True once a message whose body is in ``wanted`` sits in ``queue`` (looked at unacked, then requeued)."""
        import time as _time

        import pika as _pika

        conn = _pika.BlockingConnection(_pika.URLParameters(uri))
        try:
            deadline = _time.monotonic() + timeout
            while _time.monotonic() < deadline:
                channel = conn.channel()
                seen = []
                while True:
                    method, _props, body = channel.basic_get(queue, auto_ack=False)
                    if method is None:
                        break
                    seen.append(body)
                channel.close()  # everything taken goes back to the queue
                if wanted.intersection(seen):
                    return True
                conn.process_data_events(0.2)
            return False
        finally:
            conn.close()

    def flaky(batches):
        from pyspark import TaskContext

        ctx = TaskContext.get()
        frame = pd.concat(list(batches), ignore_index=True)
        if ctx.partitionId() == 0 and ctx.attemptNumber() == 0:
            for start in range(0, len(frame), 4):
                yield frame.iloc[start:start + 4]
                if start >= 8:  # a few rows are on their way: wait until one was published, then fail
                    assert _browse_for(amqp_uri, queue, {v.encode() for v in frame.value}, 60)
                    raise RuntimeError("injected failure on the first attempt of partition 0")
        if ctx.attemptNumber() > 0:
            frame = frame.iloc[::-1]  # the retry sees its rows in another order
        for start in range(0, len(frame), 4):
            yield frame.iloc[start:start + 4]

    df = spark.createDataFrame(rows, schema).repartition(3).mapInPandas(flaky, schema)
    conf = {"spark.sql.execution.arrow.maxRecordsPerBatch": "4"}
    old = {k: spark.conf.get(k, None) for k in conf}
    try:
        for key, value in conf.items():
            spark.conf.set(key, value)
        writer(df, amqp_uri, routingKey=queue, node="billing", maxInFlight="2").save()  # publish as rows come
    finally:
        for key, value in old.items():
            spark.conf.unset(key) if value is None else spark.conf.set(key, value)
    got = admin.get_all(queue)
    ids_by_body: dict[bytes, set[str]] = {}
    for _, props, body in got:
        ids_by_body.setdefault(body, set()).add(props.message_id)
    assert len(ids_by_body) == len(rows)  # every output arrived
    assert len(got) > len(rows)  # the failed attempt published copies...
    assert all(len(ids) == 1 for ids in ids_by_body.values())  # ...with the same ids as the retry
    expected = {v.encode(): caused_id(c, "billing", t, v.encode(), None, [], "text/plain; charset=utf-8", t, "",
                                      queue) for v, c, t in rows}
    assert {b: ids.pop() for b, ids in ids_by_body.items()} == expected
    assert len(set(expected.values())) == len(rows)

    # the same rows through one partition, in another order: the same ids
    writer(spark.createDataFrame(rows[::-1], schema).coalesce(1), amqp_uri, routingKey=queue, node="billing").save()
    assert {b: p.message_id for _, p, b in admin.get_all(queue)} == expected


def test_s2_an_output_index_column_gives_safebunny_message_id(spark, amqp_uri, admin, make_queue):
    queue = make_queue()
    rows = [("b", "order-1", 1), ("a", "order-1", 0), ("c", "order-2", 0)]
    df = spark.createDataFrame(rows, "value string, causationId string, outputIndex int").repartition(2)
    writer(df, amqp_uri, routingKey=queue, node="billing", type="Invoice").save()
    got = {b: p.message_id for _, p, b in admin.get_all(queue)}
    assert got == {v.encode(): message_id(c, "billing", "Invoice", i) for v, c, i in rows}
