"""detect_queue_type against real classic, quorum and stream queues, and its errors."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import pytest

from conftest import use_stream_broker
from safebunny.errors import (
    BrokerAuthenticationError,
    BrokerUnreachableError,
    QueueNotFoundError,
    SafeBunnyBrokerError,
    VhostNotFoundError,
)
from safebunny.streams.probe import detect_queue_type, parse_inequivalent

# streams need the stream plugin: a broker that has it (a throwaway one when the run's broker lacks it)
broker, amqp_uri = use_stream_broker()


def _with(uri: str, *, password: str | None = None, port: int | None = None, vhost: str | None = None,
          host: str | None = None) -> str:
    parts = urlsplit(uri)
    user = parts.username or "guest"
    pw = password if password is not None else (parts.password or "guest")
    netloc = f"{user}:{pw}@{host or parts.hostname}:{port or parts.port or 5672}"
    path = parts.path if vhost is None else "/" + vhost
    return urlunsplit((parts.scheme, netloc, path, parts.query, ""))


CASES = [
    ("classic", None, "classic"),
    ("classic", {"x-message-ttl": 60000, "x-max-length": 10, "x-overflow": "reject-publish"}, "classic"),
    ("quorum", None, "quorum"),
    ("quorum", {"x-delivery-limit": 3, "x-max-length": 100}, "quorum"),
    ("stream", None, "stream"),
    ("stream", {"x-max-length-bytes": 10_000_000, "x-stream-max-segment-size-bytes": 1_000_000}, "stream"),
]


@pytest.mark.parametrize("kind, arguments, expected", CASES)
@pytest.mark.parametrize("via", ["stream-protocol", "amqp-only"])
def test_detects_each_queue_type(make_queue, amqp_uri, stream_port, admin, kind, arguments, expected, via):
    queue = make_queue(kind, arguments)
    port = stream_port if via == "stream-protocol" else 0
    assert detect_queue_type(amqp_uri, queue, port) == expected
    # the probe changed nothing: the queue still exists with its arguments (a redeclare with them succeeds)
    admin.declare_queue(queue, kind, arguments)


def test_non_durable_classic_queue(admin, amqp_uri, unique_name):
    admin._ch().queue_declare(unique_name, durable=False, auto_delete=False)
    try:
        assert detect_queue_type(amqp_uri, unique_name, 0) == "classic"
    finally:
        admin.delete_queue(unique_name)


@pytest.mark.parametrize("via", ["stream-protocol", "amqp-only"])
def test_missing_queue_is_not_created(amqp_uri, stream_port, admin, unique_name, via):
    port = stream_port if via == "stream-protocol" else 0
    with pytest.raises(QueueNotFoundError) as info:
        detect_queue_type(amqp_uri, unique_name, port)
    text = str(info.value)
    hostport = f"{urlsplit(amqp_uri).hostname}:{urlsplit(amqp_uri).port}"
    assert unique_name in text and "Declare it" in text and hostport in text
    import pika.exceptions

    with pytest.raises(pika.exceptions.ChannelClosedByBroker):
        admin._ch().queue_declare(unique_name, passive=True)


@pytest.mark.parametrize("via", ["stream-protocol", "amqp-only"])
def test_wrong_password_names_user_not_password(amqp_uri, stream_port, make_queue, via):
    queue = make_queue("stream")
    uri = _with(amqp_uri, password="s3cret-Wrong")
    with pytest.raises(BrokerAuthenticationError) as info:
        detect_queue_type(uri, queue, stream_port if via == "stream-protocol" else 0)
    text = str(info.value)
    assert "s3cret-Wrong" not in text and "'guest'" in text and "refused the login" in text


@pytest.mark.parametrize("kind", ["classic", "quorum"])
def test_wrong_password_on_an_amqp_queue_names_the_amqp_port(amqp_uri, stream_port, make_queue, kind):
    """The stream port answers, but the queue is read over AMQP: the refusal is reported for the URI's port."""
    queue = make_queue(kind)
    with pytest.raises(BrokerAuthenticationError) as info:
        detect_queue_type(_with(amqp_uri, password="s3cret-Wrong"), queue, stream_port)
    text = str(info.value)
    assert f"{urlsplit(amqp_uri).hostname}:{urlsplit(amqp_uri).port} " in text and "refused the login" in text
    assert "stream protocol" not in text and f":{stream_port}" not in text and "s3cret-Wrong" not in text


def test_missing_vhost(amqp_uri, stream_port):
    uri = _with(amqp_uri, vhost="no-such-vhost-sb")
    for port in (stream_port, 0):
        with pytest.raises(VhostNotFoundError) as info:
            detect_queue_type(uri, "q", port)
        assert "'no-such-vhost-sb'" in str(info.value)


def test_unreachable_host(amqp_uri):
    from brokers import free_port

    port = free_port()
    uri = _with(amqp_uri, port=port, password="topsecret")
    with pytest.raises(BrokerUnreachableError) as info:
        detect_queue_type(uri, "q", free_port())
    text = str(info.value)
    assert f"127.0.0.1:{port}" in text and "topsecret" not in text and "broker is running" in text
    assert isinstance(info.value, SafeBunnyBrokerError)


def parse_inequivalent_arg(reply_text):
    """(argument, current value, value_known) of a reply, as the probe reads it."""
    found = parse_inequivalent(reply_text)
    return None if found is None else (found["arg"], found["current"], found["known"])


def test_parse_inequivalent_arg_forms():
    head = "PRECONDITION_FAILED - inequivalent arg '{}' for queue 'q' in vhost '/': received {} but current is {}"
    assert parse_inequivalent_arg(head.format("x-queue-type", "'stream'", "'quorum'")) == (
        "x-queue-type", "quorum", True)
    assert parse_inequivalent_arg(head.format("x-queue-type", "the value 'stream' of type 'longstr'", "none")) == (
        "x-queue-type", None, True)
    assert parse_inequivalent_arg(head.format("x-max-length-bytes", "none", "the value '100' of type 'signedint'")) \
        == ("x-max-length-bytes", 100, True)
    assert parse_inequivalent_arg(head.format("x-overflow", "none", "the value 'drop-head' of type 'longstr'")) \
        == ("x-overflow", "drop-head", True)
    assert parse_inequivalent_arg(head.format("x-weird", "none", "the value '1.5' of type 'double'"))[2] is False
    assert parse_inequivalent_arg("NOT_FOUND - no queue 'q' in vhost '/'") is None
