"""One stream-protocol partition of the source against raw rstream consume, in one warm Spark session.

    .venv/bin/python -m bench.stream_partition [--n 300000] [--rounds 3] [--warmup 2]

Issue 50, item 3 (target: one partition >= 0.85x raw rstream consume). ``bench.run``'s stream cases measure the
same pair, but with ``--quick --only`` they are the session's first Spark work, so the driver JVM is still
compiling (in ``--full`` they follow the AMQP chains). Here one stream is filled with rstream (``send_batch``
of 1,000, ~200-byte JSON bodies), ``--warmup`` reads of it through the source warm the session, then each round
runs raw rstream consume and the source (one partition, 50k per batch, into Spark's ``noop`` sink; its rate
is the batches after the cold first one), alternating which goes first. Prints each round's ratio and the
median beside the target; writes ``bench/results/stream_partition.json``. Profile the Python worker with
``python -m bench.profile "bench.stream_partition --rounds 1"``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from bench import connector as conn
from bench import raw
from bench.report import STREAM_ONE_PARTITION_TARGET, alternating_rounds, ratio_line
from bench.run import STREAM_MMPT
from bench.session import bench_session

__all__ = ["main"]

_URI = os.environ.get("SAFEBUNNY_BENCH_AMQP_URI", "amqp://guest:guest@127.0.0.1:5672/%2F")
BATCH = STREAM_MMPT  # bench.run's stream source batches


def _largest(phases: dict[str, float], top: int = 6) -> str:
    ranked = sorted(((k, v) for k, v in phases.items() if k != "triggerExecution"), key=lambda kv: -kv[1])[:top]
    return " · ".join(f"{k} {v:,.0f}" for k, v in ranked) + f" (batch {phases.get('triggerExecution', 0):,.0f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=300_000, help="messages in the stream, read whole by each case")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=2, help="source reads before the first round")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    with bench_session("sb-bench-stream1-") as session:
        workdir = session.workdir
        broker = session.stream_broker(_URI)
        book = session.book(broker.uri)
        spark = session.start_spark()
        stream = book.declare("stream-one", "stream")
        raw.rstream_publish(broker.uri, stream, args.n)

        phases: list[dict] = []

        def source() -> float:
            run = conn.run_source(spark, broker.uri, stream, "stream", args.n, BATCH, workdir)
            phases.append(run.extra.get("phases_ms_p50") or {})
            return run.rate

        for _ in range(args.warmup):
            source()

        def summary(got: dict) -> tuple[dict, str]:
            r = {"rstream_msgs_s": round(got["raw"]), "source_msgs_s": round(got["source"]),
                 "ratio": round(got["source"] / got["raw"], 3), "source_phases_ms_p50": phases[-1]}
            return r, (f"rstream consume {r['rstream_msgs_s']:,} msg/s; source, 1 partition {r['source_msgs_s']:,} "
                       f"msg/s; ratio {r['ratio']}; the source's Spark phases, p50 ms: {_largest(phases[-1])}")

        rounds = alternating_rounds(args.rounds, ("raw", "source"), lambda case, _: (
            raw.rstream_consume(broker.uri, stream, args.n).rate if case == "raw" else source()), summary)
        ratio = statistics.median(r["ratio"] for r in rounds)
        print(ratio_line(f"stream source, 1 partition / raw rstream consume, median of {len(rounds)} rounds "
                         "(issue 50, item 3)", ratio, STREAM_ONE_PARTITION_TARGET), flush=True)
        result = {"n": args.n, "batch": BATCH, "warmup": args.warmup, "broker": broker.said, "rounds": rounds,
                  "median_ratio": ratio, "target": STREAM_ONE_PARTITION_TARGET,
                  "met": ratio >= STREAM_ONE_PARTITION_TARGET, "load_at_end": os.getloadavg(),
                  "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
        out = Path(__file__).parent / "results" / "stream_partition.json"
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")
        return 0


if __name__ == "__main__":
    sys.exit(main())
