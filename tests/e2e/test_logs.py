"""The library's logs show up in the driver's output with no logging set up (issue: invisible logs)."""

import os
import subprocess
import sys
import time
import uuid

import pytest

from helpers import run_drivers

pytestmark = pytest.mark.xdist_group("drivers")  # tests/xdist_units.py: drivers of their own

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


# One driver process for both saga scripts below, one after another in its session (one JVM start, not two): the
# first runs a saga with a poison row and idle triggers, the second drains another saga with failing rows and stops
# the session. Each writes PART-<n> to stdout and stderr as it begins, so each test reads the output of its part.
SAGA_SESSION = r'''
import sys, time
from pyspark.sql import SparkSession, functions as F
import safebunny

uri, name, root, idle = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false").config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.sql.shuffle.partitions", "2").getOrCreate())

def part(n, suffix):
    # PART-<n> on both streams; the part's saga (a name and root of its own) and its root
    print(f"PART-{n}", flush=True)
    print(f"PART-{n}", file=sys.stderr, flush=True)
    return safebunny.Saga(name + suffix, uri=uri, root=root + suffix,
                          settings=safebunny.SagaSettings(retry=safebunny.Retry(delays=("1s",)))), root + suffix
'''

SAGA_DRIVER = r'''
saga, here = part(1, "")

@F.udf("string")
def loud(name):
    if name == "poison":
        raise ValueError("no poison, please")
    return name.upper()

@saga.step("shouter", consumes="NameGiven", from_node="app", schema="name string")
def shout(names, ctx):
    return safebunny.Outcome(effects=[safebunny.append(names.select("messageId", loud("name").alias("loud")),
                                                       here + "/loud")])

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

DRAIN_DRIVER = r'''
saga, here = part(2, "-drain")

@F.udf("string")
def louder(name):
    if name.startswith("bad"):
        raise ValueError("no bad names")
    return name.upper()

@saga.step("shouter", consumes="NameGiven", from_node="app", schema="name string", produces=["Shouted"])
def shout_all(names, ctx):
    ok = names.select("messageId", louder("name").alias("loud"))
    return safebunny.Outcome(effects=[safebunny.append(ok, here + "/loud")],
                             emits=[safebunny.emit(ok, type="Shouted")])

@saga.step("printer", consumes="Shouted", from_node="shouter", schema="loud string")
def show(rows, ctx):
    return safebunny.Outcome(effects=[safebunny.append(rows.select("messageId", "loud"), here + "/printed")])

names = [(f"n{i}",) for i in range(30)] + [("bad1",), ("bad2",), ("bad3",)]
saga.start(spark.createDataFrame(names, "name string"), node="app", type="NameGiven", business_key="name")
saga.drain(spark)
poisoned = len(saga.poison_rows("shouter", "NameGiven"))
safebunny.topology.delete(saga)
spark.stop()
print("DRIVER-DONE poisoned", poisoned)
'''


@pytest.fixture(scope="module")
def saga_parts(amqp_uri, tmp_path_factory):
    """The driver's two parts' output: ``{n: (returncode, stdout, stderr)}``, each stream from its PART-<n> on."""
    name = f"sbt-logs-{uuid.uuid4().hex[:8]}"
    environment = {k: v for k, v in os.environ.items() if k != "SAFEBUNNY_LOG_LEVEL"}
    done = subprocess.run([sys.executable, "-c", SAGA_SESSION + SAGA_DRIVER + DRAIN_DRIVER, amqp_uri, name,
                           str(tmp_path_factory.mktemp("saga") / "saga"), "8"],
                          capture_output=True, text=True, timeout=1000, env=environment)  # 400 + 600 s

    def part(text, n):
        after = text.split(f"PART-{n}\n", 1)[1] if f"PART-{n}\n" in text else ""
        return after.split(f"PART-{n + 1}\n", 1)[0]

    return {n: (done.returncode, part(done.stdout, n), part(done.stderr, n)) for n in (1, 2)}, done


def test_a_saga_with_a_poison_row_and_idle_triggers_prints_few_lines(saga_parts):
    """One poison row (isolated, retried once, parked) and idle 1-second triggers: a handful of lines,
    no executor traces, no "falling behind", Spark's streaming note at most once."""
    parts, done = saga_parts
    _, stdout, stderr = parts[1]
    start = done.stderr.split("PART-1\n", 1)[0]  # the session's start, which this part's lines include
    output = stdout + start + stderr
    assert "DRIVER-DONE poisoned 1" in stdout, (done.stdout + done.stderr)[-5000:]
    lines = [line for line in output.splitlines() if line.strip() and not line.startswith("IDLE-")]
    assert len(lines) <= 20, "\n".join(lines)
    assert "Traceback (most recent call last)" not in output and "\tat org.apache.spark" not in output
    # a batch that isolates a poison row may take longer than the trigger (Spark says so); an idle one must not
    idle = stderr.split("IDLE-START", 1)[1].split("IDLE-END", 1)[0]
    assert "falling behind" not in idle
    assert output.count("spark.sql.adaptive.enabled is not supported in streaming") <= 1
    assert "1 message(s) poisoned" in output and "no poison, please" in output  # safebunny's summary says why


def test_a_drained_saga_with_failing_rows_and_a_stopped_session_prints_no_worker_or_task_noise(saga_parts):
    """Three rows failing in a UDF on two cores (tasks of one job fail side by side), retried and parked, then
    ``spark.stop()``: no ``Lost task`` lines from Spark's scheduler, no ``EOFError`` from PySpark's daemon."""
    parts, done = saga_parts
    returncode, stdout, stderr = parts[2]
    output = stdout + stderr
    assert returncode == 0 and "DRIVER-DONE poisoned 3" in stdout, (done.stdout + done.stderr)[-5000:]
    assert "TaskSetManager" not in output and "Lost task" not in output, output[-5000:]
    assert "EOFError" not in output and "daemon.py" not in output, output[-5000:]
    assert "3 message(s) poisoned (ValueError)" in output and "no bad names" in output
