"""The source's schema, column by column (docs/source.md documents each), and what it is checked against before
a query runs: the queue's type (the option, else the broker's answer) and the journal a classic or quorum queue
cannot be read without. The stream and batch readers use those too; this module imports none of them, so the
plugin's modules import each other one way."""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from safebunny.amqp.message_rows import arrow_schema
from safebunny.errors import SafeBunnyOptionError
from safebunny.options.source import SourceOptions, parse_source_options

__all__ = ["source_schema", "schema_for", "resolve_queue_type", "require_journal"]


def schema_for(include_headers: bool, include_offset: bool) -> StructType:
    """The schema for a given choice of optional columns: Spark's types of the one message schema,
    :func:`safebunny.amqp.message_rows.arrow_schema` (what the readers write), nullability included."""
    return from_arrow_schema(arrow_schema(include_headers, include_offset))


def source_schema(raw_options: Mapping[str, str]) -> StructType:
    """Validate the options (so errors come at ``load()``) and return the schema.

    With ``queueType=auto`` (the default) this asks the broker for the queue's type, so a missing
    queue, a wrong password or an unreachable host are reported at ``load()``, with safebunny's
    error at the end of Spark's message, not when the query runs (where Spark's query description
    follows it). The ``offset`` column is always present:
    it is the stream offset for stream queues and null for classic and quorum queues.
    """
    options = parse_source_options(raw_options)
    # fail at load(), not when the query starts: a missing queue, a refused login, a journal needed and missing
    # (queueType=stream asks nothing: it needs no journal)
    require_journal(options, resolve_queue_type(options))
    return schema_for(options.include_headers, include_offset=True)


def resolve_queue_type(options: SourceOptions) -> str:
    """``classic``, ``quorum`` or ``stream``: the option when set, else the broker's answer."""
    if options.queue_type != "auto":
        return options.queue_type
    from safebunny.streams.probe import detect_queue_type

    return detect_queue_type(options.connection.login_uri, options.queue, options.stream_port)


def require_journal(options: SourceOptions, queue_type: str) -> None:
    """Classic and quorum queues need ``journalLocation`` (a Unity Catalog volume works: its files are written whole
    there); say so before the query starts."""
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
