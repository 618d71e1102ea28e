"""The one policy for step queries that never started because Spark's Python process for them did not connect back.

Spark waits a fixed 10 s for the Python process of a Python data source or ``foreachBatch`` query to connect back
(not configurable in Spark 4.2); on a loaded machine, or a Spark Connect server starting many at once, it misses
now and then. Such a query never ran, so its miss is not the step's failure: it does not count toward the step's
restarts. It starts again after :data:`WAIT_S`, then twice that, ... up to 16 times that as its misses in a row
grow, and among several such steps one at a time, :data:`STAGGER_S` apart (Python processes all starting at once
are what made each miss its 10 s). Both loops that start step queries follow it: the supervisor of a running saga
(:mod:`safebunny.saga.run.runner`) and a drain's rounds (:mod:`safebunny.saga.run.drain`), which gives up after
:data:`TRIES` misses in a row.

Pure: the caller passes the clock.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["STAGGER_S", "TRIES", "WAIT_S", "Start", "UnstartedSteps"]

#: seconds before the first start again; each further miss in a row doubles it, up to 16 times
WAIT_S = 2.0
#: seconds between the starts of two steps that missed
STAGGER_S = 5.0
#: misses in a row after which a drain raises the step's error (the supervisor of a running saga never gives up)
TRIES = 6
#: how a step due to start starts (:meth:`UnstartedSteps.starting`): ``"wait"``, not yet (another step that missed
#: started less than :data:`STAGGER_S` ago); ``"again"``, its query did not start last time (not a failure of the
#: step's); ``"restart"``, it did not miss
Start = Literal["wait", "again", "restart"]


class UnstartedSteps:
    """Which steps missed their Python process's start, how many times in a row, and when each may start again."""

    def __init__(self, wait_s: float | None = None, stagger_s: float | None = None) -> None:
        self.wait_s = WAIT_S if wait_s is None else wait_s
        self.stagger_s = STAGGER_S if stagger_s is None else stagger_s
        #: step label -> misses in a row
        self.streak: dict[str, int] = {}
        self._pending: set[str] = set()  # missed, not yet started again
        self._next_at = 0.0  # when the next pending step may start

    def missed(self, label: str) -> float:
        """Note that ``label``'s query did not start; the seconds to wait before starting it again."""
        self.streak[label] = self.streak.get(label, 0) + 1
        self._pending.add(label)
        return self.wait_for(label)

    def wait_for(self, label: str) -> float:
        """The seconds ``label`` waits before its next start after its misses in a row so far."""
        return self.wait_s * 2.0 ** min(max(self.streak.get(label, 1), 1) - 1, 4)

    def starting(self, label: str, now: float) -> Start:
        """How ``label``, due to start, starts at ``now`` (:data:`Start`); a start again is counted for the stagger
        (a step that did not miss is never held)."""
        if label not in self._pending:
            return "restart"
        if now < self._next_at:
            return "wait"
        self._next_at = now + self.stagger_s
        self._pending.discard(label)
        return "again"

    def ran(self, label: str) -> None:
        """``label``'s query ran (a round ended, or it stayed up): its misses in a row start again from none."""
        self.streak.pop(label, None)

    def exhausted(self, label: str, tries: int | None = None) -> bool:
        """Whether ``label`` missed more than ``tries`` (:data:`TRIES`) times in a row."""
        return self.streak.get(label, 0) > (TRIES if tries is None else tries)
