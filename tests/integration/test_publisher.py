"""ConfirmingPublisher against the real broker: confirms, returns, nacks, closed channels, the cache."""

import pika
import pytest

from safebunny.amqp import confirming_publisher as pubmod
from safebunny.amqp.confirming_publisher import ConfirmingPublisher, PublishCounts, acquire, release
from safebunny.errors import SafeBunnyBrokerError, SafeBunnyPublishError


def props(mid: str, **kw) -> pika.BasicProperties:
    return pika.BasicProperties(message_id=mid, delivery_mode=2, **kw)


def test_every_message_is_confirmed_and_arrives_with_its_properties(amqp_uri, admin, make_queue):
    queue = make_queue()
    with ConfirmingPublisher(amqp_uri, max_in_flight=50) as pub:
        for i in range(500):
            pub.publish("", queue, b"body-%d" % i, props(f"m-{i}", correlation_id="c", content_type="text/plain",
                                                         headers={"i": str(i)}))
        counts = pub.flush()
    assert counts == PublishCounts(published=500, confirmed=500, returned=0, nacked=0)
    got = admin.get_all(queue)
    assert [p.message_id for _, p, _ in got] == [f"m-{i}" for i in range(500)]
    _, p, body = got[7]
    assert (body, p.correlation_id, p.content_type, p.headers, p.delivery_mode) == (
        b"body-7", "c", "text/plain", {"i": "7"}, 2)


def test_a_window_of_one_still_publishes_everything(amqp_uri, admin, make_queue):
    queue = make_queue()
    with ConfirmingPublisher(amqp_uri, max_in_flight=1) as pub:
        for i in range(20):
            pub.publish("", queue, b"x", props(f"m-{i}"))
        assert pub.flush().confirmed == 20
    assert admin.ready(queue) == 20


def test_unroutable_fails_naming_exchange_and_routing_key(amqp_uri, make_exchange, make_queue, admin):
    exchange = make_exchange("topic")
    queue = make_queue()
    admin._ch().queue_bind(queue, exchange, "good.key")
    pub = ConfirmingPublisher(amqp_uri).open()
    pub.publish(exchange, "good.key", b"ok", props("ok-1"))
    pub.publish(exchange, "no.such.binding", b"lost?", props("bad-1"))
    with pytest.raises(SafeBunnyPublishError) as info:
        pub.flush()
    text = str(info.value)
    assert "returned as unroutable" in text and repr(exchange) in text and "'no.such.binding'" in text
    assert "'bad-1'" in text and info.value.reply_code == 312
    assert pub.counts.returned == 1 and pub.counts.published == 2
    assert pub.counts.confirmed <= 1  # the returned message is never counted as confirmed
    assert not pub.is_open  # a failed publisher is closed, never reused
    assert admin.ready(queue) == 1


@pytest.mark.parametrize("properties", [pika.BasicProperties(), pika.BasicProperties(message_id="m-x")])
def test_a_returned_message_is_never_counted_as_confirmed(amqp_uri, properties):
    pub = ConfirmingPublisher(amqp_uri).open()
    pub.publish("", "sbt-no-such-queue-anonymous", b"lost?", properties)
    with pytest.raises(SafeBunnyPublishError, match="'sbt-no-such-queue-anonymous'"):
        pub.flush()
    assert (pub.counts.returned, pub.counts.confirmed) == (1, 0)


def test_full_reject_publish_queue_nacks_fail_the_flush(amqp_uri, make_queue, admin):
    queue = make_queue(arguments={"x-max-length": 3, "x-overflow": "reject-publish"})
    pub = ConfirmingPublisher(amqp_uri).open()
    with pytest.raises(SafeBunnyPublishError) as info:
        for i in range(10):
            pub.publish("", queue, b"x", props(f"m-{i}"))
        pub.flush()
    text = str(info.value)
    assert "nacked" in text and f"routing key {queue!r}" in text and "reject-publish" in text
    assert pub.counts.nacked >= 1
    assert admin.ready(queue) == 3


def test_missing_exchange_is_a_clear_error(amqp_uri, unique_name):
    pub = ConfirmingPublisher(amqp_uri).open()
    with pytest.raises(SafeBunnyPublishError) as info:
        pub.publish(unique_name, "k", b"x", props("m"))
        pub.flush()
    text = str(info.value)
    assert "404" in text and unique_name in text and "Declare the exchange" in text


def test_missing_exchange_error_names_the_failing_message_not_the_last_one(amqp_uri, unique_name, make_queue):
    """Publishing is pipelined; the 404 named the exchange and routing key of the last message sent."""
    queue = make_queue()
    pub = ConfirmingPublisher(amqp_uri).open()
    with pytest.raises(SafeBunnyPublishError) as info:
        pub.publish(unique_name, "orders.created", b"x", props("bad-row"))
        for i in range(5):
            pub.publish("", queue, b"ok", props(f"good-{i}"))
        pub.flush()
    text = str(info.value)
    assert "404" in text and "'bad-row'" in text and f"exchange {unique_name!r}" in text
    assert "routing key 'orders.created'" in text
    assert queue not in text and "good-" not in text


def test_wrong_password_on_open_is_an_authentication_error(amqp_uri):
    from urllib.parse import urlsplit

    from safebunny.errors import BrokerAuthenticationError

    parts = urlsplit(amqp_uri)
    bad = amqp_uri.replace(f"{parts.username}:{parts.password}@", f"{parts.username}:WrongS3cret@", 1)
    with pytest.raises(BrokerAuthenticationError) as info:
        ConfirmingPublisher(bad, connect_timeout=5).open()
    assert "WrongS3cret" not in str(info.value) and "refused the login" in str(info.value)


def test_connection_errors_name_the_endpoint_without_password():
    with pytest.raises(SafeBunnyBrokerError) as info:
        ConfirmingPublisher("amqp://guest:s3cret@127.0.0.1:1/%2F", connect_timeout=3).open()
    assert "127.0.0.1:1" in str(info.value) and "s3cret" not in str(info.value)


def test_cache_reuses_a_healthy_publisher_and_drops_a_failed_one(amqp_uri, make_queue):
    queue = make_queue()
    pubmod.close_all()
    first = acquire(amqp_uri, max_in_flight=10)
    first.publish("", queue, b"x", props("a"))
    first.flush()
    release(first)
    again = acquire(amqp_uri, max_in_flight=10)
    assert again is first and again.counts.published == 0  # counts restart per use
    other_settings = acquire(amqp_uri, max_in_flight=11)
    assert other_settings is not first
    release(other_settings)
    again.publish("", "sbt-no-such-queue-for-cache", b"x", props("b"))
    with pytest.raises(SafeBunnyPublishError):
        again.flush()
    release(again, healthy=False)
    fresh = acquire(amqp_uri, max_in_flight=10)
    assert fresh is not first and fresh.is_open
    release(fresh)
    pubmod.close_all()


def test_cache_replaces_a_publisher_idle_longer_than_its_heartbeat(amqp_uri):
    pubmod.close_all()
    first = acquire(amqp_uri, heartbeat=5)
    release(first)
    first.last_used -= 6  # pretend it sat idle, unserviced, for longer than the heartbeat
    second = acquire(amqp_uri, heartbeat=5)
    assert second is not first and second.is_open and not first.is_open
    release(second)
    pubmod.close_all()


def test_unconfirmed_messages_time_out_with_a_clear_error():
    """A broker that blocks publishers (memory alarm) never confirms: the flush fails after the timeout.

    Uses its own throwaway broker, because the alarm blocks every publisher of a broker.
    """
    from brokers import RABBIT_BIN, ThrowawayBroker

    if not (RABBIT_BIN / "rabbitmq-server").exists():
        pytest.fail(f"this test needs Debian's rabbitmq-server under {RABBIT_BIN}")
    broker = ThrowawayBroker(plugins=()).start()
    try:
        broker.ctl("set_vm_memory_high_watermark", "0")
        pub = ConfirmingPublisher(broker.uri, confirm_timeout=2.0).open()
        pub.publish("", "amq.rabbitmq.reply-to.nobody", b"x", props("stuck-1"))
        with pytest.raises(SafeBunnyPublishError) as info:
            pub.flush()
        text = str(info.value)
        assert "did not confirm message 'stuck-1'" in text and "within 2 s" in text
        assert "confirmTimeoutMs" in text
        assert not pub.is_open
    finally:
        broker.destroy()
