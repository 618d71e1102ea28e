"""What a step's handler is told, a :class:`StepContext`, and what it returns, an :class:`Outcome` made of
effects (:func:`append`, :func:`merge`) and emits (:func:`emit`).

The same three functions serve a DataFrame handler (Spark DataFrames) and a row handler (``rows=True``:
plain dicts, or lists of dicts, for its message, whose ``messageId`` the step fills in when left out); every
effect and emit row carries the ``messageId`` of the input message that caused it (docs/exactly-once.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from safebunny.errors import SafeBunnyOptionError

__all__ = ["StepContext", "Outcome", "Effect", "Emit", "FailedRow", "append", "merge", "emit"]


@dataclass(frozen=True)
class StepContext:
    """Where a handler call stands.

    - ``node``: the step's node name;
    - ``batch_id``: Spark's micro-batch id;
    - ``epoch``: the checkpoint's identity (the streaming query id), stable across restarts;
    - ``message_id``/``correlation_id``: the current message in a row handler (``None`` in a
      DataFrame handler). Use ``message_id`` as the idempotency key of an external call.
    - ``attempt``: 1 for the first try of a row, 2 for its first in-place retry, ...
    """

    node: str
    batch_id: int
    epoch: str
    message_id: str | None = None
    correlation_id: str | None = None
    attempt: int = 1


@dataclass(frozen=True)
class Effect:
    """A write to a Delta table, applied exactly once per batch.

    ``kind`` is ``"append"`` or ``"merge"``; ``table`` a path (written with delta-rs) or, when the
    session has Delta, a table name; ``on`` the merge keys.
    """

    kind: str
    data: Any
    table: str
    on: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        from safebunny.delta.target import is_path
        from safebunny.storage.volumes import refuse_volume

        if not isinstance(self.table, str) or not self.table:
            raise SafeBunnyOptionError(f"An effect needs a Delta table path or name; got {self.table!r}.", "table")
        if is_path(self.table):  # refused when the handler builds it, before any effect of its batch is applied
            refuse_volume(self.table, "The effect table", "table")

    @property
    def key(self) -> tuple[str, str, tuple[str, ...]]:
        return (self.kind, self.table, self.on)


@dataclass(frozen=True)
class Emit:
    """Messages to publish after the batch's effects, with ids derived from their causes.

    ``type`` is the message type (the AMQP ``type`` property and the type slot of the derived id);
    ``exchange``/``routing_key`` route it (a saga routes by node and type instead). The body: docs/exactly-once.md.
    """

    data: Any
    type: str
    exchange: str | None = None
    routing_key: str | None = None

    @property
    def key(self) -> tuple[str, str | None, str | None]:
        return (self.type, self.exchange, self.routing_key)


@dataclass(frozen=True)
class FailedRow:
    """An input message the handler could not process: its id, the reason, and the attempts made."""

    message_id: str
    reason: str
    attempts: int = 1
    correlation_id: str | None = None
    error_type: str | None = None
    row: Mapping[str, Any] | None = None


@dataclass
class Outcome:
    """What one handler call decided: Delta ``effects`` and messages to ``emits``.

    ``failed`` is filled in by the step (rows isolated as failing); a handler may also add
    :class:`FailedRow` entries itself for messages it rejects on purpose.
    """

    effects: Sequence[Effect] = field(default_factory=list)
    emits: Sequence[Emit] = field(default_factory=list)
    failed: list[FailedRow] = field(default_factory=list)


def append(data: Any, table: str) -> Effect:
    """Append ``data`` (a DataFrame, or dict rows in a row handler) to the Delta table ``table``."""
    return Effect("append", data, table)


def merge(data: Any, table: str, on: str | Sequence[str]) -> Effect:
    """Upsert ``data`` into ``table``: rows matching on the ``on`` columns are updated, others inserted."""
    keys = (on,) if isinstance(on, str) else tuple(on)
    if not keys or not all(isinstance(k, str) and k for k in keys):
        raise SafeBunnyOptionError(f"merge(..., on=...) needs one or more column names; got {on!r}.", "on")
    return Effect("merge", data, table, keys)


def emit(data: Any, type: str, exchange: str | None = None, routing_key: str | None = None) -> Emit:  # noqa: A002
    """Publish one message per row of ``data`` with type ``type``, after the batch's effects."""
    if not isinstance(type, str) or not type:
        raise SafeBunnyOptionError(f"emit(..., type=...) needs a message type; got {type!r}.", "type")
    return Emit(data, type, exchange, routing_key)
