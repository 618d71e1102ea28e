"""The sink: ``df.write.format("safebunny")`` and ``df.writeStream.format("safebunny")``.

:func:`create_writer` and :func:`create_stream_writer` run on the driver when the write or
query starts; they validate the options and the input's columns, so bad input fails
before anything is published. Each task (``write``, on an executor) turns its Arrow
batches into messages (:mod:`safebunny.amqp.outgoing`), publishes them with confirms
(:mod:`safebunny.amqp.confirming_publisher`, one cached connection per Python worker) and returns a
:class:`SafeBunnyWriteStats` only after every message was confirmed and routed; any nack,
return or timeout fails the task, and Spark's retry republishes the same ids. The
driver-side ``commit``/``abort`` log a summary of the batch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from safebunny.amqp.outgoing import MessageBuilder, SinkPlan, plan_sink
from safebunny.amqp.sending import confirmed, publish_batches
from safebunny.errors import SafeBunnyOptionError
from safebunny.options.sink import parse_sink_options

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

__all__ = [
    "SafeBunnyWriter",
    "SafeBunnyStreamWriter",
    "SafeBunnyWriteStats",
    "create_writer",
    "create_stream_writer",
    "summarize",
]

LOG = logging.getLogger("safebunny.sink")  # per-batch summaries at INFO: SAFEBUNNY_LOG_LEVEL=INFO (safebunny.logs)
_BATCH_ID_PROPERTY = "streaming.sql.batchId"  # set by Spark's MicroBatchExecution on every task


@dataclass
class SafeBunnyWriteStats(WriterCommitMessage):
    """What one task published: sent to the driver's ``commit``/``abort``."""

    partition_id: int
    attempt: int
    published: int
    confirmed: int
    returned: int
    nacked: int
    seconds: float


def summarize(messages: list[WriterCommitMessage | None]) -> dict[str, int]:
    """Totals over the tasks' commit messages (``None`` for a task that failed)."""
    stats = [m for m in messages if isinstance(m, SafeBunnyWriteStats)]
    return {"tasks": len(messages), "succeeded": len(stats),
            **{name: sum(getattr(m, name) for m in stats) for name in ("published", "confirmed", "returned", "nacked")}}


def _describe(total: Mapping[str, int]) -> str:
    return (f"{total['succeeded']}/{total['tasks']} tasks succeeded, {total['published']} messages published, "
            f"{total['confirmed']} confirmed, {total['returned']} returned, {total['nacked']} nacked")


class _Publishing:
    """The part shared by the batch and the streaming writer: the plan (the options and columns) and the task's
    work."""

    #: a micro-batch's task (its scope names the batch) rather than a batch write's
    streaming = False

    def __init__(self, plan: SinkPlan) -> None:
        self.plan = plan

    def write(self, batches: Iterator[pa.RecordBatch]) -> SafeBunnyWriteStats:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx else 0
        attempt = ctx.attemptNumber() if ctx else 0
        if self.streaming:
            batch_id = ctx.getLocalProperty(_BATCH_ID_PROPERTY) if ctx else None
            scope = f"batch:{batch_id}/partition:{partition}"
        else:
            scope = f"write/partition:{partition}"
        builder = MessageBuilder(self.plan, scope)
        started = time.monotonic()
        counts = confirmed(self.plan.options, lambda publisher: publish_batches(publisher, builder, batches))
        stats = SafeBunnyWriteStats(partition, attempt, counts.published, counts.confirmed, counts.returned,
                                    counts.nacked, round(time.monotonic() - started, 3))
        LOG.info("safebunny sink task %s (partition %d, attempt %d): %d published, %d confirmed",
                 scope, partition, attempt, stats.published, stats.confirmed)
        if builder.repeated_outputs:
            LOG.warning("safebunny sink task %s: %d rows repeat an earlier output of the same causationId with "
                        "identical content and no outputIndex; they carry the same message id, so the next step "
                        "keeps one of each. Add an 'outputIndex' column if a cause sends the same message twice.",
                        scope, builder.repeated_outputs)
        return stats


class SafeBunnyWriter(_Publishing, DataSourceArrowWriter):
    """``df.write.format("safebunny")``: one task per partition, each confirmed before it succeeds."""

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        LOG.info("safebunny sink write committed: %s", _describe(summarize(messages)))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        LOG.warning("safebunny sink write aborted: %s. Messages of the tasks that succeeded stay published; "
                    "running the write again republishes them with the same ids.", _describe(summarize(messages)))


class SafeBunnyStreamWriter(_Publishing, DataSourceStreamArrowWriter):
    """``df.writeStream.format("safebunny")``: every micro-batch's messages confirmed before it commits."""

    streaming = True

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        LOG.info("safebunny sink batch %d committed: %s", batchId, _describe(summarize(messages)))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        LOG.warning("safebunny sink batch %d aborted: %s. Messages of the tasks that succeeded stay published; "
                    "the replayed batch republishes them with the same ids.", batchId,
                    _describe(summarize(messages)))


def _plan(options: Mapping[str, str], schema: StructType) -> SinkPlan:
    return plan_sink(parse_sink_options(options), {f.name: f.dataType.simpleString() for f in schema.fields})


def create_writer(options: Mapping[str, str], schema: StructType, overwrite: bool) -> SafeBunnyWriter:
    """The batch writer; validates the options and columns on the driver, before any task runs."""
    if overwrite:
        raise SafeBunnyOptionError(
            "The safebunny sink cannot overwrite: published messages cannot be taken back. "
            "Use mode('append').", "mode")
    return SafeBunnyWriter(_plan(options, schema))


def create_stream_writer(options: Mapping[str, str], schema: StructType, overwrite: bool) -> SafeBunnyStreamWriter:
    """The streaming writer; validates the options and columns on the driver when the query starts.

    ``overwrite`` (complete output mode) is accepted: each batch's rows are published as messages.
    """
    return SafeBunnyStreamWriter(_plan(options, schema))
