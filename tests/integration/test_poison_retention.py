"""Poison streams are declared with a retention (x-max-age, default 30 days); one that already exists
without it (as earlier versions declared them) keeps working, with a warning. Real broker, no Spark."""

from __future__ import annotations

import logging
import time
import uuid

import pika
import pytest

import safebunny


def _saga(uri, tmp_path, name=None, **kwargs):  # type: ignore[no-untyped-def]
    saga = safebunny.Saga(name or f"sbr-{uuid.uuid4().hex[:8]}", uri=uri, root=str(tmp_path / "saga"),
        settings=safebunny.SagaSettings(**kwargs))

    @saga.step("stock", consumes="OrderPlaced", from_node="orders", schema="orderId string")
    def reserve(orders, ctx):  # type: ignore[no-untyped-def]
        return None

    return saga


def _declares(admin, queue: str, arguments: dict) -> bool:  # type: ignore[no-untyped-def]
    """Whether the broker accepts a declare of ``queue`` with ``arguments`` (it compares them with its own)."""
    try:
        admin._ch().queue_declare(queue, durable=True, arguments=arguments)
        return True
    except pika.exceptions.ChannelClosedByBroker as exc:
        assert exc.reply_code == 406
        return False


def test_a_new_poison_stream_keeps_parked_messages_30_days(amqp_uri, tmp_path, admin) -> None:
    saga = _saga(amqp_uri, tmp_path)
    try:
        saga.declare()
        poison = safebunny.topology.poison_queue_name(saga, "stock", "OrderPlaced")
        assert _declares(admin, poison, {"x-queue-type": "stream", "x-max-age": "30D"})
        assert not _declares(admin, poison, {"x-queue-type": "stream", "x-max-age": "7D"})
    finally:
        safebunny.topology.delete(saga)


def test_an_existing_poison_stream_without_retention_keeps_working(amqp_uri, tmp_path, admin, caplog) -> None:
    saga = _saga(amqp_uri, tmp_path, poison_max_age="12h")
    poison = safebunny.topology.poison_queue_name(saga, "stock", "OrderPlaced")
    admin.declare_queue(poison, "stream")  # as an earlier version declared it
    try:
        with caplog.at_level(logging.WARNING, logger="safebunny.saga"):
            saga.declare()
            saga.declare()  # idempotent
        assert "keeps its own retention" in caplog.text and "set_policy" in caplog.text
        assert _declares(admin, poison, {"x-queue-type": "stream"})  # unchanged: still no x-max-age
    finally:
        safebunny.topology.delete(saga)
        admin.delete_queue(poison)


def test_a_retention_that_rabbitmq_would_not_read_is_refused_before_anything_is_declared(amqp_uri, tmp_path) -> None:
    for bad in ("30 days", "0D", "30d", ""):
        with pytest.raises(safebunny.SafeBunnyOptionError, match="poison_max_age"):
            _saga(amqp_uri, tmp_path, poison_max_age=bad)
    assert _saga(amqp_uri, tmp_path, poison_max_age=None).config.settings.poison_max_age is None


def test_the_unrouted_stream_has_a_retention_and_an_existing_one_keeps_its_own(amqp_uri, tmp_path, admin,
                                                                                 caplog) -> None:
    saga = _saga(amqp_uri, tmp_path, unrouted_max_age="2D")
    unrouted = safebunny.topology.unrouted_name(saga)
    try:
        saga.declare()
        assert _declares(admin, unrouted, {"x-queue-type": "stream", "x-max-age": "2D"})
        assert not _declares(admin, unrouted, {"x-queue-type": "stream", "x-max-age": "7D"})
        again = _saga(amqp_uri, tmp_path, name=saga.name)  # the default, 7D, for the stream that exists with 2D
        with caplog.at_level(logging.WARNING, logger="safebunny.saga"):
            again.declare()
        assert "unrouted queue" in caplog.text and "keeps its own retention" in caplog.text
        assert _declares(admin, unrouted, {"x-queue-type": "stream", "x-max-age": "2D"})
    finally:
        safebunny.topology.delete(saga)
    with pytest.raises(safebunny.SafeBunnyOptionError, match="unrouted_max_age"):
        _saga(amqp_uri, tmp_path, unrouted_max_age="7 days")


def test_status_counts_the_unrouted_messages_and_warns(amqp_uri, tmp_path, capsys, monkeypatch) -> None:
    from safebunny.cli.main import main
    from safebunny.saga.look.status import unrouted_depth

    name = f"sbu-{uuid.uuid4().hex[:8]}"
    module = tmp_path / "unrouted_saga.py"
    module.write_text("import safebunny\n"
                      f"saga = safebunny.Saga({name!r}, uri={amqp_uri!r}, root={str(tmp_path / 'saga')!r})\n"
                      "@saga.step('stock', consumes='OrderPlaced', from_node='orders', schema='orderId string')\n"
                      "def reserve(orders, ctx):\n    return None\n")
    monkeypatch.delenv("SAFEBUNNY_URI", raising=False)
    saga = _saga(amqp_uri, tmp_path, name=name)
    try:
        saga.declare()
        assert unrouted_depth(saga) == 0
        conn = pika.BlockingConnection(pika.URLParameters(amqp_uri))
        ch = conn.channel()
        ch.confirm_delivery()
        for i in range(3):  # a type no step consumes: the exchange's alternate exchange keeps it
            ch.basic_publish(name, "orders.OrderCancelled", b"{}", pika.BasicProperties(message_id=f"c{i}"),
                             mandatory=True)
        conn.close()
        deadline = time.monotonic() + 30  # a stream's count in a passive declare lags a second or two
        while unrouted_depth(saga) != 3 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert unrouted_depth(saga) == 3
        assert main(["status", f"{module}:saga"]) == 0
        out = capsys.readouterr().out
        assert f"WARNING unrouted: 3 message(s) in {name}.unrouted" in out and "no step consumes" in out
    finally:
        safebunny.topology.delete(saga)
    assert unrouted_depth(saga) is None
