"""``SafeBunnyQueueReader``: classic and quorum queues in Spark, acked only on commit.

Spark's side of :class:`safebunny.queues.queue_source.QueueSource`, which holds the contract: this module
maps Spark's read limits and offsets (dicts of :class:`~safebunny.queues.offset.QueueOffset`) onto it, and
serves each planned batch from its journal file (:class:`JournalPartition`, read on an executor).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from safebunny._lazy import exports
from safebunny.errors import SafeBunnyOptionError
from safebunny.options.source import SourceOptions
from safebunny.queues.journal import Journal
from safebunny.queues.offset import QueueOffset
from safebunny.queues.queue_source import DEFAULT_MAX_MESSAGES, QueueSource

__all__ = ["SafeBunnyQueueReader", "JournalPartition", "DEFAULT_MAX_MESSAGES", "read_journal_partition"]
#: the names of earlier releases (CHANGELOG.md)
__getattr__, _ = exports(__name__, {}, {"SafeBunnyQueueStreamReader": "write SafeBunnyQueueReader."})


@dataclass
class JournalPartition(InputPartition):
    """One logged batch: the sequence range ``(start_seq, end_seq]`` in the journal."""

    location: str
    start_seq: int
    end_seq: int
    include_headers: bool

    def __post_init__(self) -> None:
        super().__init__((self.start_seq, self.end_seq))


class SafeBunnyQueueReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Reads a classic or quorum queue (:class:`~safebunny.queues.queue_source.QueueSource` does the work)."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self.source = QueueSource(options)

    def _limits(self, limit: ReadLimit) -> tuple[int, int | None]:
        source = self.source
        if isinstance(limit, ReadMaxRows):
            return max(1, int(limit.max_rows)), source.max_bytes
        if isinstance(limit, ReadMaxBytes):
            return source.batch_cap(), max(1, int(limit.max_bytes))
        if isinstance(limit, ReadAllAvailable):
            return source.prefetch(), None
        return source.batch_cap(), source.max_bytes

    # ------------------------------------------------------------------ Spark API
    def initialOffset(self) -> dict:
        return QueueOffset(0).to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        source = self.source
        if source.max_messages is not None:
            return ReadMaxRows(source.max_messages)
        if source.max_bytes is not None:
            return ReadMaxBytes(source.max_bytes)
        return ReadMaxRows(DEFAULT_MAX_MESSAGES)

    def prepareForTriggerAvailableNow(self) -> None:
        self.source.prepare_available_now()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        if isinstance(limit, ReadAllAvailable) and not self.source.available_now:
            # Spark passes "all available" without preparing availableNow only for trigger(once=True), which
            # plans a batch and stops before committing it: every run would redeliver its messages
            raise SafeBunnyOptionError(
                f"trigger(once=True) cannot be used to read queue {self.source.queue!r}: Spark stops before "
                "committing the batch it read, so its messages are never acked and come back at every run. Use "
                ".trigger(availableNow=True), which commits (and acks) every batch before the query ends.",
                "trigger")
        count, max_bytes = self._limits(limit)
        return self.source.latest(QueueOffset.from_json(start), count, max_bytes).to_json()

    def reportLatestOffset(self) -> dict | None:
        lag = self.source.lag()
        return None if lag is None else lag.to_json()

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        first, last = QueueOffset.from_json(start), QueueOffset.from_json(end)
        if not self.source.readable(first, last):
            return []
        return [JournalPartition(self.source.location, first.seq, last.seq, self.source.include_headers)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, JournalPartition)
        return read_journal_partition(partition)

    def commit(self, end: dict) -> None:
        self.source.commit(QueueOffset.from_json(end))

    def stop(self) -> None:
        self.source.stop()


def read_journal_partition(partition: JournalPartition) -> Iterator[pa.RecordBatch]:
    """An executor's read of one batch: the record batches of its journal file."""
    journal = Journal(partition.location)
    # never skip here: the driver decided in partitions() that this batch exists; an executor that
    # cannot read it must fail the task (Spark retries it), or the batch would be committed and acked empty
    yield from journal.rows(partition.start_seq, partition.end_seq, partition.include_headers)
