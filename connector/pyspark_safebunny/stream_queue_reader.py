"""``SafeBunnyStreamQueueReader``: the streaming source over a stream queue (``x-queue-type=stream``).

Offsets are stream offsets: the Spark offset ``{"offset": n}`` means "the next stream offset
to read is n", so a micro-batch between ``{"offset": a}`` and ``{"offset": b}`` reads
``[a, b)``. No journal is needed: a replay reads the same offsets again, and the broker
keeps them until retention removes them (then ``failOnDataLoss`` decides). Nothing is acked
and ``commit`` does nothing: the checkpoint is the only record of progress.

The driver side (``initialOffset``/``latestOffset``) opens a short connection per call to
find the stream's bounds; partitions (``[start, end)`` ranges, ``minPartitions`` of them) are
read on executors, each with its own connection, opened lazily inside ``read`` and closed at
its end.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
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
from safebunny.stream_client import open_stream_client
from safebunny.stream_offsets import (
    StreamBounds,
    capped_end,
    from_spark_offset,
    resolve_start,
    split_range,
    to_spark_offset,
)

__all__ = ["SafeBunnyStreamQueueReader", "SafeBunnyStreamPartition", "read_stream_partition",
           "check_schema", "stream_bounds", "starting_offset"]

log = logging.getLogger("safebunny.source")


class SafeBunnyStreamPartition(InputPartition):
    """Stream offsets ``[start, end)`` of one stream queue (plain fields: picklable)."""

    def __init__(self, start: int, end: int) -> None:
        super().__init__((start, end))
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"SafeBunnyStreamPartition(start={self.start}, end={self.end})"


def check_schema(options: dict[str, Any], schema: StructType) -> None:
    """Reject a user-specified schema: the columns are fixed (see the README)."""
    from pyspark_safebunny.schema import schema_for

    expected = schema_for(options["includeHeaders"], include_offset=True)
    if schema != expected:
        raise SafeBunnyOptionError(
            f"The safebunny source has a fixed schema ({expected.simpleString()}), but got "
            f"{schema.simpleString()}. Do not call .schema() on the reader; select or cast columns afterwards.",
            "schema",
        )


def _empty_wait_s(options: dict[str, Any]) -> float:
    return max(0.05, options["pollTimeoutMs"] / 1000.0)


def stream_bounds(options: dict[str, Any]) -> StreamBounds:
    """Ask the broker for the stream's bounds (one short-lived connection)."""
    with open_stream_client(options["uri"], options["streamPort"], options["heartbeatSeconds"]) as client:
        return client.bounds(options["queue"], _empty_wait_s(options))


def starting_offset(options: dict[str, Any]) -> int:
    """Resolve ``startingOffsets`` to a stream offset on the broker."""
    spec = options["startingOffsets"]
    with open_stream_client(options["uri"], options["streamPort"], options["heartbeatSeconds"]) as client:
        bounds = client.bounds(options["queue"], _empty_wait_s(options))
        found = None
        if isinstance(spec, dict):
            found = client.offset_for_timestamp(options["queue"], spec["timestamp"], _empty_wait_s(options))
    return resolve_start(spec, bounds, found)


def _warn(message: str) -> None:
    log.warning(message)


def read_stream_partition(options: dict[str, Any], partition: SafeBunnyStreamPartition) -> Iterator[Any]:
    """Yield Arrow batches with exactly the stream offsets of ``partition`` (runs on executors)."""
    client = open_stream_client(options["uri"], options["streamPort"], options["heartbeatSeconds"])
    try:
        yield from client.read_range(
            options["queue"], options["queue"], partition.start, partition.end,
            include_headers=options["includeHeaders"], fail_on_data_loss=options["failOnDataLoss"], warn=_warn,
        )
    finally:
        client.close()


class SafeBunnyStreamQueueReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Reads a stream queue by offset; see the module docstring."""

    def __init__(self, options: dict[str, Any], schema: StructType) -> None:
        check_schema(options, schema)
        self.options = dict(options)
        self.schema = schema
        self._target_end: int | None = None
        self._latest_tail: int | None = None

    # -- driver side -------------------------------------------------------------------------

    def initialOffset(self) -> dict:
        return to_spark_offset(starting_offset(self.options))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.get("maxMessagesPerTrigger") is not None:
            return ReadMaxRows(self.options["maxMessagesPerTrigger"])
        if self.options.get("maxBytesPerTrigger") is not None:
            return ReadMaxBytes(self.options["maxBytesPerTrigger"])
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target_end = stream_bounds(self.options).tail

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = from_spark_offset(start)
        bounds = stream_bounds(self.options)
        self._latest_tail = bounds.tail
        tail = bounds.tail if self._target_end is None else min(bounds.tail, self._target_end)
        if isinstance(limit, ReadMaxRows):
            end = capped_end(begin, tail, max_messages=limit.max_rows, max_bytes=self.options.get("maxBytesPerTrigger"),
                             avg_message_bytes=bounds.avg_message_bytes)
        elif isinstance(limit, ReadMaxBytes):
            end = capped_end(begin, tail, max_messages=self.options.get("maxMessagesPerTrigger"),
                             max_bytes=limit.max_bytes, avg_message_bytes=bounds.avg_message_bytes)
        elif isinstance(limit, ReadMinRows) and self._target_end is None:
            end = tail if tail - begin >= limit.min_rows else begin
        else:  # ReadAllAvailable, or anything this source does not know: no cap
            end = capped_end(begin, tail)
        return to_spark_offset(end)

    def reportLatestOffset(self) -> dict | None:
        return None if self._latest_tail is None else to_spark_offset(self._latest_tail)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        ranges = split_range(from_spark_offset(start), from_spark_offset(end), self.options["minPartitions"])
        return [SafeBunnyStreamPartition(lo, hi) for lo, hi in ranges]

    def commit(self, end: dict) -> None:
        """Nothing to do: a stream queue keeps its messages; the checkpoint records progress."""

    def stop(self) -> None:
        """Nothing to close: connections live only inside each call."""

    # -- executor side -----------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, SafeBunnyStreamPartition):  # Spark's stand-in for "no partitions"
            return iter(())
        return read_stream_partition(self.options, partition)
