"""``create_microbatch_reader``: the source's micro-batch reader (Spark's ``DataSourceStreamReader``), which picks
the reader for the queue's type.

Classic and quorum queues get :class:`SafeBunnyQueueReader` (journal, ack on
commit); stream queues get :class:`SafeBunnyStreamQueueReader` (read by offset).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from pyspark_safebunny.schema import require_journal, resolve_queue_type
from safebunny.options.source import SourceOptions, parse_source_options

__all__ = ["create_microbatch_reader", "SafeBunnyMicroBatchReader"]


def create_microbatch_reader(raw_options: Mapping[str, str], schema: StructType) -> DataSourceStreamReader:
    """The source's micro-batch reader; it asks the broker nothing until Spark calls it
    (:class:`SafeBunnyMicroBatchReader`)."""
    return SafeBunnyMicroBatchReader(parse_source_options(raw_options), schema)


def _queue_reader(options: SourceOptions, schema: StructType) -> DataSourceStreamReader:
    queue_type = resolve_queue_type(options)
    if queue_type == "stream":
        from pyspark_safebunny.stream_queue_reader import SafeBunnyStreamQueueReader

        return SafeBunnyStreamQueueReader(options, schema)
    require_journal(options, queue_type)
    from pyspark_safebunny.queue_reader import SafeBunnyQueueReader

    return SafeBunnyQueueReader(options, schema)


class SafeBunnyMicroBatchReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The reader Spark gets: it probes the queue's type and creates the reader for it on Spark's first call.

    PySpark's streaming source runner creates the reader in a ``try`` whose ``finally`` calls
    ``reader.stop()``: an error raised while the reader is created (a refused login, a missing queue) is
    hidden there behind ``UnboundLocalError: cannot access local variable 'reader'``. Raised from a method
    call instead, it is what the query fails with. The planning worker and the executors never create the
    queue's reader: ``read`` serves a partition by its type.
    """

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self._reader: DataSourceStreamReader | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_reader": None}  # executors need the options only

    def _queue(self) -> Any:
        if self._reader is None:
            self._reader = _queue_reader(self.options, self.schema)
        return self._reader

    def initialOffset(self) -> dict:
        return self._queue().initialOffset()

    def getDefaultReadLimit(self) -> ReadLimit:
        return self._queue().getDefaultReadLimit()

    def prepareForTriggerAvailableNow(self) -> None:
        self._queue().prepareForTriggerAvailableNow()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        return self._queue().latestOffset(start, limit)

    def reportLatestOffset(self) -> dict | None:
        return self._queue().reportLatestOffset()

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return self._queue().partitions(start, end)

    def commit(self, end: dict) -> None:
        self._queue().commit(end)

    def stop(self) -> None:
        if self._reader is not None:
            self._reader.stop()

    def read(self, partition: InputPartition) -> Iterator[Any]:
        kind = type(partition).__name__  # by name: loads only the module of the partition's own reader
        if kind == "JournalPartition":
            from pyspark_safebunny.queue_reader import read_journal_partition

            return read_journal_partition(partition)  # type: ignore[arg-type]
        if kind == "SafeBunnyStreamQueuePartition":
            from pyspark_safebunny.stream_queue_reader import read_stream_partition

            return read_stream_partition(self.options, partition)
        return iter(())  # Spark's stand-in for "no partitions"
