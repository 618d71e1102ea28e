"""A streaming driver for the crash tests: ``python crash_driver.py URI QUEUE WORKDIR``.

Reads QUEUE with safebunny (availableNow, 200 messages a batch) and, per batch, writes the
rows it saw to ``WORKDIR/out/batch-<id>-<pid>.json`` before the crash point ``effect``. The
test sets ``SAFEBUNNY_CRASH_AT`` to kill the whole driver at a named point.
"""

import json
import os
import sys

from driver_session import driver_session  # tests/e2e, the script's own folder

from safebunny.crashpoints import crash_point

uri, queue, workdir = sys.argv[1:4]
spark = driver_session("safebunny-crash")
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


queue_type = os.environ.get("SAFEBUNNY_TEST_QUEUE_TYPE", "classic")
df = (spark.readStream.format("safebunny").option("uri", uri).option("queue", queue)
      .option("queueType", queue_type).option("journalLocation", os.path.join(workdir, "journal"))
      .option("maxMessagesPerTrigger", "200")
      .option("streamPort", os.environ.get("SAFEBUNNY_TEST_STREAM_PORT", "5552"))
      .option("failOnDataLoss", os.environ.get("SAFEBUNNY_TEST_FAIL_ON_DATA_LOSS", "true")).load())
q = (df.writeStream.foreachBatch(effect).option("checkpointLocation", os.path.join(workdir, "cp"))
     .trigger(availableNow=True).start())
q.awaitTermination()
print("DRIVER-DONE", flush=True)
spark.stop()
