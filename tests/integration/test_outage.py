"""An outage longer than pollTimeoutMs never ends an availableNow run early; an outage longer than
reconnectTimeoutMs fails the batch with a clear error. The reader is driven as Spark drives it (no JVM); the
broker really closes the channel, and reconnecting is made to fail for a while, as a restarting broker would."""

import time

import pytest

import safebunny.queues.consumer as consumer_mod
from helpers import publish_numbered, queue_reader
from safebunny.errors import BrokerUnreachableError, SafeBunnyBrokerError


def _outage(monkeypatch, reader, seconds):
    real_open = consumer_mod.open_connection
    down_until = time.monotonic() + seconds

    def flaky_open(uri, heartbeat=None, name="safebunny/consumer"):
        if time.monotonic() < down_until:
            raise BrokerUnreachableError("simulated: the broker is restarting")
        return real_open(uri, heartbeat, name)

    monkeypatch.setattr(consumer_mod, "open_connection", flaky_open)
    consumer = reader.source._consumer
    consumer._connection.add_callback_threadsafe(  # the broker closes the channel: 406 unknown delivery tag
        lambda: consumer._channel.basic_ack(delivery_tag=10_000_000, multiple=False))
    time.sleep(0.3)


def _available_now(reader, on_batch):
    reader.prepareForTriggerAvailableNow()
    start, ids, n = reader.initialOffset(), [], 0
    while True:
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        if end == start:
            return ids
        reader.commit(start) if n else None
        ids += [r["messageId"] for p in reader.partitions(start, end) for b in reader.read(p) for r in b.to_pylist()]
        on_batch(n)
        start, n = end, n + 1


def test_an_outage_longer_than_the_poll_timeout_does_not_end_available_now_early(amqp_uri, make_queue, tmp_path,
                                                                                 monkeypatch, admin):
    queue = make_queue()
    publish_numbered(amqp_uri, queue, 500)
    reader = queue_reader(amqp_uri, queue, str(tmp_path / "j"), maxMessagesPerTrigger="100")
    try:
        ids = _available_now(reader, lambda n: _outage(monkeypatch, reader, 3.0) if n == 1 else None)
    finally:
        reader.stop()
    assert set(ids) == {f"m{i}" for i in range(500)}


def test_an_outage_longer_than_reconnect_timeout_fails_clearly(amqp_uri, make_queue, tmp_path, monkeypatch):
    queue = make_queue()
    publish_numbered(amqp_uri, queue, 300)
    reader = queue_reader(amqp_uri, queue, str(tmp_path / "j"), maxMessagesPerTrigger="100",
                          reconnectTimeoutMs="1500")
    try:
        with pytest.raises(SafeBunnyBrokerError, match="could not reconnect within 1.5 s"):
            _available_now(reader, lambda n: _outage(monkeypatch, reader, 30.0) if n == 0 else None)
    finally:
        reader.stop()
