"""kill -9 of a saga's driver in the middle of draining, then a restart: each step's effects exactly once, with
the saga's state on an S3-compatible object store (issue 37): its root (journals, claims, inbox, status, reports,
leases, instances) and both effect tables on ``moto_server``; only Spark's checkpoints stay on local disk
(hadoop-aws is not installable here). The same kill with local state, on executors in their own processes, is
``test_local_cluster``."""

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


def _run(uri, name, workdir, state, *extra, crash_at=None):
    env = {k: v for k, v in os.environ.items() if k != "SAFEBUNNY_CRASH_AT"}  # AWS_* of the store included
    env["SAFEBUNNY_TEST_STATE"] = state
    if crash_at:
        env["SAFEBUNNY_CRASH_AT"] = crash_at
    return subprocess.run([sys.executable, str(DRIVER), uri, name, str(workdir), *extra], env=env,
                          capture_output=True, text=True, timeout=500, start_new_session=True)


def _shape(uri, name, state):
    """The driver's saga without its handlers: enough to read its queues and delete its topology."""
    saga = safebunny.Saga(name, uri=uri, root=f"{state}/saga", settings=safebunny.SagaSettings(
        retry=safebunny.Retry(delays=("1s",))))
    saga.step("stock", consumes="OrderPlaced", from_node="orders", schema="orderId string")(lambda d, c: None)
    saga.step("shipping", consumes="StockReserved", from_node="stock", schema="orderId string")(lambda d, c: None)
    return saga


def _why(stderr):
    """The error lines of a driver's stderr (Spark's Java frames left out), for the assertion message."""
    lines = [ln for ln in stderr.splitlines()
             if ("Error" in ln or "Exception" in ln) and not ln.strip().startswith("at ")]
    return "\n".join(lines[:25]) or stderr[-3000:]


# One kill point, after a batch's effects and before its inbox marker: its replay meets its own claim and effects
# on the store (the step crash tests cover every point of a batch; here the saga's queries restart together).
@pytest.mark.parametrize("crash_at", ["step.after_effects:3"])
def test_a_saga_with_its_state_on_s3_killed_mid_drain_applies_each_effect_once(amqp_uri, s3_root, tmp_path,
                                                                               crash_at):
    name = f"sbt-crash-{uuid.uuid4().hex[:8]}"
    try:
        crashed = _run(amqp_uri, name, tmp_path, s3_root, "start", crash_at=crash_at)
        assert crashed.returncode == -signal.SIGKILL, _why(crashed.stderr)
        finished = _run(amqp_uri, name, tmp_path, s3_root)  # its steps replay at once; the first starts alone
        assert finished.returncode == 0 and "DRIVER-DONE" in finished.stdout, _why(finished.stderr)
        want = sorted(f"o{i}" for i in range(120))
        for table in ("reservations", "shipments"):
            got = DeltaRsTarget(f"{s3_root}/{table}").read().column("orderId").to_pylist()
            assert sorted(got) == want, f"{table}: each order exactly once"
        assert waiting(_shape(amqp_uri, name, s3_root)) == 0
        local = sorted(p.relative_to(tmp_path).parts[0] for p in tmp_path.iterdir())
        assert local == ["checkpoints"], f"only Spark's checkpoints on local disk; found {local}"
    finally:
        safebunny.topology.delete(_shape(amqp_uri, name, s3_root))
