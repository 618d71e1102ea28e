"""``SafeBunnyStreamQueueReader``: the streaming source over a stream queue (``x-queue-type=stream``), as Spark glue.

The logic is Spark-free in :mod:`safebunny.streams.stream_source` (offsets, bounds, a stream replaced under a
checkpoint, reading a range); this module turns Spark's read limits into its arguments and its ranges into
partitions (``minPartitions`` of them, read on executors). Nothing is acked and ``commit`` does nothing: the
checkpoint is the only record of progress.

A batch read (``spark.read.format("safebunny")``, :func:`create_batch_reader`) is of stream queues only: it reads
the offsets from ``startingOffsets`` (default ``earliest``) to ``endingOffsets`` (exclusive; the stream's tail at
planning time by default) in ``minPartitions`` ranges, and consumes and acks nothing. Classic and quorum queues
cannot be read in batch: reading them removes the messages, so use ``readStream`` with
``trigger(availableNow=True)``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from pyspark_safebunny.schema import resolve_queue_type, schema_for
from safebunny._lazy import exports
from safebunny.errors import SafeBunnyOptionError
from safebunny.options.source import SourceOptions, parse_source_options
from safebunny.streams.offsets import batch_start, from_spark_offset, split_range, to_spark_offset
from safebunny.streams.stream_source import StreamSource, batch_range, read_partition

__all__ = ["SafeBunnyStreamQueueReader", "SafeBunnyStreamQueuePartition", "read_stream_partition", "check_schema",
           "create_batch_reader", "SafeBunnyStreamQueueBatchReader"]
#: the names of earlier releases (CHANGELOG.md)
__getattr__, _ = exports(__name__, {}, {"SafeBunnyStreamBatchReader": "write SafeBunnyStreamQueueBatchReader.",
                                        "SafeBunnyStreamPartition": "write SafeBunnyStreamQueuePartition."})


@dataclass
class SafeBunnyStreamQueuePartition(InputPartition):
    """Stream offsets ``[start, end)`` of one stream queue (plain fields: picklable)."""

    start: int
    end: int

    def __post_init__(self) -> None:
        super().__init__((self.start, self.end))


def check_schema(options: SourceOptions, schema: StructType) -> None:
    """Reject a user-specified schema: the columns are fixed (see docs/source.md)."""
    expected = schema_for(options.include_headers, include_offset=True)
    if schema != expected:
        raise SafeBunnyOptionError(
            f"The safebunny source has a fixed schema ({expected.simpleString()}), but got "
            f"{schema.simpleString()}. Do not call .schema() on the reader; select or cast columns afterwards.",
            "schema",
        )


def read_stream_partition(options: SourceOptions, partition: InputPartition) -> Iterator[Any]:
    """Yield Arrow batches with exactly the stream offsets of ``partition`` (runs on executors); none for any
    other partition (Spark's stand-in for "no partitions")."""
    if not isinstance(partition, SafeBunnyStreamQueuePartition):
        return iter(())
    return read_partition(options, partition.start, partition.end)


class SafeBunnyStreamQueueReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Reads a stream queue by offset; see :mod:`safebunny.streams.stream_source`."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        check_schema(options, schema)
        self.options = options
        self.schema = schema
        self.source = StreamSource(self.options)

    # -- driver side -------------------------------------------------------------------------

    def initialOffset(self) -> dict:
        return self.source.initial()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_messages_per_trigger is not None:
            return ReadMaxRows(self.options.max_messages_per_trigger)
        if self.options.max_bytes_per_trigger is not None:
            return ReadMaxBytes(self.options.max_bytes_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.source.prepare_available_now()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        if isinstance(limit, ReadMaxRows):
            return self.source.latest(start, limit.max_rows, self.options.max_bytes_per_trigger)
        if isinstance(limit, ReadMaxBytes):
            return self.source.latest(start, self.options.max_messages_per_trigger, limit.max_bytes)
        if isinstance(limit, ReadMinRows):
            return self.source.latest(start, min_rows=limit.min_rows)
        return self.source.latest(start)  # ReadAllAvailable, or anything this source does not know: no cap

    def reportLatestOffset(self) -> dict | None:
        tail = self.source.latest_tail
        return None if tail is None else to_spark_offset(tail)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        ranges = split_range(batch_start(start, end), from_spark_offset(end), self.options.min_partitions)
        return [SafeBunnyStreamQueuePartition(lo, hi) for lo, hi in ranges]

    def commit(self, end: dict) -> None:
        """Nothing to do: a stream queue keeps its messages; the checkpoint records progress."""

    def stop(self) -> None:
        self.source.stop()

    # -- executor side -----------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_stream_partition(self.options, partition)


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
    return SafeBunnyStreamQueueBatchReader(options, schema)


class SafeBunnyStreamQueueBatchReader(DataSourceReader):
    """Reads ``[startingOffsets, tail)`` of a stream queue once."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        check_schema(options, schema)
        self.options = options
        self.schema = schema

    def partitions(self) -> list[InputPartition]:
        start, end = batch_range(self.options)
        return [SafeBunnyStreamQueuePartition(lo, hi)
                for lo, hi in split_range(start, end, self.options.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_stream_partition(self.options, partition)

