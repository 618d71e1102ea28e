"""kill -9 of the whole driver at every point of a step's batch, then a restart from the same checkpoint:
exactly one Delta effect per input, one distinct emitted id per input, nothing left in the queue or unacked."""

import json
import os
import signal
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import random_kills

import safebunny
from brokers import ThrowawayBroker
from helpers import Admin, publish_numbered, queue_totals, restart_in_one_driver, run_drivers, wait_until
from safebunny.delta.delta_rs import DeltaRsTarget

pytestmark = pytest.mark.xdist_group("drivers")  # tests/xdist_units.py: drivers of their own

DRIVER = Path(__file__).with_name("step_crash_driver.py")
N = 150  # three batches of 50


def _command(uri, queue, out, workdir, crash_at=None, checkpoint="ck", journal=None, effects="append",
             executor_rows=None, by_name=False, kill_on_create=None, record=True):
    """The driver's argv and environment for one run (``crash_at``: the kill point it stops at)."""
    env = {k: v for k, v in os.environ.items() if k != "SAFEBUNNY_CRASH_AT"}
    if executor_rows:
        env["SAFEBUNNY_TEST_EXECUTOR_PUBLISH_ROWS"] = str(executor_rows)
    env["SAFEBUNNY_TEST_CHECKPOINT"] = checkpoint
    env["SAFEBUNNY_TEST_EFFECTS"] = effects
    if by_name:  # tables by name (tests/delta_spark)
        env["SAFEBUNNY_TEST_BY_NAME"] = "1"
    if not record:  # the step's record_frame_outcomes off
        env["SAFEBUNNY_TEST_RECORD"] = "0"
    if kill_on_create:  # killed as that table's first commit lands (tests/delta_spark)
        env["SAFEBUNNY_TEST_KILL_ON_CREATE"] = kill_on_create
    if journal:
        env["SAFEBUNNY_TEST_JOURNAL"] = journal
    if crash_at:
        env["SAFEBUNNY_CRASH_AT"] = crash_at
    return [sys.executable, str(DRIVER), uri, queue, out, str(workdir)], env


def _run(*args, **kwargs):
    return run_drivers([_command(*args, **kwargs)], timeout=400)[0]


def _done(finished, workdir):
    return f"DRIVER-DONE {workdir}\n" in finished.stdout


def _check(broker, admin, queue, out, workdir, ids):
    effects = DeltaRsTarget(str(Path(workdir) / "effects")).read().column("messageId").to_pylist()
    assert sorted(effects) == sorted(ids), "each input exactly once in the effect table"
    published = admin.get_all(out)
    assert len(published) >= len(ids)
    got = {p.message_id for _, p, _ in published}
    assert got == {safebunny.message_id(i, "billing", "InvoiceRequested", 0) for i in ids}
    wait_until(lambda: queue_totals(broker, queue) == (0, 0), what="the queue empty and nothing unacked")


def _kill_matrices(uri, tmp_path_factory, matrices, at_once=2, metastores=()):
    """``matrices``: ``{name: (points, restart)}``, each point a ``(crash_at, settings)``. For each point: its own
    queues and folder, N messages, a driver killed at ``crash_at``; then one driver restarts every point of every
    matrix, each with its ``settings`` and its matrix's ``restart`` (checkpoint, journal). Yields
    ``{(name, crash_at): (queue, out, workdir, crashed)}`` and the restart's result; deletes the queues at the
    end. ``at_once``: crash drivers run side by side.

    ``metastores`` (tests/delta_spark: drivers with a Hive catalog in Derby, which one JVM at a time can open):
    folders, the i-th point's drivers get the (i mod len)-th as ``SAFEBUNNY_TEST_METASTORE``. The points of one
    metastore are a lane: their crash drivers one after another, then one driver restarting them; the lanes run
    side by side, and the restart's result joins the lanes' (their output, the first failed return code)."""
    admin = Admin(uri)
    runs, scenarios, commands = {}, [], []
    try:
        for name, (points, restart) in matrices.items():
            for crash_at, settings in points:
                tag = f"{name}-" + crash_at.replace(".", "-").replace(":", "-")
                queue = admin.declare_queue(f"sbt-{tag}-{uuid.uuid4().hex[:6]}")
                out = admin.declare_queue(f"{queue}-out")
                workdir = tmp_path_factory.mktemp(tag)
                publish_numbered(uri, queue, N)
                runs[name, crash_at] = (queue, out, workdir, None)
                commands.append(_command(uri, queue, out, workdir, crash_at, **settings))
                scenarios.append({"queue": queue, "out": out, "workdir": str(workdir), **settings, **restart})
        if not metastores:
            crashes = run_drivers(commands, 400, at_once)
            finished = restart_in_one_driver(DRIVER, uri, scenarios)
        else:
            crashes, finished = _lanes(uri, commands, scenarios, [str(m) for m in metastores])
        for key, crashed in zip(list(runs), crashes, strict=True):
            runs[key] = (*runs[key][:3], crashed)
        yield runs, finished
    finally:
        for queue, out, _, _ in runs.values():
            admin.delete_queue(queue)
            admin.delete_queue(out)
        admin.close()


def _lanes(uri, commands, scenarios, metastores):
    """The crash drivers and restarts of :func:`_kill_matrices` by metastore: the crash results in the order of
    ``commands``, and the lanes' restarts as one ``CompletedProcess``."""
    lanes = len(metastores)

    def lane(j):
        env = {"SAFEBUNNY_TEST_METASTORE": metastores[j]}
        mine = range(j, len(commands), lanes)
        crashed = run_drivers([(argv, {**own, **env}) for argv, own in (commands[i] for i in mine)], 400, 1)
        return dict(zip(mine, crashed, strict=True)), restart_in_one_driver(DRIVER, uri, [scenarios[i] for i in mine],
                                                                             env)

    with ThreadPoolExecutor(lanes) as pool:
        done = list(pool.map(lane, range(lanes)))
    crashes = {i: result for crashed, _ in done for i, result in crashed.items()}
    restarts = [restarted for _, restarted in done]
    failed = [r.returncode for r in restarts if r.returncode]
    finished = subprocess.CompletedProcess([r.args for r in restarts], failed[0] if failed else 0,
                                           "".join(r.stdout for r in restarts), "".join(r.stderr for r in restarts))
    return [crashes[i] for i in range(len(commands))], finished


# The source's own kill points before a batch reaches the step (after consume, after the journal write) are
# test_source_crash's: the step then sees a replayed batch, as after step.in_handler. source.before_ack stays
# here: committed messages come back and the inbox must drop them.
SAME_CHECKPOINT = [
    ("step.in_handler:2", None),
    ("step.after_effects:2", None), ("step.after_inbox:2", None), ("sink.mid_publish:1", None),
    ("source.before_ack:2", None),
    # the batches' 50 emits published from the executors (over a threshold of 10), killed once they are out
    ("step.after_publish:2", 10)]


@pytest.mark.parametrize("crash_at, executor_rows", SAME_CHECKPOINT)
def test_a_step_killed_at_any_point_ends_exactly_once(broker, admin, kill_matrices, crash_at, executor_rows):
    """Each kill point in a driver of its own; the restarts from the same checkpoints share one driver."""
    runs, finished = kill_matrices
    queue, out, workdir, crashed = runs["same", crash_at]
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    assert _done(finished, workdir), finished.stderr[-3000:]
    if executor_rows:
        assert f"PUBLISHED-FROM {workdir} ['executors']" in finished.stdout, finished.stdout
    _check(broker, admin, queue, out, workdir, [f"m{i}" for i in range(N)])


# (kill point in the second batch, ledger rows the new epoch must write: it reads the last 100 messages):
# after the claim nothing of that batch is applied; after one effect (the append: effects apply in key order)
# only the merge is left; after both effects, only the third batch is the new epoch's
NEW_CHECKPOINT = [
    ("step.after_claim:2", 100), ("step.after_one_effect:3", 100), ("step.after_effects:2", 50),
    # after the marker: the batch's outputs must already be out (the new epoch finds its messages done)
    ("step.after_inbox:2", 50)]


@pytest.fixture(scope="module")
def kill_matrices(broker, amqp_uri, tmp_path_factory):
    """Both matrices' crashes, then one driver that restarts all of them (one JVM start, not two)."""
    same = [(crash_at, {"executor_rows": rows} if rows else {}) for crash_at, rows in SAME_CHECKPOINT]
    # outcomes not recorded: each ledger row's epoch says which epoch computed and merged it (recorded outcomes:
    # tests/e2e/test_frame_record_crash.py)
    new = [(crash_at, {"journal": "journal", "effects": "both", "record": False}) for crash_at, _ in NEW_CHECKPOINT]
    yield from _kill_matrices(amqp_uri, tmp_path_factory,
                              {"same": (same, {}), "new": (new, {"checkpoint": "ck-new"})})


@pytest.mark.parametrize("crash_at,merged_by_new_epoch", NEW_CHECKPOINT)
def test_a_kill_then_a_new_checkpoint_applies_each_effect_once(broker, admin, kill_matrices, crash_at,
                                                               merged_by_new_epoch):
    """The driver dies inside its second batch (50 messages), before or just after its inbox marker; a new
    checkpoint (a new epoch) over the same queue and journal gets those messages again. Each effect table must
    hold each message once (the append by its rows, the merge by which epoch wrote each row: the old one, unless
    its batch had not reached that table), and every output must be published."""
    runs, finished = kill_matrices
    queue, out, workdir, crashed = runs["new", crash_at]
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    old_epoch = json.loads((workdir / "ck" / "metadata").read_text())["id"]
    assert _done(finished, workdir), finished.stderr[-3000:]
    ids = [f"m{i}" for i in range(N)]
    _check(broker, admin, queue, out, workdir, ids)
    ledger = DeltaRsTarget(str(workdir / "ledger")).read().to_pylist()
    assert sorted(r["messageId"] for r in ledger) == sorted(ids)
    assert sum(r["epoch"] != old_epoch for r in ledger) == merged_by_new_epoch
    assert not list((workdir / "inbox" / "_claims").rglob("*.json")), "every claim retired"


def test_duplicates_and_a_replaced_checkpoint_cause_no_second_effect(broker, amqp_uri, make_queue, admin, tmp_path):
    queue, out = make_queue(), make_queue(suffix="-out")
    publish_numbered(amqp_uri, queue, 60)
    publish_numbered(amqp_uri, queue, 20)  # the same message published twice
    assert _run(amqp_uri, queue, out, tmp_path, journal="journal").returncode == 0
    # a new checkpoint over the same queue and journalLocation, with old messages redelivered: a new epoch,
    # the same inbox; the new query takes the journal over from the old one, which is gone
    publish_numbered(amqp_uri, queue, 60)
    done = _run(amqp_uri, queue, out, tmp_path, checkpoint="ck-new", journal="journal")
    assert done.returncode == 0 and _done(done, tmp_path), done.stderr[-3000:]
    _check(broker, admin, queue, out, tmp_path, [f"m{i}" for i in range(60)])


def test_a_broker_restart_mid_stream_ends_exactly_once(tmp_path):
    """A throwaway broker stopped and started while the step runs (durable queues, persistent messages):
    the driver rides it out or fails clearly; a restart from the same checkpoint ends exactly once."""
    n = 200
    broker = ThrowawayBroker(plugins=()).start()
    try:
        admin = Admin(broker.uri)
        queue, out = admin.declare_queue("sbt-restart-in"), admin.declare_queue("sbt-restart-out")
        admin.close()
        publish_numbered(broker.uri, queue, n)
        env = {k: v for k, v in os.environ.items() if k != "SAFEBUNNY_CRASH_AT"}
        env.update(SAFEBUNNY_TEST_CHECKPOINT="ck", SAFEBUNNY_TEST_HANDLER_SLEEP="1.0")
        first = subprocess.Popen([sys.executable, str(DRIVER), broker.uri, queue, out, str(tmp_path)], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            wait_until(lambda: (tmp_path / "ck" / "commits" / "0").exists() or first.poll() is not None,
                       timeout=300, what="the step's first batch committed")
            assert first.poll() is None, "the driver ended before the broker restart"
            broker.stop()
            broker.start()
            _, stderr = first.communicate(timeout=400)
        finally:
            if first.poll() is None:
                os.killpg(first.pid, signal.SIGKILL)
        # the first run either rode out the restart or failed with a clear broker error; never a silent loss
        assert first.returncode == 0 or "SafeBunny" in stderr, stderr[-3000:]
        finished = _run(broker.uri, queue, out, tmp_path)
        assert finished.returncode == 0 and _done(finished, tmp_path), finished.stderr[-3000:]
        admin = Admin(broker.uri)
        try:
            _check(broker, admin, queue, out, tmp_path, [f"m{i}" for i in range(n)])
        finally:
            admin.close()
    finally:
        broker.destroy()


def test_random_kills_while_messages_flow_end_exactly_once(broker, amqp_uri, tmp_path):
    """Random SIGKILLs of the driver mid-stream, every second restart from a new checkpoint (a new epoch),
    then a count (``python tests/e2e/random_kills.py --n 20000 --kills 10 --replace-every 2`` at full size).
    Two kills: the second restart is the new checkpoint."""
    result = random_kills.run(amqp_uri, 400, 2, tmp_path, batch=100, seed=11,
                              totals=lambda q: queue_totals(broker, q), log=lambda line: None, replace_every=2)
    assert result["effect_rows"] == 400 and result["distinct_emitted"] == 400
    assert result["kills"] >= 1
