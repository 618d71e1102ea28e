"""kill -9 of the whole driver at named points, then a restart from the same checkpoint."""

import json
import os
import signal
import sys
import uuid
from pathlib import Path

import pytest

from helpers import Admin, publish_numbered, queue_totals, restart_in_one_driver, run_drivers, wait_until

pytestmark = pytest.mark.xdist_group("drivers")  # tests/xdist_units.py: drivers of their own

DRIVER = Path(__file__).with_name("crash_driver.py")
N = 600  # three batches of 200 (crash_driver.py): every kill point is in the first two, a batch follows it


def _command(uri, queue, workdir, crash_at=None, fail_on_data_loss=True, queue_type="classic", stream_port=None):
    """The driver's argv and environment for one run (``crash_at``: the kill point it stops at)."""
    env = dict(os.environ)
    if stream_port:
        env["SAFEBUNNY_TEST_STREAM_PORT"] = str(stream_port)
    env["SAFEBUNNY_TEST_QUEUE_TYPE"] = queue_type
    env.pop("SAFEBUNNY_CRASH_AT", None)
    env["SAFEBUNNY_TEST_FAIL_ON_DATA_LOSS"] = str(fail_on_data_loss).lower()
    if crash_at:
        env["SAFEBUNNY_CRASH_AT"] = crash_at
    return [sys.executable, str(DRIVER), uri, queue, str(workdir)], env


def _run(*args, **kwargs):
    return run_drivers([_command(*args, **kwargs)], timeout=400)[0]


def _batches(workdir):
    """{batch_id: {run: rows}} from the driver's output files; ``run`` orders by write time."""
    out = {}
    paths = sorted((Path(workdir) / "out").glob("batch-*.json"), key=lambda p: p.stat().st_mtime_ns)
    for run, path in enumerate(paths):
        batch_id = int(path.stem.split("-")[1])
        out.setdefault(batch_id, {})[run] = [tuple(r) for r in json.loads(path.read_text())]
    return out


def _fill(amqp_uri, queue):
    publish_numbered(amqp_uri, queue, N, body=lambda i: b"x")


def _done(finished, workdir):
    return f"DRIVER-DONE {workdir}\n" in finished.stdout


CRASH_POINTS = ["effect:2", "source.after_journal_write:1", "source.after_journal_write:2", "source.before_ack:2"]
#: killed beside the others, restarted by its own test (it deletes the journal first)
DATA_LOSS = "effect:1"


@pytest.fixture(scope="module")
def kill_points(broker, amqp_uri, tmp_path_factory):
    """Each kill point in a driver of its own (its own queue and folder, N messages); then one driver restarts
    them all but :data:`DATA_LOSS` from their checkpoints, one after another. Yields ``{crash_at: (queue,
    workdir, crashed, first_runs)}`` and the restart's result."""
    admin = Admin(amqp_uri)
    runs = {}
    try:
        places = {}
        for crash_at in [*CRASH_POINTS, DATA_LOSS]:
            tag = crash_at.replace(".", "-").replace(":", "-")
            queue = admin.declare_queue(f"sbt-source-crash-{tag}-{uuid.uuid4().hex[:6]}")
            workdir = tmp_path_factory.mktemp(tag)
            _fill(amqp_uri, queue)
            places[crash_at] = (queue, workdir)
        results = run_drivers([_command(amqp_uri, q, w, crash_at) for crash_at, (q, w) in places.items()], 400)
        for (crash_at, (queue, workdir)), crashed in zip(places.items(), results, strict=True):
            runs[crash_at] = (queue, workdir, crashed, _batches(workdir))
        restarts = [{"queue": q, "workdir": str(w)} for at, (q, w, _, _) in runs.items() if at != DATA_LOSS]
        yield runs, restart_in_one_driver(DRIVER, amqp_uri, restarts)
    finally:
        for queue, _, _, _ in runs.values():
            admin.delete_queue(queue)
        admin.close()


@pytest.mark.parametrize("crash_at", CRASH_POINTS)
def test_crash_and_restart_loses_nothing_and_replays_exactly(broker, kill_points, crash_at):
    runs, finished = kill_points
    queue, tmp_path, crashed, first_runs = runs[crash_at]
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-2000:]
    assert _done(finished, tmp_path), finished.stderr[-3000:]

    batches = _batches(tmp_path)
    # a batch that ran in both drivers was replayed: same ids, same order, same flags
    for runs in batches.values():
        if len(runs) == 2:
            a, b = runs.values()
            assert a == b
    # the final view: the last run of each batch id
    final = [row for _, runs in sorted(batches.items()) for row in runs[max(runs)]]
    ids = [m for m, _ in final]
    assert set(ids) == {f"m{i}" for i in range(N)}, "a message was lost"
    seen = set()
    for message_id, redelivered in final:
        if message_id in seen:
            assert redelivered, f"{message_id} came twice without the redelivered flag"
        seen.add(message_id)
    if crash_at.startswith("effect"):
        assert any(len(runs) == 2 for runs in batches.values()), "no batch was replayed"
        assert first_runs
    wait_until(lambda: queue_totals(broker, queue) == (0, 0), what="an empty queue", every=0.5)
    assert not list((tmp_path / "journal").glob("*.arrow"))


def test_missing_journal_of_a_logged_batch_fails_unless_failOnDataLoss_is_false(broker, amqp_uri, kill_points):
    runs, _ = kill_points
    queue, tmp_path, crashed, _ = runs[DATA_LOSS]  # killed in its batch 0: logged, not committed
    assert crashed.returncode == -signal.SIGKILL
    journals = list((tmp_path / "journal").glob("*.arrow"))
    assert journals
    for path in journals:
        path.unlink()
    failed = _run(amqp_uri, queue, tmp_path)
    assert failed.returncode != 0 and "DRIVER-DONE" not in failed.stdout
    assert "is missing" in failed.stderr and "failOnDataLoss" in failed.stderr
    skipped = _run(amqp_uri, queue, tmp_path, fail_on_data_loss=False)
    assert skipped.returncode == 0 and _done(skipped, tmp_path), skipped.stderr[-3000:]
    # the skipped batch's messages were never acked: the broker requeued them, nothing is lost
    final = [row for _, runs in sorted(_batches(tmp_path).items()) for row in runs[max(runs)]]
    assert {m for m, _ in final} == {f"m{i}" for i in range(N)}
    assert queue_totals(broker, queue) == (0, 0)
