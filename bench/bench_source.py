"""The classic/quorum source against raw pika consume, interleaved in one run.

    .venv/bin/python -m bench.bench_source [--n 50000] [--rounds 3] [--kinds classic,quorum] [--batch 10000]
        [--checkpoints both|local|spark-default] [--warmup-n 100000] [--warmup-s 90]

Each round, per queue type: fill a queue with ``n`` ~200-byte JSON messages and drain it with the raw
ceiling (``raw.consume_multiple``: pika, prefetch 1,000, ``multiple`` acks every 250); fill it again and
drain it with the source into Spark's ``noop`` sink at ``--batch`` messages per trigger, once with the
session setting of :func:`safebunny.spark.conf.local_checkpoint_conf` ("local checkpoints": Spark's
``FileSystemBasedCheckpointFileManager``) and once with Spark's default checkpoint file manager (with
``--checkpoints both``, the default; the two alternate which goes first from round to round); fill it
again and drain it with the source at its default options and local checkpoints (the backlog drain rate
users get without tuning; ``--default-n`` messages, so that several of its large batches follow the
first). The setting is read per query at its start, so one session serves both.

Warm-up: the driver JVM's JIT compilers take most of its CPU for the first minute or so after it starts
(Java Flight Recorder: the C2 compiler threads used about 60% of the JVM's CPU in the first ~40 s, about
10% after ~90 s). So before the first round the session drains ``--warmup-n`` messages at ``--batch`` per
trigger, with each checkpoint setting, and repeats that until ``--warmup-s`` seconds have passed since the
session started. Each query's first batch is still left out, as in ``bench.connector``. Ratios are per
round (the raw number of the same minutes), then the median; so are Spark's ``walCommit`` and
``commitOffsets`` phase medians. Results: ``bench/results/source.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench import connector as conn
from bench import raw
from bench.broker import QueueBook
from bench.session import bench_session
from safebunny.spark.conf import CHECKPOINT_FILE_MANAGER_KEY, local_checkpoint_conf

__all__ = ["main", "warm_up"]

_URI = os.environ.get("SAFEBUNNY_BENCH_AMQP_URI", "amqp://guest:guest@127.0.0.1:5672/%2F")
RESULTS = Path(__file__).parent / "results"
#: the per-query checkpoint settings compared: key -> is it local_checkpoint_conf()
SETTINGS = {"local": True, "spark-default": False}
#: Spark's phases that write the checkpoint's offset log and commit log
CHECKPOINT_PHASES = ("walCommit", "commitOffsets")


def _checkpoints(spark: Any, local: bool) -> None:
    """Queries started from now on use local_checkpoint_conf() (``local``) or Spark's default."""
    if local:
        for key, value in local_checkpoint_conf().items():
            spark.conf.set(key, value)
    else:
        spark.conf.unset(CHECKPOINT_FILE_MANAGER_KEY)


def _source(spark: Any, book: QueueBook, kind: str, n: int, batch: int | None, workdir: Path,
            local: bool) -> dict[str, Any]:
    q = book.declare(f"src-{kind}", kind)  # a fresh queue per case: none sees another's
    try:
        raw.publish_window(_URI, q, n)
        _checkpoints(spark, local)
        run = conn.run_source(spark, _URI, q, kind, n, batch, workdir)
        left = book.depth(q)  # what the source left unacked: none
    finally:
        book.delete(q)
    phases = run.extra.get("phases_ms_p50") or {}
    return {"rate": run.rate, "batches": run.extra.get("batches"), "first_batch": run.extra.get("first_batch"),
            "batch_ms_p50": statistics.median(run.batch_ms) if run.batch_ms else None,
            "phases_ms_p50": phases, "left_behind": left,
            **{p: phases.get(p) for p in CHECKPOINT_PHASES}}


def _round(spark: Any, book: QueueBook, kind: str, n: int, batch: int, workdir: Path, default_n: int,
           settings: list[str]) -> dict[str, Any]:
    q = book.declare(f"src-{kind}", kind)
    try:
        raw.publish_window(_URI, q, n)
        out: dict[str, Any] = {"raw": raw.consume_multiple(_URI, q, n).rate}
    finally:
        book.delete(q)
    for setting in settings:
        out[setting] = r = _source(spark, book, kind, n, batch, workdir, SETTINGS[setting])
        r["ratio"] = r["rate"] / out["raw"]
    backlog_local = "local" in settings
    out["default_options"] = r = _source(spark, book, kind, default_n, None, workdir, backlog_local)
    r["checkpoints"] = "local" if backlog_local else "spark-default"
    r["ratio"] = r["rate"] / out["raw"]
    return out


def warm_up(spark: Any, book: QueueBook, n: int, batch: int, workdir: Path, settings: list[str],
             until: float) -> int:
    """Drain ``n`` messages per setting, again until ``until`` (time.time()); returns the messages drained."""
    drained = 0
    while True:
        for setting in settings:
            _source(spark, book, "classic", n, batch, workdir, SETTINGS[setting])
            drained += n
        if time.time() >= until:
            return drained


def _line(i: int, kind: str, r: dict[str, Any], settings: list[str]) -> str:
    parts = [f"round {i} {kind}: raw {r['raw']:,.0f} msg/s"]
    for setting in settings:
        s = r[setting]
        parts.append(f"source, {setting} checkpoints {s['rate']:,.0f} ({s['ratio']:.2f}x, {s['batches']} batches, "
                     f"p50 {s['batch_ms_p50']:.0f} ms, walCommit {s['walCommit']} / commitOffsets "
                     f"{s['commitOffsets']} ms)")
    d = r["default_options"]
    parts.append(f"default options {d['rate']:,.0f} ({d['ratio']:.2f}x, {d['batches']} batches)")
    return "; ".join(parts)


def _median(values: list[Any]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _summary(rs: list[dict[str, Any]], settings: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"raw": _median([r["raw"] for r in rs])}
    for case in [*settings, "default_options"]:
        out[case] = {key: _median([r[case][key] for r in rs]) for key in ("rate", "ratio", *CHECKPOINT_PHASES)}
    if len(settings) == 2:  # local over Spark's default, per round
        out["local_over_spark_default"] = _median([r["local"]["rate"] / r["spark-default"]["rate"] for r in rs])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_source", description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--default-n", type=int, default=200_000,
                        help="queue depth for the default-options drain (deep enough for several large batches)")
    parser.add_argument("--kinds", default="classic,quorum")
    parser.add_argument("--checkpoints", choices=["both", *SETTINGS], default="both",
                        help="the checkpoint file manager of the --batch cases: safebunny.spark.conf's local one, "
                             "Spark's default, or both in every round (default)")
    parser.add_argument("--warmup-n", type=int, default=100_000, help="messages per warm-up query")
    parser.add_argument("--warmup-s", type=float, default=90.0,
                        help="repeat the warm-up until this many seconds after the session started")
    parser.add_argument("--out", type=Path, default=RESULTS / "source.json")
    args = parser.parse_args(argv)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    settings = list(SETTINGS) if args.checkpoints == "both" else [args.checkpoints]
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    rounds: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    warm: dict[str, Any] = {}
    with bench_session("safebunny-bench-source-") as session:
        workdir = session.workdir
        book = session.book(_URI, os.urandom(3).hex())
        session_started = time.time()
        spark = session.start_spark()
        started = time.time()
        drained = warm_up(spark, book, args.warmup_n, args.batch, workdir, settings,
                           session_started + args.warmup_s)
        warm = {"messages": drained, "seconds": round(time.time() - session_started, 1)}
        print(f"warm-up: {drained:,} messages, {warm['seconds']:.0f} s after the session started", flush=True)
        for i in range(args.rounds):
            order = settings if i % 2 == 0 else settings[::-1]  # which setting goes first alternates
            for kind in kinds:
                r = _round(spark, book, kind, args.n, args.batch, workdir, args.default_n, order)
                rounds[kind].append(r)
                print(_line(i + 1, kind, r, settings), flush=True)
    summary = {kind: _summary(rs, settings) for kind, rs in rounds.items() if rs}
    for kind, s in summary.items():
        cases = ", ".join(
            f"{setting} checkpoints {s[setting]['rate']:,.0f} ({s[setting]['ratio']:.2f}x; walCommit "
            f"{s[setting]['walCommit']} / commitOffsets {s[setting]['commitOffsets']} ms)" for setting in settings)
        gain = (f"; local over Spark's default {s['local_over_spark_default']:.2f}x"
                if "local_over_spark_default" in s else "")
        print(f"{kind}: median raw {s['raw']:,.0f} msg/s; source {args.batch:,}/batch: {cases}{gain}; default "
              f"options {s['default_options']['rate']:,.0f} ({s['default_options']['ratio']:.2f}x)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "command": "python -m bench.bench_source " + " ".join(argv if argv is not None else sys.argv[1:]),
        "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "load_average_end": os.getloadavg(), "n": args.n, "batch": args.batch, "checkpoints": settings,
        "warm_up": warm, "rounds": rounds, "median": summary}, indent=1, default=str) + "\n")
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
