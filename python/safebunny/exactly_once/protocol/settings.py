"""A step's settings as one typed, frozen object: what ``Step(...)``'s keywords build, checked once."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa

from safebunny.errors import SafeBunnyOptionError, moved_keywords
from safebunny.exactly_once.collect.batch import Prepared, Skip
from safebunny.exactly_once.emits.retrying_publisher import ExecutorPublishing, PublishSettings
from safebunny.exactly_once.emits.routed_rows import Router
from safebunny.exactly_once.inbox.table import DEFAULT_WINDOW
from safebunny.exactly_once.outcome import FailedRow, Outcome, StepContext
from safebunny.options.connection import ConnectionSettings
from safebunny.options.sink import PublishOptions, sink_options

__all__ = ["StepSettings"]

InboxBackend = Literal["auto", "delta-rs", "spark"]

Handler = Callable[[Any, StepContext], "Outcome | None"]
#: (failed rows, ctx) -> None, or how many of them it retried and parked (``{"retried": n, "parked": m}``)
FailedCallback = Callable[[list[FailedRow], StepContext], "Mapping[str, int] | None"]
#: (the new messages' Arrow rows, their Spark schema) -> the handler's input, or None to hand the handler
#: the rows as they are
Prepare = Callable[[pa.Table, Any], "Prepared | None"]
#: (the new messages' Arrow rows) -> the failed row of each message whose failure an earlier attempt recorded for
#: good (a saga's parkings): those never reach the handler and go to ``on_failed`` as recorded
Parked = Callable[[pa.Table], "Mapping[str, FailedRow]"]
#: (failed rows) -> the parking record of each the step parks for good (committed, fenced, before anything is sent)
Parks = Callable[[list[FailedRow]], "Mapping[str, Mapping[str, Any]]"]


_CONNECTION = "StepSettings(connection=safebunny.ConnectionSettings(uri, password=..., connection_name=...))"


@moved_keywords({"uri": _CONNECTION, "password": _CONNECTION, "connection_name": _CONNECTION})
@dataclass(frozen=True)
class StepSettings(ExecutorPublishing):
    """Everything a :class:`~safebunny.exactly_once.protocol.step.Step` is told besides its node and inbox, by
    keyword, checked when made: ``Step("billing", inbox, StepSettings(connection=ConnectionSettings(uri),
    window=...))``. Each setting is documented on :class:`~safebunny.exactly_once.protocol.step.Step`; one value
    may serve several steps (``dataclasses.replace`` makes a variant)."""

    connection: ConnectionSettings | None = None
    publish_options: PublishOptions = field(default_factory=PublishOptions)
    publish_retry_seconds: float = 60.0
    window: dt.timedelta = DEFAULT_WINDOW
    inbox_backend: InboxBackend = "auto"
    state: str | None = None
    row_retries: int = 2
    max_isolation_jobs: int = 64
    record_frame_outcomes: bool = True
    on_failed: FailedCallback | None = None
    router: Router | None = None
    epoch: str | None = None
    checkpoint: str | None = None
    journal: str | None = None
    prepare: Prepare | None = None
    skip: Skip | None = None
    parked: Parked | None = None
    parks: Parks | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.publish_options, PublishOptions):
            raise SafeBunnyOptionError(
                f"publish_options must be a safebunny.PublishOptions (e.g. PublishOptions(confirm_timeout_ms=5000)), "
                f"not a map of sink option strings; got {type(self.publish_options).__name__}.", "publish_options")
        if self.row_retries < 0 or self.max_isolation_jobs < 1:
            raise SafeBunnyOptionError(
                f"row_retries must be >= 0 and max_isolation_jobs >= 1; got {self.row_retries} and "
                f"{self.max_isolation_jobs}.", "row_retries")

    def publishing(self, node: str) -> PublishSettings:
        """How step ``node`` publishes its emits: the sink options (``publish_options`` on ``connection``, named
        ``safebunny/<node>/publisher`` unless its ``connection_name`` says otherwise)."""
        connection = self.connection
        sink = None if connection is None else sink_options(
            connection.named(connection.name_or(f"safebunny/{node}/publisher")), self.publish_options)
        return PublishSettings(sink=sink, retry_seconds=self.publish_retry_seconds, **self.executor_publishing())
