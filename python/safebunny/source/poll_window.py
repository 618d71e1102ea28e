"""How long an empty poll may wait for a first message under a processing-time trigger.

Spark starts a processing-time trigger at a multiple of its interval (the wall clock's, so the triggers of
several queries fire together) and warns "Current batch is falling behind" when one takes longer than the
interval. A source that waits for a first message should therefore stop waiting in time for the rest of
the trigger to finish within the interval's slot: the wait ends at the slot's end minus a reserve for what
comes after the poll. That rest varies with load (docs/performance.md), so
the reserve is learned: when an idle trigger (one that read nothing) still ran late, the next call comes
that much after its slot started, and the reserve grows by it; it decays back toward its base while idle
triggers end on time. Pure logic on a clock passed in, so it is testable without Spark or a broker.
"""

from __future__ import annotations

import math

__all__ = ["PollWindow"]


class PollWindow:
    """The first-message wait of each poll for a trigger of ``interval_ms``, at most ``max_wait_ms``.

    ``base_reserve`` is the fraction of the interval kept free after the poll when nothing says more is
    needed (a quarter by default); the learned reserve never exceeds half the interval.
    """

    #: a call that starts less than this after its slot began is on time (Spark's own start-up of a trigger)
    ON_TIME_S = 0.03

    def __init__(self, interval_ms: float, max_wait_ms: float, base_reserve: float = 0.25) -> None:
        if interval_ms <= 0:
            raise ValueError(f"interval_ms must be positive, got {interval_ms!r}")
        self.interval = interval_ms / 1000.0
        self.max_wait = max(0.0, max_wait_ms / 1000.0)
        self.base = self.interval * base_reserve
        self.reserve = self.base
        self._after_idle = False

    def wait(self, now: float) -> float:
        """Seconds to wait for a first message in a poll that starts at wall-clock time ``now``."""
        slot_end = (math.floor(now / self.interval) + 1) * self.interval
        return min(self.max_wait, max(0.0, slot_end - self.reserve - now))

    def started(self, now: float) -> None:
        """Note a poll starting at ``now``; learns from it when the previous poll found nothing."""
        if not self._after_idle:
            return
        late = now - math.floor(now / self.interval) * self.interval
        if late > self.ON_TIME_S and late < self.interval / 2:
            # the idle trigger before this one overran its slot by about ``late``: keep that much more free
            self.reserve = min(self.interval / 2, self.reserve + late * 1.25)
        else:
            self.reserve = max(self.base, self.reserve - (self.reserve - self.base) * 0.1)

    def ended(self, idle: bool) -> None:
        """Note whether the poll that just ended found nothing (so no batch runs in its trigger)."""
        self._after_idle = idle
