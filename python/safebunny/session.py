"""Spark sessions and Python threads.

Spark looks Python data sources up through the JVM's *active* session, which is per thread: from a
thread other than the one that created the session, ``format("safebunny")`` fails with
``DATA_SOURCE_NOT_FOUND``. :func:`activate` makes a session active in the calling thread on both
sides; safebunny calls it wherever it runs Spark work (steps, sagas), and :func:`publish` /
:func:`read_stream` are thread-safe entry points for users.
"""

from __future__ import annotations

from typing import Any

from safebunny import first_stream

__all__ = ["activate", "publish", "read_stream"]


def activate(spark: Any) -> Any:
    """Make ``spark`` the active session in this thread (Python and JVM); returns it."""
    from pyspark.sql import SparkSession

    jvm = getattr(spark, "_jvm", None)
    jsession = getattr(spark, "_jsparkSession", None)
    if jvm is not None and jsession is not None:
        jvm.org.apache.spark.sql.SparkSession.setActiveSession(jsession)
        jvm.org.apache.spark.sql.SparkSession.setDefaultSession(jsession) if _no_default(jvm) else None
    SparkSession._activeSession = spark  # the Python side's notion of the active session
    return spark


def _no_default(jvm: Any) -> bool:
    return not jvm.org.apache.spark.sql.SparkSession.getDefaultSession().isDefined()


def publish(df: Any, **options: Any) -> None:
    """``df.write.format("safebunny").options(**options).save()`` from any thread."""
    activate(df.sparkSession)
    with first_stream.guarded(df.sparkSession):  # its tasks hold the map a first stream start grows
        df.write.format("safebunny").mode("append").options(**{k: str(v) for k, v in options.items()}).save()


def read_stream(spark: Any, **options: Any) -> Any:
    """``spark.readStream.format("safebunny").options(**options).load()`` from any thread."""
    activate(spark)
    return spark.readStream.format("safebunny").options(**{k: str(v) for k, v in options.items()}).load()
