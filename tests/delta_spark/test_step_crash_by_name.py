"""kill -9 of the whole driver inside a batch of a step whose inbox and effect tables are given by name (Delta Spark,
a Hive catalog that outlives the driver), then a restart from the same checkpoint or from a new one (a new epoch):
exactly one effect row per input, one merge row per input written by the epoch the claims say, every output
published, every claim retired. The machinery is tests/e2e/test_step_crash.py's, with ``by_name`` scenarios in two
lanes, each with a Derby metastore of its own: a lane's drivers (its crashes, then one driver restarting them) run one
after another, the two lanes side by side.

The restarts after a kill inside a batch spell every table ``spark_catalog.<database>.<table>`` where the crashed
driver wrote ``<database>.<table>`` (one table, a second spelling: the effects' app ids and the fence's lock must not
change with it); the restarts after a create cut short keep the first spelling, so both are restarted from."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "e2e"))

from step_crash_driver import by_name_database  # noqa: E402
from test_step_crash import N, _kill_matrices  # noqa: E402

import safebunny  # noqa: E402
from helpers import queue_totals, wait_until  # noqa: E402

SAME = ["step.after_effects:2", "step.after_inbox:2"]
# (kill point in the second batch, ledger rows the new epoch writes), as in tests/e2e/test_step_crash.py
NEW = [("step.after_claim:2", 100), ("step.after_one_effect:3", 100), ("step.after_effects:2", 50)]


# A create by name cut short: the driver killed the moment a table's first log file lands in its location, before
# the catalog has the name; the restart (same checkpoint, or a new one) takes that log over instead of being refused
# for good. The append target, the merge target and the inbox, each with the restart that is hardest for it.
CREATES = [("create.effects", "effects", {}), ("create.ledger", "ledger", {"checkpoint": "ck-new"}),
           ("create.inbox", "inbox", {}), ("create.inbox-new", "inbox", {"checkpoint": "ck-new"})]


@pytest.fixture(scope="module")
def matrices(broker, amqp_uri, tmp_path_factory):
    # two Hive catalogs (tests/e2e/driver_session.py), one per lane: Derby opens in one JVM at a time, so the
    # drivers of one run one after another and the two lanes side by side
    metastores = [tmp_path_factory.mktemp("metastore") for _ in range(2)]
    both = {"by_name": True, "effects": "both", "journal": "journal"}
    same = [(crash_at, both) for crash_at in SAME]
    # outcomes not recorded: each ledger row's epoch says which epoch merged it (as in tests/e2e/test_step_crash.py)
    new = [(crash_at, {**both, "record": False}) for crash_at, _ in NEW]
    matrices = {"same": (same, {"qualified": True}), "new": (new, {"checkpoint": "ck-new", "qualified": True})}
    matrices.update({label: ([(label, {**both, "kill_on_create": table})], restart)
                     for label, table, restart in CREATES})
    for runs, finished in _kill_matrices(amqp_uri, tmp_path_factory, matrices, metastores=metastores):
        yield runs, finished, metastores


def _rows(spark, metastores, workdir, table):
    """A by-name scenario's table, read by its path in the warehouse of the metastore its drivers had."""
    found = [m / "warehouse" / f"{by_name_database(str(workdir))}.db" / table for m in metastores]
    found = [path for path in found if path.exists()]
    assert len(found) == 1, found
    return spark.read.format("delta").load(str(found[0])).collect()


def _check(spark, broker, admin, metastores, queue, out, workdir):
    ids = [f"m{i}" for i in range(N)]
    assert sorted(r.messageId for r in _rows(spark, metastores, workdir, "effects")) == sorted(ids)
    got = {p.message_id for _, p, _ in admin.get_all(out)}
    assert got == {safebunny.message_id(i, "billing", "InvoiceRequested", 0) for i in ids}
    wait_until(lambda: queue_totals(broker, queue) == (0, 0), what="the queue empty and nothing unacked")
    assert not list((workdir / "state" / "_claims").rglob("*.json")), "every claim retired"
    return ids


@pytest.mark.parametrize("crash_at", SAME)
def test_a_step_by_name_killed_then_restarted_from_its_checkpoint_under_a_second_spelling_ends_exactly_once(
        spark, broker, admin, matrices, crash_at):
    """Killed after a batch's effects or after its marker; the restart from the
    same checkpoint names the same tables spark_catalog.<database>.<table>: each effect once, in both tables."""
    runs, finished, metastores = matrices
    queue, out, workdir, crashed = runs["same", crash_at]
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    assert f"DRIVER-DONE {workdir}\n" in finished.stdout, finished.stderr[-3000:]
    ids = _check(spark, broker, admin, metastores, queue, out, workdir)
    assert sorted(r.messageId for r in _rows(spark, metastores, workdir, "ledger")) == sorted(ids)


@pytest.mark.parametrize("crash_at,merged_by_new_epoch", NEW)
def test_a_step_by_name_killed_then_run_from_a_new_checkpoint_under_a_second_spelling_applies_each_effect_once(
        spark, broker, admin, matrices, crash_at, merged_by_new_epoch):
    """The new epoch (its tables spelled spark_catalog.<database>.<table>) reads the dead batch's claim and asks each
    table's history (DESCRIBE HISTORY, the commits' userMetadata) whether that batch applied there: the append holds
    each message once, and the merge's rows say which epoch wrote them."""
    runs, finished, metastores = matrices
    queue, out, workdir, crashed = runs["new", crash_at]
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    assert f"DRIVER-DONE {workdir}\n" in finished.stdout, finished.stderr[-3000:]
    old_epoch = json.loads((workdir / "ck" / "metadata").read_text())["id"]
    ids = _check(spark, broker, admin, metastores, queue, out, workdir)
    ledger = _rows(spark, metastores, workdir, "ledger")
    assert sorted(r.messageId for r in ledger) == sorted(ids)
    assert sum(r.epoch != old_epoch for r in ledger) == merged_by_new_epoch


@pytest.mark.parametrize("label,table,restart", CREATES)
def test_a_create_by_name_cut_short_by_a_kill_is_taken_over_by_the_restart(spark, broker, admin, matrices, label,
                                                                          table, restart):
    runs, finished, metastores = matrices
    queue, out, workdir, crashed = runs[label, label]
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    assert f"DRIVER-DONE {workdir}\n" in finished.stdout, finished.stderr[-3000:]
    database = by_name_database(str(workdir))
    # the kill fell between the log and the name, and the restart registered that log (delta/spark_create.py)
    assert f"{database}.{table}' does not exist by name" in finished.stderr, finished.stderr[-3000:]
    ids = _check(spark, broker, admin, metastores, queue, out, workdir)
    assert sorted(r.messageId for r in _rows(spark, metastores, workdir, "ledger")) == sorted(ids)
