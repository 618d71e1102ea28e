"""The consumer_timeout budget of the queue source.

RabbitMQ closes a channel whose oldest unacked delivery is older than its ``consumer_timeout`` and requeues
what it held; a delivery waits about two batch durations before its ack (docs/performance.md, "The
``consumer_timeout`` budget"), so batches slower than half the timeout lose their acks and spin on the same
messages. :class:`AckBudget` warns when two intervals between plans pass half the timeout, and fails the
query with a clear error when the broker closed the channel for an overdue ack in two of the last five
commits.
"""

from __future__ import annotations

import logging
import time
from collections import deque

from safebunny.errors import SafeBunnyBrokerError

__all__ = ["AckBudget"]

#: commits looked at, and how many of them lost to consumer_timeout fail the query
LOSS_WINDOW = 5
LOSSES_TO_FAIL = 2
#: seconds between two warnings about the budget
_WARN_EVERY = 600.0

log = logging.getLogger("safebunny.source")


class AckBudget:
    """The ack-age budget of one reader against the broker's ``consumer_timeout`` (``timeout_ms``, 0: unknown)."""

    def __init__(self, queue: str, timeout_ms: int) -> None:
        self.queue = queue
        self.timeout_s = timeout_ms / 1000.0
        self.batch_s: float | None = None  # the last interval between two plans with a batch in between
        self._planned_at: float | None = None
        self._losses: deque[bool] = deque(maxlen=LOSS_WINDOW)
        self._warned_at = float("-inf")

    def planned(self, previous_pending: bool, now: float | None = None) -> None:
        """A batch was planned. ``previous_pending``: the previous batch is still unacked, so the time since
        the previous plan is a batch's duration (after an idle spell it is not)."""
        now = time.monotonic() if now is None else now
        if previous_pending and self._planned_at is not None:
            self.batch_s = now - self._planned_at
            wait = 2 * self.batch_s
            if self.timeout_s and wait > self.timeout_s / 2 and now - self._warned_at > _WARN_EVERY:
                self._warned_at = now
                log.warning(
                    "Queue %r: the last batch took %.1f s, so a message waits about %.1f s for its ack (the reader "
                    "prefetches two batches), more than half the broker's consumer_timeout (option "
                    "'consumerTimeoutMs', %.0f s). Past it the broker closes the channel and every unacked message "
                    "is read again. Make batches shorter (lower 'maxMessagesPerTrigger' or 'maxBytesPerTrigger', a "
                    "faster handler) or raise consumer_timeout.", self.queue, self.batch_s, wait, self.timeout_s)
        self._planned_at = now

    def committed(self, lost_to_timeout: bool) -> None:
        """A commit acked its batch, or could not because the broker closed the channel for an overdue ack."""
        self._losses.append(lost_to_timeout)

    def check(self) -> None:
        """Raise when acks keep being lost to consumer_timeout: failing clearly beats reading forever."""
        lost = sum(self._losses)
        if lost < LOSSES_TO_FAIL:
            return
        took = f"; the last batch took about {self.batch_s:.1f} s" if self.batch_s is not None else ""
        raise SafeBunnyBrokerError(
            f"The broker closed the channel of queue {self.queue!r} because a delivery stayed unacked longer than "
            f"its consumer_timeout, in {lost} of the last {len(self._losses)} batches. Each such batch is "
            "redelivered and read again, so the query would spin on the same messages. A message waits for its "
            f"ack about two batch durations (the reader prefetches two batches){took}. Make batches shorter (lower "
            "'maxMessagesPerTrigger' or 'maxBytesPerTrigger', a faster handler) or raise the broker's "
            "consumer_timeout (and option 'consumerTimeoutMs' with it), then restart the query.", reply_code=406)
