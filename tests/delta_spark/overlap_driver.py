"""One of two drivers of a step whose inbox and effect tables are given by name: ``python overlap_driver.py URI
QUEUE WORKDIR DRIVER``.

Each driver has its own Spark catalog (as two clusters have their own sessions) and registers the names
``sb_overlap.inbox``, ``.ledger`` and ``.reservations`` on the Delta tables the test created under
``WORKDIR/tables``; the step (node ``stock``, its claims under ``WORKDIR/state``) appends each order to the ledger,
then merges it into reservations on ``orderId``. The queue is consumed with a single active consumer: the broker
gives it to one driver, and to the other when that one's connection closes. It runs until ``WORKDIR/stop-DRIVER``
appears; ``SAFEBUNNY_STALL_AT`` stalls it mid-batch (crashpoints.py). Driver ``b`` spells every table
``spark_catalog.sb_overlap.<table>``: two spellings of one table are one lock.
"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "e2e"))

from driver_session import driver_session  # noqa: E402

import safebunny  # noqa: E402

DATABASE = "sb_overlap"
TABLES = ("inbox", "ledger", "reservations")


def register(spark, workdir: str) -> None:
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
    for table in TABLES:
        spark.sql(f"CREATE TABLE IF NOT EXISTS {DATABASE}.{table} USING DELTA "
                  f"LOCATION '{os.path.join(workdir, 'tables', table)}'")


if __name__ == "__main__":
    from pyspark.sql import functions as F

    uri, queue, workdir, driver = sys.argv[1:5]
    spark = driver_session(f"safebunny-overlap-{driver}")
    register(spark, workdir)
    spelled = f"spark_catalog.{DATABASE}" if driver == "b" else DATABASE
    step = safebunny.Step(node="stock", inbox=f"{spelled}.inbox", settings=safebunny.StepSettings(
        connection=safebunny.ConnectionSettings(uri), state=os.path.join(workdir, "state")))

    def reserve(orders, ctx):
        ok = orders.select("messageId", F.get_json_object(F.col("value").cast("string"), "$.orderId").alias("orderId"))
        return safebunny.Outcome(effects=[safebunny.append(ok, f"{spelled}.ledger"),
                                          safebunny.merge(ok, f"{spelled}.reservations", on=["orderId"])])

    df = (spark.readStream.format("safebunny").option("uri", uri).option("queue", queue)
          .option("queueType", "classic").option("singleActiveConsumer", "true")
          .option("journalLocation", os.path.join(workdir, f"journal-{driver}"))
          .option("maxMessagesPerTrigger", "15").load())
    query = (df.writeStream.foreachBatch(step.foreach_batch(reserve))
             .option("checkpointLocation", os.path.join(workdir, f"ck-{driver}"))
             .trigger(processingTime="500 milliseconds").start())
    print("RUNNING", flush=True)
    stop = os.path.join(workdir, f"stop-{driver}")
    while not os.path.exists(stop) and query.isActive:
        time.sleep(0.5)
    print("QUERY-EXCEPTION" if query.exception() else "DRIVER-DONE", query.exception(), flush=True)
    query.stop()
    spark.stop()
