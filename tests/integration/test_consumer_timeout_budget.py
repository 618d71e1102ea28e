"""A delivery waits about two batch durations for its ack (the prefetch holds two batches). On a broker whose
consumer_timeout is 2 s, batches of 1.2 s lose their acks to channel closures; the reader fails the query with a
clear error instead of reading the same messages again and again. The reader is driven as Spark drives it."""

import logging
import time

import pika
import pytest

from helpers import publish_numbered, queue_reader
from safebunny.errors import SafeBunnyBrokerError


def _spark_like(reader, batches, duration):
    """Plan batch N+1, commit batch N, run N+1 for ``duration`` s; returns the number of batches planned."""
    start, previous = reader.initialOffset(), None
    for _ in range(batches):
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        if previous is not None:
            reader.commit(previous)
        for p in reader.partitions(start, end):
            list(reader.read(p))
        time.sleep(duration)  # the batch's work
        previous, start = end, end
    return batches


def _queue(uri, name):
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    ch = conn.channel()
    ch.queue_delete(name)
    ch.queue_declare(name, durable=True)
    conn.close()
    return name


def test_batches_slower_than_half_the_consumer_timeout_fail_clearly_instead_of_spinning(short_timeout_broker,
                                                                                        tmp_path, caplog):
    uri = short_timeout_broker.uri
    queue = _queue(uri, "budget-slow")
    publish_numbered(uri, queue, 400)
    reader = queue_reader(uri, queue, str(tmp_path / "j"), maxMessagesPerTrigger="20", consumerTimeoutMs="2000")
    caplog.set_level(logging.WARNING, logger="safebunny.source")
    try:
        with pytest.raises(SafeBunnyBrokerError) as info:
            _spark_like(reader, batches=12, duration=1.2)
    finally:
        reader.stop()
    message = str(info.value)
    assert "consumer_timeout" in message and "two batch durations" in message
    assert "'maxMessagesPerTrigger'" in message and "'consumerTimeoutMs'" in message
    # the estimate warned before the broker's verdict
    assert any("waits about" in r.getMessage() for r in caplog.records)


def test_batches_well_inside_the_consumer_timeout_run_on(short_timeout_broker, tmp_path, caplog):
    uri = short_timeout_broker.uri
    queue = _queue(uri, "budget-fast")
    publish_numbered(uri, queue, 200)
    reader = queue_reader(uri, queue, str(tmp_path / "j"), maxMessagesPerTrigger="20", consumerTimeoutMs="2000")
    caplog.set_level(logging.WARNING, logger="safebunny.source")
    try:
        assert _spark_like(reader, batches=6, duration=0.3) == 6
        assert reader.source._consumer.generation == 1  # the broker never closed the channel
        assert not any(reader.source._budget._losses)  # no ack was lost to consumer_timeout
    finally:
        reader.stop()
    # The warning is an estimate from measured batch durations: on a loaded machine one interval can pass half the
    # timeout (CI saw 1.3 s once, and 0.5x s, printed "0.5", beside a benchmark) and then the warning is right. It
    # must not come from the 0.3 s batches themselves: it warns past 0.5 s, which prints as 0.5 at one decimal.
    estimates = [r.getMessage() for r in caplog.records if "waits about" in r.getMessage()]
    assert all(float(m.split("the last batch took ")[1].split(" s,")[0]) >= 0.5 for m in estimates), estimates
