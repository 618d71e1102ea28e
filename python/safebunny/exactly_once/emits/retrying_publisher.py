"""Where a step's emits are published, and how a failed publish is retried before the batch fails.

Small batches publish from the driver (:func:`~safebunny.amqp.sending.publish_table`: no Spark job), one with
more rows than ``executor_publish_rows`` from the executors (:func:`publish_from_executors`); the ids are derived on
the driver, so a publish may be repeated. Either way the call returns only when every message is confirmed and
routed. A broker failure is retried with the same rows until ``retry_seconds`` are spent, then fails the batch in
safebunny's own error class (:func:`~safebunny.spark.exceptions.error_of`); a refused login or a missing vhost fails
at once (docs/exactly-once.md).

From the executors, the batch's publish rows (built on the driver either way) become a small DataFrame,
coalesced to about one partition per ``partition_rows`` rows (no shuffle), written with
``df.write.format("safebunny")``, which returns only once every message is confirmed (docs/exactly-once.md,
"Where the emits are published"). The options keep the password out of the URI
(:meth:`~safebunny.options.sink.SinkOptions.spark_options`): Spark redacts an option named ``password`` in plans
and logs, not a password inside ``uri``.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, fields
from typing import Any, Final, Literal

import pyarrow as pa

from safebunny.amqp.sending import publish_table
from safebunny.errors import (
    BrokerAuthenticationError,
    SafeBunnyBrokerError,
    SafeBunnyError,
    SafeBunnyOptionError,
    VhostNotFoundError,
)
from safebunny.options.sink import SinkOptions
from safebunny.spark.exceptions import error_of
from safebunny.spark.session import is_connect, publish

__all__ = ["AUTO", "DEFAULT_PARTITION_ROWS", "DEFAULT_THRESHOLD", "EmitPublisher", "ExecutorPublishRows",
           "ExecutorPublishing", "PublishSettings", "Published", "has_remote_executors", "partitions_for",
           "threshold_for"]

log = logging.getLogger("safebunny.step")
#: StepSettings(executor_publish_rows=AUTO), the default: DEFAULT_THRESHOLD where executors are other processes,
#: else never
AUTO: Final = "auto"
#: a step's ``executor_publish_rows``: rows, :data:`AUTO`, or 0/None for never
ExecutorPublishRows = int | Literal["auto"] | None
#: batches with more publish rows than this publish them from the executors (StepSettings(executor_publish_rows=))
DEFAULT_THRESHOLD = 5000
#: about this many rows per publishing task (StepSettings(executor_partition_rows=))
DEFAULT_PARTITION_ROWS = 2500


def partitions_for(rows: int, partition_rows: int, parallelism: int | None) -> int:
    """About one partition per ``partition_rows`` rows, at least one, at most ``parallelism`` (when known)."""
    wanted = max(1, math.ceil(rows / max(1, partition_rows)))
    return min(wanted, parallelism) if parallelism else wanted


def has_remote_executors(spark: Any) -> bool:
    """Whether the session's executors are processes of their own (a cluster, ``local-cluster``), not threads of
    the driver's JVM (``local[...]``), where a publish through Spark only adds a job and the rows' trip through
    the JVM to the same cores (slower than the driver's own publish: docs/performance.md). A master that
    cannot be read counts as a cluster."""
    try:
        master = spark.conf.get("spark.master", None) if is_connect(spark) else spark.sparkContext.master
    except Exception:  # noqa: BLE001 - a server that refuses to tell: a cluster
        return True
    master = str(master or "")
    return not (master == "local" or master.startswith("local["))


def threshold_for(setting: ExecutorPublishRows, spark: Any) -> int | None:
    """The rows above which a batch publishes from the executors, for ``executor_publish_rows=setting``:
    :data:`AUTO` gives :data:`DEFAULT_THRESHOLD` on a cluster and None (never) on a local session."""
    if setting == AUTO:
        return DEFAULT_THRESHOLD if spark is not None and has_remote_executors(spark) else None
    return setting or None


def parallelism_of(spark: Any) -> int | None:
    """The session's default parallelism: the most partitions a local relation is split into, so the most a
    ``coalesce`` can give. A Spark Connect session has no ``sparkContext``: its conf, when it sets
    ``spark.default.parallelism``, else unknown."""
    if is_connect(spark):
        try:
            value = spark.conf.get("spark.default.parallelism", None)
        except Exception:  # noqa: BLE001 - a server that refuses to tell: unknown
            return None
        return int(value) if value and str(value).isdigit() else None
    return int(spark.sparkContext.defaultParallelism)


def publish_from_executors(spark: Any, rows: pa.Table, options: SinkOptions, partition_rows: int) -> int:
    """Publish ``rows`` (the step's publish rows) through ``df.write.format("safebunny")``; returns the
    number of partitions asked for. Raises whatever the write raises (a Spark exception carrying the sink's
    :class:`~safebunny.errors.SafeBunnyError` in its text); the caller maps and retries it."""
    partitions = partitions_for(rows.num_rows, partition_rows, parallelism_of(spark))
    frame = spark.createDataFrame(rows).coalesce(partitions)
    publish(frame, **options.spark_options())
    return partitions


@dataclass(frozen=True)
class Published:
    """How a batch's emits went out: from ``"driver"`` or ``"executors"``, in how many partitions (1 on the
    driver) and attempts."""

    where: str
    partitions: int
    attempts: int


@dataclass(frozen=True, kw_only=True)
class ExecutorPublishing:
    """Where a step's emits are published from, declared once for the settings that carry it (``StepSettings``,
    ``SagaSettings``, :class:`PublishSettings`): ``executor_publish_rows`` (rows above which a batch publishes from
    the executors; ``"auto"``; 0 or None: never) and ``executor_partition_rows`` (rows per publishing task)."""

    executor_publish_rows: ExecutorPublishRows = AUTO
    executor_partition_rows: int = DEFAULT_PARTITION_ROWS

    def __post_init__(self) -> None:
        rows, partition_rows = self.executor_publish_rows, self.executor_partition_rows
        if (rows != AUTO and (not isinstance(rows, (int, type(None))) or (rows or 0) < 0)) or partition_rows < 1:
            raise SafeBunnyOptionError(
                f"executor_publish_rows must be 'auto', a number >= 0 or None, and executor_partition_rows >= 1; got "
                f"{rows!r} and {partition_rows!r}.", "executor_publish_rows")

    def executor_publishing(self) -> dict[str, Any]:
        """These two settings by keyword, to hand on to another settings object that carries them."""
        return {f.name: getattr(self, f.name) for f in fields(ExecutorPublishing)}


@dataclass(frozen=True)
class PublishSettings(ExecutorPublishing):
    """How a step publishes its emits: the ``sink`` options (the broker; None when the step has no connection),
    ``retry_seconds`` of republishing, and where from (:class:`ExecutorPublishing`)."""

    sink: SinkOptions | None = None
    retry_seconds: float = 60.0


class EmitPublisher:
    """A step's (``node``'s) publishing of emits, as its ``settings`` say."""

    def __init__(self, node: str, settings: PublishSettings) -> None:
        self.node = node
        self.settings = settings
        self._threshold: tuple[int | None] | None = None  # once a session is given ("auto" reads it once)

    def from_executors(self, rows: int, spark: Any = None) -> bool:
        """Whether a batch of ``rows`` publish rows goes out from the executors (of ``spark``'s session, which
        decides the threshold ``"auto"``: :func:`threshold_for`)."""
        setting = self.settings.executor_publish_rows
        if self._threshold is None and spark is not None:
            self._threshold = (threshold_for(setting, spark),)
        threshold = self._threshold[0] if self._threshold else threshold_for(setting, None)
        return threshold is not None and rows > threshold

    def publish(self, spark: Any, rows: pa.Table, scope: str) -> Published:
        """Publish ``rows`` (confirmed, all of them) from the driver or the executors, retrying the same rows."""
        settings = self.settings
        options = settings.sink
        if options is None:
            raise SafeBunnyOptionError(f"Step {self.node!r} emits messages but has no broker; pass "
                                       "StepSettings(connection=safebunny.ConnectionSettings(uri)).", "connection")
        executors = spark is not None and self.from_executors(rows.num_rows, spark)
        where = "executors" if executors else "driver"
        started = time.monotonic()
        deadline = started + settings.retry_seconds
        attempt = 0
        while True:
            attempt += 1
            try:
                if executors:
                    partitions = publish_from_executors(spark, rows, options, settings.executor_partition_rows)
                else:
                    publish_table(rows, options, scope)
                    partitions = 1
                return Published(where, partitions, attempt)
            except Exception as exc:  # noqa: BLE001 - mapped to safebunny's errors; anything else raised as is
                error = exc if isinstance(exc, SafeBunnyError) else error_of(exc)
                if not isinstance(error, SafeBunnyBrokerError):
                    if error is None or error is exc:
                        raise
                    raise error from exc
                wait = min(0.5 * 2 ** (attempt - 1), 5.0)
                final = isinstance(error, (BrokerAuthenticationError, VhostNotFoundError)) or (
                    time.monotonic() + wait > deadline)
                if final:
                    raise self._failed(error, rows.num_rows, where, attempt, time.monotonic() - started) from exc
                log.warning("step %s: publishing %d emitted messages from the %s failed (%s); publishing them again "
                            "with the same ids in %.1f s (attempt %d)", self.node, rows.num_rows, where, error,
                            wait, attempt + 1)
                time.sleep(wait)

    def _failed(self, error: SafeBunnyBrokerError, rows: int, where: str, attempts: int,
                seconds: float) -> SafeBunnyBrokerError:
        """``error``'s class, with what the batch did about it (the batch fails before its inbox marker)."""
        retry = self.settings.retry_seconds
        message = (f"step {self.node!r} could not publish its batch's {rows} emitted messages from the {where} "
                   f"({attempts} attempt(s) in {seconds:.1f} s, publish_retry_seconds={retry:g}): "
                   f"{error} The batch fails before its inbox marker, so a restart publishes them again with the "
                   "same ids.")
        try:
            return type(error)(message, error.reply_code)
        except TypeError:  # a subclass with other arguments: the error itself
            return error
