"""A step's settings as one typed, frozen object: what ``Step(...)``'s keywords build, checked once."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa

from safebunny.errors import SafeBunnyOptionError
from safebunny.exactly_once.collect.batch import Prepared, Skip
from safebunny.exactly_once.emits.retrying_publisher import (
    AUTO,
    DEFAULT_PARTITION_ROWS,
    ExecutorPublishRows,
    PublishSettings,
)
from safebunny.exactly_once.emits.routed_rows import Router
from safebunny.exactly_once.inbox.table import DEFAULT_WINDOW
from safebunny.exactly_once.outcome import FailedRow, Outcome, StepContext
from safebunny.options.connection import ConnectionSettings
from safebunny.options.sink import sink_options
from safebunny.uri import split_password, validate_uri

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


@dataclass(frozen=True)
class StepSettings:
    """Everything a :class:`~safebunny.exactly_once.protocol.step.Step` is told besides its node and inbox, by
    keyword, checked when made: ``Step("billing", inbox, StepSettings(uri=..., window=...))``. Each setting is
    documented on :class:`~safebunny.exactly_once.protocol.step.Step`; one value may serve several steps
    (``dataclasses.replace`` makes a variant)."""

    uri: str | None = None
    password: str | None = field(default=None, repr=False)
    connection_name: str | None = None
    publish_options: Mapping[str, str] = field(default_factory=dict)
    publish_retry_seconds: float = 60.0
    executor_publish_rows: ExecutorPublishRows = AUTO
    executor_partition_rows: int = DEFAULT_PARTITION_ROWS
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
        if self.uri is not None:  # the password apart, as in ConnectionSettings: the repr never shows it
            bare, password = split_password(validate_uri(self.uri, "uri"), self.password)
            object.__setattr__(self, "uri", bare)
            object.__setattr__(self, "password", password)
        if self.row_retries < 0 or self.max_isolation_jobs < 1:
            raise SafeBunnyOptionError(
                f"row_retries must be >= 0 and max_isolation_jobs >= 1; got {self.row_retries} and "
                f"{self.max_isolation_jobs}.", "row_retries")
        rows, partition_rows = self.executor_publish_rows, self.executor_partition_rows
        if (rows != AUTO and (not isinstance(rows, (int, type(None))) or (rows or 0) < 0)) or partition_rows < 1:
            raise SafeBunnyOptionError(
                f"executor_publish_rows must be 'auto', a number >= 0 or None, and executor_partition_rows >= 1; got "
                f"{rows!r} and {partition_rows!r}.", "executor_publish_rows")
        self.publishing("step")  # a bad uri or publish option fails here, not at the first emit

    def publishing(self, node: str) -> PublishSettings:
        """How step ``node`` publishes its emits: the sink options (``publish_options`` read by the sink's option
        table; the connection named ``safebunny/<node>/publisher`` unless ``connection_name`` says otherwise)."""
        sink = None
        if self.uri is not None:
            connection = ConnectionSettings(self.uri, self.password, self.connection_name or
                                            f"safebunny/{node}/publisher")
            sink = sink_options(connection, self.publish_options)
        return PublishSettings(sink, self.publish_retry_seconds, self.executor_publish_rows,
                               self.executor_partition_rows)
