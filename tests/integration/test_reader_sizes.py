"""The classic/quorum reader with big messages, against the real broker."""

import time

import pyarrow as pa

from helpers import publish_numbered
from helpers import queue_reader as _reader
from safebunny.amqp import message_rows
from safebunny.queues.journal import Journal

KIB = 1024


def test_a_batch_larger_than_one_arrow_array_is_journaled_in_pieces_and_replayed_exactly(
        amqp_uri, make_queue, tmp_path, monkeypatch):
    """Bodies beyond what one Arrow binary array holds (2 GiB; lowered here to 100 KiB) are journaled as
    several record batches, and a new reader (a replay after a restart) serves them all, in order, with the
    schema Spark expects."""
    monkeypatch.setattr(message_rows, "MAX_CHUNK_BYTES", 100 * KIB)
    queue = make_queue()
    publish_numbered(amqp_uri, queue, 20, body=lambda i: b"%04d" % i + b"x" * (40 * KIB))
    location = str(tmp_path / "j")
    reader = _reader(amqp_uri, queue, location, maxMessagesPerTrigger="20")
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        assert end["seq"] == 20
        pieces = list(Journal(location).read(0, 20))
        assert len(pieces) == 10 and all(p.num_rows == 2 for p in pieces)
        replay = _reader(amqp_uri, queue, location)
        served = [b for p in replay.partitions(start, end) for b in replay.read(p)]
    finally:
        reader.stop()
    expected = message_rows.arrow_schema(False)
    assert all(b.schema.equals(expected) for b in served)
    table = pa.Table.from_batches(served)
    assert table.column("messageId").to_pylist() == [f"m{i}" for i in range(20)]
    assert [bytes(v[:4]) for v in table.column("value").to_pylist()] == [b"%04d" % i for i in range(20)]


def _drain(reader, batches_at_most=200, start=None, committed=None):
    """Run the reader as Spark does until the queue is empty; returns the batches' rows (messageId, redelivered).
    ``start``: the end of a batch already planned (``committed``: that batch, committed with the next plan)."""
    start = start or reader.initialOffset()
    log = [committed] if committed else []
    batches = []
    for _ in range(batches_at_most):
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        if end["seq"] == start["seq"]:
            if log:
                reader.commit(log[-1])
            if end == start:
                break
            start = end
            continue
        if log:
            reader.commit(log[-1])
        log.append(end)
        rows = [r for p in reader.partitions(start, end) for b in reader.read(p)
                for r in zip(b.column("messageId").to_pylist(), b.column("redelivered").to_pylist(), strict=True)]
        batches.append(rows)
        start = end
    return batches


def test_max_bytes_per_trigger_bounds_the_bytes_the_reader_buffers(amqp_uri, make_queue, tmp_path, admin):
    """The prefetch counted messages only (2 x 10,000), so with big messages the reader buffered far more
    than maxBytesPerTrigger. Now the buffer stays within twice maxBytesPerTrigger (plus one message), nothing
    is requeued on the way (no message comes back redelivered), and every message is read exactly once."""
    queue = make_queue()
    body = 64 * KIB
    publish_numbered(amqp_uri, queue, 120, body=lambda i: b"%04d" % i + b"x" * body)
    reader = _reader(amqp_uri, queue, str(tmp_path / "j"), maxBytesPerTrigger=str(256 * KIB), pollTimeoutMs="500")
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        assert 0 < end["seq"] - start["seq"] <= 4  # 256 KiB of 64 KiB bodies
        consumer = reader.source._consumer
        buffered = []
        for _ in range(10):  # over a second, while the batch waits for Spark
            time.sleep(0.1)
            buffered.append(consumer.buffered_bytes())
        assert max(buffered) <= 2 * 256 * KIB + body + 4
        assert consumer.effective_prefetch <= 8
        rest = _drain(reader)
    finally:
        reader.stop()
    ids = [m for rows in rest for m, _ in rows]
    assert len(ids) + end["seq"] == 120 and len(set(ids)) == len(ids)
    assert not any(r for rows in rest for _, r in rows)
    assert all(len(rows) <= 4 for rows in rest)
    assert admin.get_all(queue) == []  # everything acked


def test_the_default_read_limit_takes_small_batches_when_quiet_and_large_ones_from_a_backlog(
        amqp_uri, make_queue, tmp_path):
    """Issue 15: with no maxMessagesPerTrigger a batch takes what the reader holds when Spark asks: a handful
    when few messages wait, up to 32,768 (half the largest prefetch) when a backlog does, rather than a fixed
    10,000. Every message is read exactly once."""
    from pyspark_safebunny.queue_reader import DEFAULT_MAX_MESSAGES

    queue = make_queue()
    publish_numbered(amqp_uri, queue, 5)
    reader = _reader(amqp_uri, queue, str(tmp_path / "j"))
    try:
        start = reader.initialOffset()
        first = reader.latestOffset(start, reader.getDefaultReadLimit())
        assert first["seq"] == 5  # no waiting for a full batch when the queue is quiet
        _publish_fast(amqp_uri, queue, 60_000)
        batches = _drain(reader, start=first, committed=first)
    finally:
        reader.stop()
    sizes = [len(rows) for rows in batches]
    assert sum(sizes) == 60_000 and len({m for rows in batches for m, _ in rows}) == 60_000
    assert max(sizes) > 10_000 and max(sizes) <= DEFAULT_MAX_MESSAGES == 32_768


def _publish_fast(uri, queue, n):
    """``n`` small persistent messages ``b<i>`` with ids ``b<i>``, confirmed once at the end."""
    import pika

    conn = pika.BlockingConnection(pika.URLParameters(uri))
    ch = conn.channel()
    props = [pika.BasicProperties(message_id=f"b{i}", delivery_mode=2) for i in range(n)]
    for i in range(n - 1):
        ch.basic_publish("", queue, b"b%d" % i, props[i])
    ch.confirm_delivery()
    ch.basic_publish("", queue, b"b%d" % (n - 1), props[n - 1])
    conn.close()


def test_a_new_query_s_first_batch_is_not_cut_to_one_message_by_the_consumer_restart(amqp_uri, make_queue,
                                                                                      tmp_path):
    """The consumer starts with a prefetch of 1 to learn the body size, then restarts; on a quorum queue the
    restarted consumer's first delivery can take longer than the 50 ms linger. The first batch still takes
    the waiting messages rather than the single one the first consumer got."""
    queue = make_queue("quorum")
    publish_numbered(amqp_uri, queue, 200)
    reader = _reader(amqp_uri, queue, str(tmp_path / "j"), maxMessagesPerTrigger="200")
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
    finally:
        reader.stop()
    assert end["seq"] - start["seq"] > 1
