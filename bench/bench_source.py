"""The classic/quorum source against raw pika consume, interleaved in one run (issue 15).

    .venv/bin/python -m bench.bench_source [--n 50000] [--rounds 3] [--kinds classic,quorum] [--batch 10000]

Each round, per queue type: fill a queue with ``n`` ~200-byte JSON messages and drain it with the raw
ceiling (``raw.consume_multiple``: pika, prefetch 1,000, ``multiple`` acks every 250); fill it again and
drain it with the source into Spark's ``noop`` sink at ``--batch`` messages per trigger; fill it again
and drain it with the source at its default options (the backlog drain rate users get without tuning;
``--default-n`` messages, so that several of its large batches follow the first).
The Spark session is started (and warmed with one small query) before the first round, so no round pays
the JVM's cold start; each query's first batch is still left out, as in ``bench.connector``. Ratios are
per round (the raw number of the same minutes), then the median. Results: ``bench/results/source.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import connector as conn
from bench import raw
from bench.broker import QueueBook

__all__ = ["main"]

_URI = os.environ.get("SAFEBUNNY_BENCH_AMQP_URI", "amqp://guest:guest@127.0.0.1:5672/%2F")
RESULTS = Path(__file__).parent / "results"


def _round(spark: Any, book: QueueBook, kind: str, n: int, batch: int, workdir: Path,
           default_n: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    qs = [book.declare(f"src-{kind}", kind) for _ in range(3)]  # a fresh queue per case: none sees another's
    try:
        raw.publish_window(_URI, qs[0], n)
        out["raw"] = raw.consume_multiple(_URI, qs[0], n).rate
        q = qs[1]
        raw.publish_window(_URI, q, n)
        run = conn.run_source(spark, _URI, q, kind, n, batch, workdir)
        out["source"] = run.rate
        out["source_batches"] = run.extra.get("batches")
        out["source_phases_ms_p50"] = run.extra.get("phases_ms_p50")
        out["source_batch_ms_p50"] = statistics.median(run.batch_ms) if run.batch_ms else None
        q = qs[2]
        raw.publish_window(_URI, q, default_n)
        run = conn.run_source(spark, _URI, q, kind, default_n, None, workdir)
        out["default"] = run.rate
        out["default_batches"] = run.extra.get("batches")
        out["default_first_batch"] = run.extra.get("first_batch")
        out["left_behind"] = [book.depth(x) for x in qs[1:]]  # what the source cases left unacked: none
    finally:
        for x in qs:
            book.delete(x)
    out["ratio"] = out["source"] / out["raw"]
    out["default_ratio"] = out["default"] / out["raw"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_source", description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--default-n", type=int, default=200_000,
                        help="queue depth for the default-options drain (deep enough for several large batches)")
    parser.add_argument("--kinds", default="classic,quorum")
    parser.add_argument("--out", type=Path, default=RESULTS / "source.json")
    args = parser.parse_args(argv)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    workdir = Path(tempfile.mkdtemp(prefix="safebunny-bench-source-"))
    book = QueueBook(_URI, os.urandom(3).hex())
    spark = conn.start_spark(workdir)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    rounds: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    started = time.time()
    try:
        warm = book.declare("src-warm", "classic")
        raw.publish_window(_URI, warm, 2_000)
        conn.run_source(spark, _URI, warm, "classic", 2_000, 500, workdir)
        book.delete(warm)
        for i in range(args.rounds):
            for kind in kinds:
                r = _round(spark, book, kind, args.n, args.batch, workdir, args.default_n)
                rounds[kind].append(r)
                print(f"round {i + 1} {kind}: raw {r['raw']:,.0f} msg/s; source {r['source']:,.0f} "
                      f"({r['ratio']:.2f}x, {r['source_batches']} batches, p50 {r['source_batch_ms_p50']:.0f} ms); "
                      f"default options {r['default']:,.0f} ({r['default_ratio']:.2f}x, "
                      f"{r['default_batches']} batches)", flush=True)
    finally:
        spark.stop()
        book.close()
        shutil.rmtree(workdir, ignore_errors=True)
    summary = {}
    for kind, rs in rounds.items():
        if not rs:
            continue
        summary[kind] = {key: statistics.median(r[key] for r in rs)
                         for key in ("raw", "source", "ratio", "default", "default_ratio")}
        s = summary[kind]
        print(f"{kind}: median raw {s['raw']:,.0f} msg/s, source {args.batch:,}/batch {s['source']:,.0f} "
              f"({s['ratio']:.2f}x), default options {s['default']:,.0f} ({s['default_ratio']:.2f}x)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "command": "python -m bench.bench_source " + " ".join(argv if argv is not None else sys.argv[1:]),
        "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "load_average_end": os.getloadavg(), "n": args.n, "batch": args.batch,
        "rounds": rounds, "median": summary}, indent=1, default=str) + "\n")
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
