"""Reading stream queues by offset against the real broker: both protocols, exact ranges,
timestamps, retention (data loss) and the protocol fallback."""

from __future__ import annotations

import logging
import time

import pika
import pytest

from conftest import use_stream_broker
from safebunny.amqp.connection import StreamEndpoint
from safebunny.errors import SafeBunnyDataLossError
from safebunny.streams.amqp091_client import AmqpStreamClient
from safebunny.streams.offsets import split_range
from safebunny.streams.rstream_client import RStreamClient
from safebunny.streams.stream_source import open_stream_client

# streams need the stream plugin: a broker that has it (a throwaway one when the run's broker lacks it)
broker, amqp_uri = use_stream_broker()

PROTOCOLS = ["stream", "amqp"]


@pytest.fixture
def connect(amqp_uri, stream_port):
    opened = []

    def make(protocol: str):
        endpoint = StreamEndpoint.from_uri(amqp_uri, stream_port)
        client = (RStreamClient(endpoint) if protocol == "stream" else AmqpStreamClient(endpoint)).connect()
        opened.append(client)
        return client

    yield make
    for client in opened:
        client.close()


def _props(i: int) -> pika.BasicProperties:
    return pika.BasicProperties(
        delivery_mode=2, message_id=f"m-{i}", correlation_id="corr-1", content_type="application/json",
        type="OrderPlaced", timestamp=1_700_000_000 + i,
        headers={"attempt": i, "flag": True, "who": "tester", "raw": b"\xff\xfe"},
    )


def _publish(admin, queue: str, start: int, count: int) -> None:
    admin.publish(queue, [f'{{"n": {i}}}'.encode() for i in range(start, start + count)],
                  [_props(i) for i in range(start, start + count)])


def _rows(client, queue, start, end, **kw):
    kw.setdefault("include_headers", True)
    kw.setdefault("fail_on_data_loss", True)
    return [r for batch in client.read_range(queue, queue, start, end, **kw) for r in batch.to_pylist()]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_bounds_of_empty_and_filled_stream(make_queue, admin, connect, protocol):
    queue = make_queue("stream")
    client = connect(protocol)
    started = time.monotonic()
    empty = client.bounds(queue, empty_wait_s=0.3)
    assert (empty.first, empty.tail) == (0, 0)
    assert time.monotonic() - started < 5
    _publish(admin, queue, 0, 12)
    bounds = client.bounds(queue, empty_wait_s=0.3)
    assert (bounds.first, bounds.tail) == (0, 12)
    assert bounds.avg_message_bytes > 0


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_read_range_is_exact(make_queue, admin, connect, protocol):
    queue = make_queue("stream")
    _publish(admin, queue, 0, 20)
    client = connect(protocol)
    rows = _rows(client, queue, 5, 13)
    assert [r["offset"] for r in rows] == list(range(5, 13))
    assert [r["value"] for r in rows] == [f'{{"n": {i}}}'.encode() for i in range(5, 13)]
    first = rows[0]
    assert first["messageId"] == "m-5" and first["correlationId"] == "corr-1"
    assert first["routingKey"] == queue and first["exchange"] == "" and first["queue"] == queue
    assert first["type"] == "OrderPlaced" and first["contentType"] == "application/json"
    assert first["redelivered"] is False and first["deliveryCount"] is None
    assert int(first["timestamp"].timestamp()) == 1_700_000_005
    assert dict(first["headers"]) == {"attempt": "5", "flag": "true", "who": "tester", "raw": "//4="}
    assert _rows(client, queue, 7, 7) == []
    assert [r["offset"] for r in _rows(client, queue, 19, 20)] == [19]


def test_both_protocols_give_the_same_rows(make_queue, admin, connect):
    queue = make_queue("stream")
    _publish(admin, queue, 0, 30)
    via_stream = _rows(connect("stream"), queue, 0, 30)
    via_amqp = _rows(connect("amqp"), queue, 0, 30)
    assert len(via_stream) == 30
    assert via_stream == via_amqp


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_split_ranges_read_disjoint_and_complete(make_queue, admin, connect, protocol):
    queue = make_queue("stream")
    _publish(admin, queue, 0, 25)
    client = connect(protocol)
    seen = []
    for lo, hi in split_range(0, 25, 4):
        seen.extend(r["offset"] for r in _rows(client, queue, lo, hi, include_headers=False))
    assert seen == list(range(25))


def test_small_batches_are_yielded(make_queue, admin, connect):
    queue = make_queue("stream")
    _publish(admin, queue, 0, 10)
    batches = list(connect("stream").read_range(queue, queue, 0, 10, include_headers=False,
                                                fail_on_data_loss=True, batch_rows=3))
    assert sum(b.num_rows for b in batches) == 10 and max(b.num_rows for b in batches) <= 5


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_offset_for_timestamp(make_queue, admin, connect, protocol):
    queue = make_queue("stream")
    _publish(admin, queue, 0, 3)
    time.sleep(1.1)  # chunk timestamps have millisecond resolution and AMQP's lookup whole seconds
    middle_ms = int(time.time() * 1000)
    _publish(admin, queue, 3, 3)
    client = connect(protocol)
    assert client.offset_for_timestamp(queue, middle_ms, 0.3) == 3
    assert client.offset_for_timestamp(queue, 0, 0.3) == 0
    assert client.offset_for_timestamp(queue, middle_ms + 3_600_000, 0.3) is None


@pytest.fixture
def truncated_stream(make_queue, admin):
    """A stream whose retention already removed its oldest offsets."""
    queue = make_queue("stream", {"x-max-length-bytes": 4000, "x-stream-max-segment-size-bytes": 1000})
    ch = admin._ch()
    ch.confirm_delivery()
    for i in range(120):
        ch.basic_publish("", queue, b"x" * 200, _props(i))
    return queue


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_retention_is_data_loss(truncated_stream, connect, protocol, caplog):
    queue = truncated_stream
    client = connect(protocol)
    bounds = client.bounds(queue, 0.3)
    # each new segment starts with a broker tracking record that takes an offset but is never
    # delivered: offsets have gaps, so the tail is above the 120 messages published
    assert 0 < bounds.first < bounds.tail and bounds.tail >= 120
    kept = [r["offset"] for r in _rows(client, queue, bounds.first, bounds.tail)]
    assert kept[0] == bounds.first and kept[-1] == bounds.tail - 1 and kept == sorted(set(kept))
    assert [r["value"] for r in _rows(client, queue, bounds.first, bounds.tail)] == [b"x" * 200] * len(kept)
    with pytest.raises(SafeBunnyDataLossError) as info:
        _rows(client, queue, 0, bounds.first + 2)
    assert f"offsets 0 to {bounds.first - 1}" in str(info.value)
    warnings = []
    rows = _rows(client, queue, 0, bounds.first + 2, fail_on_data_loss=False, warn=warnings.append)
    assert [r["offset"] for r in rows] == [o for o in kept if o < bounds.first + 2]
    assert len(warnings) == 1 and "SKIPPING LOST MESSAGES" in warnings[0]
    assert _rows(client, queue, 0, 3, fail_on_data_loss=False, warn=warnings.append) == []
    # a range that starts in a gap (not lost) reads without a data-loss error
    gaps = sorted(set(range(bounds.first, bounds.tail)) - set(kept))
    if gaps:
        assert [r["offset"] for r in _rows(client, queue, gaps[-1], bounds.tail)] == [o for o in kept if o > gaps[-1]]


def test_fallback_to_amqp_when_stream_port_is_closed(amqp_uri, make_queue, admin, caplog):
    from brokers import free_port

    queue = make_queue("stream")
    _publish(admin, queue, 0, 2)
    with caplog.at_level(logging.WARNING, logger="safebunny.stream"):
        client = open_stream_client(amqp_uri, free_port())
    try:
        assert client.protocol == "amqp"
        assert "does not answer" in caplog.text and "rabbitmq_stream" in caplog.text
        assert [r["offset"] for r in _rows(client, queue, 0, 2)] == [0, 1]
    finally:
        client.close()
    with open_stream_client(amqp_uri, 0) as chosen:
        assert chosen.protocol == "amqp"


def _publish_batches(stream_port: int, queue: str, count: int) -> None:
    """Publish with the stream protocol in batches, so chunks hold many messages each."""
    import asyncio

    from rstream import AMQPMessage, Producer
    from rstream._pyamqp.message import Properties

    async def run() -> None:
        async with Producer("127.0.0.1", stream_port, username="guest", password="guest") as producer:
            messages = [AMQPMessage(body=b"b%d" % i, properties=Properties(message_id=f"n{i}"))
                        for i in range(count)]
            for i in range(0, count, 500):
                await producer.send_batch(queue, messages[i:i + 500])

    asyncio.run(run())


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_ranges_inside_big_chunks_are_cut_exactly(make_queue, connect, stream_port, protocol):
    queue = make_queue("stream")
    _publish_batches(stream_port, queue, 2000)
    client = connect(protocol)
    assert client.bounds(queue, 0.3).tail == 2000
    rows = _rows(client, queue, 1234, 1240)
    assert [(r["offset"], r["value"], r["messageId"]) for r in rows] == [
        (i, b"b%d" % i, f"n{i}") for i in range(1234, 1240)]
    assert len(_rows(client, queue, 0, 2000, include_headers=False)) == 2000


def _reader(amqp_uri, queue, stream_port, **options):
    from pyspark_safebunny.schema import schema_for
    from pyspark_safebunny.stream_queue_reader import SafeBunnyStreamQueueReader
    from safebunny.options.source import parse_source_options

    raw = {"uri": amqp_uri, "queue": queue, "streamPort": str(stream_port), "pollTimeoutMs": "300"}
    raw.update({k: str(v) for k, v in options.items()})
    parsed = parse_source_options(raw)
    return SafeBunnyStreamQueueReader(parsed, schema_for(parsed.include_headers, True))


@pytest.mark.parametrize("port", ["stream", 0])
def test_reader_admission_control_and_available_now(make_queue, admin, amqp_uri, stream_port, port):
    """The driver-side methods against the broker, without Spark (Spark's part is in tests/e2e)."""
    import pickle

    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxRows, ReadMinRows

    port = stream_port if port == "stream" else 0
    queue = make_queue("stream")
    reader = _reader(amqp_uri, queue, port, maxMessagesPerTrigger=7)
    assert reader.initialOffset() == {"offset": 0}
    assert reader.latestOffset({"offset": 0}, reader.getDefaultReadLimit()) == {"offset": 0}  # empty stream
    _publish(admin, queue, 0, 20)
    assert reader.getDefaultReadLimit() == ReadMaxRows(7)
    assert reader.latestOffset({"offset": 0}, ReadMaxRows(7))["offset"] == 7
    assert reader.reportLatestOffset() == {"offset": 20}
    assert reader.latestOffset({"offset": 14}, ReadMaxRows(7))["offset"] == 20
    assert reader.latestOffset({"offset": 3}, ReadAllAvailable())["offset"] == 20
    assert reader.latestOffset({"offset": 3}, ReadMinRows(50)) == {"offset": 3}
    # maxBytesPerTrigger: about 3 messages' worth of bytes allows about 3 offsets
    bounds_reader = _reader(amqp_uri, queue, port, maxBytesPerTrigger=1)
    assert bounds_reader.latestOffset({"offset": 0}, bounds_reader.getDefaultReadLimit())["offset"] == 1
    client_class = RStreamClient if port else AmqpStreamClient
    with client_class(StreamEndpoint.from_uri(amqp_uri, port)).connect() as client:
        size = client.bounds(queue, 0.3).avg_message_bytes
    end = bounds_reader.latestOffset({"offset": 0}, ReadMaxBytes(int(size * 3)))["offset"]
    assert end == 3
    # availableNow: the target is fixed when prepared; later messages wait for the next run
    reader.prepareForTriggerAvailableNow()
    _publish(admin, queue, 20, 5)
    assert reader.latestOffset({"offset": 14}, ReadAllAvailable())["offset"] == 20
    assert reader.latestOffset({"offset": 20}, ReadMaxRows(7))["offset"] == 20
    parts = reader.partitions({"offset": 0}, {"offset": 20})
    assert [(p.start, p.end) for p in parts] == [(0, 20)]
    clone = pickle.loads(pickle.dumps(reader))  # executors get a copy without the connection
    assert [r["offset"] for b in clone.read(parts[0]) for r in b.to_pylist()] == list(range(20))
    assert _reader(amqp_uri, queue, port, startingOffsets="latest").initialOffset() == {"offset": 25}
    assert _reader(amqp_uri, queue, port, startingOffsets="4").initialOffset() == {"offset": 4}
    reader.stop()
