"""The per-batch cost of the Delta inbox as it grows (delta-rs, no Spark, no broker).

    python -m bench.bench_inbox [--sizes 1000000,10000000] [--batch 10000] [--repeat 3] [--days 7]

For each size, fills a fresh inbox table with that many processed ids for one node, spread over
``--days`` date partitions (as a week of traffic would be), then times what a step does per batch:
``Inbox.seen`` (the dedupe look-up of ``--batch`` ids: half already processed, half new) and
``Inbox.record`` (the batch's append with its app transaction), once by scanning the node's
partitions and once through the driver-side index (``inbox_index.SeenIndex``: its build, then look-ups
with no id, 1% and half of the ids seen before). Reports the median of ``--repeat`` batches, before and
after ``Inbox.maintain()`` compacts the table.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import statistics
import tempfile
import time
import uuid

import pyarrow as pa

from safebunny.exactly_once.inbox.table import INBOX_SCHEMA, PARTITIONS, Inbox, InboxRow

__all__ = ["main"]

NODE = "billing"


def _fill(path: str, size: int, days: int, now: dt.datetime) -> list[str]:
    from deltalake import write_deltalake

    ids = [str(uuid.uuid4()) for _ in range(size)]
    chunk = 1_000_000
    for start in range(0, size, chunk):
        part = ids[start:start + chunk]
        day = now - dt.timedelta(days=(start // chunk) % days)
        n = len(part)
        table = pa.table({
            "node": [NODE] * n, "messageId": part, "correlationId": part, "causationId": [None] * n,
            "type": ["OrderPlaced"] * n, "epoch": ["fill"] * n, "batchId": list(range(start, start + n)),
            "status": ["done"] * n, "reason": [None] * n, "attempts": [1] * n, "emitted": [[]] * n,
            "processedAt": [day] * n, "processedDate": [day.date().isoformat()] * n}, schema=INBOX_SCHEMA)
        write_deltalake(path, table, mode="append", partition_by=list(PARTITIONS))
    return ids


def _batches(inbox: Inbox, known: list[str], batch: int, repeat: int, first: int, now: dt.datetime,
             duplicates: float = 0.5) -> tuple[list[float], list[float]]:
    seen_s, record_s = [], []
    per = int(batch * duplicates)
    for n in range(repeat):
        old = known[n * per:(n + 1) * per]
        ids = old + [str(uuid.uuid4()) for _ in range(batch - len(old))]
        t0 = time.perf_counter()
        found = inbox.seen(ids, "bench", first + n, now=now)
        t1 = time.perf_counter()
        inbox.record([InboxRow(i, i, None) for i in ids if i not in found], "bench", first + n, now=now)
        t2 = time.perf_counter()
        assert len(found) == len(old), (len(found), len(old))
        seen_s.append(t1 - t0)
        record_s.append(t2 - t1)
    return seen_s, record_s


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_inbox", description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1000000,10000000")
    p.add_argument("--batch", type=int, default=10_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--days", type=int, default=7)
    args = p.parse_args(argv)
    now = dt.datetime.now(dt.timezone.utc)
    print(f"| inbox rows | scan: look-up of {args.batch:,} ids (half seen), p50 s | append, p50 s | "
          "index: first look-up (builds it) s | index: look-up, no id seen / 1% seen / half seen, p50 s | "
          "after compaction: scan / index, half seen |")
    print("| --- | --- | --- | --- | --- | --- |")
    for size in (int(s) for s in args.sizes.split(",")):
        root = tempfile.mkdtemp(prefix="sb-bench-inbox-")
        try:
            known = _fill(f"{root}/inbox", size, args.days, now)
            scan = Inbox(f"{root}/inbox", NODE)
            scan._store.indexed = False  # the scan the index replaces
            seen, record = _batches(scan, known, args.batch, args.repeat, 0, now)
            indexed = Inbox(f"{root}/inbox", NODE)
            t0 = time.perf_counter()
            indexed.seen(["warm-up"], "bench", 10_000, now=now)
            build = time.perf_counter() - t0
            batch_id, index_s = 100, []
            for duplicates, offset in ((0.0, 0), (0.01, size // 4), (0.5, size // 3)):
                got, _ = _batches(indexed, known[offset:], args.batch, args.repeat, batch_id, now, duplicates)
                index_s.append(statistics.median(got))
                batch_id += args.repeat
            scan.maintain(now=now, vacuum=False)
            after_scan, _ = _batches(scan, known[size // 2:], args.batch, args.repeat, batch_id, now)
            after_index, _ = _batches(indexed, known[2 * size // 3:], args.batch, args.repeat, batch_id + 50, now)
            print(f"| {size:,} | {statistics.median(seen):.3f} | {statistics.median(record):.3f} | {build:.2f} | "
                  f"{' / '.join(f'{x:.3f}' for x in index_s)} | "
                  f"{statistics.median(after_scan):.3f} / {statistics.median(after_index):.3f} |", flush=True)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
