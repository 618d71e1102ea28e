"""kill -9 of the whole driver at every point of a step's batch, then a restart from the same checkpoint:
exactly one Delta effect per input, one distinct emitted id per input, nothing left in the queue or unacked."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import safebunny
from conftest import publish_numbered, queue_totals, wait_until
from safebunny.exactly_once.delta_rs import DeltaPath

DRIVER = Path(__file__).with_name("step_crash_driver.py")
N = 150  # three batches of 50


def _run(uri, queue, out, workdir, crash_at=None, checkpoint="ck"):
    env = {k: v for k, v in os.environ.items() if k != "SAFEBUNNY_CRASH_AT"}
    env["SAFEBUNNY_TEST_CHECKPOINT"] = checkpoint
    if crash_at:
        env["SAFEBUNNY_CRASH_AT"] = crash_at
    return subprocess.run([sys.executable, str(DRIVER), uri, queue, out, str(workdir)], env=env, capture_output=True,
                          text=True, timeout=400, start_new_session=True)


def _check(broker, admin, queue, out, workdir, ids):
    effects = DeltaPath(str(Path(workdir) / "effects")).read().column("messageId").to_pylist()
    assert sorted(effects) == sorted(ids), "each input exactly once in the effect table"
    published = admin.get_all(out)
    assert len(published) >= len(ids)
    got = {p.message_id for _, p, _ in published}
    assert got == {safebunny.message_id(i, "billing", "InvoiceRequested", 0) for i in ids}
    wait_until(lambda: queue_totals(broker, queue) == (0, 0), what="the queue empty and nothing unacked")


@pytest.mark.parametrize("crash_at", [
    "source.after_consume:2", "source.after_journal_write:2", "step.in_handler:2", "step.after_effects:2",
    "step.after_inbox:2", "sink.mid_publish:1", "source.before_ack:2"])
def test_a_step_killed_at_any_point_ends_exactly_once(broker, amqp_uri, make_queue, admin, tmp_path, crash_at):
    queue, out = make_queue(), make_queue(suffix="-out")
    publish_numbered(amqp_uri, queue, N)
    crashed = _run(amqp_uri, queue, out, tmp_path, crash_at)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    finished = _run(amqp_uri, queue, out, tmp_path)
    assert finished.returncode == 0 and "DRIVER-DONE" in finished.stdout, finished.stderr[-3000:]
    _check(broker, admin, queue, out, tmp_path, [f"m{i}" for i in range(N)])


def test_duplicates_and_a_replaced_checkpoint_cause_no_second_effect(broker, amqp_uri, make_queue, admin, tmp_path):
    queue, out = make_queue(), make_queue(suffix="-out")
    publish_numbered(amqp_uri, queue, 60)
    publish_numbered(amqp_uri, queue, 20)  # the same message published twice
    assert _run(amqp_uri, queue, out, tmp_path).returncode == 0
    # a new checkpoint over the same queue, with old messages redelivered: a new epoch, same inbox
    publish_numbered(amqp_uri, queue, 60)
    done = _run(amqp_uri, queue, out, tmp_path, checkpoint="ck-new")
    assert done.returncode == 0, done.stderr[-3000:]
    _check(broker, admin, queue, out, tmp_path, [f"m{i}" for i in range(60)])
