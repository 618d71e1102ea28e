"""``create_stream_reader``: picks the reader for the queue's type.

Classic and quorum queues get :class:`SafeBunnyQueueStreamReader` (journal, ack on
commit); stream queues get :class:`SafeBunnyStreamQueueReader` (read by offset).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.types import StructType

from safebunny.errors import SafeBunnyOptionError
from safebunny.options.source import parse_source_options

__all__ = ["create_stream_reader", "resolve_queue_type", "require_journal"]


def resolve_queue_type(options: Mapping[str, Any]) -> str:
    """``classic``, ``quorum`` or ``stream``: the option when set, else the broker's answer."""
    if options["queueType"] != "auto":
        return str(options["queueType"])
    from safebunny.amqp.probe import detect_queue_type

    return detect_queue_type(options["uri"], options["queue"], options["streamPort"])


def require_journal(options: Mapping[str, Any], queue_type: str) -> None:
    """Classic and quorum queues need ``journalLocation``; say so before the query starts."""
    if queue_type != "stream" and not options.get("journalLocation"):
        raise SafeBunnyOptionError(
            f"Option 'journalLocation' is required to read the {queue_type} queue {options['queue']!r}: "
            "set it to a durable directory every executor can read (local disk in local mode, DBFS, a "
            "Volume or S3 on a cluster), e.g. .option('journalLocation', '/checkpoints/orders/journal'). "
            "Each batch's messages are written there before Spark logs the batch, so a replay is exact. "
            "(Batch reads with spark.read are for stream queues only; read classic and quorum queues with "
            "readStream and trigger(availableNow=True).)",
            "journalLocation",
        )


def create_stream_reader(raw_options: Mapping[str, str], schema: StructType) -> DataSourceStreamReader:
    options = parse_source_options(raw_options)
    queue_type = resolve_queue_type(options)
    if queue_type == "stream":
        from pyspark_safebunny.stream_queue_reader import SafeBunnyStreamQueueReader

        return SafeBunnyStreamQueueReader(options, schema)
    require_journal(options, queue_type)
    from pyspark_safebunny.queue_reader import SafeBunnyQueueStreamReader

    return SafeBunnyQueueStreamReader(options, schema)
