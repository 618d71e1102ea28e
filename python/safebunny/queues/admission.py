"""When a poll of the queue source may take a batch, and how long it waits: the source's one admission rule.

A poll waits up to ``pollTimeoutMs`` for a first message (the read limits, ``maxMessagesPerTrigger`` and
``maxBytesPerTrigger``, bound what it then takes). With ``minBatchIntervalMs`` the source also keeps the
interval itself, for a query run with a zero trigger: a batch with data starts no sooner than ``interval``
after the previous batch with data found its first message (when its poll began taking, or when a message
arrived while it waited), and then as soon as a message is there. Why the source paces and not a
processing-time trigger (hops in lockstep), and why a saga paces its entry steps only: docs/performance.md
(``minBatchIntervalMs``).

Pure logic on a clock passed in, so it is testable without Spark or a broker.
"""

from __future__ import annotations

__all__ = ["Admission"]


class Admission:
    """Whether a poll takes a batch now, and its waits (``poll_timeout_ms``; ``min_interval_ms`` 0: unpaced).

    Monotonic seconds in and out. :attr:`longest_hold` is the longest one poll sleeps for the interval: a
    longer one is waited out over several polls, so that stopping the query (between Spark's calls) never
    waits longer.
    """

    def __init__(self, poll_timeout_ms: float, min_interval_ms: float = 0, longest_hold: float = 5.0) -> None:
        if poll_timeout_ms < 0 or min_interval_ms < 0:
            raise ValueError(f"poll_timeout_ms and min_interval_ms must not be negative, got {poll_timeout_ms!r} "
                             f"and {min_interval_ms!r}")
        #: seconds a poll waits for a first message (and, under a backlog, for a full batch)
        self.first_wait = poll_timeout_ms / 1000.0
        self.interval = min_interval_ms / 1000.0
        self.paced = self.interval > 0  #: unpaced, a poll always takes and nothing need be noted
        self.longest_hold = longest_hold
        self._last: float | None = None

    def admit(self, now: float) -> tuple[float, bool]:
        """For a poll starting at ``now``: seconds to sleep first, and whether it then takes messages (False:
        it ends, and the zero trigger calls again)."""
        if not self.paced or self._last is None:
            return 0.0, True
        hold = max(0.0, self._last + self.interval - now)
        longest = max(self.first_wait, self.longest_hold)
        return min(hold, longest), hold <= longest

    def took(self, found_at: float) -> None:
        """Note that a batch with data was taken, whose first message was there at ``found_at`` (when its poll
        began taking, or later when it waited for one)."""
        self._last = found_at
