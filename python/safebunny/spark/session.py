"""A Spark session made active in the Python thread that runs Spark work, and thread-safe entry points.

Spark looks Python data sources up through the JVM's *active* session, which is per thread: from a
thread other than the one that created the session, ``format("safebunny")`` fails with
``DATA_SOURCE_NOT_FOUND``. :func:`activate` makes a session active in the calling thread on both
sides; safebunny calls it wherever it runs Spark work (steps, sagas), and :func:`publish` /
:func:`read_stream` are thread-safe entry points for users.
"""

from __future__ import annotations

import os
from typing import Any

from safebunny.errors import SafeBunnyOptionError
from safebunny.logs import LEVEL_ENV, LOG_LEVELS
from safebunny.options.connection import ConnectionSettings
from safebunny.spark import first_stream

__all__ = ["activate", "is_connect", "pickle_by_value", "publish", "read_stream", "run_session", "session_or_raise"]


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (no JVM in this process)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def activate(spark: Any) -> Any:
    """Make ``spark`` the active session in this thread (Python and JVM); returns it."""
    from pyspark.sql import SparkSession

    jvm = getattr(spark, "_jvm", None)
    jsession = getattr(spark, "_jsparkSession", None)
    if jvm is not None and jsession is not None:
        session_class = _session_class(jvm)
        session_class.setActiveSession(jsession)
        if not session_class.getDefaultSession().isDefined():
            session_class.setDefaultSession(jsession)
    SparkSession._activeSession = spark  # the Python side's notion of the active session
    return spark


def _session_class(jvm: Any) -> Any:
    """The JVM's ``SparkSession`` class, looked up once per gateway (each lookup is several py4j round trips, and a
    step activates its session every batch)."""
    found = jvm.__dict__.get("_safebunny_session_class")  # not getattr: a JVM view answers any name with a package
    if found is None:
        found = jvm.__dict__["_safebunny_session_class"] = jvm.org.apache.spark.sql.SparkSession
    return found


def session_or_raise(spark: Any, what: str, without: str) -> Any:
    """``spark``, else the active session, else an error: ``what`` needs one, ``without`` works without Spark."""
    from pyspark.sql import SparkSession

    session = spark or SparkSession.getActiveSession()
    if session is None:
        raise SafeBunnyOptionError(f"{what} needs a SparkSession: pass spark=..., or use {without} without Spark.",
                                   "spark")
    return session


def publish(df: Any, **options: Any) -> None:
    """``df.write.format("safebunny").options(**options).save()`` from any thread."""
    activate(df.sparkSession)
    with first_stream.guarded(df.sparkSession):  # its tasks hold the map a first stream start grows
        df.write.format("safebunny").mode("append").options(**_options(options)).save()


def read_stream(spark: Any, **options: Any) -> Any:
    """``spark.readStream.format("safebunny").options(**options).load()`` from any thread."""
    activate(spark)
    return spark.readStream.format("safebunny").options(**_options(options)).load()


def _options(options: dict[str, Any]) -> dict[str, str]:
    """``options`` as strings; ``uri`` without its password, which goes to the ``password`` option unless one is
    given (Spark redacts that key in query plans, not a password inside ``uri``); and ``logLevel`` from this process's
    ``SAFEBUNNY_LOG_LEVEL`` unless given: the level reaches the processes Spark runs the source and sink in
    through the options, not their environment (which needs ``spark.executorEnv.*`` on a cluster)."""
    found = {k: str(v) for k, v in options.items()}
    keys = {k.lower(): k for k in found}
    if "uri" in keys:
        secret_key = keys.get("password", "password")
        connection = ConnectionSettings(found[keys["uri"]], found.get(secret_key))
        found[keys["uri"]] = connection.uri
        if connection.password is not None:
            found[secret_key] = connection.password
    level = os.environ.get(LEVEL_ENV, "").strip().upper()
    if level in LOG_LEVELS and "loglevel" not in keys:
        found["logLevel"] = level
    return found


def run_session(remote: str | None, master: str | None) -> Any:
    """The Spark session ``safebunny run`` uses (docs/operations.md)."""
    from pyspark.sql import SparkSession

    if remote:
        return SparkSession.builder.remote(remote).getOrCreate()
    if master:
        from safebunny.spark.conf import use_local_checkpoints

        return use_local_checkpoints(SparkSession.builder.master(master).appName("safebunny-run")).getOrCreate()
    return SparkSession.builder.getOrCreate()


def pickle_by_value(module: Any) -> None:
    """Ship the handlers of a saga loaded from a file with their code: over Spark Connect (``safebunny run``)
    they are pickled to the server, where the file's made-up module name cannot be imported."""
    try:
        from pyspark import cloudpickle
    except ImportError:  # no Spark here: nothing is pickled
        return
    cloudpickle.register_pickle_by_value(module)
