"""A queue batch read on the driver from its source's journal, with Spark's own read of it run beside the step.

A classic or quorum queue batch *is* one immutable journal file, ``(start, end]`` in the source's sequence,
and the query's offset log names the range (``offsets/<N>`` its end, ``offsets/<N-1>`` its start). Reading
that file here gives the rows ``df.toArrow()`` gives, in the same order, without a Spark job in front of the
step's work; the source, which owns both formats, reads the file (:meth:`~safebunny.queues.journal.Journal.rows`)
and decodes its offsets (:func:`~safebunny.queues.offset.logged_seq`). Spark's own read still runs
(:class:`SparkRead`, one stage that counts the rows) so ``numInputRows`` stays true, and a count that differs
fails the batch (docs/exactly-once.md, "Reading the batch from the journal").

:meth:`JournalRead.read` returns None, and the step collects the batch with Spark as before, whenever the range
cannot be read here: an offset log entry Spark purged, another source's offsets, or no journal file; and for a
frame made from the micro-batch (filtered, projected, joined), which the file does not stand for
(:func:`handed_as_is`), so the rows the step works on are always the frame's.
"""

from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa

from safebunny.errors import SafeBunnyDataLossError, SafeBunnyError
from safebunny.queues.journal import Journal
from safebunny.queues.offset import logged_seq
from safebunny.storage.location import resolve_under

__all__ = ["JournalRead", "SparkRead", "handed_as_is"]

log = logging.getLogger("safebunny.step")


def handed_as_is(batch_df: Any) -> bool:
    """Whether ``batch_df`` is the micro-batch as ``foreachBatch`` hands it: a ``LogicalRDD`` plan in classic
    Spark, a ``CachedRemoteRelation`` over Spark Connect. A frame made from it (``where``, ``select``, a join)
    has another plan on top, and anything unrecognised counts as made: Spark collects it."""
    plan = getattr(batch_df, "_plan", None)
    if plan is not None:  # Spark Connect
        return type(plan).__name__ == "CachedRemoteRelation"
    try:
        return batch_df._jdf.queryExecution().logical().getClass().getSimpleName() == "LogicalRDD"
    except Exception:  # noqa: BLE001 - not a classic frame either: Spark collects it
        return False


class SparkRead:
    """Spark's read of the batch, counted, run in a thread beside the step; :meth:`wait` checks it."""

    def __init__(self, spark: Any, batch_df: Any, expected: int) -> None:
        self.expected = expected
        self._spark, self._df = spark, batch_df
        self._count: int | None = None
        self._error: BaseException | None = None
        self._thread: Any = None

    def start(self) -> None:
        """Start Spark's read (once); an empty range has no partition, so Spark reads nothing and nothing runs."""
        if self._thread is not None or not self.expected:
            return
        from pyspark.sql.functions import lit
        from pyspark.util import InheritableThread  # the query's local properties (job group) go along

        def count() -> None:
            try:
                # one stage (a count is two, with a shuffle): the rows go through Spark, one byte each comes back
                self._count = self._df.select(lit(True).alias("read")).toArrow().num_rows
            except BaseException as exc:  # noqa: BLE001 - raised by wait(), in the step's thread
                self._error = exc

        self._thread = InheritableThread(count, session=self._spark, daemon=True, name="safebunny-spark-read")
        self._thread.start()

    def wait(self) -> None:
        """Return once Spark has read the batch; raise its error, or when it read other than the journal held."""
        self.start()
        if self._thread is None:
            return
        self._thread.join()
        if self._error is not None:
            raise self._error
        if self._count != self.expected:
            raise SafeBunnyError(
                f"Spark read {self._count} rows for this batch where its journal file holds {self.expected}: the "
                "step was handed a DataFrame other than the micro-batch (filtered or projected). Give a Step with "
                "journal= the micro-batch as foreachBatch hands it (filter in the handler, or with "
                "StepSettings(skip=...)), "
                "or leave journal= out; the batch fails and is replayed.")


class JournalRead:
    """Reads a step's batches from ``journal`` (the source's ``journalLocation``) by the offset log of
    ``checkpoint`` (the query's ``checkpointLocation``)."""

    def __init__(self, journal: str, checkpoint: str) -> None:
        self.journal = Journal(journal)
        self._fs, self._offsets = resolve_under(checkpoint, "checkpoint", "offsets")
        self._ends: dict[tuple[str, int], int] = {}  # (epoch, batch id) -> end seq: batch N's is N+1's start

    def _end(self, epoch: str, batch_id: int) -> int | None:
        if batch_id < 0:
            return 0
        end = self._ends.get((epoch, batch_id))
        if end is None:
            try:
                with self._fs.open_input_stream(f"{self._offsets}/{batch_id}") as handle:
                    end = logged_seq(handle.read().decode("utf-8"))
            except (FileNotFoundError, OSError, UnicodeDecodeError):
                return None
        return end

    def range_of(self, epoch: str, batch_id: int) -> tuple[int, int] | None:
        """Batch ``batch_id``'s ``(start, end]`` from the offset log, or None when it cannot be read there."""
        end, start = self._end(epoch, batch_id), self._end(epoch, batch_id - 1)
        if end is None or start is None or start > end:
            return None
        self._ends = {(epoch, batch_id): end}  # the next batch starts here
        return start, end

    def read(self, spark: Any, batch_df: Any, epoch: str, batch_id: int) -> tuple[pa.Table, SparkRead] | None:
        """The batch's rows as ``batch_df.toArrow()`` gives them, with Spark's read of it to start; or None."""
        if not handed_as_is(batch_df):
            log.debug("batch %d: the frame is made from the micro-batch, not the batch itself; Spark collects it",
                      batch_id)
            return None
        batch_range = self.range_of(epoch, batch_id)
        if batch_range is None:
            log.debug("batch %d: no queue offsets in the checkpoint's offset log; Spark collects it", batch_id)
            return None
        start, end = batch_range
        schema = batch_df.schema
        target = _arrow_schema(schema)
        if start == end:
            return target.empty_table(), SparkRead(spark, batch_df, 0)
        headers = "headers" in schema.fieldNames()
        try:
            batches = list(self.journal.rows(start, end, headers))
        except SafeBunnyDataLossError:  # not on this machine's storage: Spark's read says what is wrong
            return None
        table = pa.Table.from_batches(batches).cast(target) if batches else target.empty_table()
        return table, SparkRead(spark, batch_df, table.num_rows)


def _arrow_schema(schema: Any) -> pa.Schema:
    """The Arrow schema ``toArrow()`` gives a frame of Spark schema ``schema``."""
    from pyspark.sql.pandas.types import to_arrow_schema

    try:
        return to_arrow_schema(schema, timezone="UTC")
    except TypeError:  # PySpark before 4.1: timestamps are UTC by default
        return to_arrow_schema(schema)
