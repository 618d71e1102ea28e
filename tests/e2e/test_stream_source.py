"""format("safebunny") over stream queues, with a real Spark and broker (kept few and small)."""

from __future__ import annotations

import json
import time
from urllib.parse import urlsplit, urlunsplit

import pika
import pytest

from conftest import use_stream_broker
from safebunny.amqp.connection import StreamEndpoint
from safebunny.streams.stream_source import open_stream_client

# streams need the stream plugin: a broker that has it (a throwaway one when the run's broker lacks it)
broker, amqp_uri = use_stream_broker()


def _publish(uri: str, queue: str, n: int, start: int = 0, *, size: int = 0) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    ch = conn.channel()
    ch.confirm_delivery()
    for i in range(start, start + n):
        body = (b'{"n": %d}' % i) + b" " * size
        ch.basic_publish("", queue, body, pika.BasicProperties(
            message_id=f"m{i}", correlation_id="c", delivery_mode=2, timestamp=1_700_000_000 + i,
            content_type="application/json", headers={"k": i, "tag": "t"}))
    conn.close()


def _with(uri: str, *, password: str | None = None, port: int | None = None) -> str:
    parts = urlsplit(uri)
    netloc = f"{parts.username}:{password or parts.password}@{parts.hostname}:{port or parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))


def _read(spark, uri, queue, **options):
    reader = spark.read.format("safebunny").option("uri", uri).option("queue", queue)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def test_available_now_resumes_at_exactly_the_next_offset(spark, amqp_uri, make_queue, tmp_path):
    queue = make_queue("stream")
    _publish(amqp_uri, queue, 30)
    batches: list[list[tuple[int, str, int]]] = []

    def collect(df, batch_id):
        from pyspark.sql.functions import spark_partition_id

        batches.append([(r.offset, r.messageId, r.pid) for r in
                        df.select("offset", "messageId", spark_partition_id().alias("pid")).collect()])

    def run():
        reader = (spark.readStream.format("safebunny").option("uri", amqp_uri).option("queue", queue)
                  .option("maxMessagesPerTrigger", "12").option("minPartitions", "2"))
        query = (reader.load().writeStream.foreachBatch(collect)
                 .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
        assert query.awaitTermination(240)
        return query

    first = run()
    offsets = sorted(o for b in batches for o, _, _ in b)
    assert offsets == list(range(30))
    assert max(len(b) for b in batches) == 12
    assert all(len({pid for _, _, pid in b}) == 2 for b in batches if len(b) >= 2)  # minPartitions=2
    progress = [p for p in first.recentProgress if p["numInputRows"]]
    assert json.loads(progress[-1]["sources"][0]["latestOffset"]) == {"offset": 30}
    assert json.loads(progress[-1]["sources"][0]["endOffset"])["offset"] == 30

    batches.clear()
    _publish(amqp_uri, queue, 10, start=30)
    run()
    again = sorted((o, m) for b in batches for o, m, _ in b)
    assert again == [(i, f"m{i}") for i in range(30, 40)]


def test_batch_reads_starting_offsets_and_both_protocols(spark, amqp_uri, make_queue, broker):
    queue = make_queue("stream")
    _publish(amqp_uri, queue, 8)
    time.sleep(1.1)  # timestamps: chunk times in ms, the AMQP lookup in whole seconds
    middle_ms = int(time.time() * 1000)
    _publish(amqp_uri, queue, 4, start=8)
    stream_port = broker.stream_port or 5552

    def offsets(**options):
        return [r.offset for r in _read(spark, amqp_uri, queue, **options).select("offset").orderBy("offset")
                .collect()]

    assert offsets() == list(range(12))
    assert offsets(startingOffsets="latest") == []
    assert offsets(startingOffsets="5", minPartitions=3) == list(range(5, 12))
    assert offsets(startingOffsets=f"timestamp:{middle_ms}") == list(range(8, 12))
    columns = "offset, value, messageId, correlationId, routingKey, exchange, queue, redelivered, deliveryCount, " \
              "timestamp, contentType, type, headers"
    via_stream = _read(spark, amqp_uri, queue, includeHeaders="true", streamPort=stream_port,
                       queueType="stream").selectExpr(*columns.split(", ")).orderBy("offset").collect()
    via_amqp = _read(spark, amqp_uri, queue, includeHeaders="true", streamPort=0,
                     queueType="stream").selectExpr(*columns.split(", ")).orderBy("offset").collect()
    assert len(via_stream) == 12 and via_stream == via_amqp
    assert via_stream[3].headers == {"k": "3", "tag": "t"} and via_stream[3].deliveryCount is None
    assert via_stream[3].timestamp.timestamp() == 1_700_000_003


def test_retention_truncated_stream_fails_or_skips(spark, amqp_uri, make_queue):
    queue = make_queue("stream", {"x-max-length-bytes": 4000, "x-stream-max-segment-size-bytes": 1000})
    _publish(amqp_uri, queue, 60, size=200)
    with open_stream_client(amqp_uri, 5552) as client:
        first = client.bounds(queue, 1.0).first
    assert first > 0
    with pytest.raises(Exception) as info:
        _read(spark, amqp_uri, queue, startingOffsets="0").collect()
    assert "SafeBunnyDataLossError" in str(info.value) and f"offsets 0 to {first - 1}" in str(info.value)
    rows = _read(spark, amqp_uri, queue, startingOffsets="0", failOnDataLoss="false").select("offset").collect()
    assert rows and min(r.offset for r in rows) == first


@pytest.mark.parametrize("case", ["missing queue", "wrong password", "unreachable host", "classic queue"])
def test_clear_errors(spark, amqp_uri, make_queue, unique_name, case):
    from brokers import free_port

    uri, queue, words = amqp_uri, unique_name, []
    if case == "missing queue":
        words = [unique_name, "does not exist", f"{urlsplit(amqp_uri).hostname}:{urlsplit(amqp_uri).port}"]
    elif case == "wrong password":
        queue, uri = make_queue("stream"), _with(amqp_uri, password="wrongPW42")
        words = ["refused the login", "'guest'"]
    elif case == "unreachable host":
        port = free_port()
        uri, words = _with(amqp_uri, port=port, password="wrongPW42"), [f"127.0.0.1:{port}", "broker is running"]
    else:
        queue, words = make_queue("classic"), ["batch reads", "availableNow=True"]
    options = {"streamPort": free_port() if case == "unreachable host" else 5552}
    if case == "classic queue":  # the source's schema() asks for a journal for classic queues first
        options["journalLocation"] = "/tmp/unused-journal"
    with pytest.raises(Exception) as info:
        _read(spark, uri, queue, **options).collect()
    text = str(info.value)
    assert all(w in text for w in words), text[-2000:]
    assert "wrongPW42" not in text


def test_endpoint_repr_hides_password():
    assert "secret" not in repr(StreamEndpoint.from_uri("amqp://u:secret@h:5672/%2F"))
