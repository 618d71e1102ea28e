"""Where a step's emits are published, and how a failed publish is retried before the batch fails.

Small batches publish from the driver (:func:`~safebunny.amqp.sending.publish_table`: no Spark job), one with
more rows than ``executor_publish_rows`` from the executors (:mod:`~safebunny.exactly_once.emits.executor_publish`); the
ids are derived on the driver, so a publish may be repeated. Either way the call returns only when every
message is confirmed and routed. A broker failure is retried with the same rows until ``retry_seconds``
are spent, then fails the batch in safebunny's own error class (:func:`~safebunny.spark.exceptions.error_of`); a
refused login or a missing vhost fails at once (docs/exactly-once.md).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from safebunny.amqp.sending import publish_table
from safebunny.errors import (
    BrokerAuthenticationError,
    SafeBunnyBrokerError,
    SafeBunnyError,
    SafeBunnyOptionError,
    VhostNotFoundError,
)
from safebunny.exactly_once.emits.executor_publish import (
    AUTO,
    DEFAULT_PARTITION_ROWS,
    ExecutorPublishRows,
    publish_from_executors,
    threshold_for,
)
from safebunny.options.sink import SinkOptions
from safebunny.spark.exceptions import error_of

__all__ = ["EmitPublisher", "PublishSettings", "Published"]

log = logging.getLogger("safebunny.step")


@dataclass(frozen=True)
class Published:
    """How a batch's emits went out: from ``"driver"`` or ``"executors"``, in how many partitions (1 on the
    driver) and attempts."""

    where: str
    partitions: int
    attempts: int


@dataclass(frozen=True)
class PublishSettings:
    """How a step publishes its emits: the ``sink`` options (the broker; None when the step has no ``uri``),
    ``retry_seconds`` of republishing, and the executor path's ``executor_publish_rows`` (rows; ``"auto"``; 0 or
    None: never) and ``executor_partition_rows`` (rows per publishing task)."""

    sink: SinkOptions | None = None
    retry_seconds: float = 60.0
    executor_publish_rows: ExecutorPublishRows = AUTO
    executor_partition_rows: int = DEFAULT_PARTITION_ROWS


class EmitPublisher:
    """A step's (``node``'s) publishing of emits, as its ``settings`` say."""

    def __init__(self, node: str, settings: PublishSettings) -> None:
        self.node = node
        self.settings = settings
        self._auto: tuple[int | None] | None = None  # the session's threshold for "auto", read once

    def from_executors(self, rows: int, spark: Any = None) -> bool:
        """Whether a batch of ``rows`` publish rows goes out from the executors (of ``spark``'s session, which
        decides the threshold ``"auto"``: :func:`~safebunny.exactly_once.emits.executor_publish.threshold_for`)."""
        if self.settings.executor_publish_rows == AUTO:
            if self._auto is None and spark is not None:
                self._auto = (threshold_for(AUTO, spark),)
            threshold = self._auto[0] if self._auto else None
        else:
            threshold = self.settings.executor_publish_rows or None
        return threshold is not None and rows > threshold

    def publish(self, spark: Any, rows: pa.Table, scope: str) -> Published:
        """Publish ``rows`` (confirmed, all of them) from the driver or the executors, retrying the same rows."""
        settings = self.settings
        options = settings.sink
        if options is None:
            raise SafeBunnyOptionError(f"Step {self.node!r} emits messages but has no uri; pass "
                                       "StepSettings(uri=...).", "uri")
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
            failed = type(error)(message, error.reply_code)
        except TypeError:  # a subclass with other arguments: the error itself
            return error
        return failed
