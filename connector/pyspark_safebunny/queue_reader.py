"""``SafeBunnyQueueStreamReader``: classic and quorum queues, acked only on commit.

The contract (shared/DESIGN.md, "The source"):

* ``latestOffset`` (driver side, one long-lived process) takes up to the read limit of
  deliveries from the :class:`~safebunny.amqp.consumer.QueueConsumer`, writes them to the
  :class:`~safebunny.journal.Journal` and only then returns the new offset
  ``{"seq": n, "tick": t}``: ``seq`` counts messages taken by this query (never a delivery
  tag, which is channel-scoped), ``tick`` only moves to make Spark plan an empty batch.
* ``partitions``/``read`` serve a batch from its journal file, so a replay is exact.
* Each offset after the first batch carries the journal's id (``"journal"``): one query per
  ``journalLocation`` (:mod:`safebunny.journal_owner`).
* ``commit(end)`` acks with ``multiple=True`` through the last delivery of that batch and
  deletes its journal. The ack is written without waiting for the broker's answer; a round trip
  confirms the acks sent whenever ``latestOffset`` finds nothing more to read (before a query can
  end on its own) and at ``stop``. Unknown offsets (after a restart) ack nothing: the broker requeued
  those messages and they come back flagged ``redelivered``.
* Spark commits a batch only when it plans the next one. When no message arrives and a
  batch is still unacked, ``latestOffset`` returns the same ``seq`` with ``tick + 1``: Spark
  plans one empty batch and commits the previous one at once, so an idle query or an
  ``availableNow`` run ends with everything acked.
"""

from __future__ import annotations

import logging
import os
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

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

from pyspark_safebunny.available_now import take_the_rest
from safebunny.amqp.ack_budget import AckBudget
from safebunny.amqp.consumer import Delivery, QueueConsumer
from safebunny.amqp.message_rows import AmqpColumns, arrow_schema
from safebunny.amqp.poll_window import PollWindow
from safebunny.crashpoints import crash_point
from safebunny.errors import SafeBunnyDataLossError, SafeBunnyOptionError
from safebunny.journal import Journal
from safebunny.journal_owner import OFFSET_KEY, JournalOwner
from safebunny.pause_file import paused_until

__all__ = ["SafeBunnyQueueStreamReader", "JournalPartition", "DEFAULT_MAX_MESSAGES", "deliveries_to_table",
           "read_journal_partition"]

log = logging.getLogger("safebunny.source")

#: Messages per micro-batch at most when ``maxMessagesPerTrigger`` is not set: half the largest prefetch
#: (65,535), so that one batch can wait for its commit while the next one fills. A batch takes what the
#: reader has buffered when Spark asks (after up to ``pollTimeoutMs`` for a first message and 50 ms more
#: while more can arrive, or up to ``pollTimeoutMs`` for a full batch while deliveries keep arriving when the
#: broker counts enough waiting):
#: small batches, so low latency, when the queue is quiet; batches of about this size, which amortise Spark's
#: fixed cost per micro-batch, when a backlog waits.
DEFAULT_MAX_MESSAGES = 32_768

#: Body bytes the reader buffers at most when ``maxBytesPerTrigger`` is not set (with it: twice that).
DEFAULT_MAX_BUFFERED_BYTES = 256 * 1024 * 1024


@dataclass
class JournalPartition(InputPartition):
    """One logged batch: the sequence range ``(start_seq, end_seq]`` in the journal."""

    location: str
    start_seq: int
    end_seq: int
    fail_on_data_loss: bool
    include_headers: bool

    def __init__(self, location: str, start_seq: int, end_seq: int, fail_on_data_loss: bool,
                 include_headers: bool) -> None:
        super().__init__((start_seq, end_seq))
        self.location = location
        self.start_seq = start_seq
        self.end_seq = end_seq
        self.fail_on_data_loss = fail_on_data_loss
        self.include_headers = include_headers


def fit_headers(batch: pa.RecordBatch, include_headers: bool, start_seq: int, end_seq: int) -> pa.RecordBatch:
    """A journaled batch in the query's current shape: ``includeHeaders`` may have changed since it was
    written. Headers the query no longer wants are dropped; headers it wants but the journal never
    kept cannot be made up, which is a clear error rather than an Arrow schema mismatch."""
    has = "headers" in batch.schema.names
    if has and not include_headers:
        return batch.drop_columns(["headers"])
    if include_headers and not has:
        raise SafeBunnyOptionError(
            f"The batch ({start_seq}, {end_seq}] was journaled with includeHeaders=false, and the query now asks "
            "for headers: a replay cannot invent them. Set option 'includeHeaders' back to 'false' until this "
            "batch has committed (one run), then turn it on.", "includeHeaders")
    return batch


def absolute_location(location: str) -> str:
    """``location`` as an absolute path or URI (a relative local path resolved here, on the driver)."""
    if "://" in location or location.startswith("file:"):
        return location
    return os.path.abspath(os.path.expanduser(location))


def deliveries_to_table(queue: str, deliveries: list[Delivery], include_headers: bool,
                        max_chunk_bytes: int | None = None) -> pa.Table:
    """The source's rows for ``deliveries``, as a table whose record batches each hold at most
    ``max_chunk_bytes`` of bodies (default ``MAX_CHUNK_BYTES``): a batch of any total size can be
    journaled, although one Arrow ``binary`` array holds less than 2 GiB."""
    columns = AmqpColumns(include_headers)
    columns.extend([d.body for d in deliveries], [d.properties for d in deliveries],
                   [d.exchange for d in deliveries], [d.routing_key for d in deliveries],
                   [d.redelivered for d in deliveries])
    batches = columns.to_batches(queue, max_chunk_bytes)
    return pa.Table.from_batches(batches, schema=arrow_schema(include_headers, include_offset=True))


class SafeBunnyQueueStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Reads a classic or quorum queue; see the module docstring for the contract."""

    def __init__(self, options: dict[str, Any], schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self.queue: str = options["queue"]
        self.pause_file: str | None = options.get("pauseFile")
        self.include_headers: bool = options["includeHeaders"]
        self.max_messages: int | None = options["maxMessagesPerTrigger"]
        self.max_bytes: int | None = options["maxBytesPerTrigger"]
        # executors read the journal too: a relative path would resolve against each one's working directory
        self.location: str = absolute_location(options["journalLocation"])
        self._consumer: QueueConsumer | None = None
        self._journal: Journal | None = None
        self._owner: JournalOwner | None = None
        self._budget = AckBudget(self.queue, options["consumerTimeoutMs"])
        self._timeouts_seen = 0  # the consumer's count of channels closed by consumer_timeout, at the last commit
        # end seq of each returned-but-uncommitted batch -> (channel generation, last delivery tag, start seq):
        # its journal file is (start seq, end seq], its message count end - start
        self._pending: OrderedDict[int, tuple[int, int, int]] = OrderedDict()
        # journal files this process did not write, found by listing the journal at the first commit after a
        # start: (path, end seq), each deleted once a commit reaches its end; None until that first commit
        self._leftovers: list[tuple[str, int]] | None = None
        self._target_seq: int | None = None
        self._target_count: int | None = None
        self._last_seq = 0
        interval = options["triggerIntervalMs"]
        self._window = PollWindow(interval, options["pollTimeoutMs"]) if interval > 0 else None
        self._found_nothing = False

    # ------------------------------------------------------------------ helpers
    def _batch_cap(self) -> int:
        return self.max_messages or DEFAULT_MAX_MESSAGES

    def _prefetch(self) -> int:
        # room for one uncommitted batch plus the next, so batches need not wait for commits
        return min(65535, 2 * self._batch_cap())

    def _max_buffered_bytes(self) -> int:
        # room for one uncommitted batch plus the next, as the prefetch has in messages
        return 2 * self.max_bytes if self.max_bytes is not None else DEFAULT_MAX_BUFFERED_BYTES

    def _journal_(self) -> Journal:
        if self._journal is None:
            self._journal = Journal(self.location)
            self._journal.ensure()
        return self._journal

    def _owner_(self) -> JournalOwner:
        if self._owner is None:
            self._owner = JournalOwner(self._journal_(), self.queue)
        return self._owner

    def _check_owner(self, offset: dict) -> None:
        """``offset`` came from Spark's offset log (a start, a replayed end, a commit): the journal location
        must belong to the query it names, or be free when it names none."""
        journal_id = JournalOwner.id_of(offset)
        if journal_id is not None:
            self._owner_().adopt(journal_id)
        else:
            self._owner_().check_unclaimed()

    def _offset(self, seq: int, tick: int) -> dict:
        offset: dict = {"seq": seq, "tick": tick}
        if self._owner is not None and self._owner.id is not None:
            offset[OFFSET_KEY] = self._owner.id
        return offset

    def _consumer_(self) -> QueueConsumer:
        if self._consumer is None:
            self._consumer = QueueConsumer(
                self.options["uri"], self.queue, prefetch=self._prefetch(),
                heartbeat=self.options["heartbeatSeconds"], max_buffered_bytes=self._max_buffered_bytes(),
            ).start()
        return self._consumer

    def _limits(self, limit: ReadLimit) -> tuple[int, int | None]:
        if isinstance(limit, ReadMaxRows):
            return max(1, int(limit.max_rows)), self.max_bytes
        if isinstance(limit, ReadMaxBytes):
            return self._batch_cap(), max(1, int(limit.max_bytes))
        if isinstance(limit, ReadAllAvailable):
            return self._prefetch(), None
        return self._batch_cap(), self.max_bytes

    # ------------------------------------------------------------------ Spark API
    def initialOffset(self) -> dict:
        return {"seq": 0, "tick": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.max_messages is not None:
            return ReadMaxRows(self.max_messages)
        if self.max_bytes is not None:
            return ReadMaxBytes(self.max_bytes)
        return ReadMaxRows(DEFAULT_MAX_MESSAGES)

    def prepareForTriggerAvailableNow(self) -> None:
        fresh = self._consumer is None
        consumer = self._consumer_()
        # A fresh consumer counted the queue before it started consuming: exact. Otherwise the
        # count misses deliveries in flight between the broker and the buffer (documented).
        self._target_count = consumer.backlog if fresh else consumer.queue_depth() + consumer.buffered()
        self._target_seq = None
        log.info("availableNow: reading the %d messages in queue %r now", self._target_count, self.queue)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        now, window = time.time(), self._window
        if window is not None:
            window.started(now)
        self._found_nothing = False
        first_wait = window.wait(now) if window is not None else self.options["pollTimeoutMs"] / 1000.0
        try:
            return self._latest_offset(start, limit, first_wait)
        finally:
            if window is not None:
                window.ended(self._found_nothing)

    def _latest_offset(self, start: dict, limit: ReadLimit, first_wait: float) -> dict:
        seq, tick = int(start["seq"]), int(start.get("tick", 0))
        self._last_seq = seq
        self._check_owner(start)  # before consuming anything: a refused query must not hold messages
        consumer = self._consumer_()
        if self.pause_file and paused_until(self.pause_file) is not None:
            if self._pending:  # let Spark commit what is planned, then let go of the prefetch
                return self._offset(seq, tick + 1)
            if not consumer.suspended:
                log.warning("queue %r: paused by %s; returning prefetched messages to the queue", self.queue,
                            self.pause_file)
                consumer.confirm_acks()  # the last commit's ack, before the connection closes
                consumer.suspend()
            return start
        if consumer.suspended:
            log.warning("queue %r: pause over; consuming again", self.queue)
            consumer.resume()
        journal = self._journal_()
        if isinstance(limit, ReadAllAvailable) and self._target_count is None:
            # Spark passes "all available" without preparing availableNow only for trigger(once=True), which
            # plans a batch and stops before committing it: every run would redeliver its messages
            raise SafeBunnyOptionError(
                f"trigger(once=True) cannot be used to read queue {self.queue!r}: Spark stops before committing the "
                "batch it read, so its messages are never acked and come back at every run. Use "
                ".trigger(availableNow=True), which commits (and acks) every batch before the query ends.",
                "trigger")
        count, max_bytes = self._limits(limit)
        reconnect_wait = self.options["reconnectTimeoutMs"] / 1000.0
        consumer.await_connection(reconnect_wait)
        self._budget.check()  # acks keep being lost to consumer_timeout: fail instead of spinning
        if self._target_count is not None:
            if self._target_seq is None:
                self._target_seq = seq + self._target_count
            count = min(count, self._target_seq - seq)
        # with a backlog at the broker, wait up to pollTimeoutMs for a full batch, not just the 50 ms linger
        deliveries = consumer.take(count, max_bytes, first_wait, fill_wait=first_wait) if count > 0 else []
        if not deliveries and count > 0 and not consumer.ready:
            # the connection dropped while we waited: nothing new is not the same as nothing left
            consumer.await_connection(reconnect_wait)
            deliveries = consumer.take(count, max_bytes, first_wait)
        if not deliveries and count > 0 and self._target_seq is not None and not self._pending:
            # an availableNow run short of its start count: end it only if the rest is gone
            deliveries = take_the_rest(consumer, count, max_bytes, first_wait, reconnect_wait,
                                       self._target_seq - seq)
        if deliveries:
            end = seq + len(deliveries)
            self._budget.planned(previous_pending=bool(self._pending))
            self._owner_().claim()
            crash_point("source.after_consume")
            journal.write(seq, end, deliveries_to_table(self.queue, deliveries, self.include_headers))
            crash_point("source.after_journal_write")
            last = deliveries[-1]
            self._pending[end] = (last.generation, last.delivery_tag, seq)
            self._last_seq = end
            return self._offset(end, 0)
        if self._pending:
            # nothing new, but a planned batch is still unacked: make Spark commit it now
            return self._offset(seq, tick + 1)
        # Nothing new and everything committed: the query may end now (an availableNow run does), and Spark
        # may end this process without calling stop(). Commits send their acks without waiting for the broker
        # (off the batch's path); make sure it has processed them before saying there is nothing to do.
        consumer.confirm_acks()
        self._found_nothing = True
        return start

    def reportLatestOffset(self) -> dict | None:
        consumer = self._consumer
        if consumer is None:
            return None
        # the lag shows in the query's progress as latestOffset.seq - endOffset.seq
        return self._offset(self._last_seq + consumer.queue_depth_estimate() + consumer.buffered(), 0)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        start_seq, end_seq = int(start["seq"]), int(end["seq"])
        if end_seq <= start_seq:
            return []
        self._check_owner(end)
        journal = self._journal_()
        if not journal.exists(start_seq, end_seq):
            error = journal.missing(start_seq, end_seq)
            if end_seq in self._pending:
                # a batch this process still holds unacked is not lost: the journal is unreachable from here
                # (a flaky mount, a path this process cannot see). Skipping it would ack it in commit.
                raise SafeBunnyDataLossError(
                    f"The journal of the batch ({start_seq}, {end_seq}] of queue {self.queue!r} cannot be read at "
                    f"{self.location!r}, although this reader wrote it and still holds its messages unacked. It is "
                    "not skipped, whatever failOnDataLoss says: skipping would ack messages nobody read. Put "
                    "'journalLocation' on storage every Spark process can read (DBFS, a Volume, S3), then restart.")
            if self.options["failOnDataLoss"]:
                raise error
            log.warning("SKIPPING A BATCH (failOnDataLoss=false): %s", error)
            return []
        return [JournalPartition(self.location, start_seq, end_seq, self.options["failOnDataLoss"],
                                 self.include_headers)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, JournalPartition)
        return read_journal_partition(partition)

    def commit(self, end: dict) -> None:
        end_seq = int(end["seq"])
        journal_id = JournalOwner.id_of(end)
        if journal_id is not None:
            self._owner_().adopt(journal_id)
        crash_point("source.before_ack")
        done = [s for s in self._pending if s <= end_seq]
        if done and self._consumer is not None:
            generation, tag, _ = self._pending[done[-1]]
            # sent without waiting for the broker (the batch's serial path); confirmed before the reader says it
            # has nothing more to read, and at stop
            acked = self._consumer.ack_through(generation, tag)
            if not acked:
                log.warning("Batch through seq %d of queue %r could not be acked (channel replaced); the "
                            "broker redelivers those messages flagged 'redelivered'.", end_seq, self.queue)
            # messages of a lost channel come back: an availableNow run reads that many more
            lost = sum(s - self._pending[s][2] for s in done if self._pending[s][0] != generation or not acked)
            if lost and self._target_seq is not None:
                self._target_seq += lost
            timeouts = self._consumer.timeouts
            self._budget.committed(bool(lost) and timeouts > self._timeouts_seen)
            self._timeouts_seen = timeouts
        committed = [(self._pending.pop(s)[2], s) for s in done]
        crash_point("source.after_ack")
        self._delete_committed(committed, end_seq)

    def _delete_committed(self, committed: list[tuple[int, int]], end_seq: int) -> None:
        """Delete the journal files of the batches committed through ``end_seq``: by name the ones this process
        wrote (``committed``, their ``(start, end)``); the first commit after a start lists the journal for what
        an earlier process left (replayed batches, temporary files), and later ones delete those as their
        batches' ends are reached. Never a file ending after ``end_seq``."""
        journal = self._journal_()
        for start, end in committed:
            journal.delete(start, end)
        if self._leftovers is None:  # the first commit since this process started: what an earlier one left
            mine = {journal.path_of(entry[2], end) for end, entry in self._pending.items()}
            self._leftovers = [(path, end) for path, end in journal.files() if path not in mine]
        if any(end <= end_seq for _, end in self._leftovers):
            for path, end in self._leftovers:
                if end <= end_seq:
                    journal.delete_path(path)
            self._leftovers = [(path, end) for path, end in self._leftovers if end > end_seq]

    def stop(self) -> None:
        if self._owner is not None:
            self._owner.release()
        if self._consumer is not None:
            self._consumer.confirm_acks(timeout=5.0)  # acks of the last commits, before the connection closes
            self._consumer.stop()
            self._consumer = None


def read_journal_partition(partition: JournalPartition) -> Iterator[pa.RecordBatch]:
    """An executor's read of one batch: the record batches of its journal file."""
    journal = Journal(partition.location)
    # never skip here: the driver decided in partitions() that this batch exists; an executor that
    # cannot read it must fail the task (Spark retries it), or the batch would be committed and acked empty
    for batch in journal.read(partition.start_seq, partition.end_seq):
        yield fit_headers(batch, partition.include_headers, partition.start_seq, partition.end_seq)
