"""An exactly-once step against the raw stage loop, in the same run.

    .venv/bin/python -m bench.bench_step [--n 60000] [--batch 10000] [--rounds 3]

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
import statistics
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
             timeout_s: float = 900.0) -> tuple[conn.ConnRun, float, dict[str, float]]:
    """Drain ``n`` messages through one Step; returns its steady run, the whole query's wall seconds and
    the median seconds per phase of its full batches after the first (``BatchReport.phases``)."""
    from pyspark.sql import functions as F  # noqa: N812

    import safebunny

    run_dir = workdir / f"step-{uuid.uuid4().hex[:8]}"  # a fresh inbox and effect table per run
    effects, inbox = str(run_dir / "orders"), str(run_dir / "inbox")
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
    full = [r for r in step.reports if r.received == batch][1:] or list(step.reports)
    names = full[0].phases if full else {}
    phases = {k: round(statistics.median(r.phases.get(k, 0.0) for r in full), 3) for k in names}
    return run, wall, phases


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=60_000, help="messages per case (default 60000)")
    parser.add_argument("--batch", type=int, default=10_000, help="the step's maxMessagesPerTrigger")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of raw then step (order alternating)")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    workdir = Path(tempfile.mkdtemp(prefix="sb-bench-step-"))
    book = QueueBook(_URI, uuid.uuid4().hex[:6])
    spark = conn.start_spark(workdir)
    rounds = []
    try:
        for index in range(args.rounds):
            # alternate which case runs first, so a drift of the machine's load favours neither
            order = ("raw", "step") if index % 2 == 0 else ("step", "raw")
            got: dict[str, Any] = {}
            for case in order:
                q_in = book.declare(f"{case}-in-{index}", "classic")
                q_out = book.declare(f"{case}-out-{index}", "classic")
                raw.publish_window(_URI, q_in, args.n)
                if case == "raw":
                    got["raw"] = raw.stage_loop(_URI, q_in, q_out, args.n).rate
                else:
                    run, wall, phases = run_step(spark, _URI, q_in, q_out, args.n, args.batch, workdir)
                    emitted = book.depth(q_out)
                    if emitted != args.n or book.depth(q_in) != 0:
                        raise conn.ConnectorBenchError(
                            f"{emitted} emitted (expected {args.n}), {book.depth(q_in)} left in {q_in!r}")
                    got.update(step=run.rate, wall=wall, batches=run.extra.get("batches"), batch_ms=run.batch_ms,
                               phases=phases)
                book.delete(q_in)
                book.delete(q_out)
            rounds.append({"raw_stage_msgs_s": round(got["raw"]), "step_msgs_s": round(got["step"]),
                           "ratio": round(got["step"] / got["raw"], 3), "step_wall_s": round(got["wall"], 1),
                           "step_batches": got["batches"], "step_batch_ms": got["batch_ms"],
                           "step_phase_s": got["phases"]})
            r = rounds[-1]
            print(f"round {index + 1}: raw stage loop {r['raw_stage_msgs_s']:,} msg/s, step {r['step_msgs_s']:,} "
                  f"msg/s ({r['step_batches']} batches), ratio {r['ratio']}; step phases (median s): "
                  f"{r['step_phase_s']}")
        ratio = statistics.median(r["ratio"] for r in rounds)
        result = {"n": args.n, "batch": args.batch, "rounds": rounds, "median_ratio": ratio,
                  "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
        print(f"median ratio step/raw over {len(rounds)} rounds: {ratio} (target >= 0.4)")
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
