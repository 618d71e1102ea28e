"""What one batch of a step did: :class:`BatchReport` (``Step.reports`` keeps the recent ones), the seconds of
each phase, and the batch's log line."""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["BatchReport"]

log = logging.getLogger("safebunny.step")


@dataclass(frozen=True)
class BatchReport:
    """What one batch did (``Step.reports`` keeps the recent ones)."""

    node: str
    epoch: str
    batch_id: int
    received: int
    duplicates: int  # dropped: copies within the batch plus messages already processed (as StepStatus counts)
    already_processed: int  # of those, the ones the inbox had processed before
    processed: int
    failed: int
    emitted: int
    replayed: bool
    seconds: float
    finished_at: dt.datetime
    #: seconds spent in each phase of the batch (read, dedupe, handler, effects, inbox, publish)
    phases: Mapping[str, float] = field(default_factory=dict)
    #: where the emits were published: "driver", "executors", or "" when the batch emitted nothing
    published_from: str = ""
    #: the partitions (publishing tasks) of an executor publish; 1 on the driver, 0 when nothing was published
    publish_partitions: int = 0
    #: publishing attempts (a broker failure republishes the same ids); 0 when nothing was published
    publish_attempts: int = 0
    #: of the failed, how many ``on_failed`` sent to a retry tier and parked, as it returned them (a saga step's)
    retried: int = 0
    parked: int = 0


class Phases:
    """Seconds per phase of a batch, for :class:`BatchReport` and the log line."""

    def __init__(self) -> None:
        self.started = self._last = time.monotonic()
        self.laps: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.laps[name] = round(self.laps.get(name, 0.0) + now - self._last, 4)
        self._last = now

    def seconds(self) -> float:
        """Since the batch started."""
        return time.monotonic() - self.started


def log_report(report: BatchReport) -> None:
    """The batch's one log line."""
    log.info("step %s batch %d: %d received, %d duplicate in batch, %d already processed, %d processed, "
             "%d failed, %d emitted%s%s in %.2f s (%s)", report.node, report.batch_id, report.received,
             report.duplicates - report.already_processed, report.already_processed, report.processed,
             report.failed, report.emitted, _published_from(report), " (replay)" if report.replayed else "",
             report.seconds, ", ".join(f"{k} {v:.2f}" for k, v in report.phases.items()))


def _published_from(report: BatchReport) -> str:
    if not report.published_from:
        return ""
    where = (f"the executors, {report.publish_partitions} partition(s)" if report.published_from == "executors"
             else "the driver")
    again = f", {report.publish_attempts} attempts" if report.publish_attempts > 1 else ""
    return f" (published from {where}{again})"
