"""Issue 48, item 3: a parked order is parked for good, even when the driver dies on the failure-routing path and
the service is back when its message comes again.

Forty orders; while the stock service is down every fifth fails with an error type in ``Retry(poison_on=...)``,
so the stock step parks it at once and its ``fails_as`` message runs the release compensation. The driver is
killed on the failure-routing path (after the parking was recorded, before the copies; or after the poison
copies and ``fails_as`` messages were confirmed, before the inbox marker), the service comes back, and the
driver restarts from the same checkpoint or a new one (a new epoch: the stock batch's messages, never acked, come
back to a batch that has no record of them but the parking). Each parked order must end parked and released
once, never reserved or shipped; each other order reserved and shipped once. Before the parking was recorded
ahead of its copies, the new-checkpoint case shipped and released all eight parked orders."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import safebunny
from safebunny.delta.delta_rs import DeltaRsTarget
from safebunny.saga.define import topology
from safebunny.saga.run.drain import waiting

pytestmark = pytest.mark.xdist_group("drivers")  # tests/xdist_units.py: drivers of their own

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from saga_parking_driver import ORDERS, define  # noqa: E402


def _run(uri, name, workdir, checkpoints, *extra, crash_at=None):
    env = {k: v for k, v in os.environ.items() if k not in ("SAFEBUNNY_CRASH_AT", "SAFEBUNNY_FAIL_AT")}
    if crash_at:
        env["SAFEBUNNY_CRASH_AT"] = crash_at
    return subprocess.run([sys.executable, str(HERE / "saga_parking_driver.py"), uri, name, str(workdir),
                           checkpoints, *extra], env=env, cwd=str(HERE), capture_output=True, text=True,
                          timeout=600, start_new_session=True)


def _why(stderr):
    lines = [ln for ln in stderr.splitlines()
             if ("Error" in ln or "Exception" in ln) and not ln.strip().startswith("at ")]
    return "\n".join(lines[:25]) or stderr[-3000:]


def _orders(path):
    table = DeltaRsTarget(str(path)).read()
    return [] if table is None else sorted(table.column("orderId").to_pylist())


@pytest.mark.parametrize(("crash_at", "checkpoints"), [("saga.after_failure_copies", "ck-new"),
                                                       ("saga.after_failure_copies", "ck"),
                                                       ("saga.after_parked_ids", "ck-new")])
def test_a_parked_order_stays_parked_after_a_kill_on_the_failure_path_and_a_recovered_service(
        amqp_uri, tmp_path, crash_at, checkpoints):
    name = f"sbt-park-{uuid.uuid4().hex[:8]}"
    saga = define(amqp_uri, name, str(tmp_path), "ck")
    down = tmp_path / "service-down"
    try:
        down.touch()
        crashed = _run(amqp_uri, name, tmp_path, "ck", "start", crash_at=crash_at)
        assert crashed.returncode == -signal.SIGKILL, _why(crashed.stderr)
        down.unlink()  # the service is back
        finished = _run(amqp_uri, name, tmp_path, checkpoints)
        assert finished.returncode == 0 and "DRIVER-DONE" in finished.stdout, _why(finished.stderr)
        parked = sorted(f"o{i}" for i in range(0, ORDERS, 5))
        others = sorted(f"o{i}" for i in range(ORDERS) if i % 5)
        assert _orders(tmp_path / "shipments") == others, "parked orders must not ship; the others ship once"
        assert _orders(tmp_path / "reservations") == others
        assert _orders(tmp_path / "releases") == parked, "each parked order released once"
        poisoned = {p.correlationId for p in saga.poison_rows("stock", "OrderPlaced")}
        assert poisoned == {safebunny.correlation_id_for(o) for o in parked}
        assert waiting(saga) == 0
    finally:
        topology.delete(saga)
