"""readStream.format("safebunny") over classic and quorum queues, with a real Spark and broker."""


import pytest

from helpers import publish_numbered, queue_totals
from helpers import wait_until as _wait


def _publish(uri, queue, n, start=0):
    publish_numbered(uri, queue, n, start, body=lambda i: b'{"n": %d}' % i, correlation_id="c",
                     headers={"k": 1, "nested": {"a": [1, 2]}})


def _reader(spark, uri, queue, tmp_path, **options):
    r = (spark.readStream.format("safebunny").option("uri", uri).option("queue", queue)
         .option("journalLocation", str(tmp_path / "journal")))
    for k, v in options.items():
        r = r.option(k, str(v))
    return r.load()


@pytest.mark.parametrize("kind", ["classic", "quorum"])
def test_available_now_reads_every_message_once_over_several_batches(spark, broker, amqp_uri, make_queue,
                                                                     tmp_path, kind):
    queue = make_queue(kind)
    _publish(amqp_uri, queue, 250)  # three batches: 100, 100, 50
    df = _reader(spark, amqp_uri, queue, tmp_path, maxMessagesPerTrigger=100, includeHeaders="true")
    name = f"out_{kind}"
    q = (df.writeStream.format("memory").queryName(name).option("checkpointLocation", str(tmp_path / "cp"))
         .trigger(availableNow=True).start())
    q.awaitTermination(300)
    rows = spark.sql(f"select messageId, queue, redelivered, headers, correlationId from {name}").collect()
    assert sorted(r.messageId for r in rows) == sorted(f"m{i}" for i in range(250))
    assert {r.queue for r in rows} == {queue} and not any(r.redelivered for r in rows)
    assert rows[0].headers["nested"] == '{"a":[1,2]}' and rows[0].correlationId == "c"
    assert max(p["numInputRows"] for p in q.recentProgress) == 100
    # everything committed is acked: nothing ready, nothing unacked, journal cleaned up
    _wait(lambda: queue_totals(broker, queue) == (0, 0), what="queue empty")
    assert not list((tmp_path / "journal").glob("*.arrow"))


def test_continuous_query_acks_while_idle_and_holds_messages_unacked_during_a_batch(
        spark, broker, amqp_uri, make_queue, tmp_path):
    queue = make_queue()
    _publish(amqp_uri, queue, 300)
    seen = []
    unacked_during_batch = []

    def process(batch_df, batch_id):
        n = batch_df.count()
        if n:
            unacked_during_batch.append((n, queue_totals(broker, queue)[1]))
        seen.extend(r.messageId for r in batch_df.select("messageId").collect())

    df = _reader(spark, amqp_uri, queue, tmp_path, maxMessagesPerTrigger=100)
    q = (df.writeStream.foreachBatch(process).option("checkpointLocation", str(tmp_path / "cp"))
         .trigger(processingTime="500 milliseconds").start())
    try:
        _wait(lambda: len(seen) >= 300, what="300 rows")
        # the query is still running and idle: its last batch gets acked anyway (the tick)
        _wait(lambda: queue_totals(broker, queue) == (0, 0), timeout=60, what="all acked while idle")
        assert q.isActive
        _publish(amqp_uri, queue, 50, start=300)
        _wait(lambda: len(seen) >= 350, what="350 rows")
        _wait(lambda: queue_totals(broker, queue) == (0, 0), timeout=60, what="all acked again")
    finally:
        q.stop()
    assert sorted(seen) == sorted(f"m{i}" for i in range(350))
    # while a batch ran, its own messages were unacked in the broker
    assert unacked_during_batch and all(unacked >= n for n, unacked in unacked_during_batch)


def test_lag_is_reported_in_progress_and_no_password_in_plans_or_progress(spark, amqp_uri, make_queue, tmp_path):
    queue = make_queue()
    _publish(amqp_uri, queue, 500)
    df = (spark.readStream.format("safebunny").option("uri", amqp_uri.replace("guest:guest", "guest:zzz"))
          .option("password", "guest").option("queue", queue).option("queueType", "classic")
          .option("journalLocation", str(tmp_path / "j")).option("maxMessagesPerTrigger", 100).load())
    plan = df._jdf.queryExecution().toString()
    assert "guest:guest" not in plan and "password=*********(redacted)" in plan
    q = (df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp"))
         .trigger(processingTime="200 milliseconds").start())
    try:
        _wait(lambda: any(p["numInputRows"] for p in q.recentProgress), what="a batch")
        progress = q.recentProgress
        latest = [p["sources"][0].get("latestOffset") for p in progress if p["numInputRows"]]
        assert latest and latest[0] is not None and '"seq"' in latest[0]
        assert all("guest:guest" not in str(p) for p in progress)
    finally:
        q.stop()


def test_register_hides_a_password_inside_uri_in_plans(spark, amqp_uri):
    import safebunny

    safebunny.register(spark)
    secret = amqp_uri.replace("guest:guest", "guest:pl4ntext")
    df = (spark.readStream.format("safebunny").option("uri", secret).option("queue", "q")
          .option("queueType", "classic").option("journalLocation", "/tmp/x").load())
    assert "pl4ntext" not in df._jdf.queryExecution().toString()


def test_read_stream_moves_a_password_inside_uri_to_the_redacted_password_option(default_redaction, amqp_uri,
                                                                                    make_queue):
    import safebunny

    df = safebunny.read_stream(default_redaction, uri=amqp_uri, queue=make_queue(), queueType="classic",
                               journalLocation="/tmp/x")
    plan = df._jdf.queryExecution().toString()
    assert "amqp://guest@127.0.0.1" in plan and "password=*********(redacted)" in plan
    assert "guest:guest" not in plan


@pytest.mark.parametrize(
    "options, words",
    [
        ({"queueType": "classic"}, ["'journalLocation' is required", "classic queue"]),
        ({"queueType": "classic", "journalLocation": "/tmp/x", "maxMessagesPerTriger": "5"},
         ["Unknown option", "maxMessagesPerTrigger"]),
        ({"queueType": "classic", "journalLocation": "/tmp/x", "maxMessagesPerTrigger": "-5"},
         ["'maxMessagesPerTrigger' must be at least 1", "-5"]),
        ({"queueType": "sideways"}, ["'queueType' must be one of", "'sideways'"]),
    ],
)
def test_bad_options_fail_at_load_with_clear_words(spark, amqp_uri, options, words):
    r = spark.readStream.format("safebunny").option("uri", amqp_uri).option("queue", "whatever")
    for k, v in options.items():
        r = r.option(k, v)
    with pytest.raises(Exception) as info:
        r.load()
    for word in words:
        assert word in str(info.value)


def test_missing_queue_and_wrong_password_fail_clearly_without_the_password(spark, amqp_uri):
    with pytest.raises(Exception) as info:
        spark.readStream.format("safebunny").option("uri", amqp_uri).option("queue", "sbt-missing-q-1").load()
    assert "does not exist" in str(info.value) or "not found" in str(info.value).lower()
    bad = amqp_uri.replace("guest:guest", "guest:s3cr3tpw")
    with pytest.raises(Exception) as info:
        spark.readStream.format("safebunny").option("uri", bad).option("queue", "q").load()
    assert "s3cr3tpw" not in str(info.value)


def test_trigger_once_is_refused_with_advice(spark, amqp_uri, make_queue, tmp_path):
    """`trigger(once=True)` plans one batch and never commits it; the source refuses it and names availableNow."""
    queue = make_queue()
    publish_numbered(amqp_uri, queue, 5)
    df = (spark.readStream.format("safebunny").option("uri", amqp_uri).option("queue", queue)
          .option("queueType", "classic").option("journalLocation", str(tmp_path / "j")).load())
    q = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ck")).trigger(once=True).start()
    with pytest.raises(Exception, match="availableNow"):  # noqa: B017 - Spark wraps our error in its own
        q.awaitTermination(120)


def test_two_queries_sharing_a_journal_location_fail_clearly_and_a_restart_keeps_its_own(spark, broker, amqp_uri,
                                                                                         make_queue, tmp_path):
    """The journal's id travels through Spark's offset log; a second query (another checkpoint) on the same
    journalLocation fails naming the option, the first one restarts from its checkpoint and goes on."""
    import json

    orders, payments = make_queue(suffix="-a"), make_queue(suffix="-b")
    _publish(amqp_uri, orders, 30)
    _publish(amqp_uri, payments, 30)

    def run(queue, checkpoint):
        df = _reader(spark, amqp_uri, queue, tmp_path, queueType="classic", maxMessagesPerTrigger=10)
        return (df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / checkpoint))
                .trigger(availableNow=True).start())

    first = run(orders, "cp-a")
    first.awaitTermination(300)
    assert first.exception() is None
    logged = json.loads((tmp_path / "cp-a" / "offsets" / "0").read_text().splitlines()[-1])
    assert logged["journal"]
    second = run(payments, "cp-b")
    with pytest.raises(Exception) as info:  # noqa: B017 - Spark wraps our error in its own
        second.awaitTermination(120)
    assert "'journalLocation'" in str(info.value) and "belongs to another query" in str(info.value)
    assert queue_totals(broker, payments) == (30, 0)
    _publish(amqp_uri, orders, 5, start=30)
    again = run(orders, "cp-a")
    again.awaitTermination(300)
    assert again.exception() is None and sum(p["numInputRows"] for p in again.recentProgress) == 5
    _wait(lambda: queue_totals(broker, orders) == (0, 0), what="orders all acked")
