"""A driver for the step crash tests: ``python step_crash_driver.py URI QUEUE OUT_QUEUE WORKDIR``.

Reads QUEUE with safebunny (availableNow, 50 messages a batch) through a safebunny.Step with one Delta
effect (``WORKDIR/effects``; with ``SAFEBUNNY_TEST_EFFECTS=both`` also a merge into ``WORKDIR/ledger``) and
one emit to OUT_QUEUE; the test sets ``SAFEBUNNY_CRASH_AT`` to kill the
whole driver at a named point, then runs it again from the same checkpoint.

``SAFEBUNNY_TEST_SCENARIOS`` (a JSON list of objects with ``queue``, ``out``, ``workdir`` and optionally
``checkpoint``, ``journal``, ``effects``, ``executor_rows``, ``by_name``, ``qualified``) replaces the arguments
after URI: the driver runs each scenario's query to its end, one after another in one SparkSession, so one driver
process restarts the scenarios of several kill points. ``by_name`` (the Delta Spark tier) gives the inbox and the effect
tables by name, ``<database>.inbox``, ``.effects``, ``.ledger``, in a database named after the workdir (its claims in
``WORKDIR/state``); the driver's session then has Delta and a Hive catalog (tests/e2e/driver_session.py).
``qualified`` spells those names ``spark_catalog.<database>.<table>`` (one table, a second spelling).
``SAFEBUNNY_TEST_KILL_ON_CREATE=<table>`` (by name) kills the driver the moment that table's first log file lands
in its location, before the catalog has its name (a create cut short).
``SAFEBUNNY_TEST_STATE_ROOT`` (a folder, e.g. on a volume) holds the state and the journal in place of WORKDIR.
``counter`` (a file): the handler's outputs depend on a counter there that every handler call moves (an
``attempt`` column in both effects, the emit's ``outputIndex``); ``record`` (default true) is the step's
``record_frame_outcomes``.
It prints ``DRIVER-DONE <workdir>`` for each scenario that finished and ``DRIVER-FAILED <workdir>`` (its
traceback on stderr) for one that did not, then goes on.
"""

import json
import os
import re
import signal
import sys
import threading
import time

from driver_session import driver_session, run_scenarios  # tests/e2e, the script's own folder
from pyspark.sql import functions as F

import safebunny


def _scenarios(argv: list[str]) -> list[dict]:
    if os.environ.get("SAFEBUNNY_TEST_SCENARIOS"):
        return json.loads(os.environ["SAFEBUNNY_TEST_SCENARIOS"])
    queue, out_queue, workdir = argv[2:5]
    # SAFEBUNNY_TEST_EXECUTOR_PUBLISH_ROWS: batches with more emits than this publish them from the executors
    return [{"queue": queue, "out": out_queue, "workdir": workdir,
             "checkpoint": os.environ.get("SAFEBUNNY_TEST_CHECKPOINT", "ck"),
             "journal": os.environ.get("SAFEBUNNY_TEST_JOURNAL"),
             "effects": os.environ.get("SAFEBUNNY_TEST_EFFECTS", "append"),
             "executor_rows": int(os.environ.get("SAFEBUNNY_TEST_EXECUTOR_PUBLISH_ROWS", "0")) or None,
             "by_name": os.environ.get("SAFEBUNNY_TEST_BY_NAME") == "1",
             "record": os.environ.get("SAFEBUNNY_TEST_RECORD") != "0"}]


pause = float(os.environ.get("SAFEBUNNY_TEST_HANDLER_SLEEP", "0"))  # slow batches: a broker restart lands mid-stream


def run(spark, uri: str, scenario: dict) -> None:
    workdir, out_queue = scenario["workdir"], scenario["out"]
    checkpoint = scenario.get("checkpoint") or "ck"
    if scenario.get("by_name"):
        database = by_name_database(workdir)
        spark.sql(f"CREATE DATABASE IF NOT EXISTS {database}")
        spelled = f"spark_catalog.{database}" if scenario.get("qualified") else database
        inbox, effects_table, ledger_table = (f"{spelled}.{t}" for t in ("inbox", "effects", "ledger"))
        if os.environ.get("SAFEBUNNY_TEST_KILL_ON_CREATE"):
            _kill_when_created(spark, database, os.environ["SAFEBUNNY_TEST_KILL_ON_CREATE"])
        state = os.path.join(os.environ.get("SAFEBUNNY_TEST_STATE_ROOT") or workdir, "state")
    else:
        inbox, state = os.path.join(workdir, "inbox"), None
        effects_table, ledger_table = os.path.join(workdir, "effects"), os.path.join(workdir, "ledger")
    step = safebunny.Step(node="billing", inbox=inbox, settings=safebunny.StepSettings(
        connection=safebunny.ConnectionSettings(uri), state=state,
        executor_publish_rows=scenario.get("executor_rows") or None,
        record_frame_outcomes=scenario.get("record", True)))
    counter = scenario.get("counter")
    # effects "both" adds a merge into WORKDIR/ledger (one row per message, a per-message counter that counts
    # how often the merge ran for it), so a crash can fall between two effects of one batch
    both = scenario.get("effects") == "both"

    def bill(orders, ctx):
        if pause:
            time.sleep(pause)
        invoices = orders.select("messageId", F.col("value").cast("string").alias("order"))
        if counter:  # a handler that is not deterministic: each call reads and moves a counter
            attempt = int(open(counter).read() or 0) + 1 if os.path.exists(counter) else 1
            with open(counter, "w") as f:
                f.write(str(attempt))
            invoices = invoices.withColumn("attempt", F.lit(attempt))
        effects = [safebunny.append(invoices, effects_table)]
        if both:
            ledger = invoices.select("messageId", F.lit(ctx.batch_id).alias("batchId"),
                                     F.lit(ctx.epoch).alias("epoch"), *(["attempt"] if counter else []))
            effects.append(safebunny.merge(ledger, ledger_table, on=["messageId"]))
        return safebunny.Outcome(effects=effects,
                                 emits=[safebunny.emit(invoices.withColumn("outputIndex", F.col("attempt"))
                                                       if counter else invoices, type="InvoiceRequested", exchange="",
                                                       routing_key=out_queue)])

    journal = os.path.join(os.environ.get("SAFEBUNNY_TEST_STATE_ROOT") or workdir,
                           scenario.get("journal") or f"journal-{checkpoint}")
    df = (spark.readStream.format("safebunny").option("uri", uri).option("queue", scenario["queue"])
          .option("queueType", "classic").option("journalLocation", journal)
          .option("maxMessagesPerTrigger", os.environ.get("SAFEBUNNY_TEST_BATCH", "50"))
          .load())
    q = (df.writeStream.foreachBatch(step.foreach_batch(bill))
         .option("checkpointLocation", os.path.join(workdir, checkpoint)).trigger(availableNow=True).start())
    q.awaitTermination()
    print("PUBLISHED-FROM", workdir, sorted({r.published_from for r in step.reports if r.published_from}),
          flush=True)


def _kill_when_created(spark, database: str, table: str) -> None:
    """A thread that kills this driver (its process group) as soon as ``database.table``'s first commit is written
    in the table's location: Delta writes it before the catalog gets the name."""
    location = spark.sql(f"DESCRIBE DATABASE EXTENDED {database}").where("info_name = 'Location'").first()[1]
    first = os.path.join(location.removeprefix("file:"), table, "_delta_log", f"{0:020d}.json")

    def watch() -> None:
        while not os.path.exists(first):
            time.sleep(0.0002)
        os.killpg(os.getpgrp(), signal.SIGKILL)

    threading.Thread(target=watch, daemon=True).start()


def by_name_database(workdir: str) -> str:
    """The database of a ``by_name`` scenario: named after its workdir."""
    return "sb_" + re.sub(r"[^a-z0-9]+", "_", os.path.basename(os.path.normpath(workdir)).lower())


if __name__ == "__main__":
    uri = sys.argv[1]
    os.environ["SAFEBUNNY_CRASH_PGID"] = str(os.getpgrp())  # crash points in Python workers kill this driver too
    spark = driver_session("safebunny-step-crash")
    run_scenarios(spark, _scenarios(sys.argv), lambda scenario: run(spark, uri, scenario))
