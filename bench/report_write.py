"""What recording one batch in a saga step's report file costs when it holds the newest 240 reports.

    python -m bench.report_write [--repeat 500]

Fills a fresh ``ReportStore`` under a temporary folder with :data:`~safebunny.saga.run.reports.KEEP` reports, then
times ``ReportStore.record`` (read the file, add the report, rewrite it whole: write, then rename) and, apart,
its read and its write alone; prints the file's size and the median and p90 of each in milliseconds.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import statistics
import tempfile
import time

import orjson

from safebunny.exactly_once.protocol.report import BatchReport
from safebunny.saga.run.reports import KEEP, ReportStore, add_report
from safebunny.storage.writes import write_atomically

__all__ = ["main"]


def _report(batch_id: int) -> BatchReport:
    phases = {"read": 0.01, "dedupe": 0.002, "handler": 0.03, "ids": 0.001, "effects": 0.05, "publish": 0.02,
              "failed": 0.0, "inbox": 0.04}
    return BatchReport("payment", "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", batch_id, 500, 3, 2, 495, 2, 495, False,
                       0.16, dt.datetime.now(dt.timezone.utc), phases, "driver", 0, 1, 1, 1)


def _times(fn, repeat: int) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    seen = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        seen.append((time.perf_counter() - start) * 1000)
    seen.sort()
    return statistics.median(seen), seen[int(len(seen) * 0.9)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=500)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="sb-report-write-")
    try:
        store = ReportStore(root, "payment.StockReserved")
        for batch_id in range(KEEP):
            store.record(_report(batch_id))
        data = orjson.dumps(store.read())
        batch = iter(range(KEEP, KEEP + 10 * args.repeat))
        record = _times(lambda: store.record(_report(next(batch))), args.repeat)
        read = _times(store.read, args.repeat)
        add = _times(lambda: orjson.dumps(add_report(store.read(), _report(next(batch)))), args.repeat)
        write = _times(lambda: write_atomically(store.filesystem, store.path, data, durable=False), args.repeat)
        print(f"report file: {len(data) / 1024:.0f} KiB, {KEEP} reports, load {os.getloadavg()[0]:.1f}")
        for name, (median, p90) in (("record (read, add, rewrite)", record), ("read", read),
                                    ("read + add + encode", add), ("rewrite alone", write)):
            print(f"{name:30s} median {median:6.2f} ms  p90 {p90:6.2f} ms")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
