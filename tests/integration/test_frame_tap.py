"""The consumer's frame tap on a real broker: the same deliveries, byte for byte, as pika decodes them."""

from __future__ import annotations

import random
from datetime import datetime

import pika
import pytest

from helpers import wait_until
from safebunny.queues.consumer import QueueConsumer

FIELDS = ("content_type", "content_encoding", "headers", "delivery_mode", "priority", "correlation_id",
          "reply_to", "expiration", "message_id", "timestamp", "type", "user_id", "app_id", "cluster_id")


def messages() -> tuple[list[bytes], list[pika.BasicProperties]]:
    rnd = random.Random(15)
    bodies, props = [], []
    for i in range(300):
        # bodies of one to three frames (frame_max 131072), empty ones, and every property set by some
        bodies.append(rnd.randbytes(rnd.choice([0, 7, 200, 131_072, 300_000])))
        props.append(pika.BasicProperties(
            content_type="application/json" if i % 2 else None, content_encoding="utf-8" if i % 5 == 0 else None,
            headers={"i": i, "s": "é", "b": b"\x00\xff", "when": datetime(2026, 11, 23, 1, 2, 3),
                     "list": [1, "two", {"three": 3}], "none": None} if i % 3 == 0 else None,
            delivery_mode=2, priority=i % 10 if i % 4 == 0 else None, correlation_id=f"c-{i}",
            reply_to="replies" if i % 7 == 0 else None, expiration="600000" if i % 11 == 0 else None,
            message_id=f"m-{i}-ü", timestamp=1_763_000_000 + i, type="OrderPlaced",
            user_id="guest" if i % 13 == 0 else None, app_id="tests", cluster_id=None))
    return bodies, props


def consume_all(uri: str, queue: str, n: int) -> tuple[list[tuple], QueueConsumer]:
    consumer = QueueConsumer(uri, queue, prefetch=1000).start()
    taken = []
    try:
        while len(taken) < n:
            got = consumer.take(n - len(taken), None, first_wait=10)
            assert got, f"only {len(taken)} of {n} deliveries arrived"
            taken += got
        assert consumer.acks.ack_through(taken[-1].generation, taken[-1].delivery_tag)
    finally:
        consumer.stop()
    rows = [(d.delivery_tag, d.body, d.exchange, d.routing_key, d.redelivered,
             {f: getattr(d.properties, f) for f in FIELDS}) for d in taken]
    return rows, consumer


def test_tapped_deliveries_equal_pikas(amqp_uri, admin, make_queue, monkeypatch: pytest.MonkeyPatch):
    bodies, props = messages()
    tapped_q, pika_q = make_queue(suffix="-tap"), make_queue(suffix="-pika")
    admin.publish(tapped_q, bodies, props)
    admin.publish(pika_q, bodies, props)
    wait_until(lambda: admin.ready(tapped_q) == admin.ready(pika_q) == len(bodies), what="both queues full")

    tapped, consumer = consume_all(amqp_uri, tapped_q, len(bodies))
    assert consumer._tap is not None and consumer._tap.fast > 0  # noqa: SLF001 - the tap decoded them
    monkeypatch.setenv("SAFEBUNNY_PIKA_DECODE", "1")
    decoded_by_pika, plain = consume_all(amqp_uri, pika_q, len(bodies))
    assert plain._tap is None  # noqa: SLF001

    assert [r[1] for r in tapped] == bodies
    assert {r[3] for r in tapped} == {tapped_q} and {r[3] for r in decoded_by_pika} == {pika_q}
    assert [r[:3] + r[4:] for r in tapped] == [r[:3] + r[4:] for r in decoded_by_pika]
