"""The driver side of the classic and quorum queue source, without Spark: acked only on commit.

:meth:`QueueSource.latest` takes a batch and journals it before returning its offset; executors serve the
batch from its journal file; :meth:`QueueSource.commit` acks through the batch's last delivery and deletes its
file; an empty ``tick`` batch lets Spark commit the one before. The contract, in full: docs/source.md (the
bullets from "Each batch's messages are written to journalLocation" on).

An ``availableNow`` run ends only when the messages counted at its start have been read, and, with option
``availableNowAwaitFile``, not before that file is there (what arrives meanwhile is read too). A take that comes
back empty before then does not end the run: a passive declare on the consumer's channel says whether a message
is still ready at the broker or buffered, and only when none is may the run end; messages that stay ready
without reaching this consumer for ``reconnectTimeoutMs`` fail the run. Why: docs/source.md (the
``availableNow`` bullet).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from typing import TYPE_CHECKING

from safebunny.crashpoints import crash_point
from safebunny.errors import SafeBunnyBrokerError, SafeBunnyDataLossError
from safebunny.queues.ack_budget import AckBudget
from safebunny.queues.admission import Admission
from safebunny.queues.consumer import Delivery, QueueConsumer
from safebunny.queues.journal import Journal, deliveries_to_table
from safebunny.queues.journal_owner import JournalOwner
from safebunny.queues.offset import QueueOffset
from safebunny.storage.location import absolute_location
from safebunny.storage.pause import await_file_present, paused_until

if TYPE_CHECKING:
    from safebunny.options.source import SourceOptions

__all__ = ["QueueSource", "DEFAULT_MAX_MESSAGES"]

log = logging.getLogger("safebunny.source")

#: Messages per micro-batch at most when ``maxMessagesPerTrigger`` is not set: half the largest prefetch
#: (65,535), so that one batch can wait for its commit while the next one fills. A batch takes what the
#: reader has buffered when Spark asks (after up to ``pollTimeoutMs`` for a first message and 50 ms more
#: while more can arrive, or up to ``pollTimeoutMs`` for a full batch while deliveries keep arriving when the
#: broker counts enough waiting): small batches, so low latency, when the queue is quiet; batches of about
#: this size, which amortise Spark's fixed cost per micro-batch, when a backlog waits.
DEFAULT_MAX_MESSAGES = 32_768

#: Body bytes the reader buffers at most when ``maxBytesPerTrigger`` is not set (with it: twice that).
DEFAULT_MAX_BUFFERED_BYTES = 256 * 1024 * 1024

#: how long an ``availableNow`` run waits at most for its ``availableNowAwaitFile``; then whoever was to write it
#: is taken to be gone (a drain whose process died) and the run ends as a plain one does
AWAIT_FILE_MAX_S = 3600.0


def take_the_rest(consumer: QueueConsumer, count: int, max_bytes: int | None, wait: float, timeout: float,
                  missing: int) -> list[Delivery]:
    """Deliveries for an ``availableNow`` run still ``missing`` messages of its start count, after a take
    found none: an empty list only when the broker holds none ready for this consumer."""
    deadline = time.monotonic() + timeout
    while True:
        ready = consumer.acks.queue_depth()  # a round trip: deliveries sent before its answer are buffered now
        if ready <= 0 and consumer.buffered() <= 0:
            log.info("availableNow on queue %r: %d message(s) counted at the start are no longer there (another "
                     "consumer took them, they expired, or the queue was purged); the run ends", consumer.queue,
                     missing)
            return []
        deliveries = consumer.take(count, max_bytes, max(wait, 0.05))  # never a busy loop of round trips
        if deliveries:
            return deliveries
        if time.monotonic() >= deadline:
            raise SafeBunnyBrokerError(
                f"availableNow on queue {consumer.queue!r}: {missing} message(s) counted at the start are still to "
                f"read and {ready} wait ready at the broker, but none reached this consumer in {timeout:g} s (is "
                "another consumer active on a single-active-consumer queue?). The run fails rather than end as "
                "complete; restart it (option 'reconnectTimeoutMs' sets the wait).")


class AwaitedFile:
    """The file an ``availableNow`` run awaits before it may end (option ``availableNowAwaitFile``)."""

    def __init__(self, path: str, queue: str) -> None:
        self.path, self.queue = path, queue
        self.since = time.monotonic()

    def arrived(self) -> bool:
        """Whether the file is there, or was waited for :data:`AWAIT_FILE_MAX_S` (then with a warning)."""
        if await_file_present(self.path):
            return True
        if time.monotonic() - self.since < AWAIT_FILE_MAX_S:
            return False
        log.warning("availableNow on queue %r: %s did not appear in %.0f s; the run ends once it has read what "
                    "the queue holds now", self.queue, self.path, AWAIT_FILE_MAX_S)
        return True


class QueueSource:
    """One query's reading of one classic or quorum queue, as its
    :class:`~safebunny.options.source.SourceOptions` say."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.queue: str = options.queue
        self.pause_file: str | None = options.pause_file
        self.include_headers: bool = options.include_headers
        self.max_messages: int | None = options.max_messages_per_trigger
        self.max_bytes: int | None = options.max_bytes_per_trigger
        # executors read the journal too: a relative path would resolve against each one's working directory
        # (require_journal refused a missing one before)
        self.location: str = absolute_location(options.journal_location)  # type: ignore[arg-type]
        self._consumer: QueueConsumer | None = None
        self._journal: Journal | None = None
        self._owner: JournalOwner | None = None
        self._budget = AckBudget(self.queue, options.consumer_timeout_ms)
        self._timeouts_seen = 0  # the consumer's count of channels closed by consumer_timeout, at the last commit
        # end seq of each returned-but-uncommitted batch -> (channel generation, last delivery tag, start seq):
        # its journal file is (start seq, end seq], its message count end - start
        self._pending: OrderedDict[int, tuple[int, int, int]] = OrderedDict()
        # journal files this process did not write, found by listing the journal at the first commit after a
        # start: (path, end seq), each deleted once a commit reaches its end; None until that first commit
        self._leftovers: list[tuple[str, int]] | None = None
        self._target_seq: int | None = None
        self._target_count: int | None = None
        self._awaited: AwaitedFile | None = None  # an availableNow run's availableNowAwaitFile, until it is there
        self._last_seq = 0
        #: whether a poll takes a batch now, and how long it waits
        self.admission = Admission(options.poll_timeout_ms, options.min_batch_interval_ms)

    # ------------------------------------------------------------------ sizes
    def batch_cap(self) -> int:
        return self.max_messages or DEFAULT_MAX_MESSAGES

    def prefetch(self) -> int:
        # room for one uncommitted batch plus the next, so batches need not wait for commits
        return min(65535, 2 * self.batch_cap())

    @property
    def available_now(self) -> bool:
        """Whether an availableNow run was prepared (:meth:`prepare_available_now`)."""
        return self._target_count is not None

    # ------------------------------------------------------------------ parts, made on first use
    def _journal_(self) -> Journal:
        if self._journal is None:
            self._journal = Journal(self.location)
            self._journal.ensure()
        return self._journal

    def _owner_(self) -> JournalOwner:
        if self._owner is None:
            self._owner = JournalOwner(self._journal_(), self.queue)
        return self._owner

    def _consumer_(self) -> QueueConsumer:
        if self._consumer is None:
            # a byte budget with room for one uncommitted batch plus the next, as the prefetch has in messages; none
            # on a queue with a single active consumer, where its cancel and re-consume would hand the queue away
            budget = 2 * self.max_bytes if self.max_bytes is not None else DEFAULT_MAX_BUFFERED_BYTES
            self._consumer = QueueConsumer(
                self.options.connection.login_uri, self.queue, prefetch=self.prefetch(),
                heartbeat=self.options.heartbeat_seconds,
                max_buffered_bytes=None if self.options.single_active_consumer else budget,
                name=self.options.connection.connection_name,
            ).start()
        return self._consumer

    def check_owner(self, offset: QueueOffset) -> None:
        """``offset`` came from Spark's offset log (a start, a replayed end, a commit): the journal location
        must belong to the query it names, or be free when it names none."""
        if offset.journal is not None:
            self._owner_().adopt(offset.journal)
        else:
            self._owner_().check_unclaimed()

    def _offset(self, seq: int, tick: int) -> QueueOffset:
        return QueueOffset(seq, tick, self._owner.id if self._owner is not None else None)

    # ------------------------------------------------------------------ planning
    def prepare_available_now(self) -> None:
        fresh = self._consumer is None
        consumer = self._consumer_()
        # A fresh consumer counted the queue before it started consuming: exact. Otherwise the
        # count misses deliveries in flight between the broker and the buffer (documented).
        self._target_count = consumer.acks.backlog if fresh else consumer.acks.queue_depth() + consumer.buffered()
        self._target_seq = None
        awaited = self.options.available_now_await_file
        self._awaited = AwaitedFile(awaited, self.queue) if awaited else None
        log.info("availableNow: reading the %d messages in queue %r now%s", self._target_count, self.queue,
                 f", and what arrives until {awaited} is there" if awaited else "")

    def latest(self, start: QueueOffset, count: int, max_bytes: int | None) -> QueueOffset:
        """The end of the next batch after ``start``: up to ``count`` messages (and about ``max_bytes``), taken
        and journaled; ``start`` itself when there is nothing to do. :class:`Admission` decides whether to take."""
        sleep, take = self.admission.admit(time.monotonic())
        if sleep > 0:
            time.sleep(sleep)  # messages arriving meanwhile wait, as they would for a trigger
        if not take:
            # still within the interval: end this poll (committing a planned batch, so it is acked) and let
            # the zero trigger call again, so that stopping the query never waits for a long interval
            return self._offset(start.seq, start.tick + 1) if self._pending else start
        began = time.monotonic()
        end = self._latest(start, count, max_bytes, self.admission.first_wait)
        if self.admission.paced and end.seq > start.seq:
            first = self._consumer_().first_arrived_at  # when the batch's first message was there
            self.admission.took(max(began, first or began))
        return end

    def _latest(self, start: QueueOffset, count: int, max_bytes: int | None, first_wait: float) -> QueueOffset:
        seq, tick = start.seq, start.tick
        self._last_seq = seq
        self.check_owner(start)  # before consuming anything: a refused query must not hold messages
        consumer = self._consumer_()
        if self.pause_file and paused_until(self.pause_file) is not None:
            if self._pending:  # let Spark commit what is planned, then let go of the prefetch
                return self._offset(seq, tick + 1)
            if not consumer.suspended:
                log.warning("queue %r: paused by %s; returning prefetched messages to the queue", self.queue,
                            self.pause_file)
                consumer.acks.confirm_acks()  # the last commit's ack, before the connection closes
                consumer.suspend()
            return start
        if consumer.suspended:
            log.warning("queue %r: pause over; consuming again", self.queue)
            consumer.resume()
        journal = self._journal_()
        reconnect_wait = self.options.reconnect_timeout_ms / 1000.0
        consumer.await_connection(reconnect_wait)
        self._budget.check()  # acks keep being lost to consumer_timeout: fail instead of spinning
        if self._target_count is not None:
            if self._target_seq is None:
                self._target_seq = seq + self._target_count
            self._count_once_awaited(consumer, seq)
            if self._awaited is None:
                count = min(count, self._target_seq - seq)
        # with a backlog at the broker, wait up to pollTimeoutMs for a full batch, not just the 50 ms linger
        deliveries = consumer.take(count, max_bytes, first_wait, fill_wait=first_wait) if count > 0 else []
        if not deliveries and count > 0 and not consumer.ready:
            # the connection dropped while we waited: nothing new is not the same as nothing left
            consumer.await_connection(reconnect_wait)
            deliveries = consumer.take(count, max_bytes, first_wait)
        while not deliveries and self._awaited is not None and not self._pending:
            # an availableNow run whose file is not there yet: no end, wait for what arrives (or for the file)
            consumer.await_connection(reconnect_wait)
            if self._count_once_awaited(consumer, seq):
                count = min(count, self._target_seq - seq)  # type: ignore[operator]
                deliveries = consumer.take(count, max_bytes, first_wait) if count > 0 else []
                break
            deliveries = consumer.take(count, max_bytes, max(first_wait, 0.2))
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
        consumer.acks.confirm_acks()
        return start

    def _count_once_awaited(self, consumer: QueueConsumer, seq: int) -> bool:
        """When the file an availableNow run awaits has just appeared: the run's end becomes what the queue holds
        now (the passive declare first: deliveries sent before its answer are buffered by then). True then."""
        if self._awaited is None or not self._awaited.arrived():
            return False
        self._awaited = None
        self._target_seq = seq + consumer.acks.queue_depth() + consumer.buffered()
        log.info("availableNow: %s is there; reading the %d messages in queue %r now",
                 self.options.available_now_await_file, self._target_seq - seq, self.queue)
        return True

    def lag(self) -> QueueOffset | None:
        """Where the queue's end is, as an offset (the lag shows in Spark's progress as its seq minus the end
        offset's); None before the consumer exists."""
        consumer = self._consumer
        if consumer is None:
            return None
        return self._offset(self._last_seq + consumer.acks.queue_depth_estimate() + consumer.buffered(), 0)

    def readable(self, start: QueueOffset, end: QueueOffset) -> bool:
        """Whether batch ``(start, end]`` can be served from its journal: False for an empty batch or (with
        ``failOnDataLoss=false``) a lost one, skipped with a warning; a lost batch otherwise raises."""
        if end.seq <= start.seq:
            return False
        self.check_owner(end)
        journal = self._journal_()
        if journal.exists(start.seq, end.seq):
            return True
        error = journal.missing(start.seq, end.seq)
        if end.seq in self._pending:
            # a batch this process still holds unacked is not lost: the journal is unreachable from here
            # (a flaky mount, a path this process cannot see). Skipping it would ack it in commit.
            raise SafeBunnyDataLossError(
                f"The journal of the batch ({start.seq}, {end.seq}] of queue {self.queue!r} cannot be read at "
                f"{self.location!r}, although this reader wrote it and still holds its messages unacked. It is "
                "not skipped, whatever failOnDataLoss says: skipping would ack messages nobody read. Put "
                "'journalLocation' on storage every Spark process can read (a cloud storage URI such as "
                "'s3://...', or DBFS), then restart.")
        if self.options.fail_on_data_loss:
            raise error
        log.warning("SKIPPING A BATCH (failOnDataLoss=false): %s", error)
        return False

    # ------------------------------------------------------------------ committing
    def commit(self, end: QueueOffset) -> None:
        end_seq = end.seq
        if end.journal is not None:
            self._owner_().adopt(end.journal)
        crash_point("source.before_ack")
        done = [s for s in self._pending if s <= end_seq]
        if done and self._consumer is not None:
            generation, tag, _ = self._pending[done[-1]]
            # sent without waiting for the broker (the batch's serial path); confirmed before the reader says it
            # has nothing more to read, and at stop
            acked = self._consumer.acks.ack_through(generation, tag)
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
            self._consumer.acks.confirm_acks(timeout=5.0)  # acks of the last commits, before the connection closes
            self._consumer.stop()
            self._consumer = None
