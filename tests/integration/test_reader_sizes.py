"""The classic/quorum reader with big messages, against the real broker (issue 9: F5 and F6)."""

import pyarrow as pa

from conftest import publish_numbered
from pyspark_safebunny.queue_reader import SafeBunnyQueueStreamReader
from pyspark_safebunny.schema import schema_for
from safebunny.amqp import message_rows
from safebunny.journal import Journal
from safebunny.options.source import parse_source_options

KIB = 1024


def _reader(uri, queue, journal, **extra):
    raw = {"uri": uri, "queue": queue, "queueType": "classic", "journalLocation": journal, **extra}
    options = parse_source_options(raw)
    return SafeBunnyQueueStreamReader(options, schema_for(options["includeHeaders"], True))


def test_a_batch_larger_than_one_arrow_array_is_journaled_in_pieces_and_replayed_exactly(
        amqp_uri, make_queue, tmp_path, monkeypatch):
    """F5: bodies beyond what one Arrow binary array holds (2 GiB; lowered here to 100 KiB) are journaled as
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
