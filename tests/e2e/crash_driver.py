"""A streaming driver for the crash tests: ``python crash_driver.py URI QUEUE WORKDIR``.

Reads QUEUE with safebunny (availableNow, 200 messages a batch) and, per batch, writes the
rows it saw to ``WORKDIR/out/batch-<id>-<pid>.json`` before the crash point ``effect``. The
test sets ``SAFEBUNNY_CRASH_AT`` to kill the whole driver at a named point.

``SAFEBUNNY_TEST_SCENARIOS`` (a JSON list of objects with ``queue`` and ``workdir``) replaces QUEUE and
WORKDIR: the driver runs each scenario's query to its end, one after another in one SparkSession (one
driver process restarts the scenarios of several kill points), and prints ``DRIVER-DONE <workdir>`` for
each that finished, ``DRIVER-FAILED <workdir>`` (its traceback on stderr) for one that did not.
"""

import json
import os
import sys

from driver_session import driver_session, run_scenarios  # tests/e2e, the script's own folder

from safebunny.crashpoints import crash_point

queue_type = os.environ.get("SAFEBUNNY_TEST_QUEUE_TYPE", "classic")


def run(spark, uri: str, queue: str, workdir: str) -> None:
    out = os.path.join(workdir, "out")
    os.makedirs(out, exist_ok=True)

    def effect(batch_df, batch_id):
        rows = [(r.messageId, r.redelivered) for r in batch_df.select("messageId", "redelivered", "offset")
                .orderBy("offset").collect()] if queue_type == "stream" else \
            [(r.messageId, r.redelivered) for r in batch_df.select("messageId", "redelivered").collect()]
        path = os.path.join(out, f"batch-{batch_id}-{os.getpid()}.json")
        with open(path + ".tmp", "w") as f:
            json.dump(rows, f)
        os.replace(path + ".tmp", path)
        crash_point("effect")

    df = (spark.readStream.format("safebunny").option("uri", uri).option("queue", queue)
          .option("queueType", queue_type).option("journalLocation", os.path.join(workdir, "journal"))
          .option("maxMessagesPerTrigger", "200")
          .option("streamPort", os.environ.get("SAFEBUNNY_TEST_STREAM_PORT", "5552"))
          .option("failOnDataLoss", os.environ.get("SAFEBUNNY_TEST_FAIL_ON_DATA_LOSS", "true")).load())
    q = (df.writeStream.foreachBatch(effect).option("checkpointLocation", os.path.join(workdir, "cp"))
         .trigger(availableNow=True).start())
    q.awaitTermination()


if __name__ == "__main__":
    uri = sys.argv[1]
    scenarios = (json.loads(os.environ["SAFEBUNNY_TEST_SCENARIOS"]) if os.environ.get("SAFEBUNNY_TEST_SCENARIOS")
                 else [{"queue": sys.argv[2], "workdir": sys.argv[3]}])
    spark = driver_session("safebunny-crash")
    run_scenarios(spark, scenarios, lambda scenario: run(spark, uri, scenario["queue"], scenario["workdir"]))
