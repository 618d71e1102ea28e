"""Four shards of one saga step writing one effect table by name on Delta Spark: how often they plan again.

    .venv-delta/bin/python -m bench.shards_by_name [--shards 4] [--orders 20000] [--delta-jars DIR]

The shards of a step share the table's lock by name (:func:`~safebunny.exactly_once.claims.takeover.lock_app_id`),
so a batch whose commit races another shard's plans again ("planning again (n/8)" in the step's log), and fails
after eight. One process drains ``--orders`` orders through the step (``shards=--shards``, one append per batch)
with ``saga.drain``; the bench counts the replans each batch logged, checks one effect row per order and that no
batch failed for attempts, and writes ``shards_by_name.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench.report import verdict
from bench.session import bench_session

__all__ = ["main", "ReplanCounter"]

RESULTS = Path(__file__).resolve().parent / "results"
_URI = os.environ.get("SAFEBUNNY_BENCH_AMQP_URI", "amqp://guest:guest@127.0.0.1:5672/%2F")


class ReplanCounter(logging.Handler):
    """Counts the step log's "planning again" lines per ``(node, batch)`` and the batches that ran out of attempts."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.replans: dict[str, int] = {}

    def emit(self, record: logging.LogRecord) -> None:
        if "planning again" in record.msg and len(record.args or ()) >= 2:
            key = f"{record.args[0]}/{record.args[1]}"  # type: ignore[index]
            self.replans[key] = self.replans.get(key, 0) + 1


def run(spark: Any, orders: int, shards: int, workdir: Path) -> dict[str, Any]:
    import safebunny
    from safebunny.saga.define import topology

    name = f"bench-shards-{uuid.uuid4().hex[:6]}"
    spark.sql("CREATE DATABASE IF NOT EXISTS sb_shards")
    table = f"sb_shards.reservations_{name[-6:]}"
    saga = safebunny.Saga(name, uri=_URI, root=str(workdir / name))

    @saga.step("stock", consumes="OrderPlaced", from_node="orders", schema="orderId string", shards=shards)
    def reserve(orders_df: Any, ctx: Any) -> Any:
        return safebunny.Outcome(effects=[safebunny.append(orders_df.select("messageId", "orderId"), table)])

    counter = ReplanCounter()
    logging.getLogger("safebunny.step").addHandler(counter)
    try:
        saga.start(spark.range(orders).selectExpr("concat('o', id) AS orderId"), node="orders", type="OrderPlaced",
                   business_key="orderId")
        t0 = time.time()
        error = None
        try:
            saga.drain(spark, timeout=1800, restarts=0)
        except Exception as exc:  # noqa: BLE001 - a batch out of attempts is the bench's answer, reported
            error = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
        seconds = time.time() - t0
        ids = [r[0] for r in spark.table(table).select("orderId").collect()] if spark.catalog.tableExists(table) else []
        batches = [r for s in saga.steps for r in saga.reports_of(s) if r.received]
        per_batch = [counter.replans.get(f"{r.node}/{r.batch_id}", 0) for r in batches]
        return {"orders": orders, "shards": shards, "seconds": round(seconds, 1), "rows": len(ids),
                "distinct": len(set(ids)), "batches": len(batches), "replans": sum(counter.replans.values()),
                "replans_per_batch": round(sum(per_batch) / max(len(batches), 1), 3),
                "max_replans_in_a_batch": max(counter.replans.values(), default=0), "error": error}
    finally:
        logging.getLogger("safebunny.step").removeHandler(counter)
        topology.delete(saga)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--orders", type=int, default=20_000)
    parser.add_argument("--delta-jars", default=os.path.expanduser("~/.cache/safebunny/delta-jars/4.4.0"))
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    with bench_session("sb-bench-shards-") as session:
        spark = session.start_spark(args.delta_jars)
        got = run(spark, args.orders, args.shards, session.workdir)
    met = got["error"] is None and got["rows"] == got["distinct"] == args.orders
    got.update({"met": met, "load": os.getloadavg(), "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())})
    print(f"{args.shards} shards of one step on one table by name, {args.orders:,} orders: {got['batches']} batches, "
          f"{got['replans']} replans ({got['replans_per_batch']} per batch, at most {got['max_replans_in_a_batch']} "
          f"in one), {got['rows']:,} rows ({got['distinct']:,} distinct), failed for attempts: "
          f"{got['error'] or 'none'}: {verdict(met)}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "shards_by_name.json").write_text(json.dumps(got, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
