"""What ``safebunny.spark.first_stream`` guards against, read from Spark's JVM: the Python function Spark keeps for the
data source (one per JVM when Spark found it by itself, one per registration otherwise) has an ``envVars`` map
that is not thread-safe (a Scala ``mutable.HashMap``, or a Java ``HashMap`` when registered) and that every
function made from it shares, and a streaming query's source runner writes its keys into that very map. When a
Spark upgrade makes any of this false (a copy, a thread-safe map), this test says so and the guard can go."""

import safebunny

RUNNER_KEYS = {"SPARK_LOCAL_DIRS", "SPARK_AUTH_SOCKET_TIMEOUT", "SPARK_BUFFER_SIZE", "SPARK_PYTHON_RUNTIME"}


def test_spark_writes_each_stream_sources_keys_into_one_map_shared_by_every_query(spark, amqp_uri, make_queue,
                                                                                  tmp_path):
    jvm = spark._jvm
    manager = spark._jsparkSession.sessionState().dataSourceManager()
    env = manager.lookupDataSource("safebunny").dataSourceCls().envVars()
    kind = env.getClass().getName()
    if kind.endswith("MutableMapWrapper"):  # found by Spark itself
        kind = env.underlying().getClass().getName()
    assert kind in ("scala.collection.mutable.HashMap", "java.util.HashMap")  # neither is thread-safe
    again = manager.lookupDataSource("safebunny").createPythonFunction(bytearray(b"f")).envVars()
    assert jvm.System.identityHashCode(again) == jvm.System.identityHashCode(env)  # one map, not a copy

    queue = make_queue()
    query = (safebunny.read_stream(spark, uri=amqp_uri, queue=queue, queueType="classic",
                                   journalLocation=str(tmp_path / "journal"))
             .writeStream.foreachBatch(lambda df, i: None).option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None
    assert RUNNER_KEYS <= set(env.keySet())  # the source runner's own keys, in the shared map
