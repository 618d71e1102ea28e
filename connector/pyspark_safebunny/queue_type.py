"""Which reader a queue needs: its type (the option, else the broker's answer), and the journal a classic or
quorum queue cannot be read without. Used by the schema (to fail at ``load()``) and by the stream and batch
readers; it imports none of them, so the plugin's modules import each other one way."""

from __future__ import annotations

from safebunny.errors import SafeBunnyOptionError
from safebunny.options.source import SourceOptions
from safebunny.storage.volumes import refuse_volume

__all__ = ["resolve_queue_type", "require_journal"]


def resolve_queue_type(options: SourceOptions) -> str:
    """``classic``, ``quorum`` or ``stream``: the option when set, else the broker's answer."""
    if options.queue_type != "auto":
        return options.queue_type
    from safebunny.streams.probe import detect_queue_type

    return detect_queue_type(options.connection.login_uri, options.queue, options.stream_port)


def require_journal(options: SourceOptions, queue_type: str) -> None:
    """Classic and quorum queues need ``journalLocation``, off Unity Catalog volumes; say so before the query
    starts."""
    if queue_type == "stream":
        return
    if not options.journal_location:
        raise SafeBunnyOptionError(
            f"Option 'journalLocation' is required to read the {queue_type} queue {options.queue!r}: "
            "set it to a durable directory every executor can read (local disk in local mode, a cloud storage "
            "URI such as 's3://...' or DBFS on a cluster), e.g. "
            ".option('journalLocation', '/checkpoints/orders/journal'). "
            "Each batch's messages are written there before Spark logs the batch, so a replay is exact. "
            "(Batch reads with spark.read are for stream queues only; read classic and quorum queues with "
            "readStream and trigger(availableNow=True).)",
            "journalLocation",
        )
    refuse_volume(options.journal_location, "Option 'journalLocation'", "journalLocation")
