"""The context a step's handler receives with each batch (or each message, for row handlers)."""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = ["StepContext"]


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

    def for_message(self, message_id: str, correlation_id: str | None, attempt: int = 1) -> StepContext:
        return replace(self, message_id=message_id, correlation_id=correlation_id, attempt=attempt)
