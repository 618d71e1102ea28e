"""At most one batch with data per interval, each taken as soon as its data is there: the source as the trigger.

A processing-time trigger starts every query at the same multiples of its interval. In a chain of queries
(a saga's steps) that makes the hops move in lockstep: at a slot's start each step is busy with what its
upstream published during the previous slot, so what the upstream publishes now waits for the next slot,
and every hop costs a whole interval (docs/performance.md).

With a pacer the query runs with a zero trigger and the source keeps the interval itself: a batch with data
starts no sooner than ``interval`` after the previous batch with data found its first message (when its poll
began taking, or when a message arrived while it waited), and then as soon as a message is there. Batches
are spaced as under a trigger (one per interval under a steady load, back to back under a backlog), not
aligned to the wall clock, and Spark never warns "falling behind" for an idle poll: a zero trigger has no
interval to fall behind. A saga paces its entry steps only; a step fed by other steps runs unpaced and takes
each upstream output as it arrives, so it runs at most as often as its upstreams do (pacing it too would put
it back in lockstep: its readiness and its upstream's output would come at the same moment each interval).

Pure logic on a clock passed in, so it is testable without Spark or a broker.
"""

from __future__ import annotations

__all__ = ["BatchPacer"]


class BatchPacer:
    """Spaces the batches with data of one query by about ``interval_ms`` (monotonic seconds in and out)."""

    def __init__(self, interval_ms: float) -> None:
        if interval_ms <= 0:
            raise ValueError(f"interval_ms must be positive, got {interval_ms!r}")
        self.interval = interval_ms / 1000.0
        self._last: float | None = None

    def hold(self, now: float) -> float:
        """Seconds a poll starting at ``now`` waits before it may take messages (0: take at once)."""
        if self._last is None:
            return 0.0
        return max(0.0, self._last + self.interval - now)

    def took(self, found_at: float) -> None:
        """Note that a batch with data was taken, whose first message was there at ``found_at`` (when its poll
        began taking, or later when it waited for one)."""
        self._last = found_at
