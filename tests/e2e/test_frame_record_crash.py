"""A DataFrame handler that is not deterministic (its outputs carry a file-backed counter that every call moves),
killed after its batch's first effect commit, then replayed from the same checkpoint and from a new one: with its
outcome recorded (``record_frame_outcomes``, the default) the effects and the emitted ids are those of the first
attempt; without, the replay's second effect and its emits are a second answer (the trade-off the setting names)."""

import json
import os
import signal
import sys
import uuid
from pathlib import Path

import pytest

import safebunny
from helpers import Admin, publish_numbered, queue_totals, restart_in_one_driver, run_drivers, wait_until
from safebunny.delta.delta_rs import DeltaRsTarget

pytestmark = pytest.mark.xdist_group("drivers")  # tests/xdist_units.py: drivers of their own

DRIVER = Path(__file__).with_name("step_crash_driver.py")
N = 100  # two batches of 50
#: the append then the merge of the first batch, then the second batch's append: killed right after it commits
CRASH_AT = "step.after_one_effect:3"
CASES = {"same": ("ck", True), "new": ("ck-new", True), "new-unrecorded": ("ck-new", False)}


@pytest.fixture(scope="module")
def killed_and_replayed(broker, amqp_uri, tmp_path_factory):
    """Each case killed in a driver of its own, then one driver restarting all of them."""
    admin = Admin(amqp_uri)  # closed while the drivers run (an idle connection may be reset meanwhile)
    runs, commands, scenarios = {}, [], []
    try:
        for case, (restart_checkpoint, record) in CASES.items():
            queue = admin.declare_queue(f"sbt-frame-{case}-{uuid.uuid4().hex[:6]}")
            out = admin.declare_queue(f"{queue}-out")
            workdir = tmp_path_factory.mktemp(f"frame-{case}")
            publish_numbered(amqp_uri, queue, N)
            scenario = {"queue": queue, "out": out, "workdir": str(workdir), "journal": "journal", "effects": "both",
                        "counter": str(workdir / "counter"), "record": record}
            env = {k: v for k, v in os.environ.items()}
            env.update(SAFEBUNNY_CRASH_AT=CRASH_AT, SAFEBUNNY_TEST_SCENARIOS=json.dumps([{**scenario,
                                                                                         "checkpoint": "ck"}]))
            commands.append(([sys.executable, str(DRIVER), amqp_uri], env))
            scenarios.append({**scenario, "checkpoint": restart_checkpoint})
            runs[case] = (queue, out, workdir)
        admin.close()
        crashed = dict(zip(runs, run_drivers(commands, 400), strict=True))
        yield runs, crashed, _restarted(amqp_uri, scenarios)
    finally:
        admin = Admin(amqp_uri)
        for queue, out, _ in runs.values():
            admin.delete_queue(queue)
            admin.delete_queue(out)
        admin.close()


def _restarted(uri, scenarios, again=2):
    """The restart of every scenario in one driver; a scenario whose query could not start because a Python worker
    of Spark's did not connect back within Spark's fixed 10 s (a machine loaded by other runs) is restarted again,
    from the same checkpoint, which is one more replay. Its output and the last return code."""
    finished = restart_in_one_driver(DRIVER, uri, scenarios)
    for _ in range(again):
        left = [s for s in scenarios if f"DRIVER-FAILED {s['workdir']}\n" in finished.stdout
                and "Python worker failed to connect back" in finished.stderr]
        if not left:
            break
        more = restart_in_one_driver(DRIVER, uri, left)
        finished.stdout += more.stdout
        finished.stderr += more.stderr
        finished.returncode = more.returncode
    return finished


def _attempts(workdir, table):
    return {r["messageId"]: r["attempt"] for r in DeltaRsTarget(str(Path(workdir) / table)).read().to_pylist()}


@pytest.mark.parametrize("case", ["same", "new"])
def test_a_replay_applies_and_sends_what_the_first_attempt_recorded(broker, admin, killed_and_replayed, case):
    runs, crashed, finished = killed_and_replayed
    queue, out, workdir = runs[case]
    assert crashed[case].returncode == -signal.SIGKILL, crashed[case].stderr[-3000:]
    assert f"DRIVER-DONE {workdir}\n" in finished.stdout, finished.stderr[-3000:]
    ids = [f"m{i}" for i in range(N)]
    first = {m: 1 if int(m[1:]) < 50 else 2 for m in ids}  # the counter's value at each batch's first call
    appended = DeltaRsTarget(str(workdir / "effects")).read().column("messageId").to_pylist()
    assert sorted(appended) == sorted(ids), "each message once in the first effect table"
    assert _attempts(workdir, "effects") == first
    assert _attempts(workdir, "ledger") == first, "the second effect, applied by the replay, is the first attempt's"
    published = {p.message_id for _, p, _ in admin.get_all(out)}
    assert published == {safebunny.message_id(m, "billing", "InvoiceRequested", first[m]) for m in ids}
    assert int((workdir / "counter").read_text()) == 2, "the replay never ran the handler on the killed batch again"
    wait_until(lambda: queue_totals(broker, queue) == (0, 0), what="the queue empty and nothing unacked")
    assert not list((workdir / "inbox" / "_claims").rglob("*.json")), "every claim retired"


def test_without_the_record_a_replay_recomputes_a_second_answer(broker, admin, killed_and_replayed):
    """The trade-off of ``record_frame_outcomes=False``: the killed batch's second effect and its emits come from
    the replay's call (the counter moved), while its first effect holds the first call's rows."""
    runs, crashed, finished = killed_and_replayed
    queue, out, workdir = runs["new-unrecorded"]
    assert crashed["new-unrecorded"].returncode == -signal.SIGKILL, crashed["new-unrecorded"].stderr[-3000:]
    assert f"DRIVER-DONE {workdir}\n" in finished.stdout, finished.stderr[-3000:]
    second = [f"m{i}" for i in range(50, N)]
    appended, merged = _attempts(workdir, "effects"), _attempts(workdir, "ledger")
    assert {appended[m] for m in second} == {2} and {merged[m] for m in second} == {3}
    published = {p.message_id for _, p, _ in admin.get_all(out)}
    assert {safebunny.message_id(m, "billing", "InvoiceRequested", 3) for m in second} <= published
