"""Per-shard overhead: one driver running 1, 2, 4, 8 shards of one saga step, in one run.

    .venv/bin/python -m bench.shard_overhead [--messages 8000] [--shards 1,2,4,8] [--out DIR]

Each case drains a backlog of ``--messages`` orders through the step of ``bench.saga_drivers`` (one
Delta append per batch, batches of up to 500) run by one driver process (``local[2]``) holding every
shard: its rate from the first effect row to the last, and the CPU of the driver's process tree (its
JVM, reader and worker processes) per message over that span. A raw pika consume of as many messages
from a quorum queue, in the same run, is the baseline of the ratios. The fit of the driver's CPU seconds
against the shard count (``bench.scale_model.fit_line``) is the CPU one more shard costs a drain of
this size; ``bench.scale_model`` turns the figures into a model of drivers against shards.
Writes ``shards.json`` to ``bench/results`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from bench import raw
from bench.saga_drivers import drain_case, publisher_session
from bench.scale_model import fit_line
from bench.session import bench_session

__all__ = ["main", "summarise"]

RESULTS = Path(__file__).resolve().parent / "results"


def summarise(cases: list[dict[str, Any]], raw_msgs_s: float) -> dict[str, Any]:
    """Ratios of each case to the raw baseline and to one shard, and the per-shard CPU fit."""
    one = next((c for c in cases if c["shards"] == 1 and c.get("msg_per_s")), None)
    for c in cases:
        c["ratio_to_raw"] = round(c["msg_per_s"] / raw_msgs_s, 3) if c.get("msg_per_s") and raw_msgs_s else None
        c["ratio_to_one_shard"] = (round(c["msg_per_s"] / one["msg_per_s"], 3)
                                   if one and c.get("msg_per_s") else None)
    measured = [c for c in cases if c.get("driver_cpu_s") is not None]
    fit = None
    if len({c["shards"] for c in measured}) >= 2:
        intercept, slope = fit_line([float(c["shards"]) for c in measured], [c["driver_cpu_s"] for c in measured])
        fit = {"cpu_s_at_zero_shards": round(intercept, 2), "cpu_s_per_added_shard": round(slope, 2)}
    return {"raw_pika_consume_msgs_s": round(raw_msgs_s), "cases": cases, "driver_cpu_fit": fit}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=8000)
    parser.add_argument("--shards", default="1,2,4,8", help="comma-separated shard counts")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--uri", default=os.environ.get("SAFEBUNNY_URI", "amqp://guest:guest@127.0.0.1:5672/%2F"))
    args = parser.parse_args(argv)
    counts = [int(s) for s in args.shards.split(",") if s.strip()]
    load_start = os.getloadavg()
    cases = []
    with bench_session() as session:
        book = session.book(args.uri)
        q = book.declare("shards-raw", "quorum")
        raw.publish_window(args.uri, q, args.messages)
        raw_rate = raw.consume_multiple(args.uri, q, args.messages).rate
        book.delete(q)
        book.close()  # before the drains, as ever: no idle connection of the harness on the broker meanwhile
        spark = session.keep_spark(publisher_session())
        for shards in counts:
            case = drain_case(spark, args.uri, shards, args.messages, ["a"])
            cases.append(case)
            print(f"{shards} shard(s): {case['msg_per_s']} msg/s, driver CPU {case['driver_cpu_us_per_msg']} µs/msg",
                  flush=True)
    result = {"case": "one driver, 1..n shards of one step", **summarise(cases, raw_rate),
              "load_average_at_start": load_start, "load_average_at_end": os.getloadavg(),
              "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "shards.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
