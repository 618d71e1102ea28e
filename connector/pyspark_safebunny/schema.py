"""The source's schema, column by column (README documents each)."""

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

from safebunny.source_options import parse_source_options

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

    The ``offset`` column is always present: it is the stream offset for stream queues and
    null for classic and quorum queues, so the schema does not depend on a broker probe.
    """
    options = parse_source_options(raw_options)
    return schema_for(options["includeHeaders"], include_offset=True)
