"""One of several drivers of a sharded saga: ``python shard_driver.py URI NAME WORKDIR DRIVER``.

Two sharded steps (stock reserves with a Delta append and emits, shipping ships with a Delta append),
run continuously as driver ``DRIVER`` until the file ``WORKDIR/stop-DRIVER`` appears. The test sets
``SAFEBUNNY_CRASH_AT`` to kill one driver mid-batch. With ``SAFEBUNNY_TEST_GO`` (a file), the driver starts
its session at once but its saga only once that file exists: a standby's session start overlaps the first
driver's. ``SAFEBUNNY_TEST_LEDGER=1`` gives stock a second Delta table (``ledger``, applied before
``reservations``); ``SAFEBUNNY_TEST_BALANCE=0`` runs without handing shards over between drivers. With
``SAFEBUNNY_TEST_CHECKPOINTS`` (a folder), the Spark checkpoints go there (``Saga(checkpoints=...)``).
``SAFEBUNNY_TEST_TABLES`` (a folder holding the Delta tables ``reservations``, ``ledger`` and ``shipments``, made by
the test; the Delta Spark tier) gives the effect tables by name, ``sb_drivers.<table>``, each driver registering
those names on those folders in its own catalog (tests/delta_spark/test_drivers_by_name.py);
``SAFEBUNNY_TEST_DATABASE`` names that database (default ``sb_drivers``). ``SAFEBUNNY_TEST_SAGA_TABLES=1`` keeps the
saga's own inbox by name there too (``SagaSettings(tables=...)``, registered on the folder ``saga_inbox`` made by the
test), and ``SAFEBUNNY_TEST_ROOT`` puts the saga's root there (tests/delta_spark/test_saga_on_volume.py: a volume).
"""

import os
import sys
import time

from driver_session import driver_session  # tests/e2e, the script's own folder

import safebunny

STOCK_SHARDS, SHIPPING_SHARDS = 2, 2  # enough for a takeover and a balance; each shard is a query to start
DATABASE, TABLES = os.environ.get("SAFEBUNNY_TEST_DATABASE", "sb_drivers"), ("reservations", "ledger", "shipments")
SAGA_TABLES = os.environ.get("SAFEBUNNY_TEST_SAGA_TABLES") == "1"


def table(workdir: str, name: str) -> str:
    """Where an effect goes: ``WORKDIR/<name>`` (delta-rs), or ``sb_drivers.<name>`` with ``SAFEBUNNY_TEST_TABLES``."""
    return f"{DATABASE}.{name}" if os.environ.get("SAFEBUNNY_TEST_TABLES") else os.path.join(workdir, name)


def register(spark, tables: str, saga: str) -> None:
    """This driver's names for the Delta tables under ``tables`` (its own catalog, as another cluster's)."""
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {DATABASE} LOCATION '{os.path.join(tables, '_database')}'")
    names = {name: name for name in TABLES}
    if SAGA_TABLES:
        names[f"{saga.replace('-', '_')}_inbox"] = "saga_inbox"
    for name, folder in names.items():
        spark.sql(f"CREATE TABLE IF NOT EXISTS {DATABASE}.{name} USING DELTA LOCATION '{os.path.join(tables, folder)}'")


def define(uri: str, name: str, workdir: str, driver: str | None) -> safebunny.Saga:
    root = os.environ.get("SAFEBUNNY_TEST_ROOT") or os.path.join(workdir, "saga")
    saga = safebunny.Saga(name, uri=uri, root=root, settings=safebunny.SagaSettings(
        retry=safebunny.Retry(delays=("1s",)), batch_size=15, driver=driver,
        checkpoints=os.environ.get("SAFEBUNNY_TEST_CHECKPOINTS"), tables=DATABASE if SAGA_TABLES else None))

    @saga.step("stock", consumes="OrderPlaced", from_node="orders", schema="orderId string",
               produces=["StockReserved"], shards=STOCK_SHARDS)
    def reserve(orders, ctx):
        ok = orders.select("messageId", "orderId")
        effects = [safebunny.append(ok, table(workdir, "reservations"))]
        if os.environ.get("SAFEBUNNY_TEST_LEDGER"):
            effects.append(safebunny.append(ok, table(workdir, "ledger")))
        return safebunny.Outcome(effects=effects, emits=[safebunny.emit(ok, type="StockReserved")])

    add_shipping(saga, workdir, SHIPPING_SHARDS)
    return saga


def add_shipping(saga: safebunny.Saga, workdir: str, shards: int | None = None) -> None:
    """The step that ships what stock reserved: each ``StockReserved`` appended to ``WORKDIR/shipments``."""

    @saga.step("shipping", consumes="StockReserved", from_node="stock", schema="orderId string", shards=shards)
    def ship(reserved, ctx):
        return safebunny.Outcome(effects=[safebunny.append(reserved.select("messageId", "orderId"),
                                                           table(workdir, "shipments"))])


if __name__ == "__main__":
    uri, name, workdir, driver = sys.argv[1:5]
    spark = driver_session(f"safebunny-driver-{driver}")
    if os.environ.get("SAFEBUNNY_TEST_TABLES"):
        register(spark, os.environ["SAFEBUNNY_TEST_TABLES"], name)
    go = os.environ.get("SAFEBUNNY_TEST_GO")
    while go and not os.path.exists(go):
        time.sleep(0.2)
    saga = define(uri, name, workdir, driver)
    running = saga.run(spark, trigger="500 milliseconds", balance=os.environ.get("SAFEBUNNY_TEST_BALANCE") != "0")
    print("RUNNING", flush=True)
    stop = os.path.join(workdir, f"stop-{driver}")
    while not os.path.exists(stop):
        time.sleep(0.5)
    running.stop()
    print("DRIVER-DONE", flush=True)
    spark.stop()
