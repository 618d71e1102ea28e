"""A 2-step saga's first drain in a fresh process, as a scheduled job runs it, against the raw stage loop.

    .venv/bin/python -m bench.first_drain [--orders 20000] [--rounds 2] [--out DIR]

Each round starts a new Python process (``--child``) that starts its Spark session, publishes ``--orders`` orders
with ``saga.start`` and times its first ``saga.drain`` (``bench.saga_drain``'s saga, default path: delta-rs tables by
path), from the call to its return: every query start and every cold first batch is in it, as in a job that runs
once a day. The session's own start is reported beside (a job pays it too, but it is Spark's, not the saga's). The
raw baseline runs in the parent in the same round: ``bench.raw.stage_loop`` over as many messages from a quorum
queue to another; the ratio is the drain's messages per second per hop over it. Writes ``first_drain.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.report import alternating_rounds, ratio_line
from bench.session import bench_session

__all__ = ["main", "TARGET"]

RESULTS = Path(__file__).resolve().parent / "results"
_URI = os.environ.get("SAFEBUNNY_BENCH_AMQP_URI", "amqp://guest:guest@127.0.0.1:5672/%2F")
#: a first drain in a fresh process: its messages per second per hop over the raw stage loop's, 20,000 orders
TARGET = 0.4


def _child(orders: int) -> None:
    """In the fresh process: the session, the orders, the first drain; one JSON line on stdout."""
    from bench import saga_drain

    t0 = time.time()
    with bench_session("sb-bench-first-") as session:
        spark = session.start_spark()
        started = time.time() - t0
        got = saga_drain.drain_saga(spark, _URI, orders, session.workdir)
    print("RESULT " + json.dumps({"session_start_s": round(started, 2), **got}), flush=True)


def _first_drain(orders: int, timeout_s: float = 1800.0) -> dict:
    t0 = time.time()
    done = subprocess.run([sys.executable, "-m", "bench.first_drain", "--child", "--orders", str(orders)],
                          capture_output=True, text=True, timeout=timeout_s, check=False)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if done.returncode != 0 or line is None:
        raise RuntimeError(f"the fresh process failed (rc {done.returncode}): {done.stderr[-2000:]}")
    return {**json.loads(line[len("RESULT "):]), "process_wall_s": round(time.time() - t0, 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--orders", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=2, help="rounds of raw and a fresh process (order alternating)")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if args.child:
        _child(args.orders)
        return 0
    from bench.saga_drain import _raw


    def summary(got: dict) -> tuple[dict, str]:
        r = {"raw_stage_msgs_s": round(got["raw"]), **got["saga"],
             "ratio": round(got["saga"]["msgs_s_per_hop"] / got["raw"], 3)}
        return r, (f"first drain {r['seconds']} s = {r['msgs_s_per_hop']:,} msg/s per hop (session start "
                   f"{r['session_start_s']} s, process {r['process_wall_s']} s); raw stage loop "
                   f"{r['raw_stage_msgs_s']:,} msg/s; ratio {r['ratio']}")

    with bench_session("sb-bench-first-parent-") as session:
        book = session.book(_URI)
        rounds = alternating_rounds(args.rounds, ("raw", "saga"), lambda case, _: (
            _raw(book, args.orders) if case == "raw" else _first_drain(args.orders)), summary)
    ratio = statistics.median(r["ratio"] for r in rounds)
    print(ratio_line(f"first drain in a fresh process / raw stage loop per hop, {args.orders:,} orders, default path, "
                     f"median of {len(rounds)} rounds", ratio, TARGET), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"case": "2-step saga's first drain in a fresh process vs raw stage loop (quorum), per hop",
              "orders": args.orders, "median_ratio": round(ratio, 3), "target": TARGET, "met": ratio >= TARGET,
              "rounds": rounds, "load_at_end": os.getloadavg(), "when": time.strftime("%Y-%m-%d %H:%M UTC",
                                                                                       time.gmtime())}
    (out / "first_drain.json").write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
