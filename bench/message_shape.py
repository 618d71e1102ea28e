"""The source and raw pika consume on messages of two shapes, interleaved.

    .venv/bin/python -m bench.message_shape [--n 50000] [--rounds 2] [--kinds quorum,classic] [--batch 10000]

"plain": what ``raw.publish_window`` publishes (a short message id, a content type). "stage": what the
connector's stage publishes (a 36-character derived message id, a correlation id, an ``x-causation-id``
header, a timestamp): the queue is filled by running the connector's stage over a plain queue. Per round,
queue type and shape: fill a queue and drain it with the raw ceiling (``raw.consume_multiple``), fill
another and drain it with the source at ``--batch`` per trigger. Prints each pair and the median ratio
per (queue type, shape): how much of a source/raw gap is the messages' shape when the two read different
messages. Warms the session up as ``bench.bench_source`` does, for ``--warmup-s`` seconds (the driver JVM's JIT
compilers).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from bench import connector as conn
from bench import raw
from bench.bench_source import warm_up
from bench.session import bench_session

__all__ = ["main"]

_URI = os.environ.get("SAFEBUNNY_BENCH_AMQP_URI", "amqp://guest:guest@127.0.0.1:5672/%2F")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=50_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--kinds", default="quorum,classic")
    ap.add_argument("--batch", type=int, default=10_000)
    ap.add_argument("--warmup-s", type=float, default=60.0)
    args = ap.parse_args(argv)
    n, batch = args.n, args.batch
    with bench_session("safebunny-shape-") as session:
        work = session.workdir
        session_started = time.time()
        spark = session.start_spark()
        book = session.book(_URI, f"shape{os.getpid()}")

        def fill(queue: str, kind: str, shape: str) -> None:
            if shape == "plain":
                raw.publish_window(_URI, queue, n, timeout_s=300)
                return
            plain = book.declare("plain", kind)
            raw.publish_window(_URI, plain, n, timeout_s=300)
            conn.run_stage(spark, _URI, plain, queue, kind, n, batch, work, timeout_s=600)
            book.delete(plain)

        warm_up(spark, book, n, batch, work, ["local"], session_started + args.warmup_s)
        ratios: dict[tuple[str, str], list[float]] = {}
        for r in range(args.rounds):
            for kind in args.kinds.split(","):
                for shape in ("plain", "stage"):
                    q = book.declare(f"raw-{shape}", kind)
                    fill(q, kind, shape)
                    raw_rate = raw.consume_multiple(_URI, q, n, timeout_s=300).rate
                    book.delete(q)
                    q = book.declare(f"src-{shape}", kind)
                    fill(q, kind, shape)
                    run = conn.run_source(spark, _URI, q, kind, n, batch, work, timeout_s=600)
                    book.delete(q)
                    src_rate = run.count / max(run.end - run.start, 1e-9)
                    ratios.setdefault((kind, shape), []).append(src_rate / raw_rate)
                    print(f"round {r + 1} {kind} {shape}: raw {raw_rate:,.0f} msg/s, source {src_rate:,.0f} msg/s "
                          f"({src_rate / raw_rate:.2f}x), {run.extra['batches']} batches", flush=True)
        for (kind, shape), values in ratios.items():
            print(f"{kind} {shape}: median {statistics.median(values):.2f}x "
                  f"({' / '.join(f'{v:.2f}' for v in values)})")


if __name__ == "__main__":
    main()
