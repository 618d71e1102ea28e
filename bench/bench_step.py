"""An exactly-once step against the raw stage loop, in the same run.

    .venv/bin/python -m bench.bench_step [--n 60000] [--batch 10000] [--rounds 3]
    .venv-delta/bin/python -m bench.bench_step --by-name [--delta-jars ~/.cache/safebunny/delta-jars/4.4.0]

Raw: pika consume -> orjson transform -> confirmed publish -> batched ack (``raw.stage_loop``).
Step: the source -> ``safebunny.Step`` (in-batch and inbox dedupe) -> one Delta append (delta-rs)
-> an emit per input through the sink -> the inbox marker, ``availableNow`` with ``batch`` messages
per trigger, its emits published from the driver; "step-executors": the same step with every batch's
emits published from the executors (``executor_publish_rows`` below the batch). The steps' rate is their
steady state (the batches after the cold first one, as in ``bench.connector``). The run checks one effect
row per input and ``n`` emitted messages, and writes ``bench/results/step.json``.

``--record-cost``: the step with its DataFrame outcome recorded (``record_frame_outcomes=True``) against the same step
without, alternating, in one run (no raw loop); it writes ``bench/results/step_record.json``.

``--by-name``: the step's inbox and effect table are tables by name on Delta Spark (the Databricks path: the
``.venv-delta`` interpreter, ``make install-delta``), against the raw stage loop in the same run; the executor
case is left out; it writes ``bench/results/step_by_name.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench import connector as conn
from bench import raw
from bench.report import alternating_rounds, ratio_line
from bench.session import bench_session

__all__ = ["main", "run_step", "TARGETS"]

_URI = os.environ.get("SAFEBUNNY_BENCH_AMQP_URI", "amqp://guest:guest@127.0.0.1:5672/%2F")
#: issue 50, item 2: the step's msg/s over the raw stage loop's at 10k per batch (median of the rounds), its
#: driver publish and its executor publish; and the target for the step on tables by name
TARGETS = {"step": 1.0, "executors": 0.9, "by_name": 0.5}


def run_step(spark: Any, uri: str, queue: str, out: str, n: int, batch: int, workdir: Path,
             timeout_s: float = 900.0, executors: bool = False, by_name: bool = False,
             record: bool = True) -> tuple[conn.ConnRun, float, dict[str, float]]:
    """Drain ``n`` messages through one Step (its emits from the driver, or from the executors; its inbox and effect
    table paths on delta-rs, or ``by_name`` tables on Delta Spark); returns its steady run, the whole query's wall
    seconds and the median seconds per phase of its full batches after the first (``BatchReport.phases``)."""
    from pyspark.sql import functions as F  # noqa: N812

    import safebunny

    run_dir = workdir / f"step-{uuid.uuid4().hex[:8]}"  # a fresh inbox and effect table per run
    effects, inbox = str(run_dir / "orders"), str(run_dir / "inbox")
    if by_name:
        spark.sql("CREATE DATABASE IF NOT EXISTS sb_bench")
        effects, inbox = f"sb_bench.orders_{run_dir.name[5:]}", f"sb_bench.inbox_{run_dir.name[5:]}"
    journal, checkpoint = str(run_dir / "journal"), str(run_dir / "checkpoint")
    # told its source's journal and its checkpoint, as a saga's steps are: it reads each batch on the driver
    step = safebunny.Step(node="bench", inbox=inbox, settings=safebunny.StepSettings(
        connection=safebunny.ConnectionSettings(uri), journal=journal, checkpoint=checkpoint,
        executor_publish_rows=max(1, batch // 2) if executors else None,
        state=str(run_dir / "state") if by_name else None, record_frame_outcomes=record))

    def handle(orders: Any, ctx: Any) -> Any:
        body = F.col("value").cast("string")
        rows = orders.select("messageId", F.get_json_object(body, "$.id").cast("long").alias("orderId"),
                             F.get_json_object(body, "$.amount").cast("double").alias("amount"))
        return safebunny.Outcome(effects=[safebunny.append(rows, effects)],
                                 emits=[safebunny.emit(rows.select("messageId", "orderId"), type="OrderSeen",
                                                       exchange="", routing_key=out)])

    df = conn._reader(spark, uri, queue, "classic", batch, 1, workdir, {"journalLocation": journal})
    t0 = time.time()
    run_batch, jobs = _job_counted(spark, step.foreach_batch(handle), lambda: bool(step.reports[-1].received))
    from safebunny.saga.run.worker_starts import TRIES, UnstartedSteps
    from safebunny.spark.exceptions import is_worker_start_timeout

    unstarted = UnstartedSteps()  # a loaded machine: Spark's Python worker may miss its fixed 10 s to connect back
    for attempt in range(TRIES):  # the saga's one policy for such a query: it never ran, start it again after a wait
        query = (df.writeStream.foreachBatch(run_batch).option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        try:
            run = conn._drained(query, n, timeout_s, "step", f"the step query on {queue!r}", queue)
            break
        except Exception as exc:
            if attempt == TRIES - 1 or not is_worker_start_timeout(exc) or step.reports:
                raise
            wait = unstarted.missed("step")
            print(f"the step query's Python worker did not start in time (load {os.getloadavg()[0]:.0f}); "
                  f"again in {wait:.0f} s")
            time.sleep(wait)
    wall = time.time() - t0
    if by_name:
        got = [r.messageId for r in spark.table(effects).select("messageId").collect()]
    else:
        from deltalake import DeltaTable

        got = DeltaTable(effects).to_pyarrow_table(columns=["messageId"]).column("messageId").to_pylist()
    if len(got) != n or len(set(got)) != n:
        raise conn.ConnectorBenchError(f"the step wrote {len(got)} effect rows ({len(set(got))} distinct), "
                                       f"expected {n}")
    where = {r.published_from for r in step.reports if r.received == batch}  # a short batch may stay on the driver
    if where != {"executors" if executors else "driver"}:
        raise conn.ConnectorBenchError(f"the step published from {where}, expected "
                                       f"{'executors' if executors else 'driver'}")
    full = [r for r in step.reports if r.received == batch][1:] or list(step.reports)
    names = full[0].phases if full else {}
    phases = {k: round(statistics.median(r.phases.get(k, 0.0) for r in full), 3) for k in names}
    phases["spark_jobs"] = statistics.median(jobs[1:] or jobs or [0])  # per batch, after the first
    return run, wall, phases


def _step_round(got: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """A round's record and line: the step (and, but for ``--by-name``, the step publishing from the executors)
    against the raw stage loop."""
    step, execs = got["step"], got.get("step-executors")
    r = {"raw_stage_msgs_s": round(got["raw"]), "step_msgs_s": step["msgs_s"],
         "ratio": round(step["msgs_s"] / got["raw"], 3), "step_wall_s": step["wall_s"],
         "step_batches": step["batches"], "step_batch_ms": step["batch_ms"], "step_phase_s": step["phase_s"]}
    if execs is None:  # --by-name: the driver's publish only
        return r, (f"raw stage loop {r['raw_stage_msgs_s']:,} msg/s; step by name {r['step_msgs_s']:,} msg/s, ratio "
                   f"{r['ratio']}; phases (median s) {r['step_phase_s']}")
    r.update({"executors_msgs_s": execs["msgs_s"], "executors_ratio": round(execs["msgs_s"] / got["raw"], 3),
              "executors_vs_driver": round(execs["msgs_s"] / step["msgs_s"], 3), "executors_wall_s": execs["wall_s"],
              "executors_batch_ms": execs["batch_ms"], "executors_phase_s": execs["phase_s"]})
    return r, (f"raw stage loop {r['raw_stage_msgs_s']:,} msg/s; step (driver publish) {r['step_msgs_s']:,} msg/s, "
               f"ratio {r['ratio']}; step (executor publish) {r['executors_msgs_s']:,} msg/s, ratio "
               f"{r['executors_ratio']}, {r['executors_vs_driver']} of the driver's; phases (median s) driver "
               f"{r['step_phase_s']}, executors {r['executors_phase_s']}")


def _job_counted(spark: Any, run_batch: Any, counts: Any) -> tuple[Any, list[int]]:
    """``run_batch`` that counts the Spark jobs each batch started (the scheduler's next job id before and after:
    every job of the session, the batch's read beside the step included)."""
    jobs: list[int] = []
    scheduler = spark.sparkContext._jsc.sc().dagScheduler()

    def counted(df: Any, batch_id: int) -> None:
        before = scheduler.nextJobId()
        run_batch(df, batch_id)
        if counts():  # an empty tick batch is not a batch of the bench
            jobs.append(scheduler.nextJobId() - before)

    return counted, jobs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=60_000, help="messages per case (default 60000)")
    parser.add_argument("--batch", type=int, default=10_000, help="the step's maxMessagesPerTrigger")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of raw then step (order alternating)")
    parser.add_argument("--by-name", action="store_true", help="inbox and effect table by name on Delta Spark")
    parser.add_argument("--delta-jars", default=os.path.expanduser("~/.cache/safebunny/delta-jars/4.4.0"),
                        help="Delta Spark's jars (make delta-jars), with --by-name")
    parser.add_argument("--record-cost", action="store_true",
                        help="the step with its DataFrame outcome recorded against the same step without")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if args.record_cost:
        record_cost(args.n, args.batch, args.rounds)
        return
    cases: tuple[str, ...] = ("raw", "step") if args.by_name else ("raw", "step", "step-executors")
    with bench_session("sb-bench-step-") as session:
        workdir = session.workdir
        book = session.book(_URI)
        spark = session.start_spark(args.delta_jars if args.by_name else None)

        def measure(case: str, index: int) -> Any:
            q_in = book.declare(f"{case}-in-{index}", "classic")
            q_out = book.declare(f"{case}-out-{index}", "classic")
            raw.publish_window(_URI, q_in, args.n)
            if case == "raw":
                got: Any = raw.stage_loop(_URI, q_in, q_out, args.n).rate
            else:
                run, wall, phases = run_step(spark, _URI, q_in, q_out, args.n, args.batch, workdir,
                                             executors=case == "step-executors", by_name=args.by_name)
                emitted = book.depth(q_out)
                if emitted != args.n or book.depth(q_in) != 0:
                    raise conn.ConnectorBenchError(
                        f"{case}: {emitted} emitted (expected {args.n}), {book.depth(q_in)} left in {q_in!r}")
                got = {"msgs_s": round(run.rate), "wall_s": round(wall, 1), "batches": run.extra.get("batches"),
                       "batch_ms": run.batch_ms, "phase_s": phases}
            book.delete(q_in)
            book.delete(q_out)
            return got

        rounds = alternating_rounds(args.rounds, cases, measure, _step_round)
        ratio = statistics.median(r["ratio"] for r in rounds)
        if args.by_name:
            result = {"n": args.n, "batch": args.batch, "by_name": "pyspark 4.2.0, delta-spark 4.4.0",
                      "rounds": rounds, "median_ratio": ratio, "load": os.getloadavg(),
                      "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
            print(ratio_line(f"step by name / raw stage loop, median of {len(rounds)} rounds (issue 57)", ratio,
                             TARGETS["by_name"]))
            (Path(__file__).parent / "results").mkdir(exist_ok=True)
            (Path(__file__).parent / "results" / "step_by_name.json").write_text(json.dumps(result, indent=2) + "\n")
            return
        result = {"n": args.n, "batch": args.batch, "rounds": rounds, "median_ratio": ratio,
                  "median_executors_ratio": statistics.median(r["executors_ratio"] for r in rounds),
                  "median_executors_vs_driver": statistics.median(r["executors_vs_driver"] for r in rounds),
                  "load": os.getloadavg(), "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
        result["targets"] = {"step": TARGETS["step"], "executors": TARGETS["executors"]}
        median_phases = {k: round(statistics.median(r["step_phase_s"].get(k, 0.0) for r in rounds), 3)
                         for k in rounds[-1]["step_phase_s"]}
        print(f"step (driver publish), median phases of the rounds (s): {median_phases}")
        print(ratio_line(f"step (driver publish) / raw stage loop, {args.batch:,}/batch, median of {len(rounds)} "
                         "rounds (issue 50, item 2)", ratio, TARGETS["step"]))
        print(ratio_line(f"step (executor publish) / raw stage loop, median of {len(rounds)} rounds (issue 50, item 2)",
                         result["median_executors_ratio"], TARGETS["executors"]))
        print(f"executor publish / driver publish: {result['median_executors_vs_driver']}")
        out = Path(__file__).parent / "results" / "step.json"
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")


def record_cost(n: int, batch: int, rounds: int) -> None:
    """The step's rate with ``record_frame_outcomes`` on over off, alternating which runs first, median of rounds."""
    with bench_session("sb-bench-step-record-") as session:
        book = session.book(_URI)
        spark = session.start_spark(None)

        def measure(case: str, index: int) -> dict[str, Any]:
            record, attempt = case == "recorded", 0
            while True:  # again on new queues (4 tries) when the query's Python worker missed Spark's 10 s connect-back
                q_in, q_out = book.declare(f"rec-{record}-in-{index}-{attempt}", "classic"), book.declare(
                    f"rec-{record}-out-{index}-{attempt}", "classic")
                raw.publish_window(_URI, q_in, n)
                try:
                    run, _, phases = run_step(spark, _URI, q_in, q_out, n, batch, session.workdir, record=record)
                    return {"msgs_s": round(run.rate), "batch_ms": run.batch_ms, "phase_s": phases}
                except Exception as exc:  # noqa: BLE001 - only that start failure is retried, on new queues
                    if "failed to connect back" not in str(exc) or attempt == 3:
                        raise
                    print(f"retrying the {case} step: {str(exc)[:120]}")
                finally:
                    book.delete(q_in)
                    book.delete(q_out)
                attempt += 1

        def summary(got: dict[str, Any]) -> tuple[dict[str, Any], str]:
            on, off = got["recorded"], got["unrecorded"]
            ratio = round(on["msgs_s"] / off["msgs_s"], 3)
            return {"recorded": on, "unrecorded": off, "ratio": ratio}, (
                f"recorded {on['msgs_s']:,} msg/s, unrecorded {off['msgs_s']:,} msg/s, ratio {ratio}; phases "
                f"(median s) recorded {on['phase_s']}, unrecorded {off['phase_s']}")

        out = alternating_rounds(rounds, ("recorded", "unrecorded"), measure, summary)
    ratio = statistics.median(r["ratio"] for r in out)
    print(f"recorded / unrecorded, {batch:,}/batch, median of {rounds} rounds: {ratio}")
    result = {"n": n, "batch": batch, "rounds": out, "median_ratio": ratio, "load": os.getloadavg(),
              "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    (Path(__file__).parent / "results").mkdir(exist_ok=True)
    (Path(__file__).parent / "results" / "step_record.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
