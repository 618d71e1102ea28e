"""A large batch's emits published from the executors, through the connector's sink.

Above a threshold the batch's publish rows (built on the driver either way) become a small DataFrame,
coalesced to about one partition per ``partition_rows`` rows (no shuffle), written with
``df.write.format("safebunny")``, which returns only once every message is confirmed (docs/exactly-once.md,
"Where the emits are published"). The options keep the password out of the URI
(:meth:`~safebunny.options.sink.SinkOptions.spark_options`): Spark redacts an option named ``password`` in plans
and logs, not a password inside ``uri``.
"""

from __future__ import annotations

import math
from typing import Any, Final, Literal

import pyarrow as pa

from safebunny.options.sink import SinkOptions
from safebunny.spark.session import is_connect, publish

__all__ = ["AUTO", "DEFAULT_PARTITION_ROWS", "DEFAULT_THRESHOLD", "ExecutorPublishRows", "has_remote_executors",
           "partitions_for", "threshold_for"]

#: StepSettings(executor_publish_rows=AUTO), the default: DEFAULT_THRESHOLD where executors are other processes,
#: else never
AUTO: Final = "auto"
#: a step's ``executor_publish_rows``: rows, :data:`AUTO`, or 0/None for never
ExecutorPublishRows = int | Literal["auto"] | None
#: batches with more publish rows than this publish them from the executors (StepSettings(executor_publish_rows=))
DEFAULT_THRESHOLD = 5000
#: about this many rows per publishing task (StepSettings(executor_partition_rows=))
DEFAULT_PARTITION_ROWS = 2500


def partitions_for(rows: int, partition_rows: int, parallelism: int | None) -> int:
    """About one partition per ``partition_rows`` rows, at least one, at most ``parallelism`` (when known)."""
    wanted = max(1, math.ceil(rows / max(1, partition_rows)))
    return min(wanted, parallelism) if parallelism else wanted


def has_remote_executors(spark: Any) -> bool:
    """Whether the session's executors are processes of their own (a cluster, ``local-cluster``), not threads of
    the driver's JVM (``local[...]``), where a publish through Spark only adds a job and the rows' trip through
    the JVM to the same cores (slower than the driver's own publish: docs/performance.md). A master that
    cannot be read counts as a cluster."""
    try:
        master = spark.conf.get("spark.master", None) if is_connect(spark) else spark.sparkContext.master
    except Exception:  # noqa: BLE001 - a server that refuses to tell: a cluster
        return True
    master = str(master or "")
    return not (master == "local" or master.startswith("local["))


def threshold_for(setting: ExecutorPublishRows, spark: Any) -> int | None:
    """The rows above which a batch publishes from the executors, for ``executor_publish_rows=setting``:
    :data:`AUTO` gives :data:`DEFAULT_THRESHOLD` on a cluster and None (never) on a local session."""
    if setting == AUTO:
        return DEFAULT_THRESHOLD if spark is not None and has_remote_executors(spark) else None
    return setting or None


def parallelism_of(spark: Any) -> int | None:
    """The session's default parallelism: the most partitions a local relation is split into, so the most a
    ``coalesce`` can give. A Spark Connect session has no ``sparkContext``: its conf, when it sets
    ``spark.default.parallelism``, else unknown."""
    if is_connect(spark):
        try:
            value = spark.conf.get("spark.default.parallelism", None)
        except Exception:  # noqa: BLE001 - a server that refuses to tell: unknown
            return None
        return int(value) if value and str(value).isdigit() else None
    return int(spark.sparkContext.defaultParallelism)


def publish_from_executors(spark: Any, rows: pa.Table, options: SinkOptions, partition_rows: int) -> int:
    """Publish ``rows`` (the step's publish rows) through ``df.write.format("safebunny")``; returns the
    number of partitions asked for. Raises whatever the write raises (a Spark exception carrying the sink's
    :class:`~safebunny.errors.SafeBunnyError` in its text); the caller maps and retries it."""
    partitions = partitions_for(rows.num_rows, partition_rows, parallelism_of(spark))
    frame = spark.createDataFrame(rows).coalesce(partitions)
    publish(frame, **options.spark_options())
    return partitions
