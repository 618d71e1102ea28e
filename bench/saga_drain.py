"""A 2-step saga at its default settings draining a backlog, against the raw pika stage loop, in one run.

    .venv/bin/python -m bench.saga_drain [--orders 20000,100000] [--rounds 2] [--out DIR]

The saga (issue 50, item 1): ``stock`` appends each order to a Delta table and emits ``Reserved`` to
``shipping``, which appends it to another; every setting is ``safebunny.Saga``'s default (quorum queues).
``--orders`` orders are published with ``saga.start`` before the clock starts; the time is ``saga.drain``'s,
from its call to its return, as a user waits for it (query starts included). Its rate per hop is
``2 * orders / seconds``. The raw baseline, in the same round on the same broker: ``bench.raw.stage_loop``
(pika consume -> orjson -> confirmed publish -> batched ack) over as many messages from a quorum queue to
another. Rounds alternate which runs first; each round checks one effect row per order in both tables.
Writes ``saga_drain.json`` to ``bench/results`` (or ``--out``). ``--record-cost``: the saga with its DataFrame
outcomes recorded (``record_frame_outcomes``, the default) against the same saga without, instead of the raw loop
(``saga_drain_record.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench import connector as conn
from bench import raw
from bench.broker import QueueBook
from bench.report import alternating_rounds, ratio_line
from bench.session import bench_session

__all__ = ["main", "drain_saga", "TARGETS", "BY_NAME_TARGETS"]

RESULTS = Path(__file__).resolve().parent / "results"
_URI = os.environ.get("SAFEBUNNY_BENCH_AMQP_URI", "amqp://guest:guest@127.0.0.1:5672/%2F")
#: issue 50, item 1: the saga's messages per second per hop over the raw stage loop's, by backlog
TARGETS = {20_000: 0.3, 100_000: 0.5}
#: the target of the same saga with its effect tables by name on Delta Spark
BY_NAME_TARGETS = {100_000: 0.3}


def _saga(uri: str, workdir: Path, batch_size: int | None = None, record: bool = True,
          by_name: bool = False) -> tuple[Any, dict[str, str]]:
    import safebunny

    name = f"bench-drain-{uuid.uuid4().hex[:6]}"
    tables = {"reservations": str(workdir / "reservations"), "shipments": str(workdir / "shipments")}
    if by_name:  # effect tables by name on Delta Spark (the saga's inbox stays under its root)
        tables = {table: f"sb_drain.{table}_{name[-6:]}" for table in tables}
    settings = safebunny.SagaSettings(batch_size=batch_size, record_frame_outcomes=record)  # None: the default
    saga = safebunny.Saga(name, uri=uri, root=str(workdir / "saga"), settings=settings)

    @saga.step("stock", consumes="OrderPlaced", from_node="orders", schema="orderId string, amount double",
               produces=["Reserved"])
    def reserve(orders: Any, ctx: Any) -> Any:
        rows = orders.select("messageId", "orderId", "amount")
        return safebunny.Outcome(effects=[safebunny.append(rows, tables["reservations"])],
                                 emits=[safebunny.emit(rows, type="Reserved")])

    @saga.step("shipping", consumes="Reserved", from_node="stock", schema="orderId string, amount double")
    def ship(reserved: Any, ctx: Any) -> Any:
        return safebunny.Outcome(effects=[safebunny.append(reserved.select("messageId", "orderId"),
                                                           tables["shipments"])])

    return saga, tables


def _distinct_rows(path: str) -> tuple[int, int]:
    from safebunny.delta.backend import delta_target

    table = delta_target(path).read()
    if table is None:
        return 0, 0
    ids = table.column("orderId").to_pylist()
    return len(ids), len(set(ids))


def drain_saga(spark: Any, uri: str, orders: int, workdir: Path, batch_size: int | None = None,
               record: bool = True, by_name: bool = False) -> dict[str, Any]:
    """Publish ``orders`` orders, then time ``saga.drain``; checks one effect row per order in each table."""
    from safebunny.saga.define import topology

    run_dir = workdir / f"saga-{uuid.uuid4().hex[:8]}"
    if by_name:
        spark.sql("CREATE DATABASE IF NOT EXISTS sb_drain")
    saga, tables = _saga(uri, run_dir, batch_size, record, by_name)
    try:
        frame = spark.range(orders).selectExpr("concat('o', id) AS orderId", "CAST(id % 997 AS DOUBLE) AS amount")
        saga.start(frame, node="orders", type="OrderPlaced", business_key="orderId")
        t0 = time.time()
        rounds = saga.drain(spark, timeout=1800)
        seconds = time.time() - t0
        got = {name: _distinct_rows(path) for name, path in tables.items()}
        for name, (rows, distinct) in got.items():
            if rows != orders or distinct != orders:
                raise conn.ConnectorBenchError(f"{name}: {rows} effect rows ({distinct} distinct), expected {orders}")
        batches = [r.received for s in saga.steps for r in saga.reports_of(s)]
        return {"seconds": round(seconds, 2), "msgs_s_per_hop": round(2 * orders / seconds), "drain_rounds": rounds,
                "batches": len(batches), "largest_batch": max(batches, default=0),
                "median_batch": statistics.median(batches) if batches else 0}
    finally:
        topology.delete(saga)
        shutil.rmtree(run_dir, ignore_errors=True)


def _raw(book: QueueBook, orders: int) -> float:
    q_in, q_out = book.declare("drain-raw-in", "quorum"), book.declare("drain-raw-out", "quorum")
    try:
        raw.publish_window(_URI, q_in, orders)
        return raw.stage_loop(_URI, q_in, q_out, orders).rate
    finally:
        book.delete(q_in)
        book.delete(q_out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--orders", default="20000,100000", help="comma-separated backlog sizes")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per size (raw and saga, order alternating)")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="SagaSettings(batch_size=...) instead of the default (1000 before issue 50)")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--record-cost", action="store_true",
                        help="the saga with DataFrame outcomes recorded against the same saga without (no raw loop)")
    parser.add_argument("--by-name", action="store_true", help="the saga's effect tables by name on Delta Spark")
    parser.add_argument("--delta-jars", default=os.path.expanduser("~/.cache/safebunny/delta-jars/4.4.0"),
                        help="Delta Spark's jars (make delta-jars), with --by-name")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sizes = [int(s) for s in args.orders.split(",") if s.strip()]
    base = "saga unrecorded (per hop)" if args.record_cost else "raw stage loop"
    targets = BY_NAME_TARGETS if args.by_name else TARGETS
    cases = []
    with bench_session("sb-bench-drain-") as session:
        workdir = session.workdir
        book = session.book(_URI)
        spark = session.start_spark(args.delta_jars if args.by_name else None)
        for orders in sizes:

            def measure(case: str, _index: int, orders: int = orders) -> Any:
                if case == "raw" and args.record_cost:  # the same saga, its outcomes not recorded
                    return drain_saga(spark, _URI, orders, workdir, args.batch_size, False,
                                      args.by_name)["msgs_s_per_hop"]
                return (_raw(book, orders) if case == "raw"
                        else drain_saga(spark, _URI, orders, workdir, args.batch_size, by_name=args.by_name))

            def summary(got: dict[str, Any], orders: int = orders) -> tuple[dict[str, Any], str]:
                r = {"raw_stage_msgs_s": round(got["raw"]), **got["saga"],
                     "ratio": round(got["saga"]["msgs_s_per_hop"] / got["raw"], 3)}
                return r, (f"saga drain {r['seconds']} s = {r['msgs_s_per_hop']:,} msg/s per hop ({r['drain_rounds']} "
                           f"drain rounds, {r['batches']} batches, largest {r['largest_batch']}); {base} "
                           f"{r['raw_stage_msgs_s']:,} msg/s; ratio {r['ratio']} (target >= "
                           f"{targets.get(orders, '-')})")

            rounds = alternating_rounds(args.rounds, ("raw", "saga"), measure, summary, f"{orders:,} orders, round")
            ratio = statistics.median(r["ratio"] for r in rounds)
            target = targets.get(orders)
            cases.append({"orders": orders, "median_ratio": round(ratio, 3), "target": target,
                          "met": None if target is None else ratio >= target, "rounds": rounds})
            print(ratio_line(f"saga drain / raw stage loop per hop, {orders:,} orders, median of {len(rounds)} rounds "
                             f"{' (effect tables by name)' if args.by_name else ''}", ratio, target), flush=True)
        result = {"case": "2-step saga at default settings, drain vs raw stage loop (quorum), per hop"
                          + (", effect tables by name on Delta Spark" if args.by_name else ""),
                  "batch_size": args.batch_size or "default",
                  "cases": cases, "load_at_end": os.getloadavg(),
                  "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        name = "saga_drain.json" if args.batch_size is None else f"saga_drain_batch{args.batch_size}.json"
        if args.record_cost:  # "raw" is the saga without recording: the ratio is recorded over unrecorded
            name = "saga_drain_record.json"
        name = name.replace("saga_drain", "saga_drain_by_name") if args.by_name else name
        (out / name).write_text(json.dumps(result, indent=2) + "\n")
        return 0


if __name__ == "__main__":
    sys.exit(main())
