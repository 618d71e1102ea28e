"""A stream partition's chunk decoded column by column (``append_amqp10_many``) gives exactly the rows of
decoding one message at a time: AMQP 1.0 messages with and without properties, annotations and application
properties, and raw stream-protocol publishes that are not AMQP 1.0."""

from __future__ import annotations

import pytest

pytest.importorskip("rstream")

from rstream import AMQPMessage  # noqa: E402
from rstream._pyamqp.message import Properties  # noqa: E402

from safebunny.amqp.message_rows import AmqpColumns  # noqa: E402
from safebunny.streams.amqp10 import append_amqp10_many  # noqa: E402

CHUNK_MS = 1_700_000_000_123


def _full(i: int) -> bytes:
    return bytes(AMQPMessage(
        body=b'{"id": %d}' % i,
        properties=Properties(message_id=f"m-{i}", correlation_id=b"c-1", content_type="application/json",
                              creation_time=1_600_000_000_000 + i),
        message_annotations={b"x-routing-key": b"orders.placed", b"x-exchange": "sagas"},
        application_properties={b"x-basic-type": "OrderPlaced", "tenant": "t-7", b"x-basic-priority": 3}))


def _plain(i: int) -> bytes:
    return bytes(AMQPMessage(body=b'{"plain": %d}' % i))


def _chunks() -> list[list[bytes]]:
    raw_publish = [b"not amqp 1.0 \x00\xff", b"\x00\x53"]  # what a raw stream-protocol publish stores
    return [
        [_plain(i) for i in range(50)],  # the benchmark's shape: bodies only (constant columns)
        [_full(i) for i in range(20)],
        [_plain(0), _full(1), _plain(2), *raw_publish, _full(3)],
        raw_publish,
        [],
    ]


@pytest.mark.parametrize("include_headers", [False, True])
def test_a_chunk_column_by_column_equals_one_message_at_a_time(include_headers: bool) -> None:
    one, many = AmqpColumns(include_headers), AmqpColumns(include_headers)
    offset = 1_000
    for chunk in _chunks():
        for k, raw in enumerate(chunk):
            append_amqp10_many(one, (raw,), offset + k, CHUNK_MS)
        append_amqp10_many(many, chunk, offset, CHUNK_MS)
        offset += len(chunk) + 7  # a gap between chunks, as the broker's tracking records leave
    assert len(one) == len(many) == 50 + 20 + 6 + 2
    assert many.columns == one.columns
    assert one.to_batch("q").equals(many.to_batch("q"))
    assert many.columns["messageId"][50] == "m-0" and many.columns["type"][50] == "OrderPlaced"
    assert many.columns["timestamp"][0] == CHUNK_MS * 1000 and many.columns["offset"][:2] == [1_000, 1_001]
