"""kill -9 of the whole driver at named points, then a restart from the same checkpoint."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pika
import pytest

from conftest import queue_totals

DRIVER = Path(__file__).with_name("crash_driver.py")
N = 1000


def _run(uri, queue, workdir, crash_at=None):
    env = dict(os.environ)
    env.pop("SAFEBUNNY_CRASH_AT", None)
    if crash_at:
        env["SAFEBUNNY_CRASH_AT"] = crash_at
    return subprocess.run([sys.executable, str(DRIVER), uri, queue, str(workdir)], env=env,
                          capture_output=True, text=True, timeout=400, start_new_session=True)


def _batches(workdir):
    """{batch_id: {pid: rows}} from the driver's output files."""
    out = {}
    for path in (Path(workdir) / "out").glob("batch-*.json"):
        _, batch_id, pid = path.stem.split("-")
        out.setdefault(int(batch_id), {})[int(pid)] = [tuple(r) for r in json.loads(path.read_text())]
    return out


@pytest.mark.parametrize("crash_at", ["effect:2", "source.after_journal_write:2", "source.before_ack:2"])
def test_crash_and_restart_loses_nothing_and_replays_exactly(broker, amqp_uri, make_queue, tmp_path, crash_at):
    queue = make_queue()
    conn = pika.BlockingConnection(pika.URLParameters(amqp_uri))
    ch = conn.channel()
    ch.confirm_delivery()
    for i in range(N):
        ch.basic_publish("", queue, b"x", pika.BasicProperties(message_id=f"m{i}", delivery_mode=2))
    conn.close()

    crashed = _run(amqp_uri, queue, tmp_path, crash_at)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-2000:]
    first_pids = {pid for runs in _batches(tmp_path).values() for pid in runs}
    finished = _run(amqp_uri, queue, tmp_path)
    assert finished.returncode == 0 and "DRIVER-DONE" in finished.stdout, finished.stderr[-3000:]

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
        assert first_pids
    deadline = time.monotonic() + 60
    while queue_totals(broker, queue) != (0, 0) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert queue_totals(broker, queue) == (0, 0)
    assert not list((tmp_path / "journal").glob("*.arrow"))
