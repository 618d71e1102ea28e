"""A saga of three steps and a compensation step, defined only through the public API, against a real
broker, a real SparkSession and real Delta tables."""

from __future__ import annotations

import time
import uuid

import pika
import pytest

import safebunny
from helpers import wait_until
from safebunny.delta.delta_rs import DeltaRsTarget

ORDER = "orderId string, sku string, qty int, card string"
DECLINED = "4000-0002"


def _rows(path):
    t = DeltaRsTarget(path).read()
    return [] if t is None else t.to_pylist()


def _fulfilment(uri, tmp, broken):
    name = f"sbt-{uuid.uuid4().hex[:8]}"
    saga = safebunny.Saga(name, uri=uri, root=str(tmp / "saga"), settings=safebunny.SagaSettings(
        retry=safebunny.Retry(delays=("1s", "1s")), batch_size=200))
    t = {k: str(tmp / k) for k in ("reservations", "payments", "shipments", "releases")}
    calls = {}

    @saga.step("stock", consumes="OrderPlaced", from_node="orders", schema=ORDER, produces=["StockReserved"])
    def reserve(orders, ctx):
        ok = orders.select("messageId", "orderId", "sku", "qty", "card")
        return safebunny.Outcome(effects=[safebunny.append(ok.drop("card"), t["reservations"])],
                                 emits=[safebunny.emit(ok, type="StockReserved")])

    @saga.step("payment", consumes="StockReserved", from_node="stock", schema=ORDER, rows=True,
               produces=["PaymentCharged", "PaymentDeclined"])
    def charge(msg, ctx):
        calls[msg["orderId"]] = calls.get(msg["orderId"], 0) + 1
        if msg["orderId"] == "o-poison" and broken["on"]:
            raise ConnectionError("payment provider rejects this order")
        order = {"orderId": msg["orderId"], "sku": msg["sku"], "qty": msg["qty"]}
        if msg["card"] == DECLINED:
            return safebunny.Outcome(emits=[safebunny.emit(order, type="PaymentDeclined")])
        return safebunny.Outcome(effects=[safebunny.append({"orderId": msg["orderId"]}, t["payments"])],
                                 emits=[safebunny.emit(order, type="PaymentCharged")])

    @saga.step("shipping", consumes="PaymentCharged", from_node="payment", schema="orderId string, sku string")
    def ship(paid, ctx):
        return safebunny.Outcome(effects=[safebunny.append(paid.select("messageId", "orderId"), t["shipments"])])

    @saga.step("stock", consumes="PaymentDeclined", from_node="payment", schema="orderId string, qty int",
               compensates="OrderPlaced")
    def release(declined, ctx):
        return safebunny.Outcome(effects=[safebunny.append(declined.select("messageId", "orderId"), t["releases"])])

    return saga, t, calls


def _publish_raw(uri, exchange, routing_key, body, message_id):
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.basic_publish(exchange, routing_key, body, pika.BasicProperties(message_id=message_id, delivery_mode=2))
    conn.close()


def test_saga_runs_each_step_exactly_once_with_retries_poison_compensation_and_redrive(spark, amqp_uri, tmp_path):
    broken = {"on": True}
    saga, t, calls = _fulfilment(amqp_uri, tmp_path, broken)
    try:
        orders = [(f"o{i}", f"sku{i % 3}", 1 + i % 4, DECLINED if i % 10 == 3 else "4000-0001") for i in range(60)]
        orders.append(("o-poison", "sku0", 1, "4000-0001"))
        df = spark.createDataFrame(orders, "orderId string, sku string, qty int, card string")
        saga.start(df, node="orders", type="OrderPlaced", business_key="orderId")
        saga.start(df.limit(10), node="orders", type="OrderPlaced", business_key="orderId")  # started twice
        _publish_raw(amqp_uri, saga.name, "orders.OrderPlaced", b"{not json", "malformed-1")
        saga.drain(spark, timeout=300)

        declined = {o[0] for o in orders if o[3] == DECLINED}
        reserved = [r["orderId"] for r in _rows(t["reservations"])]
        assert sorted(reserved) == sorted(o[0] for o in orders)  # each order reserved once, duplicates dropped
        assert sorted(r["orderId"] for r in _rows(t["releases"])) == sorted(declined)  # compensation ran
        shipped = sorted(r["orderId"] for r in _rows(t["shipments"]))
        assert shipped == sorted(o[0] for o in orders if o[0] not in declined and o[0] != "o-poison")
        assert sorted(r["orderId"] for r in _rows(t["payments"])) == shipped
        assert calls["o-poison"] == 3 * 3  # three deliveries (first + two tiers), each tried 3 times in place

        parked = saga.poison_rows("payment", "StockReserved")
        assert [p.correlationId for p in parked] == [safebunny.correlation_id_for("o-poison")]
        assert "rejects this order" in parked[0].reason and parked[0].attempts == 3
        assert parked[0].state == "parked" and parked[0].parkedAt and parked[0].parkedAt >= parked[0].firstFailure
        assert parked[0].headers["x-safebunny-error-type"] == parked[0].errorType
        malformed = saga.poison_rows("stock", "OrderPlaced")
        assert [p.messageId for p in malformed] == ["malformed-1"] and "does not parse" in malformed[0].reason
        assert saga.poison("payment", "StockReserved", spark).count() == 1

        # discarded on purpose: recorded with the reason, hidden from listings, never redriven
        assert saga.discard("stock", "OrderPlaced", ["malformed-1", "not-parked"], "test data, not an order") == 1
        assert saga.poison_rows("stock", "OrderPlaced") == []
        [gone] = saga.poison_rows("stock", "OrderPlaced", all=True)
        assert gone.state == "discarded" and gone.messageId == "malformed-1"
        assert saga.redrive("stock", "OrderPlaced") == 0
        with pytest.raises(safebunny.SafeBunnyOptionError, match="reason"):
            saga.discard("stock", "OrderPlaced", ["malformed-1"], " ")

        status = {(s.node, s.type): s for s in saga.status()}
        assert status[("stock", "OrderPlaced")].duplicates == 10
        assert status[("payment", "StockReserved")].parked == 1 and status[("payment", "StockReserved")].retried == 2
        assert all(s.backlog == 0 and s.retrying == 0 for s in status.values())

        broken["on"] = False  # the fix
        assert saga.redrive("payment", "StockReserved", error_type="NoSuchError") == 0  # by error type
        assert saga.redrive("payment", "StockReserved", error_type=parked[0].errorType) == 1
        assert [p.state for p in saga.poison_rows("payment", "StockReserved")] == ["redriven"]
        saga.drain(spark, timeout=120)
        assert "o-poison" in [r["orderId"] for r in _rows(t["shipments"])]
        assert saga.poison_rows("payment", "StockReserved") == []  # resolved: redriven, then processed
        assert [p.state for p in saga.poison_rows("payment", "StockReserved", all=True)] == ["resolved"]
        assert saga.redrive("payment", "StockReserved") == 1  # again: the inbox drops it
        saga.drain(spark, timeout=120)
        assert sorted(r["orderId"] for r in _rows(t["shipments"])).count("o-poison") == 1

        paid = [e for e in saga.trace("o-poison") if e.node == "payment"]  # two retry tiers, poison, a redrive
        assert [(e.delivery, e.status) for e in paid] == [(1, "failed"), (2, "failed"), (3, "failed"), (4, "done")]
        assert paid[0].attempts == 3  # the in-place tries of one delivery

        path = saga.trace("o1")  # a business key works as well as a correlation id
        assert [e.node for e in path] == ["stock", "payment", "shipping"]
        assert path[1].causationId == path[0].messageId and path[1].messageId in path[0].emitted
    finally:
        safebunny.topology.delete(saga)


def test_a_paused_step_takes_nothing_then_resumes_by_itself(spark, amqp_uri, tmp_path):
    saga, t, _ = _fulfilment(amqp_uri, tmp_path, {"on": False})
    try:
        saga.declare()
        until = saga.pause("shipping", "PaymentCharged", 30)
        running = saga.run(spark, trigger="500 milliseconds")
        try:
            df = spark.createDataFrame([(f"p{i}", "s", 1, "4000-0001") for i in range(20)], ORDER)
            saga.start(df, node="orders", type="OrderPlaced", business_key="orderId")
            wait_until(lambda: len(_rows(t["payments"])) == 20, timeout=120, what="payments while shipping paused")
            assert time.time() < until, "the machine was too slow to check the pause while it held"
            assert _rows(t["shipments"]) == []
            assert any(s.breaker.startswith("open") for s in saga.status() if s.node == "shipping")
            wait_until(lambda: len(_rows(t["shipments"])) == 20, timeout=120, what="shipping resumed by itself")
        finally:
            running.stop()
    finally:
        safebunny.topology.delete(saga)


def test_a_queue_declared_earlier_with_other_arguments_is_a_clear_error(amqp_uri, tmp_path, admin):
    saga, _, _ = _fulfilment(amqp_uri, tmp_path, {"on": False})
    queue = safebunny.topology.queue_name(saga, "shipping", "PaymentCharged")
    admin.declare_queue(queue, "classic")
    try:
        with pytest.raises(safebunny.topology.SafeBunnyTopologyError) as err:
            saga.declare()
        text = str(err.value)
        assert queue in text and "Nothing was changed" in text
        assert "x-dead-letter-exchange = none" in text and "the saga declares x-dead-letter-exchange = ''" not in text
        assert admin.ready(queue) == 0
        with pytest.raises(pika.exceptions.ChannelClosedByBroker):  # nothing else was created before the check
            admin._ch().queue_declare(safebunny.topology.queue_name(saga, "stock", "OrderPlaced"), passive=True)
    finally:
        admin.delete_queue(queue)
