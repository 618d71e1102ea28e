"""An exactly-once step against the raw stage loop, in the same run (issue 11, item 6a).

    .venv/bin/python -m bench.bench_step [--n 60000] [--batch 10000]

Raw: pika consume -> orjson transform -> confirmed publish -> batched ack (``raw.stage_loop``).
Step: the source -> ``safebunny.Step`` (in-batch and inbox dedupe) -> one Delta append (delta-rs)
-> an emit per input through the sink -> the inbox marker, ``availableNow`` with ``batch`` messages
per trigger. The step's rate is its steady state (the batches after the cold first one, as in
``bench.connector``). The run checks one effect row per input and ``n`` emitted messages, and writes
``bench/results/step.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench import connector as conn
from bench import raw
from bench.broker import QueueBook

__all__ = ["main", "run_step"]

_URI = os.environ.get("SAFEBUNNY_BENCH_AMQP_URI", "amqp://guest:guest@127.0.0.1:5672/%2F")


def run_step(spark: Any, uri: str, queue: str, out: str, n: int, batch: int, workdir: Path,
             timeout_s: float = 900.0) -> tuple[conn.ConnRun, float]:
    """Drain ``n`` messages through one Step; returns its steady run and the whole query's wall seconds."""
    from pyspark.sql import functions as F  # noqa: N812

    import safebunny

    effects, inbox = str(workdir / "orders"), str(workdir / "inbox")
    step = safebunny.Step(node="bench", inbox=inbox, uri=uri)

    def handle(orders: Any, ctx: Any) -> Any:
        body = F.col("value").cast("string")
        rows = orders.select("messageId", F.get_json_object(body, "$.id").cast("long").alias("orderId"),
                             F.get_json_object(body, "$.amount").cast("double").alias("amount"))
        return safebunny.Outcome(effects=[safebunny.append(rows, effects)],
                                 emits=[safebunny.emit(rows.select("messageId", "orderId"), type="OrderSeen",
                                                       exchange="", routing_key=out)])

    df = conn._reader(spark, uri, queue, "classic", batch, 1, workdir)
    t0 = time.time()
    query = (df.writeStream.foreachBatch(step.foreach_batch(handle))
             .option("checkpointLocation", str(workdir / f"ck-{uuid.uuid4().hex[:8]}"))
             .trigger(availableNow=True).start())
    run = conn._drained(query, n, timeout_s, "step", f"the step query on {queue!r}", queue)
    wall = time.time() - t0
    from deltalake import DeltaTable

    got = DeltaTable(effects).to_pyarrow_table(columns=["messageId"]).column("messageId").to_pylist()
    if len(got) != n or len(set(got)) != n:
        raise conn.ConnectorBenchError(f"the step wrote {len(got)} effect rows ({len(set(got))} distinct), "
                                       f"expected {n}")
    return run, wall


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=60_000, help="messages per case (default 60000)")
    parser.add_argument("--batch", type=int, default=10_000, help="the step's maxMessagesPerTrigger")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    workdir = Path(tempfile.mkdtemp(prefix="sb-bench-step-"))
    book = QueueBook(_URI, uuid.uuid4().hex[:6])
    spark = conn.start_spark(workdir)
    try:
        a, b = book.declare("raw-in", "classic"), book.declare("raw-out", "classic")
        raw.publish_window(_URI, a, args.n)
        stage = raw.stage_loop(_URI, a, b, args.n)
        c, d = book.declare("step-in", "classic"), book.declare("step-out", "classic")
        raw.publish_window(_URI, c, args.n)
        step, wall = run_step(spark, _URI, c, d, args.n, args.batch, workdir)
        emitted = book.depth(d)
        if emitted != args.n or book.depth(c) != 0:
            raise conn.ConnectorBenchError(f"{emitted} emitted (expected {args.n}), {book.depth(c)} left in {c!r}")
        result = {"n": args.n, "batch": args.batch, "raw_stage_msgs_s": round(stage.rate),
                  "step_msgs_s": round(step.rate), "step_wall_s": round(wall, 1),
                  "ratio": round(step.rate / stage.rate, 3), "step_batches": step.extra.get("batches"),
                  "step_batch_ms": step.batch_ms, "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
        print(f"raw stage loop: {result['raw_stage_msgs_s']:,} msg/s")
        print(f"step (inbox + Delta append + emit): {result['step_msgs_s']:,} msg/s steady "
              f"({result['step_batches']} batches, {result['step_wall_s']} s wall)")
        print(f"ratio step/raw: {result['ratio']} (target >= 0.4)")
        out = Path(__file__).parent / "results" / "step.json"
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")
    finally:
        for q in list(book.names):
            book.delete(q)
        spark.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
