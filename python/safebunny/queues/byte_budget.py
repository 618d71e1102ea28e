"""The consumer's byte budget, pure: body bytes delivered and taken, and the prefetch the budget holds.

The consumer (:mod:`safebunny.queues.consumer`) counts each delivery in and each take out, and asks this when
to cancel, when to consume again and with which prefetch; the cancel and the consume themselves are its I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ByteBudget"]


@dataclass
class ByteBudget:
    """``limit``: the most body bytes buffered (``None``: no budget); ``prefetch``: the configured prefetch.

    ``in_bytes``/``in_count`` are written only by the consumer's I/O thread, ``out_bytes`` only under its lock."""

    limit: int | None
    prefetch: int
    in_bytes: int = 0
    in_count: int = 0
    out_bytes: int = 0

    def buffered(self) -> int:
        """Body bytes delivered and not yet taken."""
        return self.in_bytes - self.out_bytes

    def prefetch_for_next(self) -> int:
        """The next consumer's prefetch: ``prefetch``, or what the budget holds at the average body size (1 until
        a first delivery tells the size)."""
        if self.limit is None:
            return self.prefetch
        if not self.in_count:
            return 1
        average = max(1.0, self.in_bytes / self.in_count)
        return max(1, min(self.prefetch or 65535, int(self.limit // average)))

    def may_resume(self) -> bool:
        """A cancelled consumer consumes again once its buffer is down to half the budget."""
        return self.buffered() <= (self.limit or 0) // 2
