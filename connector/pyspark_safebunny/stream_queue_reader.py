"""``SafeBunnyStreamQueueReader``: the streaming source over a stream queue (``x-queue-type=stream``).

Offsets are stream offsets: the Spark offset ``{"offset": n}`` means "the next stream offset
to read is n", so a micro-batch between ``{"offset": a}`` and ``{"offset": b}`` reads
``[a, b)``. No journal is needed: a replay reads the same offsets again, and the broker
keeps them until retention removes them (then ``failOnDataLoss`` decides). Nothing is acked
and ``commit`` does nothing: the checkpoint is the only record of progress.

The driver side (``initialOffset``/``latestOffset``) keeps one connection between calls to
find the stream's bounds (replaced when idle for long; never pickled); partitions
(``[start, end)`` ranges, ``minPartitions`` of them) are read on executors, each with its own
connection, opened lazily inside ``read`` and closed at its end.
"""

from __future__ import annotations

import atexit
import logging
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

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

from safebunny.errors import (
    BrokerAuthenticationError,
    QueueNotFoundError,
    SafeBunnyBrokerError,
    SafeBunnyDataLossError,
    SafeBunnyOptionError,
    VhostNotFoundError,
)
from safebunny.streams.client import StreamQueueClient
from safebunny.streams.offsets import (
    ANCHOR_KEY,
    RESET_KEY,
    StreamBounds,
    anchor_offset,
    batch_start,
    capped_end,
    from_spark_offset,
    make_anchor,
    replaced_message,
    reset_message,
    resolve_start,
    split_range,
    to_spark_offset,
)
from safebunny.streams.protocol import open_stream_client

__all__ = ["SafeBunnyStreamQueueReader", "SafeBunnyStreamPartition", "read_stream_partition",
           "check_schema", "stream_bounds", "starting_offset"]

log = logging.getLogger("safebunny.source")
T = TypeVar("T")


class SafeBunnyStreamPartition(InputPartition):
    """Stream offsets ``[start, end)`` of one stream queue (plain fields: picklable)."""

    def __init__(self, start: int, end: int) -> None:
        super().__init__((start, end))
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"SafeBunnyStreamPartition(start={self.start}, end={self.end})"


def check_schema(options: dict[str, Any], schema: StructType) -> None:
    """Reject a user-specified schema: the columns are fixed (see docs/source.md)."""
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


class _DriverConnection:
    """The driver side's client, kept between calls (opening one costs a round trip or more, TLS more).

    Between triggers nobody services its heartbeats, so a client idle for longer than
    ``MAX_IDLE_S`` is replaced rather than trusted; a broker error other than a definite
    answer (missing queue, refused login, missing vhost) is retried once on a new connection.
    """

    MAX_IDLE_S = 20.0

    def __init__(self, options: dict[str, Any]) -> None:
        self.options = options
        self.client: StreamQueueClient | None = None
        self.used = 0.0
        ref = weakref.ref(self)
        atexit.register(lambda: ref() is not None and ref().close())  # Spark never calls stop()

    def _drop(self) -> None:
        if self.client is not None:
            try:
                self.client.close()
            except Exception:
                pass
            self.client = None

    def _get(self) -> StreamQueueClient:
        if self.client is not None and time.monotonic() - self.used > self.MAX_IDLE_S:
            self._drop()
        if self.client is None:
            o = self.options
            self.client = open_stream_client(o["uri"], o["streamPort"], o["heartbeatSeconds"])
        return self.client

    def call(self, action: Callable[[StreamQueueClient], T]) -> T:
        try:
            result = action(self._get())
        except (QueueNotFoundError, BrokerAuthenticationError, VhostNotFoundError):
            self._drop()
            raise
        except SafeBunnyBrokerError:
            self._drop()
            result = action(self._get())
        self.used = time.monotonic()
        return result

    def close(self) -> None:
        self._drop()


def stream_bounds(options: dict[str, Any], connection: _DriverConnection | None = None) -> StreamBounds:
    """Ask the broker for the stream's bounds."""
    own = connection is None
    connection = connection or _DriverConnection(options)
    try:
        return connection.call(lambda client: client.bounds(options["queue"], _empty_wait_s(options)))
    finally:
        if own:
            connection.close()


def starting_offset(options: dict[str, Any], connection: _DriverConnection | None = None) -> int:
    """Resolve ``startingOffsets`` to a stream offset on the broker."""
    spec = options["startingOffsets"]
    own = connection is None
    connection = connection or _DriverConnection(options)
    try:
        bounds = connection.call(lambda client: client.bounds(options["queue"], _empty_wait_s(options)))
        found = None
        if isinstance(spec, dict):
            found = connection.call(
                lambda client: client.offset_for_timestamp(options["queue"], spec["timestamp"], _empty_wait_s(options)))
        return resolve_start(spec, bounds, found)
    finally:
        if own:
            connection.close()


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
        self._connection: _DriverConnection | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_connection"] = None  # connections are never pickled (executors open their own)
        return state

    def _driver(self) -> _DriverConnection:
        if self._connection is None:
            self._connection = _DriverConnection(self.options)
        return self._connection

    # -- driver side -------------------------------------------------------------------------

    def initialOffset(self) -> dict:
        return to_spark_offset(starting_offset(self.options, self._driver()))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.get("maxMessagesPerTrigger") is not None:
            return ReadMaxRows(self.options["maxMessagesPerTrigger"])
        if self.options.get("maxBytesPerTrigger") is not None:
            return ReadMaxBytes(self.options["maxBytesPerTrigger"])
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target_end = stream_bounds(self.options, self._driver()).tail

    def _waits_for(self, begin: int) -> bool:
        """True when ``begin`` is the ``startingOffsets`` number (beyond the tail it waits, as documented)."""
        spec = self.options.get("startingOffsets")
        return isinstance(spec, int) and not isinstance(spec, bool) and spec == begin

    def _first_message_from(self, offset: int) -> tuple[int, bytes | None] | None:
        wait = min(1.0, _empty_wait_s(self.options))
        return self._driver().call(lambda client: client.first_message_from(self.options["queue"], offset, wait))

    def _anchor(self, end: int) -> str | None:
        """The anchor of end offset ``end`` (see :data:`ANCHOR_KEY`), or None when there is none."""
        found = self._first_message_from(end - 1) if end > 0 else None
        return None if found is None else make_anchor(*found)

    def _replaced(self, start: dict, begin: int, bounds: StreamBounds) -> str | None:
        """Why the stream behind this checkpoint offset is not the one the query read, or None."""
        if bounds.tail < begin and not self._waits_for(begin):
            return reset_message(self.options["queue"], begin, bounds)  # offsets never go backwards
        anchor = start.get(ANCHOR_KEY) if isinstance(start, dict) else None
        at = anchor_offset(anchor)
        if at is None or at < bounds.first or begin == 0:  # no anchor, or retention removed it: cannot tell
            return None
        found = self._first_message_from(begin - 1)
        if found is None or make_anchor(*found) != anchor:
            return replaced_message(self.options["queue"], begin, at)
        return None

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = from_spark_offset(start)
        bounds = stream_bounds(self.options, self._driver())
        self._latest_tail = bounds.tail
        reset_from = None
        message = self._replaced(start, begin, bounds)
        if message is not None:
            # the stream was deleted and re-created since this offset was written: data loss
            if self.options["failOnDataLoss"]:
                raise SafeBunnyDataLossError(message)
            log.warning("failOnDataLoss=false, SKIPPING LOST MESSAGES: %s Going on from offset %d.", message,
                        bounds.first)
            begin = reset_from = bounds.first
            if self._target_end is not None:  # an availableNow target of the old stream means nothing now
                self._target_end = bounds.tail
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
        if end == begin and reset_from is None:
            return start  # nothing new: the same offset, so Spark plans no batch
        offset: dict[str, Any] = to_spark_offset(end)
        if reset_from is not None:
            offset[RESET_KEY] = reset_from
        anchor = self._anchor(end)
        if anchor is not None:
            offset[ANCHOR_KEY] = anchor
        return offset

    def reportLatestOffset(self) -> dict | None:
        return None if self._latest_tail is None else to_spark_offset(self._latest_tail)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        ranges = split_range(batch_start(start, end), from_spark_offset(end), self.options["minPartitions"])
        return [SafeBunnyStreamPartition(lo, hi) for lo, hi in ranges]

    def commit(self, end: dict) -> None:
        """Nothing to do: a stream queue keeps its messages; the checkpoint records progress."""

    def stop(self) -> None:
        """Close the driver side's connection (executors close theirs at the end of each read)."""
        if self._connection is not None:
            self._connection.close()

    # -- executor side -----------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, SafeBunnyStreamPartition):  # Spark's stand-in for "no partitions"
            return iter(())
        return read_stream_partition(self.options, partition)
