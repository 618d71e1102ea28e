"""A saga whose effect tables are given by name on real Delta Spark (issue 47, item 2): stock appends each order to
one table and merges it into another, shipping appends it to a third; each order once in each, and the saga's
``status`` and ``instances`` (which read the broker, the batches' counters, the inbox and the started table, never
the effect tables) report every instance completed and nothing left."""

from __future__ import annotations

import uuid

import safebunny

ORDERS = 30


def test_a_saga_with_effect_tables_by_name_applies_each_order_once_and_reports_it(spark, amqp_uri, database,
                                                                                   tmp_path):
    name = f"sbt-{uuid.uuid4().hex[:8]}"
    saga = safebunny.Saga(name, uri=amqp_uri, root=str(tmp_path / "saga"),
                          settings=safebunny.SagaSettings(batch_size=12))
    ledger, stock, shipments = f"{database}.ledger", f"{database}.stock", f"{database}.shipments"

    @saga.step("stock", consumes="OrderPlaced", from_node="orders", schema="orderId string, qty int",
               produces=["StockReserved"])
    def reserve(orders, ctx):
        ok = orders.select("messageId", "orderId", "qty")
        return safebunny.Outcome(effects=[safebunny.append(ok, ledger), safebunny.merge(ok, stock, on=["orderId"])],
                                 emits=[safebunny.emit(ok.select("messageId", "orderId"), type="StockReserved")])

    @saga.step("shipping", consumes="StockReserved", from_node="stock", schema="orderId string")
    def ship(reserved, ctx):
        return safebunny.Outcome(effects=[safebunny.append(reserved.select("messageId", "orderId"), shipments)])

    try:
        orders = spark.createDataFrame([(f"o{i}", 1 + i % 3) for i in range(ORDERS)], "orderId string, qty int")
        saga.start(orders, node="orders", type="OrderPlaced", business_key="orderId")
        saga.start(orders.limit(5), node="orders", type="OrderPlaced", business_key="orderId")  # started twice
        saga.drain(spark, timeout=300)
        want = sorted(f"o{i}" for i in range(ORDERS))
        for table in (ledger, stock, shipments):
            assert sorted(r.orderId for r in spark.table(table).collect()) == want, table
        merges = [r.operationMetrics for r in spark.sql(f"DESCRIBE HISTORY {stock}").collect()
                  if r.operation == "MERGE"]
        assert sum(int(m["numTargetRowsUpdated"]) for m in merges) == 0, "no order merged twice"

        status = {(s.node, s.type): s for s in saga.status()}
        assert status[("stock", "OrderPlaced")].duplicates == 5
        assert all(s.backlog == 0 and s.retrying == 0 and s.parked == 0 for s in status.values()), status
        rows = saga.instances(spark).collect()
        assert len(rows) == ORDERS and {r.state for r in rows} == {"completed"}, rows[:3]
        assert sorted(r.businessKey for r in rows) == want
    finally:
        safebunny.topology.delete(saga)
