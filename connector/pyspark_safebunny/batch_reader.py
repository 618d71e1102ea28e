"""Batch reads (``spark.read.format("safebunny")``): stream queues only.

A batch read of a stream queue reads the offsets from ``startingOffsets`` (default
``earliest``) to ``endingOffsets`` (exclusive; the stream's tail at planning time by default,
once that option exists in ``source_options``), in ``minPartitions`` parallel ranges;
nothing is consumed or acked. Classic and quorum queues cannot be read in batch: reading
them removes the messages, so use ``readStream`` with ``trigger(availableNow=True)``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from pyspark_safebunny.queue_type import resolve_queue_type
from pyspark_safebunny.stream_queue_reader import SafeBunnyStreamPartition, check_schema, read_stream_partition
from safebunny.errors import SafeBunnyOptionError
from safebunny.options.source import SourceOptions, parse_source_options
from safebunny.streams.offsets import split_range
from safebunny.streams.stream_source import batch_range

__all__ = ["create_batch_reader", "SafeBunnyStreamBatchReader"]


def create_batch_reader(raw_options: Mapping[str, str], schema: StructType) -> DataSourceReader:
    """The batch reader for a stream queue; a clear error for classic and quorum queues."""
    options = parse_source_options(raw_options)
    kind = resolve_queue_type(options)
    if kind != "stream":
        raise SafeBunnyOptionError(
            f"Queue {options.queue!r} is a {kind} queue: batch reads (spark.read) of classic and quorum "
            "queues are not supported, because reading them removes the messages. Use "
            "spark.readStream.format('safebunny') with .trigger(availableNow=True) instead, which acks only "
            "after each batch has committed.",
            "queue",
        )
    return SafeBunnyStreamBatchReader(options, schema)


class SafeBunnyStreamBatchReader(DataSourceReader):
    """Reads ``[startingOffsets, tail)`` of a stream queue once."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        check_schema(options, schema)
        self.options = options
        self.schema = schema

    def partitions(self) -> list[InputPartition]:
        start, end = batch_range(self.options)
        return [SafeBunnyStreamPartition(lo, hi) for lo, hi in split_range(start, end, self.options.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_stream_partition(self.options, partition)
