"""Bad input to a saga ends in a clear error or in poison with a reason, on a real broker, the shared
SparkSession and real Delta tables: null business keys, wrong-typed bodies, redrive after compensation,
and a password inside the saga's URI kept out of the query plans."""

from __future__ import annotations

import uuid

import pika
import pytest

import safebunny
from safebunny.delta.delta_rs import DeltaRsTarget
from safebunny.errors import SafeBunnyOptionError
from safebunny.saga.run.queries import source_frame


def _rows(path):
    t = DeltaRsTarget(path).read()
    return [] if t is None else t.to_pylist()


def _saga(uri, tmp):
    return safebunny.Saga(f"sbi-{uuid.uuid4().hex[:8]}", uri=uri, root=str(tmp / "saga"),
        settings=safebunny.SagaSettings(retry=safebunny.Retry(delays=("1s",)), batch_size=50))


def _publish(uri, saga, routing_key, bodies):
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    ch = conn.channel()
    ch.confirm_delivery()
    for mid, body in bodies:
        ch.basic_publish(saga.name, routing_key, body, pika.BasicProperties(message_id=mid, delivery_mode=2),
                         mandatory=True)
    conn.close()


def test_start_refuses_null_and_blank_business_keys_before_publishing(spark, amqp_uri, tmp_path, admin):
    saga = _saga(amqp_uri, tmp_path)
    saga.step("stock", consumes="OrderPlaced", from_node="orders", schema="orderId string")(lambda df, ctx: None)
    try:
        df = spark.createDataFrame([("o1",), (None,), ("",), ("  ",), (None,), ("o2",)], "orderId string")
        with pytest.raises(SafeBunnyOptionError, match=r"4 row\(s\) have a null or empty 'orderId'.*Nothing was "
                                                       r"published"):
            saga.start(df, node="orders", type="OrderPlaced", business_key="orderId")
        saga.declare()
        assert admin.ready(safebunny.topology.queue_name(saga, "stock", "OrderPlaced")) == 0
        saga.start(df.where("orderId in ('o1', 'o2')"), node="orders", type="OrderPlaced", business_key="orderId")
        assert admin.ready(safebunny.topology.queue_name(saga, "stock", "OrderPlaced")) == 2
    finally:
        safebunny.topology.delete(saga)


def test_wrong_typed_bodies_are_parked_naming_the_field_and_compensated_ones_are_not_redriven(
        spark, amqp_uri, tmp_path):
    saga = _saga(amqp_uri, tmp_path)
    t = {k: str(tmp_path / k) for k in ("reservations", "releases", "loose")}

    @saga.step("stock", consumes="OrderPlaced", from_node="orders", schema="orderId string, qty bigint, userId string",
               fails_as="StockFailed")
    def reserve(orders, ctx):
        return safebunny.Outcome(effects=[safebunny.append(orders.select("messageId", "orderId", "userId"),
                                                           t["reservations"])])

    @saga.step("stock", consumes="StockFailed", from_node="stock", schema="orderId string", compensates="OrderPlaced")
    def release(failed, ctx):
        return safebunny.Outcome(effects=[safebunny.append(failed.select("messageId", "orderId"), t["releases"])])

    @saga.step("audit", consumes="OrderPlaced", from_node="orders", schema="orderId string, userId string",
               strict_schema=False)
    def audit(orders, ctx):
        return safebunny.Outcome(effects=[safebunny.append(orders.select("messageId", "userId"), t["loose"])])

    try:
        saga.declare()
        _publish(amqp_uri, saga, "orders.OrderPlaced", [
            ("good", b'{"orderId": "o1", "qty": 2, "userId": "u1"}'),
            ("amount", b'{"orderId": "o2", "qty": "abc", "userId": "u2"}'),
            ("user", b'{"orderId": "o3", "qty": 1, "userId": 17}')])
        saga.drain(spark, timeout=300)

        assert [r["orderId"] for r in _rows(t["reservations"])] == ["o1"]
        parked = {p.messageId: p for p in saga.poison_rows("stock", "OrderPlaced")}
        assert sorted(parked) == ["amount", "user"]
        assert "field 'qty' has \"abc\" (a string), but the schema expects bigint" in parked["amount"].reason
        assert "field 'userId' has 17 (a number), but the schema expects string" in parked["user"].reason
        assert all(p.errorType == "MalformedMessage" and p.parkedAt for p in parked.values())
        assert sorted(r["orderId"] for r in _rows(t["releases"])) == ["o2", "o3"]  # fails_as: compensated
        assert sorted(r["userId"] for r in _rows(t["loose"])) == ["17", "u1", "u2"]  # strict_schema=False coerces

        with pytest.raises(SafeBunnyOptionError, match=r"Refusing to redrive 2 message\(s\) of step stock.OrderPlaced"
                                                       r".*fails_as='StockFailed'.*force=True"):
            saga.redrive("stock", "OrderPlaced")
        assert saga.redrive("stock", "OrderPlaced", ids=["user"], force=True) == 1
    finally:
        safebunny.topology.delete(saga)


def test_a_password_inside_the_saga_uri_stays_out_of_query_plans(default_redaction, amqp_uri, tmp_path, capsys):
    assert amqp_uri.startswith("amqp://guest:guest@")
    saga = _saga(amqp_uri, tmp_path)
    saga.step("stock", consumes="OrderPlaced", from_node="orders", schema="orderId string")(lambda df, ctx: None)
    try:
        saga.declare()
        capsys.readouterr()
        source_frame(default_redaction, saga, saga.steps[0]).explain(True)  # the frame the step's query reads
        plan = capsys.readouterr().out
        assert "amqp://guest@" in plan and "password" in plan
        assert "guest:guest" not in plan and "guest%3A" not in plan
    finally:
        safebunny.topology.delete(saga)
