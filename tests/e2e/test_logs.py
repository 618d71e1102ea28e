"""The library's logs show up in the driver's output with no logging set up (issue: invisible logs)."""

import os
import subprocess
import sys
import time

DRIVER = r'''
import sys
from pyspark.sql import SparkSession
uri, queue, out, workdir, pause = sys.argv[1:6]
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
df = (spark.readStream.format("safebunny").option("uri", uri).option("queue", queue).option("queueType", "classic")
      .option("journalLocation", workdir + "/j").option("pauseFile", pause).load())
q = df.writeStream.format("noop").option("checkpointLocation", workdir + "/ck").trigger(availableNow=True).start()
q.awaitTermination(120)
spark.createDataFrame([("x",)], "value string").write.format("safebunny").mode("append").option("uri", uri) \
    .option("routingKey", out).save()
print("DRIVER-DONE")
'''


def _drive(amqp_uri, queue, out, tmp_path, **env):
    tmp_path.mkdir(parents=True, exist_ok=True)
    pause = tmp_path / "pause"
    pause.write_text(repr(time.time() + 600))  # the reader process warns that it is paused
    environment = {k: v for k, v in os.environ.items() if k != "SAFEBUNNY_LOG_LEVEL"}
    environment.update(env)
    return subprocess.run([sys.executable, "-c", DRIVER, amqp_uri, queue, out, str(tmp_path), str(pause)],
                          capture_output=True, text=True, timeout=300, env=environment)


def test_reader_warnings_and_requested_summaries_reach_the_drivers_output(amqp_uri, make_queue, tmp_path):
    queue, out = make_queue(), make_queue(suffix="-out")
    quiet = _drive(amqp_uri, queue, out, tmp_path / "a")
    assert quiet.returncode == 0, quiet.stderr[-3000:]
    assert "safebunny WARNING safebunny.source" in quiet.stderr and "paused by" in quiet.stderr
    assert "safebunny sink task" not in quiet.stderr  # summaries only when asked for
    chatty = _drive(amqp_uri, queue, out, tmp_path / "b", SAFEBUNNY_LOG_LEVEL="INFO")
    assert chatty.returncode == 0, chatty.stderr[-3000:]
    assert "safebunny INFO safebunny.sink" in chatty.stderr and "safebunny sink task" in chatty.stderr
