"""``SafeBunnyStreamQueueReader``: the streaming source over a stream queue (``x-queue-type=stream``), as Spark glue.

The logic is Spark-free in :mod:`safebunny.streams.stream_source` (offsets, bounds, a stream replaced under a
checkpoint, reading a range); this module turns Spark's read limits into its arguments and its ranges into
partitions (``minPartitions`` of them, read on executors). Nothing is acked and ``commit`` does nothing: the
checkpoint is the only record of progress.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from safebunny.errors import SafeBunnyOptionError
from safebunny.options.source import SourceOptions
from safebunny.streams.offsets import batch_start, from_spark_offset, split_range, to_spark_offset
from safebunny.streams.stream_source import StreamSource, read_partition

__all__ = ["SafeBunnyStreamQueueReader", "SafeBunnyStreamPartition", "read_stream_partition", "check_schema"]


@dataclass
class SafeBunnyStreamPartition(InputPartition):
    """Stream offsets ``[start, end)`` of one stream queue (plain fields: picklable)."""

    start: int
    end: int

    def __post_init__(self) -> None:
        super().__init__((self.start, self.end))


def check_schema(options: SourceOptions, schema: StructType) -> None:
    """Reject a user-specified schema: the columns are fixed (see docs/source.md)."""
    from pyspark_safebunny.schema import schema_for

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
    if not isinstance(partition, SafeBunnyStreamPartition):
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
        return [SafeBunnyStreamPartition(lo, hi) for lo, hi in ranges]

    def commit(self, end: dict) -> None:
        """Nothing to do: a stream queue keeps its messages; the checkpoint records progress."""

    def stop(self) -> None:
        self.source.stop()

    # -- executor side -----------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_stream_partition(self.options, partition)
