"""Writes and stream reads through format("safebunny") from Python threads other than the session's creator."""

import threading

import safebunny
from helpers import publish_numbered, wait_until


def _in_thread(fn):
    box = {}

    def run():
        try:
            box["value"] = fn()
        except Exception as exc:  # handed back to the test
            box["error"] = exc

    t = threading.Thread(target=run)
    t.start()
    t.join(300)
    return box


def test_a_plain_write_from_another_thread_fails_and_safebunny_publish_works(spark, amqp_uri, make_queue, admin):
    queue = make_queue()
    df = spark.createDataFrame([("a",), ("b",)], "value string")

    plain = _in_thread(lambda: df.write.format("safebunny").mode("append").option("uri", amqp_uri)
                       .option("routingKey", queue).save())
    # the negative control: Spark's lookup goes through the thread's (missing) active session
    assert "error" in plain and "DATA_SOURCE_NOT_FOUND" in str(plain["error"])

    # registering the source on the session does not help, nor does PySpark's inheritable_thread_target:
    # DataSource.lookupDataSource asks SparkSession.getActiveSession (per JVM thread), never the session
    from pyspark import inheritable_thread_target

    safebunny.register(spark)
    again = _in_thread(lambda: df.write.format("safebunny").mode("append").option("uri", amqp_uri)
                       .option("routingKey", queue).save())
    assert "error" in again and "DATA_SOURCE_NOT_FOUND" in str(again["error"])
    inherited = _in_thread(inheritable_thread_target(
        lambda: df.write.format("safebunny").mode("append").option("uri", amqp_uri).option("routingKey", queue).save()))
    assert "error" in inherited and "DATA_SOURCE_NOT_FOUND" in str(inherited["error"])

    done = _in_thread(lambda: safebunny.publish(df, uri=amqp_uri, routingKey=queue))
    assert "error" not in done, done.get("error")
    assert sorted(b for _, _, b in admin.get_all(queue)) == [b"a", b"b"]


def test_a_stream_read_starts_from_another_thread(spark, amqp_uri, make_queue, tmp_path):
    queue = make_queue()
    publish_numbered(amqp_uri, queue, 20)
    seen = []

    def start():
        df = safebunny.read_stream(spark, uri=amqp_uri, queue=queue, queueType="classic",
                                   journalLocation=str(tmp_path / "journal"))
        q = (df.writeStream.foreachBatch(lambda b, i: seen.extend(r.messageId for r in b.collect()))
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
        q.awaitTermination(120)
        return q

    box = _in_thread(start)
    assert "error" not in box, box.get("error")
    wait_until(lambda: len(seen) == 20, what="20 messages read by a query started from a thread")
