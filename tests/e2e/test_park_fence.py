"""Issue 58, item 1: a parking is fenced. Two live batches on one message, one parking it and one applying it, end
with the message in one branch: applied (reserved and shipped once), or parked with its compensation (released
once), never both.

Two driver processes run one saga whose steps each have one shard (``park_fence_driver.py``). Driver a's stock
service is down: its first stock batch fails every order with ``ServiceDown``, an error type in
``Retry(poison_on=...)``, so it parks them and sends their ``StockFailed`` compensations. That batch stalls (the
stall hook, :mod:`safebunny.crashpoints`) after its effects (its parkings decided; before this change, not yet
recorded), or before it commits its decisions; its consumer connection is closed, so the broker gives the orders to
driver b, the standby, whose service answers. Once b has taken every order one way, a resumes. Before this change,
the stall after the effects ended with every order reserved and shipped by b *and* released by a."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from helpers import wait_until
from safebunny.delta.delta_rs import DeltaRsTarget
from safebunny.saga.define import topology

pytestmark = pytest.mark.xdist_group("drivers")  # tests/xdist_units.py: drivers of their own

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from park_fence_driver import define  # noqa: E402
from test_saga_drivers import _close_active_consumers, _consumers, _full_log, _log, _stop  # noqa: E402

ORDERS = 12


def _driver(uri, name, workdir, driver, **env):
    environ = {k: v for k, v in os.environ.items() if k not in ("SAFEBUNNY_CRASH_AT", "SAFEBUNNY_FAIL_AT",
                                                                 "SAFEBUNNY_STALL_AT")}
    out = open(workdir / f"driver-{driver}.log", "w")  # noqa: SIM115 - the process writes it until it ends
    return subprocess.Popen([sys.executable, str(HERE / "park_fence_driver.py"), uri, name, str(workdir), driver],
                            env={**environ, **env}, cwd=str(HERE), stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True)


def _orders(path):
    table = DeltaRsTarget(str(path)).read()
    return [] if table is None else table.column("orderId").to_pylist()


def _wait(workdir, condition, what, timeout=420, every=1.0):
    """``wait_until``, failing with both drivers' logs (this machine is shared: a driver may start slowly)."""
    try:
        wait_until(condition, timeout=timeout, every=every, what=what)
    except AssertionError as exc:
        logs = "\n".join(f"--- driver {d}:\n{_log(workdir, d)}" for d in "ab" if (workdir / f"driver-{d}.log").exists())
        raise AssertionError(f"{exc}\n{logs}") from None


def _commits(checkpoint: Path) -> int:
    folder = checkpoint / "commits"
    return len([p for p in folder.iterdir() if not p.name.startswith(".")]) if folder.exists() else 0


@pytest.mark.parametrize("stall_at", ["step.after_effects", "step.before_decisions"])
def test_a_batch_parking_an_order_while_the_new_holder_applies_it_ends_in_one_branch(spark, broker, amqp_uri,
                                                                                    tmp_path, stall_at):
    if broker.ctl is None:
        pytest.skip("closing a connection needs rabbitmqctl for the test broker")
    name = f"sbt-parkfence-{uuid.uuid4().hex[:8]}"
    saga = define(amqp_uri, name, str(tmp_path), None)
    queues = [topology.consumer_queue(saga, s.node, s.consumes, 0) for s in saga.steps]
    stock = queues[:1]
    stock_a = define(amqp_uri, name, str(tmp_path), "a").steps[0].units()[0]
    checkpoint_a = Path(define(amqp_uri, name, str(tmp_path), "a").config.layout.checkpoint(stock_a.unit_label))
    down, stall, go = tmp_path / "service-down-a", tmp_path / "stall-a", tmp_path / "go-b"
    down.touch()
    stall.mkdir()
    first = second = None
    try:
        first = _driver(amqp_uri, name, tmp_path, "a", SAFEBUNNY_STALL_AT=stall_at, SAFEBUNNY_STALL_DIR=str(stall),
                        SAFEBUNNY_TEST_DOWN=str(down))
        _wait(tmp_path, lambda: min(_consumers(saga, queues)) >= 1, "driver a holds every shard")
        second = _driver(amqp_uri, name, tmp_path, "b", SAFEBUNNY_TEST_GO=str(go))
        go.touch()
        _wait(tmp_path, lambda: "RUNNING" in _full_log(tmp_path, "b"), "driver b running")
        time.sleep(5)  # b's consumers attach at their first trigger (waiting ones are not counted)
        saga.start(spark.createDataFrame([(f"o{i}",) for i in range(ORDERS)], "orderId string"), node="orders",
                   type="OrderPlaced", business_key="orderId")
        _wait(tmp_path, lambda: (stall / "stalled").exists(), "driver a's batch stalled")
        stalled_at = _commits(checkpoint_a)
        assert _close_active_consumers(broker, stock), "driver a's stock consumer found"
        want = sorted(f"o{i}" for i in range(ORDERS))
        _wait(tmp_path, lambda: sorted(set(_orders(tmp_path / "shipments")) | set(_orders(tmp_path / "releases")))
              == want, "driver b took every order one way")
        (stall / "release").touch()
        _wait(tmp_path, lambda: _commits(checkpoint_a) > stalled_at, "driver a's stalled batch to end", 240)
        down.unlink()
        time.sleep(5)  # a compensation a's batch sent would be released within a few triggers
        reserved, shipped, released = (Counter(_orders(tmp_path / t)) for t in ("reservations", "shipments",
                                                                                 "releases"))
        both = sorted(set(shipped) & set(released))
        assert not both, f"{len(both)} order(s) shipped and released: {both}\n{_log(tmp_path, 'a')}"
        for order in want:
            branch = (reserved[order], shipped[order], released[order])
            assert branch in ((1, 1, 0), (0, 0, 1)), f"{order}: reserved, shipped, released {branch}"
        parked = {p.correlationId for p in saga.poison_rows("stock", "OrderPlaced")}
        assert len(parked) == len(released), "each released order is in the poison queue"
        assert first.poll() is None and second.poll() is None, _log(tmp_path, "a")
    finally:
        _stop(tmp_path, [(first, "a"), (second, "b")])
        topology.delete(saga)
