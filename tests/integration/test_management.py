"""Unacked counts from the real management plugin, on a throwaway broker started with it (the machine's
broker runs without the plugin, and the tests do not change its plugins); and the note when no API answers."""

from __future__ import annotations

import pika

import safebunny
from brokers import ThrowawayBroker, free_port
from helpers import wait_until
from safebunny.amqp.management import queue_counts
from safebunny.saga.define import topology


def test_status_shows_the_unacked_messages_of_a_step_queue(management_broker: ThrowawayBroker, tmp_path) -> None:  # type: ignore[no-untyped-def]
    url = f"http://127.0.0.1:{management_broker.management_port}"  # type: ignore[attr-defined]
    saga = safebunny.Saga("mgmt", uri=management_broker.uri, root=str(tmp_path), settings=safebunny.SagaSettings(
        management_url=url, quorum=False, retry=safebunny.Retry(delays=("1s",))))

    @saga.step("stock", consumes="OrderPlaced", from_node="orders", schema="orderId string")
    def reserve(df, ctx):  # type: ignore[no-untyped-def]
        return None

    saga.declare()
    queue = topology.queue_name(saga, "stock", "OrderPlaced")
    conn = pika.BlockingConnection(pika.URLParameters(management_broker.uri))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        for i in range(3):
            ch.basic_publish("", queue, b"{}", pika.BasicProperties(message_id=f"m{i}", delivery_mode=2))
        ch.basic_qos(prefetch_count=2)
        held = [ch.basic_get(queue)[0] for _ in range(2)]  # delivered, not acknowledged
        assert all(m is not None for m in held)
        wait_until(lambda: (queue_counts(management_broker.uri, [queue], url=url)[0] or {}).get(queue) is not None
                   and queue_counts(management_broker.uri, [queue], url=url)[0][queue].unacked == 2,
                   timeout=30, what="the management API to count 2 unacked")
        (status,) = saga.status()
        assert (status.unacked, status.backlog, status.note) == (2, 1, None)
        refused = queue_counts(management_broker.uri, [queue], password="wrong-secret", url=url)
        assert refused[0] is None and "refused user 'guest'" in refused[1] and "wrong-secret" not in refused[1]
    finally:
        conn.close()


def test_without_a_management_api_unacked_is_empty_with_the_reason(amqp_uri: str) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    counts, note = queue_counts(amqp_uri, ["any"], password="hunter2", url=nowhere)
    assert counts is None
    assert nowhere in note and "rabbitmq_management" in note and "hunter2" not in note
    wrong_login = queue_counts("amqp://nobody:hunter2@127.0.0.1:5672/%2F", ["any"], url=nowhere)[1]
    assert "hunter2" not in wrong_login
