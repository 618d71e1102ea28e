"""The source's schema, column by column (docs/source.md documents each)."""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from pyspark_safebunny.queue_type import require_journal, resolve_queue_type
from safebunny.amqp.message_rows import arrow_schema
from safebunny.options.source import parse_source_options

__all__ = ["source_schema", "schema_for"]


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
