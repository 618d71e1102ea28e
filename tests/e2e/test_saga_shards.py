"""A sharded saga step against a real broker, SparkSession and Delta tables: each instance's messages
reach one shard (by its correlation id), every effect happens once across the shards, a duplicate
start is dropped by the shared inbox, a failing row is retried within its shard and parked in the
step's one poison queue, and the step's status sums its shards."""

from __future__ import annotations

import uuid
from collections import Counter

import safebunny
from safebunny.delta.delta_rs import DeltaRsTarget
from safebunny.ids import correlation_id_for
from safebunny.saga.define import topology

SHARDS = 3


def _rows(path: str) -> list[dict]:  # type: ignore[type-arg]
    table = DeltaRsTarget(path).read()
    return [] if table is None else table.to_pylist()


def test_a_sharded_step_applies_each_instance_once_in_its_own_shard(spark, amqp_uri, tmp_path):
    saga = safebunny.Saga(f"sbs-{uuid.uuid4().hex[:8]}", uri=amqp_uri, root=str(tmp_path / "saga"),
        settings=safebunny.SagaSettings(retry=safebunny.Retry(delays=("1s",)), batch_size=50))
    reserved, shipped = str(tmp_path / "reserved"), str(tmp_path / "shipped")

    @saga.step("stock", consumes="OrderPlaced", from_node="orders", schema="orderId string",
               produces=["StockReserved"], shards=SHARDS)
    def reserve(orders, ctx):
        from pyspark.sql import functions as F

        if_ok = orders.where(F.col("orderId") != "o-bad")
        bad = F.udf(lambda o: 1 // 0 if o == "o-bad" else o, "string")  # the bad order fails in its row
        return safebunny.Outcome(effects=[safebunny.append(orders.select("messageId", bad("orderId").alias("orderId")),
                                                           reserved)],
                                 emits=[safebunny.emit(if_ok.select("messageId", "orderId"), type="StockReserved")])

    @saga.step("shipping", consumes="StockReserved", from_node="stock", schema="orderId string")
    def ship(reservations, ctx):
        return safebunny.Outcome(effects=[safebunny.append(reservations.select("messageId", "orderId"), shipped)])

    try:
        orders = [f"o{i}" for i in range(40)] + ["o-bad"]
        df = spark.createDataFrame([(o,) for o in orders], "orderId string")
        saga.start(df, node="orders", type="OrderPlaced", business_key="orderId")
        # before anything runs: each order waits in the shard its instance hashes to
        expected = Counter(topology.shard_of(correlation_id_for(o), SHARDS) for o in orders)
        queues = [topology.consumer_queue(saga, "stock", "OrderPlaced", i) for i in range(SHARDS)]
        depths = topology.depths(saga, queues)
        assert [depths[q][0] for q in queues] == [expected[i] for i in range(SHARDS)]
        assert all(expected[i] > 0 for i in range(SHARDS))

        saga.start(df.limit(10), node="orders", type="OrderPlaced", business_key="orderId")  # started twice
        saga.drain(spark, timeout=300)

        good = sorted(o for o in orders if o != "o-bad")
        assert sorted(r["orderId"] for r in _rows(reserved)) == good  # once each, across three queries
        assert sorted(r["orderId"] for r in _rows(shipped)) == good
        parked = saga.poison_rows("stock", "OrderPlaced")
        assert [p.correlationId for p in parked] == [correlation_id_for("o-bad")]
        assert parked[0].attempts == 2  # retried once through its shard's retry tier, then parked

        [stock] = [s for s in saga.status() if s.node == "stock"]
        assert stock.query == ", ".join(f"{saga.name}.stock.OrderPlaced.shard.{i}" for i in range(SHARDS))
        assert stock.backlog == 0 and stock.retrying == 0 and stock.poisoned == 1
        assert stock.received >= len(orders) + 10 and stock.processed == len(good)
        assert stock.duplicates >= 10
    finally:
        topology.delete(saga)
