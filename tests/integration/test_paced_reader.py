"""A reader paced by ``minBatchIntervalMs`` (what saga.run sets for its entry steps, with a zero trigger): it takes a
first batch at once, holds the next until the interval has passed since the first one's messages were there,
and an idle poll takes a message the moment it arrives (real broker; the reader driven as Spark drives it)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from helpers import publish_numbered, queue_reader


def test_a_paced_reader_spaces_its_batches_by_the_interval(amqp_uri, make_queue, tmp_path: Path):
    queue = make_queue()
    publish_numbered(amqp_uri, queue, 3)
    reader = queue_reader(amqp_uri, queue, str(tmp_path / "journal"), pollTimeoutMs="6000", minBatchIntervalMs="3000")
    try:
        start = reader.initialOffset()
        began = time.monotonic()
        first = reader.latestOffset(start, reader.getDefaultReadLimit())
        took_first = time.monotonic() - began
        assert first["seq"] == 3
        reader.commit(first)
        publish_numbered(amqp_uri, queue, 2, start=3)
        second = reader.latestOffset(first, reader.getDefaultReadLimit())
        held = time.monotonic() - began
        assert second["seq"] == 5
        # bounds far from each other, so a loaded machine (two test workers) cannot blur them
        assert took_first < 2.0, f"the first batch waits for nothing, not the 3 s interval ({took_first:.2f} s)"
        assert held >= 2.9, f"the second batch came {held:.2f} s after the first was taken, inside the 3 s interval"
    finally:
        reader.stop()


def test_an_idle_paced_reader_takes_a_message_as_it_arrives(amqp_uri, make_queue, tmp_path: Path):
    queue = make_queue()
    publish_numbered(amqp_uri, queue, 1)
    reader = queue_reader(amqp_uri, queue, str(tmp_path / "journal"), pollTimeoutMs="10000", minBatchIntervalMs="500")
    try:
        first = reader.latestOffset(reader.initialOffset(), reader.getDefaultReadLimit())
        reader.commit(first)
        time.sleep(0.6)  # the interval has passed: the next poll waits for a message, not for the pacer
        sent = {}

        def publish_later() -> None:
            time.sleep(1.0)
            sent["at"] = time.monotonic()
            publish_numbered(amqp_uri, queue, 1, start=1)

        thread = threading.Thread(target=publish_later)
        thread.start()
        second = reader.latestOffset(first, reader.getDefaultReadLimit())
        returned = time.monotonic()
        thread.join()
        assert second["seq"] == 2
        assert returned - sent["at"] < 4.0, "the message was taken when it arrived, not at the poll's 10 s timeout"
    finally:
        reader.stop()


def test_a_long_interval_ends_each_poll_in_time_and_commits_the_planned_batch(amqp_uri, make_queue, tmp_path: Path):
    # a query is stopped between Spark's calls: a poll may not sleep through a 30 s interval
    queue = make_queue()
    publish_numbered(amqp_uri, queue, 2)
    reader = queue_reader(amqp_uri, queue, str(tmp_path / "journal"), pollTimeoutMs="600",
                          minBatchIntervalMs="30000")
    reader.source.admission.longest_hold = 1.0  # (5 s by default)
    try:
        first = reader.latestOffset(reader.initialOffset(), reader.getDefaultReadLimit())
        assert first["seq"] == 2
        publish_numbered(amqp_uri, queue, 1, start=2)
        began = time.monotonic()
        tick = reader.latestOffset(first, reader.getDefaultReadLimit())
        assert time.monotonic() - began < 4
        # nothing new is taken inside the interval, but the planned batch gets an empty batch after it so that
        # Spark commits it (and the source acks it) now rather than after the interval
        assert tick["seq"] == 2 and tick != first
        reader.commit(tick)
        again = reader.latestOffset(tick, reader.getDefaultReadLimit())
        assert again == tick, "nothing to commit and inside the interval: no batch"
    finally:
        reader.stop()
