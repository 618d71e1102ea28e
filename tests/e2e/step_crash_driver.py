"""A driver for the step crash tests: ``python step_crash_driver.py URI QUEUE OUT_QUEUE WORKDIR``.

Reads QUEUE with safebunny (availableNow, 50 messages a batch) through a safebunny.Step with one Delta
effect (``WORKDIR/effects``; with ``SAFEBUNNY_TEST_EFFECTS=both`` also a merge into ``WORKDIR/ledger``) and
one emit to OUT_QUEUE; the test sets ``SAFEBUNNY_CRASH_AT`` to kill the
whole driver at a named point, then runs it again from the same checkpoint.
"""

import os
import sys
import time

from driver_session import driver_session  # tests/e2e, the script's own folder
from pyspark.sql import functions as F

import safebunny

uri, queue, out_queue, workdir = sys.argv[1:5]
os.environ["SAFEBUNNY_CRASH_PGID"] = str(os.getpgrp())  # crash points in Python workers kill this driver too
spark = driver_session("safebunny-step-crash")
checkpoint = os.environ.get("SAFEBUNNY_TEST_CHECKPOINT", "ck")
# SAFEBUNNY_TEST_EXECUTOR_PUBLISH_ROWS: batches with more emits than this publish them from the executors
executor_rows = int(os.environ.get("SAFEBUNNY_TEST_EXECUTOR_PUBLISH_ROWS", "0")) or None
step = safebunny.Step(node="billing", inbox=os.path.join(workdir, "inbox"), uri=uri,
                      executor_publish_rows=executor_rows)


pause = float(os.environ.get("SAFEBUNNY_TEST_HANDLER_SLEEP", "0"))  # slow batches: a broker restart lands mid-stream


# SAFEBUNNY_TEST_EFFECTS=both adds a merge into WORKDIR/ledger (one row per message, a per-message counter
# that counts how often the merge ran for it), so a crash can fall between two effects of one batch
both = os.environ.get("SAFEBUNNY_TEST_EFFECTS") == "both"


def bill(orders, ctx):
    if pause:
        time.sleep(pause)
    invoices = orders.select("messageId", F.col("value").cast("string").alias("order"))
    effects = [safebunny.append(invoices, os.path.join(workdir, "effects"))]
    if both:
        ledger = invoices.select("messageId", F.lit(ctx.batch_id).alias("batchId"), F.lit(ctx.epoch).alias("epoch"))
        effects.append(safebunny.merge(ledger, os.path.join(workdir, "ledger"), on=["messageId"]))
    return safebunny.Outcome(effects=effects,
                             emits=[safebunny.emit(invoices, type="InvoiceRequested", exchange="",
                                                   routing_key=out_queue)])


journal = os.environ.get("SAFEBUNNY_TEST_JOURNAL") or f"journal-{checkpoint}"
df = (spark.readStream.format("safebunny").option("uri", uri).option("queue", queue).option("queueType", "classic")
      .option("journalLocation", os.path.join(workdir, journal))
      .option("maxMessagesPerTrigger", os.environ.get("SAFEBUNNY_TEST_BATCH", "50"))
      .load())
q = (df.writeStream.foreachBatch(step.foreach_batch(bill))
     .option("checkpointLocation", os.path.join(workdir, checkpoint)).trigger(availableNow=True).start())
q.awaitTermination()
print("PUBLISHED-FROM", sorted({r.published_from for r in step.reports if r.published_from}), flush=True)
print("DRIVER-DONE", flush=True)
spark.stop()
