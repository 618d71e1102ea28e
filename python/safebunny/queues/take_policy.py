"""When :meth:`~safebunny.queues.consumer.QueueConsumer.take` keeps waiting for deliveries: pure rules over
what the buffer and the consumer show, and a clock passed in.

A take waits in up to four phases (first, restart, backlog, fill; what each waits for: docs/source.md, "How
long a take waits"). :class:`TakeWaits` is asked after every wake-up; ``want`` is the buffer length the
taker waits for, so the I/O thread wakes it only when that is reached.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BufferView", "TakeWaits"]


@dataclass(frozen=True)
class BufferView:
    """What a take sees of the consumer at one moment."""

    buffered: int
    #: the consumer is cancelled: its byte budget is full, or it learnt the body size
    paused: bool
    #: the broker may send more soon (prefetch and byte budget not used up)
    can_grow: bool
    #: the consumer was restarted and has not delivered since
    restarted: bool
    #: the broker's last count of ready messages
    backlog: int
    failed: bool = False


class TakeWaits:
    """The waiting of one take that began at ``now`` (monotonic seconds)."""

    def __init__(self, max_messages: int, max_bytes: int | None, first_wait: float, linger: float,
                 fill_wait: float, now: float) -> None:
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.linger = linger
        self.fill_wait = fill_wait
        self.first_deadline = now + first_wait
        self.phase = "first"
        #: the buffer length the taker waits for (0 once it waits no more)
        self.want = 1
        self._end = self._quiet_at = 0.0
        self._seen = 0

    def until(self, view: BufferView, now: float) -> float | None:
        """Keep waiting until this monotonic time (or a wake-up), or None: stop waiting and take."""
        if view.failed:
            return self._done()
        if self.phase == "first":
            if not view.buffered and now < self.first_deadline:
                return self.first_deadline
            self.phase = "restart"
        if self.phase == "restart":
            if view.buffered and view.paused and view.can_grow and now < self.first_deadline:
                return self.first_deadline
            if view.restarted and not view.paused and view.backlog > view.buffered:
                self.phase, self.want = "backlog", view.buffered + 1
            else:
                self.phase = "fill?"
        if self.phase == "backlog":
            if view.buffered < self.want and now < self.first_deadline:
                return self.first_deadline
            self.phase, self.want = "fill?", 1
        if self.phase == "fill?":
            if not (view.buffered and view.buffered < self.max_messages and self.linger > 0 and view.can_grow):
                return self._done()
            fill = (self.fill_wait > self.linger and self.max_bytes is None
                    and view.backlog >= self.max_messages - view.buffered)
            self.phase, self.want = "fill", self.max_messages
            self._end = now + (self.fill_wait if fill else self.linger)
            self._quiet_at = now + self.linger  # the wait ends unless more arrives before (without fill: end)
            self._seen = view.buffered
        if self.phase == "fill":
            if view.buffered != self._seen:
                self._seen, self._quiet_at = view.buffered, now + self.linger
            until = min(self._end, self._quiet_at)
            if view.buffered < self.max_messages and view.can_grow and now < until:
                return until
        return self._done()

    def _done(self) -> None:
        self.phase, self.want = "done", 0
        return None
