"""The library's logs show up in the driver's output with no logging set up (issue: invisible logs)."""

import os
import subprocess
import sys
import time

import pytest

from conftest import run_drivers

pytestmark = pytest.mark.xdist_group("drivers")  # tests/conftest.py: drivers of their own

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


def _command(amqp_uri, queue, out, tmp_path, **env):
    tmp_path.mkdir(parents=True, exist_ok=True)
    pause = tmp_path / "pause"
    pause.write_text(repr(time.time() + 600))  # the reader process warns that it is paused
    environment = {k: v for k, v in os.environ.items() if k != "SAFEBUNNY_LOG_LEVEL"}
    environment.update(env)
    return [sys.executable, "-c", DRIVER, amqp_uri, queue, out, str(tmp_path), str(pause)], environment


def test_reader_warnings_and_requested_summaries_reach_the_drivers_output(amqp_uri, make_queue, tmp_path):
    """Two drivers side by side (own queues and folders): one at the default level, one asking for INFO."""
    quiet, chatty = run_drivers([
        _command(amqp_uri, make_queue(suffix="-a"), make_queue(suffix="-a-out"), tmp_path / "a"),
        _command(amqp_uri, make_queue(suffix="-b"), make_queue(suffix="-b-out"), tmp_path / "b",
                 SAFEBUNNY_LOG_LEVEL="INFO")],
        timeout=300)
    assert quiet.returncode == 0, quiet.stderr[-3000:]
    assert "safebunny WARNING safebunny.source" in quiet.stderr and "paused by" in quiet.stderr
    assert "safebunny sink task" not in quiet.stderr  # summaries only when asked for
    assert chatty.returncode == 0, chatty.stderr[-3000:]
    assert "safebunny INFO safebunny.sink" in chatty.stderr and "safebunny sink task" in chatty.stderr


# a saga driver's session and saga (uri, name and root from its arguments), shared by the scripts below
SAGA_SESSION = r'''
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false").config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.sql.shuffle.partitions", "2").getOrCreate())
saga = safebunny.Saga(name, uri=uri, root=root, settings=safebunny.SagaSettings(retry=safebunny.Retry(delays=("1s",))))
'''

SAGA_DRIVER = r'''
import sys, time
from pyspark.sql import SparkSession, functions as F
import safebunny

uri, name, root, idle = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
''' + SAGA_SESSION + r'''
@F.udf("string")
def loud(name):
    if name == "poison":
        raise ValueError("no poison, please")
    return name.upper()

@saga.step("shouter", consumes="NameGiven", from_node="app", schema="name string")
def shout(names, ctx):
    return safebunny.Outcome(effects=[safebunny.append(names.select("messageId", loud("name").alias("loud")),
                                                       root + "/loud")])

saga.start(spark.createDataFrame([("ada",), ("poison",), ("grace",)], "name string"), node="app",
           type="NameGiven", business_key="name")
running = saga.run(spark, trigger="1 second")
deadline = time.monotonic() + 240
while not saga.poison_rows("shouter", "NameGiven") and time.monotonic() < deadline:
    time.sleep(0.5)
print("IDLE-START", file=sys.stderr, flush=True)  # the same stream as Spark's log lines
time.sleep(idle)  # idle triggers
print("IDLE-END", file=sys.stderr, flush=True)
running.stop()
poisoned = len(saga.poison_rows("shouter", "NameGiven"))
safebunny.topology.delete(saga)
print("DRIVER-DONE poisoned", poisoned)
'''


def test_a_saga_with_a_poison_row_and_idle_triggers_prints_few_lines(amqp_uri, unique_name, tmp_path):
    """One poison row (isolated, retried once, parked) and idle 1-second triggers: a handful of lines,
    no executor traces, no "falling behind", Spark's streaming note at most once."""
    environment = {k: v for k, v in os.environ.items() if k != "SAFEBUNNY_LOG_LEVEL"}
    done = subprocess.run([sys.executable, "-c", SAGA_DRIVER, amqp_uri, unique_name, str(tmp_path / "saga"), "8"],
                          capture_output=True, text=True, timeout=400, env=environment)
    output = done.stdout + done.stderr
    assert done.returncode == 0 and "DRIVER-DONE poisoned 1" in done.stdout, output[-5000:]
    lines = [line for line in output.splitlines() if line.strip() and not line.startswith("IDLE-")]
    assert len(lines) <= 20, "\n".join(lines)
    assert "Traceback (most recent call last)" not in output and "\tat org.apache.spark" not in output
    # a batch that isolates a poison row may take longer than the trigger (Spark says so); an idle one must not
    idle = done.stderr.split("IDLE-START", 1)[1].split("IDLE-END", 1)[0]
    assert "falling behind" not in idle
    assert output.count("spark.sql.adaptive.enabled is not supported in streaming") <= 1
    assert "1 message(s) poisoned" in output and "no poison, please" in output  # safebunny's summary says why


DRAIN_DRIVER = r'''
import sys
from pyspark.sql import SparkSession, functions as F
import safebunny

uri, name, root = sys.argv[1], sys.argv[2], sys.argv[3]
''' + SAGA_SESSION + r'''
@F.udf("string")
def loud(name):
    if name.startswith("bad"):
        raise ValueError("no bad names")
    return name.upper()

@saga.step("shouter", consumes="NameGiven", from_node="app", schema="name string", produces=["Shouted"])
def shout(names, ctx):
    ok = names.select("messageId", loud("name").alias("loud"))
    return safebunny.Outcome(effects=[safebunny.append(ok, root + "/loud")], emits=[safebunny.emit(ok, type="Shouted")])

@saga.step("printer", consumes="Shouted", from_node="shouter", schema="loud string")
def show(rows, ctx):
    return safebunny.Outcome(effects=[safebunny.append(rows.select("messageId", "loud"), root + "/printed")])

names = [(f"n{i}",) for i in range(30)] + [("bad1",), ("bad2",), ("bad3",)]
saga.start(spark.createDataFrame(names, "name string"), node="app", type="NameGiven", business_key="name")
saga.drain(spark)
poisoned = len(saga.poison_rows("shouter", "NameGiven"))
safebunny.topology.delete(saga)
spark.stop()
print("DRIVER-DONE poisoned", poisoned)
'''


def test_a_drained_saga_with_failing_rows_and_a_stopped_session_prints_no_worker_or_task_noise(amqp_uri, unique_name,
                                                                                                tmp_path):
    """Three rows failing in a UDF on two cores (tasks of one job fail side by side), retried and parked, then
    ``spark.stop()``: no ``Lost task`` lines from Spark's scheduler, no ``EOFError`` from PySpark's daemon."""
    environment = {k: v for k, v in os.environ.items() if k != "SAFEBUNNY_LOG_LEVEL"}
    done = subprocess.run([sys.executable, "-c", DRAIN_DRIVER, amqp_uri, unique_name, str(tmp_path / "saga")],
                          capture_output=True, text=True, timeout=600, env=environment)
    output = done.stdout + done.stderr
    assert done.returncode == 0 and "DRIVER-DONE poisoned 3" in done.stdout, output[-5000:]
    assert "TaskSetManager" not in output and "Lost task" not in output, output[-5000:]
    assert "EOFError" not in output and "daemon.py" not in output, output[-5000:]
    assert "3 message(s) poisoned (ValueError)" in output and "no bad names" in output
