"""An availableNow run reads every message counted at its start, however late one arrives, and still ends
when messages it counted went elsewhere (real broker; the reader driven as Spark drives it).

A take that comes back empty stands for a large body still on the wire under CPU load (a run once ended
after 3 of 6 messages, the other 3 left in the queue): the test makes the reader's takes find nothing for a
while, deterministically, instead of depending on load."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from helpers import publish_numbered, queue_reader
from pyspark_safebunny.queue_reader import ReadAllAvailable
from safebunny.errors import SafeBunnyBrokerError


def _run(reader) -> int:
    """Spark's availableNow loop: plan, commit, until the reader says nothing more; the messages read."""
    offset, limit = reader.initialOffset(), ReadAllAvailable()
    while True:
        end = reader.latestOffset(offset, limit)
        if end == offset:
            return offset["seq"]
        reader.commit(end)
        offset = end


def _late(reader, misses: int, first: int = 1):
    """Make the reader's takes after its ``first`` find nothing ``misses`` times (a delivery still on its way)."""
    consumer = reader.source._consumer_()
    take, calls = consumer.take, {"n": 0}

    def late_take(count, max_bytes, first_wait, *args, **kwargs):
        calls["n"] += 1
        if first < calls["n"] <= first + misses:
            return []
        return take(min(count, 3), max_bytes, first_wait, *args, **kwargs)

    consumer.take = late_take
    return calls


def test_a_run_reads_every_message_counted_at_its_start_though_some_arrive_late(amqp_uri, make_queue, tmp_path: Path):
    queue = make_queue()
    publish_numbered(amqp_uri, queue, 6)
    reader = queue_reader(amqp_uri, queue, str(tmp_path / "journal"), pollTimeoutMs="200")
    try:
        reader.prepareForTriggerAvailableNow()
        _late(reader, misses=3)
        assert _run(reader) == 6
    finally:
        reader.stop()


def test_a_run_ends_when_counted_messages_went_elsewhere(amqp_uri, make_queue, tmp_path: Path):
    queue = make_queue()
    publish_numbered(amqp_uri, queue, 4)
    reader = queue_reader(amqp_uri, queue, str(tmp_path / "journal"), pollTimeoutMs="200")
    try:
        reader.prepareForTriggerAvailableNow()
        reader.source._target_count += 3  # as if 3 of those counted were taken by another consumer or expired
        started = time.monotonic()
        assert _run(reader) == 4
        assert time.monotonic() - started < 20
    finally:
        reader.stop()


def test_a_run_fails_clearly_when_counted_messages_never_arrive(amqp_uri, make_queue, tmp_path: Path):
    queue = make_queue()
    publish_numbered(amqp_uri, queue, 2)
    reader = queue_reader(amqp_uri, queue, str(tmp_path / "journal"), pollTimeoutMs="100", reconnectTimeoutMs="1000")
    try:
        reader.prepareForTriggerAvailableNow()
        _late(reader, misses=10**9, first=0)
        with pytest.raises(SafeBunnyBrokerError, match="still to read"):
            _run(reader)
    finally:
        reader.stop()
