"""A saga that needs nothing but Unity Catalog: every Delta table by name (``SagaSettings(tables=...)``, Delta Spark
in a Hive catalog whose names outlive a killed driver) and its root on a FUSE folder under /Volumes that behaves as a
volume (the ``volume`` fixture, tests/volume_mount.py: rename ENOSYS, hard link EPERM, no append), Spark's
checkpoints on local disk. The drivers are those of the other crash tests (tests/e2e/saga_crash_driver.py,
step_crash_driver.py through random_kills.py) and the demo's own entry point; each ends exactly once, and the
mount's log shows that nothing tried a rename, a link or an append there."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "e2e"))

import random_kills  # noqa: E402
from shard_driver import TABLES, define  # noqa: E402
from test_drivers_by_name import CRASH_AT, _create_tables, _orders  # noqa: E402
from test_saga_drivers import _driver, _log, _shard_queues, _standby_then_orders, _stop  # noqa: E402

import safebunny  # noqa: E402
from helpers import queue_totals, wait_until  # noqa: E402
from safebunny.demo.main import main as demo  # noqa: E402
from safebunny.exactly_once.inbox.table import INBOX_SCHEMA, PARTITIONS  # noqa: E402
from safebunny.saga.run.drain import waiting  # noqa: E402

DRIVER = Path(__file__).parents[1] / "e2e" / "saga_crash_driver.py"
ORDERS = 30  # three batches of 10 a step


def _saga_run(uri, name, workdir, state, schema, *extra, crash_at=None, checkpoints="checkpoints"):
    env = {k: v for k, v in os.environ.items() if k != "SAFEBUNNY_CRASH_AT"}
    env.update(SAFEBUNNY_TEST_STATE=str(state), SAFEBUNNY_TEST_SCHEMA=schema,
               SAFEBUNNY_TEST_METASTORE=str(workdir / "metastore"),
               SAFEBUNNY_TEST_CHECKPOINTS=str(workdir / checkpoints), SAFEBUNNY_TEST_ORDERS=str(ORDERS))
    if crash_at:
        env["SAFEBUNNY_CRASH_AT"] = crash_at
    return subprocess.run([sys.executable, str(DRIVER), uri, name, str(workdir), *extra], env=env, cwd=str(workdir),
                          capture_output=True, text=True, timeout=600, start_new_session=True)


def _tail(run) -> str:  # type: ignore[no-untyped-def]
    lines = [ln for ln in run.stderr.splitlines() if not ln.strip().startswith("at ")]
    return "\n".join(lines[-40:])


def test_a_saga_by_name_with_its_root_on_a_volume_killed_twice_applies_each_order_once(spark, amqp_uri, volume,
                                                                                      tmp_path):
    """Killed after a batch's effects and before its marker; started again from the same checkpoint and killed
    there the same way; then from a new checkpoint (a new epoch) to the end: each order reserved and shipped once.
    Nothing of the saga's own was written outside the volume and the catalog's warehouse but Spark's checkpoints,
    and the volume saw no rename, hard link or append, and no delta-rs table."""
    name = f"sbt-volume-{uuid.uuid4().hex[:8]}"
    state, schema = volume.path / name, f"sb_volume_{uuid.uuid4().hex[:8]}"
    shape = safebunny.Saga(name, uri=amqp_uri, root=f"{state}/saga", settings=safebunny.SagaSettings(tables=schema))
    shape.step("stock", consumes="OrderPlaced", from_node="orders", schema="orderId string")(lambda d, c: None)
    shape.step("shipping", consumes="StockReserved", from_node="stock", schema="orderId string")(lambda d, c: None)
    try:
        first = _saga_run(amqp_uri, name, tmp_path, state, schema, "start", crash_at="step.after_effects:3")
        assert first.returncode == -signal.SIGKILL, _tail(first)
        again = _saga_run(amqp_uri, name, tmp_path, state, schema, crash_at="step.after_effects:2")
        assert again.returncode == -signal.SIGKILL, _tail(again)
        last = _saga_run(amqp_uri, name, tmp_path, state, schema, checkpoints="checkpoints-new")
        assert last.returncode == 0 and "DRIVER-DONE" in last.stdout, _tail(last)

        warehouse = tmp_path / "metastore" / "warehouse" / f"{schema}.db"
        want = sorted(f"o{i}" for i in range(ORDERS))
        for table in ("reservations", "shipments"):
            got = [r.orderId for r in spark.read.format("delta").load(str(warehouse / table)).collect()]
            assert sorted(got) == want, f"{table}: each order exactly once"
        assert waiting(shape) == 0
        saga_tables = sorted(p.name for p in warehouse.iterdir() if p.name.startswith(name.replace("-", "_")))
        assert saga_tables == [f"{name.replace('-', '_')}_{t}" for t in ("inbox", "inbox_decisions", "started")], \
            saga_tables  # the fenced decisions and parkings beside the inbox, by name too

        assert volume.refused() == [], "a rename, link or append on the volume"
        on_volume = [p for p in (volume.backing / name).rglob("*")]
        assert not [p for p in on_volume if p.name == "_delta_log"], "no delta-rs table on the volume"
        assert {"journal", "status", "state"} <= {p.name for p in (volume.backing / name / "saga").iterdir()}
        local = sorted(p.name for p in tmp_path.iterdir())
        assert local == ["checkpoints", "checkpoints-new", "metastore"], f"on local disk: {local}"
    finally:
        safebunny.topology.delete(shape)


def test_random_kills_of_a_step_by_name_with_its_state_on_a_volume_end_exactly_once(spark, broker, amqp_uri,
                                                                                      volume, tmp_path):
    """tests/delta_spark/test_random_kills_by_name.py's kills, the step's claims, outcome logs and journal on the
    volume (``StepSettings(state=...)``), its inbox and effect table by name, the last run from a new checkpoint."""
    from step_crash_driver import by_name_database

    metastore, state = tmp_path / "metastore", volume.path / f"step-{uuid.uuid4().hex[:8]}"
    table = metastore / "warehouse" / f"{by_name_database(str(tmp_path))}.db" / "effects"

    def effect_ids(_workdir: Path) -> list[str]:
        return [r.messageId for r in spark.read.format("delta").load(str(table)).select("messageId").collect()]

    result = random_kills.run(amqp_uri, 100, 2, tmp_path, batch=50, seed=11, log=print, replace_every=2,
                              totals=lambda q: queue_totals(broker, q), effect_ids=effect_ids,
                              env={"SAFEBUNNY_TEST_BY_NAME": "1", "SAFEBUNNY_TEST_METASTORE": str(metastore),
                                   "SAFEBUNNY_TEST_STATE_ROOT": str(state)})
    assert result["effect_rows"] == 100 and result["distinct_emitted"] == 100
    assert not list((state / "state" / "_claims").rglob("*.json")), "every claim retired"
    assert volume.refused() == [], "a rename, link or append on the volume"


def test_the_demo_runs_with_its_tables_by_name_and_its_files_on_a_volume(spark, amqp_uri, volume, database,
                                                                         tmp_path, unique_name, monkeypatch, capsys):
    """``python -m safebunny.demo --dir <volume> --tables <schema> --checkpoints <local>``, in this session (it has
    Delta): its own checks pass (every order shipped, compensated or parked once, nobody charged twice)."""
    monkeypatch.setenv("SAFEBUNNY_DEMO_URI", amqp_uri)
    work = volume.path / f"demo-{uuid.uuid4().hex[:8]}"
    rc = demo(["--orders", "60", "--declined", "0.1", "--malformed", "0.05", "--duplicates", "0.1", "--dir", str(work),
               "--tables", database, "--checkpoints", str(tmp_path / "checkpoints"), "--name", unique_name,
               "--no-bar"], spark=spark)
    out = capsys.readouterr().out
    assert rc == 0 and "checks: all passed" in out, out
    assert spark.table(f"{database}.{unique_name.replace('-', '_')}_inbox").count() > 0
    assert volume.refused() == [], "a rename, link or append on the volume"


def test_a_standby_driver_takes_over_a_killed_ones_shards_with_the_saga_by_name_on_a_volume(spark, amqp_uri, volume,
                                                                                            tmp_path):
    """tests/delta_spark/test_drivers_by_name.py's takeover with the saga's own inbox by name too and its root (the
    drivers' leases, claims, journals, reports) on the volume: each driver registers the names on the same folders in
    its own catalog; the one holding every shard is killed after one of a batch's two effect commits, the standby
    takes its shards over, and each order lands once in each table."""
    name = f"sbt-vdrivers-{uuid.uuid4().hex[:8]}"
    database = f"sb_vdrivers_{uuid.uuid4().hex[:8]}"
    saga = define(amqp_uri, name, str(tmp_path), None)  # the shape, to publish and inspect
    shards = _shard_queues(saga)
    tables = _create_tables(spark, tmp_path / "tables")
    spark.createDataFrame(INBOX_SCHEMA.empty_table()).write.format("delta").partitionBy(*PARTITIONS).save(
        str(tables / "saga_inbox"))
    by_name = {"SAFEBUNNY_TEST_TABLES": str(tables), "SAFEBUNNY_TEST_LEDGER": "1", "cwd": tmp_path,
               "SAFEBUNNY_TEST_DATABASE": database, "SAFEBUNNY_TEST_SAGA_TABLES": "1",
               "SAFEBUNNY_TEST_ROOT": str(volume.path / name), "SAFEBUNNY_TEST_CHECKPOINTS": str(tmp_path / "ck")}
    first = second = None
    try:
        first = _driver(amqp_uri, name, tmp_path, "a", crash_at=CRASH_AT, **by_name)
        second = _standby_then_orders(spark, amqp_uri, name, tmp_path, saga, shards, 40, **by_name)
        first.wait(timeout=240)
        assert first.returncode == -signal.SIGKILL, _log(tmp_path, "a")
        wait_until(lambda: len(_orders(spark, tables, "shipments")) >= 40, timeout=240, every=1,
                   what="driver b to finish the saga")
        time.sleep(3)  # a second copy would land within a few triggers
        want = sorted(f"o{i}" for i in range(40))
        for table in TABLES:
            assert sorted(_orders(spark, tables, table)) == want, f"each order once in {table}"
        assert "were applied by another batch" in (tmp_path / "driver-b.log").read_text(errors="replace"), \
            _log(tmp_path, "b")
        inbox = spark.read.format("delta").load(str(tables / "saga_inbox"))
        assert inbox.where("node = 'shipping' AND status = 'done'").count() == 40
        assert (volume.backing / name / "drivers" / "_leases").is_dir(), "the drivers' leases on the volume"
        assert volume.refused() == [], "a rename, link or append on the volume"
    finally:
        _stop(tmp_path, [(first, "a"), (second, "b")])
        safebunny.topology.delete(saga)
