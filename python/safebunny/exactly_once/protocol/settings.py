"""A step's settings as one typed, frozen object: what ``Step(...)``'s keywords build, checked once."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from safebunny.errors import SafeBunnyOptionError
from safebunny.exactly_once.collect.batch import Prepared, Skip
from safebunny.exactly_once.context import StepContext
from safebunny.exactly_once.emits.executor_publish import AUTO
from safebunny.exactly_once.emits.retrying_publisher import PublishSettings
from safebunny.exactly_once.emits.routed_rows import Router
from safebunny.exactly_once.inbox.table import DEFAULT_WINDOW
from safebunny.exactly_once.outcome import FailedRow, Outcome

__all__: list[str] = []

Handler = Callable[[Any, StepContext], "Outcome | None"]
#: (failed rows, ctx) -> None, or how many of them it retried and parked (``{"retried": n, "parked": m}``)
FailedCallback = Callable[[list[FailedRow], StepContext], "Mapping[str, int] | None"]
#: (the new messages' Arrow rows, their Spark schema) -> the handler's input, or None to hand the handler
#: the rows as they are
Prepare = Callable[[pa.Table, Any], "Prepared | None"]
#: (the new messages' Arrow rows) -> the failed row of each message whose failure an earlier attempt recorded for
#: good (a saga's parkings): those never reach the handler and go to ``on_failed`` as recorded
Parked = Callable[[pa.Table], "Mapping[str, FailedRow]"]


@dataclass(frozen=True)
class StepSettings:
    """Everything a :class:`~safebunny.exactly_once.protocol.step.Step` is told (its keywords, documented there;
    ``epoch`` is the fixed one, ``publish`` the emits' publishing)."""

    node: str
    inbox: str
    window: dt.timedelta = DEFAULT_WINDOW
    inbox_backend: str = "auto"
    state: str | None = None
    row_retries: int = 2
    max_isolation_jobs: int = 64
    on_failed: FailedCallback | None = None
    router: Router | None = None
    epoch: str | None = None
    checkpoint: str | None = None
    journal: str | None = None
    prepare: Prepare | None = None
    skip: Skip | None = None
    parked: Parked | None = None
    publish: PublishSettings = field(default_factory=PublishSettings)

    def __post_init__(self) -> None:
        if self.row_retries < 0 or self.max_isolation_jobs < 1:
            raise SafeBunnyOptionError(
                f"row_retries must be >= 0 and max_isolation_jobs >= 1; got {self.row_retries} and "
                f"{self.max_isolation_jobs}.", "row_retries")
        threshold, partition_rows = self.publish.threshold, self.publish.partition_rows
        if (threshold != AUTO and (not isinstance(threshold, (int, type(None))) or (threshold or 0) < 0)) \
                or partition_rows < 1:
            raise SafeBunnyOptionError(
                f"executor_publish_rows must be 'auto', a number >= 0 or None, and executor_partition_rows >= 1; got "
                f"{threshold!r} and {partition_rows!r}.", "executor_publish_rows")
