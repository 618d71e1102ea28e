"""A saga on ``local-cluster[2,1,1024]``: executors in their own JVMs and Python workers, as on a cluster
(``local[2]`` runs every task in the driver's JVM). ``saga.start`` publishes through the sink on the
executors, each step's source serves its journal to them, the steps apply effects and emit (stock's batches
of 40 from the executors, over a threshold of 10); the driver is
killed mid-drain (``kill -9`` of its process group) and started again: each effect exactly once."""

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import safebunny
from safebunny.delta.delta_rs import DeltaRsTarget
from safebunny.saga.run.drain import waiting

pytestmark = pytest.mark.xdist_group("drivers")  # tests/xdist_units.py: drivers of their own

DRIVER = Path(__file__).with_name("saga_crash_driver.py")
MASTER = "local-cluster[2,1,1024]"


def _run(uri, name, workdir, *extra, crash_at=None):
    env = {k: v for k, v in os.environ.items() if k != "SAFEBUNNY_CRASH_AT"}
    env["SAFEBUNNY_TEST_MASTER"] = MASTER
    env["SAFEBUNNY_TEST_EXECUTOR_PUBLISH_ROWS"] = "10"  # stock's batches of 40 emits go out from the executors
    if crash_at:
        env["SAFEBUNNY_CRASH_AT"] = crash_at
    return subprocess.run([sys.executable, str(DRIVER), uri, name, str(workdir), *extra], env=env,
                          capture_output=True, text=True, timeout=600, start_new_session=True)


def _why(stderr):
    lines = [ln for ln in stderr.splitlines()
             if ("Error" in ln or "Exception" in ln) and not ln.strip().startswith("at ")]
    return "\n".join(lines[:25]) or stderr[-3000:]


def test_a_saga_on_a_cluster_killed_mid_drain_applies_each_effect_once(amqp_uri, tmp_path):
    name = f"sbt-cluster-{uuid.uuid4().hex[:8]}"
    saga = safebunny.Saga(name, uri=amqp_uri, root=str(tmp_path / "saga"), settings=safebunny.SagaSettings(
        retry=safebunny.Retry(delays=("1s",))))
    saga.step("stock", consumes="OrderPlaced", from_node="orders", schema="orderId string")(lambda d, c: None)
    saga.step("shipping", consumes="StockReserved", from_node="stock", schema="orderId string")(lambda d, c: None)
    try:
        crashed = _run(amqp_uri, name, tmp_path, "start", crash_at="step.after_inbox:2")
        assert crashed.returncode == -signal.SIGKILL, _why(crashed.stderr)
        assert f"MASTER {MASTER}" in crashed.stdout
        finished = _run(amqp_uri, name, tmp_path)
        assert finished.returncode == 0 and "DRIVER-DONE" in finished.stdout, _why(finished.stderr)
        # a full batch: two partitions of 20 emits each, published by the two executors' Python workers
        published = next(ln for ln in finished.stdout.splitlines() if ln.startswith("PUBLISHED-FROM"))
        assert "('executors', 2)" in published, finished.stdout
        want = sorted(f"o{i}" for i in range(120))
        for table in ("reservations", "shipments"):
            got = DeltaRsTarget(str(tmp_path / table)).read().column("orderId").to_pylist()
            assert sorted(got) == want, f"{table}: each order exactly once"
        assert waiting(saga) == 0
    finally:
        safebunny.topology.delete(saga)
