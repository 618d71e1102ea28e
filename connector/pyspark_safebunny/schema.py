"""The source's schema, column by column (docs/source.md documents each)."""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from safebunny.options.source import parse_source_options

__all__ = ["BASE_FIELDS", "source_schema", "schema_for"]

BASE_FIELDS: tuple[StructField, ...] = (
    StructField("value", BinaryType(), nullable=True),
    StructField("messageId", StringType(), nullable=True),
    StructField("correlationId", StringType(), nullable=True),
    StructField("routingKey", StringType(), nullable=True),
    StructField("exchange", StringType(), nullable=True),
    StructField("queue", StringType(), nullable=False),
    StructField("redelivered", BooleanType(), nullable=False),
    StructField("deliveryCount", IntegerType(), nullable=True),
    StructField("timestamp", TimestampType(), nullable=True),
    StructField("contentType", StringType(), nullable=True),
    StructField("type", StringType(), nullable=True),
)
HEADERS_FIELD = StructField("headers", MapType(StringType(), StringType()), nullable=True)
OFFSET_FIELD = StructField("offset", LongType(), nullable=True)


def schema_for(include_headers: bool, include_offset: bool) -> StructType:
    """The schema for a given choice of optional columns."""
    fields = list(BASE_FIELDS)
    if include_headers:
        fields.append(HEADERS_FIELD)
    if include_offset:
        fields.append(OFFSET_FIELD)
    return StructType(fields)


def source_schema(raw_options: Mapping[str, str]) -> StructType:
    """Validate the options (so errors come at ``load()``) and return the schema.

    When the queue may need a journal and ``journalLocation`` is missing, this asks the broker
    for the queue's type (``queueType=auto``), so a missing queue, a wrong password or an
    unreachable host are reported at ``load()`` too. The ``offset`` column is always present:
    it is the stream offset for stream queues and null for classic and quorum queues.
    """
    options = parse_source_options(raw_options)
    if options["queueType"] in ("classic", "quorum") or (
        options["queueType"] == "auto" and not options["journalLocation"]
    ):
        # fail at load(), not when the query starts, when a journal is needed and missing
        from pyspark_safebunny.stream_reader import require_journal, resolve_queue_type

        require_journal(options, resolve_queue_type(options))
    return schema_for(options["includeHeaders"], include_offset=True)
