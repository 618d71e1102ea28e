"""Stream-queue edges found by the core audit: subscription ids, a re-created stream, the
tail over AMQP 0-9-1 when the newest chunk is bigger than a prefetch window. Real broker with the
stream plugin."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from urllib.parse import urlsplit

import pytest

from conftest import use_stream_broker
from safebunny.amqp.connection import StreamEndpoint
from safebunny.errors import QueueNotFoundError, SafeBunnyDataLossError
from safebunny.streams.amqp091_client import AmqpStreamClient
from safebunny.streams.rstream_client import RStreamClient

# streams need the stream plugin: a broker that has it (a throwaway one when the run's broker lacks it)
broker, amqp_uri = use_stream_broker()

SUBSCRIPTION_IDS = 256  # a subscription id is one byte in the stream protocol


def _send_one_chunk(amqp_uri: str, stream_port: int, queue: str, count: int, prefix: bytes = b"r") -> None:
    """``count`` messages in one sub-entry batch: the broker stores them as one chunk of ``count`` records."""
    from rstream import AMQPMessage, CompressionType, Producer

    parts = urlsplit(amqp_uri)

    async def run() -> None:
        async with Producer(parts.hostname, stream_port, username=parts.username, password=parts.password) as p:
            await p.send_sub_entry(queue, [AMQPMessage(body=prefix + b"%d" % i) for i in range(count)],
                                   compression_type=CompressionType.No)

    asyncio.run(run())


# -- F13 -----------------------------------------------------------------------------------
def test_subscription_ids_are_recycled_on_a_long_lived_connection(amqp_uri, stream_port, make_queue, admin):
    """The driver keeps one connection across triggers (two subscriptions each); ids are one byte."""
    queue = make_queue("stream")
    admin.publish(queue, [b"m%d" % i for i in range(10)])
    missing = f"{queue}-missing"
    with RStreamClient(StreamEndpoint.from_uri(amqp_uri, stream_port)).connect() as client:
        connection = client._client
        for i in range(SUBSCRIPTION_IDS):  # 2 x 256 subscriptions, and refused ones in between
            assert client.bounds(queue, 0.5).tail == 10, f"call {i}"
            if i % 8 == 0:
                with pytest.raises(QueueNotFoundError):
                    client.bounds(missing, 0.5)
        rows = [r for b in client.read_range(queue, queue, 0, 10, include_headers=False, fail_on_data_loss=True)
                for r in b.to_pylist()]
        assert [r["value"] for r in rows] == [b"m%d" % i for i in range(10)]
        assert client._client is connection and not client.connection_lost  # never reconnected
        assert client._ids_in_use == set()


# -- F4 ------------------------------------------------------------------------------------
def _reader(amqp_uri, queue, port, **options):
    from pyspark_safebunny.schema import schema_for
    from pyspark_safebunny.stream_queue_reader import SafeBunnyStreamQueueReader
    from safebunny.options.source import parse_source_options

    raw = {"uri": amqp_uri, "queue": queue, "queueType": "stream", "streamPort": str(port), "pollTimeoutMs": "300"}
    raw.update({k: str(v) for k, v in options.items()})
    parsed = parse_source_options(raw)
    return SafeBunnyStreamQueueReader(parsed, schema_for(parsed.include_headers, True))


def _recreate(admin, queue: str, bodies: list[bytes]) -> None:
    admin.delete_queue(queue)
    admin.declare_queue(queue, "stream")
    admin.publish(queue, bodies)


@pytest.mark.parametrize("via", ["stream", "amqp"])
def test_checkpoint_beyond_the_tail_of_a_recreated_stream_is_data_loss(amqp_uri, stream_port, make_queue, admin,
                                                                       via, caplog):
    port = stream_port if via == "stream" else 0
    queue = make_queue("stream")
    admin.publish(queue, [b"old%d" % i for i in range(50)])
    reader = _reader(amqp_uri, queue, port)
    start = reader.initialOffset()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert end["offset"] == 50
    _recreate(admin, queue, [b"new%d" % i for i in range(20)])
    with pytest.raises(SafeBunnyDataLossError) as info:  # it used to idle silently at offset 50
        reader.latestOffset(end, reader.getDefaultReadLimit())
    text = str(info.value)
    for words in (repr(queue), "checkpoint is at offset 50", "ends at offset 20", "re-created",
                  "new checkpoint", "failOnDataLoss=false"):
        assert words in text
    reader.stop()

    lenient = _reader(amqp_uri, queue, port, failOnDataLoss="false")
    with caplog.at_level(logging.WARNING, logger="safebunny.source"):
        nxt = lenient.latestOffset(end, lenient.getDefaultReadLimit())
    assert (nxt["offset"], nxt["resetFrom"]) == (20, 0)
    assert any("SKIPPING LOST MESSAGES" in r.getMessage() and "re-created" in r.getMessage() for r in caplog.records)
    parts = lenient.partitions(end, nxt)
    rows = [r["value"] for p in parts for b in lenient.read(p) for r in b.to_pylist()]
    assert rows == [b"new%d" % i for i in range(20)]  # the new stream from its start, nothing skipped
    assert lenient.latestOffset(nxt, lenient.getDefaultReadLimit()) == nxt  # then as usual: nothing new
    lenient.stop()


@pytest.mark.parametrize("via", ["stream", "amqp"])
def test_a_recreated_stream_already_longer_than_the_checkpoint_is_data_loss(amqp_uri, stream_port, make_queue,
                                                                            admin, via, caplog):
    """The audit's e12, second part: the new stream grew past the checkpoint's offset before the query looked
    again, so the tail check cannot see it; the end offset's anchor (the body at offset end - 1) can."""
    port = stream_port if via == "stream" else 0
    queue = make_queue("stream")
    admin.publish(queue, [b"old%d" % i for i in range(50)])
    reader = _reader(amqp_uri, queue, port)
    end = reader.latestOffset(reader.initialOffset(), reader.getDefaultReadLimit())
    assert end["offset"] == 50 and "anchor" in end
    assert reader.latestOffset(end, reader.getDefaultReadLimit()) == end  # unchanged stream: nothing new
    _recreate(admin, queue, [b"new%d" % i for i in range(60)])
    with pytest.raises(SafeBunnyDataLossError) as info:  # it used to read [50, 60) and skip new0..new49
        reader.latestOffset(end, reader.getDefaultReadLimit())
    for words in ("checkpoint is at offset 50", "offset 49 is not the one stored there now", "re-created"):
        assert words in str(info.value)
    reader.stop()
    lenient = _reader(amqp_uri, queue, port, failOnDataLoss="false")
    with caplog.at_level(logging.WARNING, logger="safebunny.source"):
        nxt = lenient.latestOffset(end, lenient.getDefaultReadLimit())
    assert (nxt["offset"], nxt["resetFrom"]) == (60, 0)
    assert any("SKIPPING LOST MESSAGES" in r.getMessage() for r in caplog.records)
    rows = [r["value"] for p in lenient.partitions(end, nxt) for b in lenient.read(p) for r in b.to_pylist()]
    assert rows == [b"new%d" % i for i in range(60)]
    lenient.stop()


def test_an_anchor_written_over_one_protocol_holds_over_the_other(amqp_uri, stream_port, make_queue, admin):
    """A query that restarts while the stream port is down (AMQP 0-9-1 fallback) must not see a re-created stream."""
    queue = make_queue("stream")
    admin.publish(queue, [b"m%d" % i for i in range(30)])
    _send_one_chunk(amqp_uri, stream_port, queue, 1500, prefix=b"batch")  # AMQP 1.0 messages too
    by_stream = _reader(amqp_uri, queue, stream_port, maxMessagesPerTrigger=700)
    by_amqp = _reader(amqp_uri, queue, 0, maxMessagesPerTrigger=700)
    start = by_stream.initialOffset()
    for _ in range(3):
        end = by_stream.latestOffset(start, by_stream.getDefaultReadLimit())
        assert by_amqp.latestOffset(end, by_amqp.getDefaultReadLimit())["offset"] > end["offset"] or \
            end["offset"] == 1530
        start = by_amqp.latestOffset(start, by_amqp.getDefaultReadLimit())
        assert start == end  # the same end offset, anchor included, from both protocols
    by_stream.stop()
    by_amqp.stop()


def test_starting_offset_beyond_the_tail_still_waits(amqp_uri, stream_port, make_queue, admin):
    queue = make_queue("stream")
    admin.publish(queue, [b"m%d" % i for i in range(5)])
    reader = _reader(amqp_uri, queue, stream_port, startingOffsets="8")
    start = reader.initialOffset()
    assert start == {"offset": 8}
    assert reader.latestOffset(start, reader.getDefaultReadLimit()) == start  # waits, as documented
    admin.publish(queue, [b"m%d" % i for i in range(5, 12)])
    assert reader.latestOffset(start, reader.getDefaultReadLimit())["offset"] == 12
    reader.stop()


# -- F9 ------------------------------------------------------------------------------------
def test_amqp_tail_with_a_newest_chunk_bigger_than_the_prefetch(amqp_uri, stream_port, make_queue):
    queue = make_queue("stream")
    _send_one_chunk(amqp_uri, stream_port, queue, 3000)
    endpoint = StreamEndpoint.from_uri(amqp_uri, stream_port)
    with RStreamClient(endpoint).connect() as rs:
        truth = rs.bounds(queue, 1.0).tail
        from rstream.constants import OffsetType

        newest = rs._first_chunk(queue, OffsetType.LAST, None, 1.0)
    assert truth == 3000
    assert newest.num_records > AmqpStreamClient.PREFETCH, "the test needs a newest chunk bigger than the prefetch"
    with AmqpStreamClient(endpoint).connect() as amqp:
        assert [amqp.bounds(queue, 1.0).tail for _ in range(2)] == [3000, 3000]


class _StallingProxy:
    """A TCP proxy to ``target`` that, on each connection, stops passing the broker's bytes on for ``stall_s``
    once ``after_bytes`` went through: a broker that pauses in the middle of a chunk (CPU or disk starved),
    made repeatable."""

    def __init__(self, target: tuple[str, int], after_bytes: int, stall_s: float) -> None:
        self.target, self.after_bytes, self.stall_s = target, after_bytes, stall_s
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            threading.Thread(target=self._pipe, args=(client, upstream, None), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, self.after_bytes), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, stall_after: int | None) -> None:
        passed = 0
        try:
            while data := src.recv(4096):
                if stall_after is not None and passed < stall_after <= passed + len(data):
                    time.sleep(self.stall_s)
                dst.sendall(data)
                passed += len(data)
        except OSError:
            pass
        for end in (src, dst):
            end.close()

    def close(self) -> None:
        self.server.close()


def test_amqp_tail_does_not_depend_on_how_fast_deliveries_arrive(amqp_uri, stream_port, make_queue):
    """CI once saw a tail of 71 for a 3000-record chunk: the tail was where deliveries paused for 0.2 s (the
    machine was busy). Here the broker's bytes stop for 1 s in the middle of the chunk; the tail is still exact."""
    queue = make_queue("stream")
    _send_one_chunk(amqp_uri, stream_port, queue, 3000)
    parts = urlsplit(amqp_uri)
    proxy = _StallingProxy((parts.hostname, parts.port), after_bytes=30_000, stall_s=1.0)
    try:
        stalling = amqp_uri.replace(f":{parts.port}/", f":{proxy.port}/")
        with AmqpStreamClient(StreamEndpoint.from_uri(stalling, stream_port)).connect() as amqp:
            assert amqp.bounds(queue, 5.0).tail == 3000
    finally:
        proxy.close()


def test_available_now_over_amqp_reads_a_quiet_stream_to_its_end(amqp_uri, stream_port, make_queue):
    queue = make_queue("stream")
    _send_one_chunk(amqp_uri, stream_port, queue, 3000)
    reader = _reader(amqp_uri, queue, 0)
    reader.prepareForTriggerAvailableNow()
    start = reader.initialOffset()
    rows = 0
    while (end := reader.latestOffset(start, reader.getDefaultReadLimit())) != start:
        rows += sum(b.num_rows for p in reader.partitions(start, end) for b in reader.read(p))
        start = end
    reader.stop()
    assert (start["offset"], rows) == (3000, 3000)
