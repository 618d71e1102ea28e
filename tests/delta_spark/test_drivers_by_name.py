"""Two driver processes run one sharded saga whose effect tables are given by name (Delta Spark): the driver holding
every shard is killed in the middle of a batch (after one of stock's two effect commits, before its publish and inbox
marker), and the standby takes its shards over; each effect ends exactly once. The equivalent of
tests/e2e/test_saga_drivers.py's standby test, with tests/e2e/shard_driver.py's steps writing ``sb_drivers.ledger``,
``sb_drivers.reservations`` and ``sb_drivers.shipments``.

How two live drivers name the same tables: each has its own catalog, Spark's in-memory one, in which it registers
the three names on the Delta tables the test made at paths (``CREATE TABLE IF NOT EXISTS ... USING DELTA LOCATION``),
as two clusters registering the same storage. Everything safebunny does with those tables goes through the name:
the appends (``saveAsTable`` with the step's lock as ``txnAppId``/``txnVersion``) and ``DESCRIBE HISTORY``, which the
standby reads to learn which of the killed batch's ids it applied where. The drivers cannot share the crash tests'
Hive catalog: an embedded Derby database is booted by one JVM at a time (Derby's XSDB6 for the second), and a Derby
network server would be machinery of the test only. What a shared catalog would add (a name created by
one driver seen by the other) is not what the takeover depends on: the fence rests on the table's log and history,
which both drivers read and write through their names here. The saga's own inbox is a delta-rs table under its root
(a saga has no inbox by name; docs/databricks.md, "Where each kind of state goes"): the steps' inbox by name is
tested in tests/delta_spark/test_step_by_name.py, the crash matrix and the random kills."""

from __future__ import annotations

import signal
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "e2e"))

from shard_driver import SHIPPING_SHARDS, STOCK_SHARDS, TABLES, define  # noqa: E402
from test_saga_drivers import _driver, _log, _shard_queues, _standby_then_orders, _stop  # noqa: E402

from helpers import wait_until  # noqa: E402
from safebunny.saga.define import topology  # noqa: E402

ORDERS = 60
CRASH_AT = "step.after_one_effect:3"  # the third effect commit of driver a: a batch with its ledger or both in


def _create_tables(spark, tables: Path) -> Path:
    """The effect tables at their paths, made once here (two drivers creating a name at once would race)."""
    for table in TABLES:
        spark.sql(f"CREATE TABLE delta.`{tables / table}` (messageId STRING, orderId STRING) USING DELTA")
    return tables


def _orders(spark, tables: Path, table: str) -> list[str]:
    return [r.orderId for r in spark.read.format("delta").load(str(tables / table)).select("orderId").collect()]


def test_a_standby_driver_takes_over_the_shards_of_a_killed_one_on_tables_by_name_exactly_once(spark, amqp_uri,
                                                                                                tmp_path):
    name = f"sbt-drivers-{uuid.uuid4().hex[:8]}"
    saga = define(amqp_uri, name, str(tmp_path), None)  # the shape, to publish and inspect
    shards = _shard_queues(saga)
    tables = _create_tables(spark, tmp_path / "tables")
    # cwd: a session's in-memory catalog makes its warehouse folder (spark-warehouse) there
    by_name = {"SAFEBUNNY_TEST_TABLES": str(tables), "SAFEBUNNY_TEST_LEDGER": "1", "cwd": tmp_path}
    first = second = None
    try:
        first = _driver(amqp_uri, name, tmp_path, "a", crash_at=CRASH_AT, **by_name)
        second = _standby_then_orders(spark, amqp_uri, name, tmp_path, saga, shards, ORDERS, **by_name)
        first.wait(timeout=240)
        died = time.monotonic()
        assert first.returncode == -signal.SIGKILL, _log(tmp_path, "a")
        assert _orders(spark, tables, "ledger"), "driver a applied effects before it died"
        want = sorted(f"o{i}" for i in range(ORDERS))
        wait_until(lambda: len(_orders(spark, tables, "shipments")) >= ORDERS, timeout=240, every=1,
                   what="driver b to finish the saga")
        print(f"driver b finished the orders {time.monotonic() - died:.1f} s after driver a died")
        time.sleep(3)  # a second copy would land within a few triggers
        for table in TABLES:
            assert sorted(_orders(spark, tables, table)) == want, f"each order once in sb_drivers.{table}"
        # b met the killed batch's claim and read in the history (by name) which ids it had applied where
        assert "were applied by another batch" in (tmp_path / "driver-b.log").read_text(errors="replace"), \
            _log(tmp_path, "b")
        depths = topology.depths(saga, shards)
        assert [d[0] for d in depths.values()] == [0] * len(shards)
        assert [d[1] for d in depths.values()] == [1] * len(shards), "every shard held by driver b"
        assert second.poll() is None, _log(tmp_path, "b")
        held = saga.shards()
        assert [(s.step, s.shard, s.held, s.backlog) for s in held] == (
            [("stock.OrderPlaced", i, True, 0) for i in range(STOCK_SHARDS)]
            + [("shipping.StockReserved", i, True, 0) for i in range(SHIPPING_SHARDS)])
    finally:
        _stop(tmp_path, [(first, "a"), (second, "b")])
        topology.delete(saga)
