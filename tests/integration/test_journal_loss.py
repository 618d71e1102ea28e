"""A batch this reader still holds is never skipped, even with failOnDataLoss=false; a relative
journalLocation is resolved on the driver (executors would resolve it against their own directory)."""

import os

import pytest

from helpers import publish_numbered, queue_reader
from safebunny.errors import SafeBunnyDataLossError
from safebunny.queues.journal import batch_file_name


def test_a_pending_batch_with_its_journal_gone_fails_instead_of_being_skipped_and_acked(amqp_uri, make_queue,
                                                                                        tmp_path, admin):
    queue = make_queue()
    publish_numbered(amqp_uri, queue, 30)
    reader = queue_reader(amqp_uri, queue, str(tmp_path / "j"), failOnDataLoss="false", maxMessagesPerTrigger="30")
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        os.remove(tmp_path / "j" / batch_file_name(start["seq"], end["seq"]))
        with pytest.raises(SafeBunnyDataLossError):
            reader.partitions(start, end)
    finally:
        reader.stop()
    assert len(admin.get_all(queue)) == 30  # nothing acked: the broker has every message back


def test_a_relative_journal_location_is_made_absolute(amqp_uri, make_queue, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    reader = queue_reader(amqp_uri, make_queue(), "journal")
    assert reader.source.location == str(tmp_path / "journal")


def test_a_batch_journaled_with_headers_replays_after_include_headers_is_turned_off(amqp_uri, make_queue, tmp_path):
    """The replay follows the query's current includeHeaders instead of failing on Arrow's schema."""
    from safebunny.errors import SafeBunnyOptionError

    queue = make_queue()
    publish_numbered(amqp_uri, queue, 10, headers={"h": "1"})
    first = queue_reader(amqp_uri, queue, str(tmp_path / "j"), includeHeaders="true")
    try:
        start = first.initialOffset()
        end = first.latestOffset(start, first.getDefaultReadLimit())
    finally:
        first.stop()
    without = queue_reader(amqp_uri, queue, str(tmp_path / "j"), includeHeaders="false")
    batches = [b for p in without.partitions(start, end) for b in without.read(p)]
    assert sum(b.num_rows for b in batches) == 10 and "headers" not in batches[0].schema.names
    # the other way round, headers that were never journaled: a clear error naming the option
    second = queue_reader(amqp_uri, queue, str(tmp_path / "j2"), includeHeaders="false")
    try:
        s2 = second.initialOffset()
        e2 = second.latestOffset(s2, second.getDefaultReadLimit())
    finally:
        second.stop()
    wanting = queue_reader(amqp_uri, queue, str(tmp_path / "j2"), includeHeaders="true")
    with pytest.raises(SafeBunnyOptionError, match="includeHeaders"):
        [b for p in wanting.partitions(s2, e2) for b in wanting.read(p)]
