"""The consumer's flow control in numbers: the prefetch a byte budget holds, and whether more can arrive.

Memory is bounded twice: the prefetch bounds the unacked deliveries in messages, and
``max_buffered_bytes`` bounds the bodies waiting in the buffer. With a byte budget the consumer
starts with a prefetch of 1; the first delivery tells the body size, and the consumer is
restarted (basic.cancel, then basic.consume on the same channel) with the prefetch the budget
holds at the average body size seen: at most ``prefetch`` and at most ``max_buffered_bytes /
average size``. Should the buffer still reach the budget (bodies grew), the consumer is
cancelled the same way until :meth:`take` has drained the buffer to half the budget. Deliveries
that arrive between a cancel and its cancel-ok are kept (they are ours, unacked): nothing is
rejected or requeued, so no delivery attempt is counted on a quorum queue.

The functions here are the arithmetic, pure over the consumer's counters.
"""

from __future__ import annotations

__all__: list[str] = []


def desired_prefetch(prefetch: int, budget: int | None, delivered: int, delivered_bytes: int) -> int:
    """The prefetch for the next consumer: ``prefetch``, or with a byte ``budget`` what it holds at the average
    body size seen (1 before the first delivery, to learn it)."""
    if budget is None:
        return prefetch
    if not delivered:
        return 1
    average = max(1.0, delivered_bytes / delivered)
    return max(1, min(prefetch or 65535, int(budget // average)))


def may_resume(buffered_bytes: int, budget: int) -> bool:
    """A cancelled consumer consumes again once its buffer is down to half the byte budget."""
    return buffered_bytes <= budget // 2


def can_grow(*, paused: bool, buffered_bytes: int, budget: int | None, prefetch: int, last_tag: int,
             acked_tag: int) -> bool:
    """Whether the broker may send more soon: the prefetch is not used up by deliveries that are buffered or
    taken and not yet acked (``last_tag - acked_tag``), and a paused consumer is about to consume again. When
    it cannot, waiting for more is pointless."""
    if paused:
        return may_resume(buffered_bytes, budget or 0)
    if not prefetch:
        return True
    return last_tag - acked_tag < prefetch
