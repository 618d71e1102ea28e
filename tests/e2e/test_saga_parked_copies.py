"""A parked order started again counts as a duplicate (the instance is parked; redrive runs it again), and the
counters of ``status``, ``trace`` and ``poison_rows`` agree; ``Retry(poison_on=...)`` matches the Python class a
UDF raised; a discarded instance shows as discarded, with the reason. A real broker, the shared SparkSession,
real Delta tables."""

from __future__ import annotations

import uuid

from pyspark.sql import functions as F  # noqa: N812

import safebunny
from safebunny.saga.look.instances import instances_table


def test_a_parked_order_started_again_is_a_duplicate_and_trace_agrees_with_poison(spark, amqp_uri, tmp_path):
    saga = safebunny.Saga(f"sbc-{uuid.uuid4().hex[:8]}", uri=amqp_uri, root=str(tmp_path / "saga"),
        settings=safebunny.SagaSettings(retry=safebunny.Retry(delays=("1s",), poison_on=("ValueError",)),
            batch_size=50))
    out = str(tmp_path / "reservations")

    @F.udf("string")
    def checked(sku):
        if sku == "unknown":
            raise ValueError(f"sku {sku!r} is not in the catalogue")  # poison_on: parked at once
        if sku == "flaky":
            raise KeyError("the stock service did not answer")  # retried once, then parked
        return sku

    @saga.step("stock", consumes="OrderPlaced", from_node="orders", schema="orderId string, sku string")
    def reserve(orders, ctx):
        return safebunny.Outcome(effects=[safebunny.append(orders.select("messageId", checked("sku").alias("sku")),
                                                           out)])

    orders = spark.createDataFrame([("o1", "ok"), ("o2", "unknown"), ("o3", "flaky")], "orderId string, sku string")
    try:
        saga.start(orders, node="orders", type="OrderPlaced", business_key="orderId")
        saga.drain(spark, timeout=300)
        parked = {p.correlationId: p for p in saga.poison_rows("stock", "OrderPlaced")}
        unknown = parked[safebunny.correlation_id_for("o2")]
        flaky = parked[safebunny.correlation_id_for("o3")]
        assert (unknown.errorType, unknown.attempts) == ("ValueError", 1), unknown  # the UDF's class, not Spark's
        assert (flaky.errorType, flaky.attempts) == ("KeyError", 2), flaky
        (first,) = saga.status()
        assert (first.received, first.failed, first.retried, first.parked, first.duplicates) == (4, 3, 1, 2, 0)

        saga.start(orders, node="orders", type="OrderPlaced", business_key="orderId")  # every order again
        saga.drain(spark, timeout=300)
        (again,) = saga.status()
        # o1 by the inbox, o2 and o3 as copies of parked messages: no second round of retries and poison
        assert (again.received, again.duplicates) == (7, 3)
        assert (again.failed, again.retried, again.parked, again.poisoned) == (3, 1, 2, 2)
        assert [p.attempts for p in saga.poison_rows("stock", "OrderPlaced")] == [1, 2]

        for key, poisoned in (("o2", unknown), ("o3", flaky)):
            entries = saga.trace(key)
            assert [e.delivery for e in entries] == list(range(1, poisoned.attempts + 1))
            assert entries[-1].status == "parked" and entries[-1].delivery == poisoned.attempts
            assert all(e.status == "failed" for e in entries[:-1])

        assert saga.discard("stock", "OrderPlaced", [unknown.messageId], "not a product we sell") == 1
        shown = {p.messageId: p for p in saga.poison_rows("stock", "OrderPlaced", all=True)}
        assert (shown[unknown.messageId].state, shown[unknown.messageId].discardReason) == (
            "discarded", "not a product we sell")
        assert shown[unknown.messageId].discardedBy and shown[flaky.messageId].discardReason is None
        states = {r["businessKey"]: r for r in instances_table(saga).to_pylist()}
        assert (states["o2"]["state"], states["o2"]["reason"]) == ("discarded", "not a product we sell")
        assert states["o3"]["state"] == "parked" and states["o1"]["state"] == "completed"
        assert saga.trace("o2")[-1].status == "discarded"
    finally:
        safebunny.topology.delete(saga)
