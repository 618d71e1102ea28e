"""A saga driver for the crash test: ``python saga_crash_driver.py URI NAME WORKDIR [start]``.

Two steps (stock reserves, shipping ships), each with a Delta effect; ``start`` publishes 120 orders
(``SAFEBUNNY_TEST_ORDERS``), three batches a step, first. Then ``saga.drain``. The test sets
``SAFEBUNNY_CRASH_AT`` to kill the whole driver mid-saga.
``SAFEBUNNY_TEST_STATE`` (a URI, e.g. ``s3://bucket/run``) puts the saga's root and the effect tables there
instead of WORKDIR; Spark's checkpoints stay under WORKDIR (``Saga(checkpoints=...)``), or in
``SAFEBUNNY_TEST_CHECKPOINTS``. ``SAFEBUNNY_TEST_SCHEMA`` (the Delta Spark tier) keeps every Delta table by name in
that schema, the saga's (``SagaSettings(tables=...)``) and the effect tables, so the root holds plain files only
(tests/delta_spark/test_saga_on_volume.py puts it on a FUSE volume).
"""

import os
import sys

from driver_session import driver_session  # tests/e2e, the script's own folder

import safebunny

uri, name, workdir = sys.argv[1:4]
spark = driver_session("safebunny-saga-crash")
print("MASTER", spark.sparkContext.master, flush=True)
# SAFEBUNNY_TEST_EXECUTOR_PUBLISH_ROWS: a batch with more emits than this publishes them from the executors,
# about 20 per task
executor_rows = int(os.environ.get("SAFEBUNNY_TEST_EXECUTOR_PUBLISH_ROWS", "0")) or None
state = os.environ.get("SAFEBUNNY_TEST_STATE") or workdir
schema = os.environ.get("SAFEBUNNY_TEST_SCHEMA") or None
orders_n = int(os.environ.get("SAFEBUNNY_TEST_ORDERS", "120"))  # a batch holds a third of them
if schema:
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {schema}")
saga = safebunny.Saga(name, uri=uri, root=f"{state}/saga", settings=safebunny.SagaSettings(
    retry=safebunny.Retry(delays=("1s",)), batch_size=max(1, orders_n // 3), executor_publish_rows=executor_rows,
    executor_partition_rows=20, tables=schema,
    checkpoints=os.environ.get("SAFEBUNNY_TEST_CHECKPOINTS") or os.path.join(workdir, "checkpoints")))


def table(name):
    return f"{schema}.{name}" if schema else f"{state}/{name}"


@saga.step("stock", consumes="OrderPlaced", from_node="orders", schema="orderId string, qty int",
           produces=["StockReserved"])
def reserve(orders, ctx):
    ok = orders.select("messageId", "orderId", "qty")
    return safebunny.Outcome(effects=[safebunny.append(ok, table("reservations"))],
                             emits=[safebunny.emit(ok, type="StockReserved")])


@saga.step("shipping", consumes="StockReserved", from_node="stock", schema="orderId string")
def ship(reserved, ctx):
    return safebunny.Outcome(effects=[safebunny.append(reserved.select("messageId", "orderId"),
                                                       table("shipments"))])


if sys.argv[4:] == ["start"]:
    orders = spark.createDataFrame([(f"o{i}", 1 + i % 3) for i in range(orders_n)], "orderId string, qty int")
    saga.start(orders, node="orders", type="OrderPlaced", business_key="orderId")
saga.drain(spark, timeout=300)
published = {(r.published_from, r.publish_partitions) for s in saga.steps for r in saga.reports_of(s)}
print("PUBLISHED-FROM", sorted(p for p in published if p[0]), flush=True)
print("DRIVER-DONE", flush=True)
spark.stop()
