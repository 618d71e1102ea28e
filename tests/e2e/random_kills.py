"""Random kills of a step's driver while messages flow through it, then a count.

    .venv/bin/python tests/e2e/random_kills.py --n 20000 --kills 10 [--batch 500] [--seed 7]

Publishes N messages to a fresh queue on the machine's broker (``SAFEBUNNY_TEST_AMQP_URI`` or
127.0.0.1:5672), then starts ``step_crash_driver.py`` (the public API only: ``safebunny.Step``,
``Outcome``, ``append``, ``emit``; availableNow) and SIGKILLs its whole process group at a random
moment once a batch is under way, ``kills`` times; then lets it run to the end and counts: every input
exactly once in the Delta effect table, exactly one distinct emitted id per input (copies of an id are
allowed: publishing is at-least-once), the input queue empty and nothing unacked. ``test_step_crash.py``
runs it small in ``make test``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pika

import safebunny
from safebunny.delta.delta_rs import DeltaRsTarget

DRIVER = Path(__file__).with_name("step_crash_driver.py")
NODE, TYPE = "billing", "InvoiceRequested"


def _entries(directory: Path) -> int:
    return sum(1 for p in directory.iterdir() if p.name.isdigit()) if directory.exists() else 0


def _effects(workdir: Path) -> list[str]:
    return DeltaRsTarget(str(workdir / "effects")).read().column("messageId").to_pylist()


def _publish(uri: str, queue: str, n: int) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    ch = conn.channel()
    ch.confirm_delivery()
    for i in range(n):
        ch.basic_publish("", queue, f"m{i}".encode(), pika.BasicProperties(message_id=f"m{i}", delivery_mode=2))
    conn.close()


def _drain_ids(uri: str, queue: str) -> list[str]:
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=1000)
    ids: list[str] = []
    for method, props, _body in ch.consume(queue, inactivity_timeout=2):
        if method is None:
            break
        ids.append(props.message_id)
        if len(ids) % 500 == 0:
            ch.basic_ack(method.delivery_tag, multiple=True)
    ch.cancel()
    conn.close()  # the unacked tail goes back to the queue, which is deleted next
    return ids


def run(uri: str, n: int, kills: int, workdir: Path, batch: int = 500, seed: int = 7,
        totals: Callable[[str], tuple[int, int]] | None = None, log: Callable[[str], None] = print,
        replace_every: int = 0, env: dict[str, str] | None = None,
        effect_ids: Callable[[Path], list[str]] | None = None) -> dict:
    """Publish, kill ``kills`` times at random, finish, count; returns the counts (raises on a violation).

    ``replace_every=k``: every k-th restart after a kill starts from a new checkpoint (a new epoch over the
    same queue, journal and inbox), as a redeployed job or a deleted checkpoint would. ``env``: more of the
    driver's environment (``SAFEBUNNY_TEST_BY_NAME``: its tables by name, tests/delta_spark); ``effect_ids(workdir)``:
    the effect table's message ids (default: the delta-rs table ``WORKDIR/effects``)."""
    rng = random.Random(seed)
    suffix = uuid.uuid4().hex[:8]
    queue, out = f"sbt-random-kills-{suffix}", f"sbt-random-kills-{suffix}-out"
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    ch = conn.channel()
    for name in (queue, out):
        ch.queue_declare(name, durable=True)
    conn.close()
    try:
        _publish(uri, queue, n)
        more, env = env or {}, {k: v for k, v in os.environ.items() if k != "SAFEBUNNY_CRASH_AT"}
        env.update(SAFEBUNNY_TEST_CHECKPOINT="ck", SAFEBUNNY_TEST_BATCH=str(batch), SAFEBUNNY_TEST_JOURNAL="journal")
        env.update(more)
        ck = workdir / "ck"
        killed = replaced = 0
        started = time.monotonic()
        for attempt in range(kills):
            if replace_every and attempt and attempt % replace_every == 0:
                replaced += 1
                env["SAFEBUNNY_TEST_CHECKPOINT"] = f"ck-{replaced}"
                ck = workdir / f"ck-{replaced}"
            proc = subprocess.Popen([sys.executable, str(DRIVER), uri, queue, out, str(workdir)], env=env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
            planned = _entries(ck / "offsets")
            deadline = time.monotonic() + 300
            while proc.poll() is None and _entries(ck / "offsets") <= planned and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(rng.uniform(0.0, 3.0))  # a random moment of the batch under way (or of the next ones)
            if proc.poll() is not None:
                log(f"run {attempt + 1}: the driver finished before the kill (rc {proc.returncode})")
                break
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            killed += 1
            log(f"kill {killed}: {_entries(ck / 'commits')} batches committed so far in {ck.name}")
        if replace_every and killed and killed % replace_every == 0:
            replaced += 1
            env["SAFEBUNNY_TEST_CHECKPOINT"] = f"ck-{replaced}"
        final = subprocess.run([sys.executable, str(DRIVER), uri, queue, out, str(workdir)], env=env,
                               capture_output=True, text=True, timeout=1800, start_new_session=True)
        if final.returncode != 0 or "DRIVER-DONE" not in final.stdout:
            raise AssertionError(f"the last run failed (rc {final.returncode}): {final.stderr[-3000:]}")
        effects = (effect_ids or _effects)(workdir)
        expected = [f"m{i}" for i in range(n)]
        if sorted(effects) != sorted(expected):
            extra, missing = len(effects) - len(set(effects)), len(set(expected) - set(effects))
            raise AssertionError(f"effects not exactly once: {len(effects)} rows, {extra} repeated, {missing} missing")
        emitted = _drain_ids(uri, out)
        want = {safebunny.message_id(m, NODE, TYPE, 0) for m in expected}
        if set(emitted) != want:
            raise AssertionError(f"emitted ids differ: {len(set(emitted) - want)} unexpected, "
                                 f"{len(want - set(emitted))} missing")
        left = totals(queue) if totals else None
        if left not in (None, (0, 0)):
            raise AssertionError(f"the input queue holds (ready, unacked) = {left}")
        result = {"messages": n, "kills": killed, "batch": batch, "effect_rows": len(effects),
                  "emitted": len(emitted), "distinct_emitted": len(set(emitted)), "left_in_queue": left,
                  "checkpoints_replaced": replaced,
                  "seconds": round(time.monotonic() - started, 1)}
        log(json.dumps(result))
        return result
    finally:
        conn = pika.BlockingConnection(pika.URLParameters(uri))
        ch = conn.channel()
        for name in (queue, out):
            ch.queue_delete(name)
        conn.close()


def _rabbitmqctl_totals(queue: str) -> tuple[int, int]:
    out = subprocess.run(["rabbitmqctl", "list_queues", "-q", "--no-table-headers", "name", "messages_ready",
                          "messages_unacknowledged"], capture_output=True, text=True, timeout=60, check=True).stdout
    for line in out.splitlines():
        cols = line.split()
        if cols and cols[0] == queue:
            return int(cols[1]), int(cols[2])
    raise KeyError(queue)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--replace-every", type=int, default=0,
                        help="start every k-th restart from a new checkpoint (a new epoch)")
    args = parser.parse_args()
    uri = os.environ.get("SAFEBUNNY_TEST_AMQP_URI", "amqp://guest:guest@127.0.0.1:5672/%2F")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    with tempfile.TemporaryDirectory(prefix="sb-random-kills-") as workdir:
        run(uri, args.n, args.kills, Path(workdir), args.batch, args.seed, totals=_rabbitmqctl_totals,
            replace_every=args.replace_every)


if __name__ == "__main__":
    main()
