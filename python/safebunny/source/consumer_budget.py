"""The consumer's flow control by its byte budget.

With a byte budget the consumer starts with a prefetch of 1, learns the body size from the first delivery and
is restarted (basic.cancel, then basic.consume on the same channel) with the prefetch the budget holds: at
most ``prefetch`` and at most ``max_buffered_bytes / average size``; should the buffer still reach the budget,
it is cancelled the same way until the take has drained the buffer to half the budget (docs/source.md).
Deliveries that arrive between a cancel and its cancel-ok are kept: nothing is rejected or requeued, so no
delivery attempt is counted on a quorum queue.

:class:`ByteBudgetFlow` is owned by a :class:`~safebunny.source.consumer.QueueConsumer` (its ``budget``),
which hands it the current channel and the call that consumes again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from pika import spec

from safebunny.source.consumer_acks import ConsumerAcks

__all__: list[str] = []

log = logging.getLogger("safebunny.source")


class ByteBudgetFlow:
    """Pausing and resuming the consumer of ``queue`` by its byte budget ``limit`` (None: no budget).

    ``channel()`` is the consumer's current channel; ``consume()`` (I/O thread) starts a consumer on it with
    :attr:`effective_prefetch` and sets :attr:`consumer_tag`; ``cond`` is the consumer's buffer condition,
    notified when it consumes again. Body bytes: ``in_*`` written only by the I/O thread, ``out_bytes`` only
    under ``cond`` (take, clears)."""

    def __init__(self, queue: str, prefetch: int, limit: int | None, acks: ConsumerAcks, cond: threading.Condition,
                 channel: Callable[[], Any], consume: Callable[[], None]) -> None:
        self.queue, self.prefetch, self.limit, self.acks, self.cond = queue, prefetch, limit, acks, cond
        self.channel, self.consume = channel, consume
        #: the prefetch of the current consumer: ``prefetch``, or what ``limit`` holds
        self.effective_prefetch = prefetch
        self.consumer_tag: str | None = None  # the consumer a pause cancels
        self.in_bytes = self.in_count = self.out_bytes = 0
        self.paused = False  # consumer cancelled because the buffer reached the budget
        self.cancelling = False  # basic.cancel sent, cancel-ok not yet received
        self.calibrating = False  # consuming with prefetch 1 to learn the body size
        self.restarted = False  # the consumer was restarted and has not delivered since

    def new_channel(self) -> None:
        """(I/O thread) A new channel: not paused; the prefetch for its consumer, 1 to learn the body size."""
        self.paused = self.cancelling = self.restarted = False
        self.effective_prefetch = self.desired_prefetch()
        self.calibrating = self.limit is not None and not self.in_count

    def desired_prefetch(self) -> int:
        """The next consumer's prefetch: ``prefetch``, or what the byte budget holds at the average body size."""
        if self.limit is None:
            return self.prefetch
        if not self.in_count:
            return 1  # to learn the body size
        average = max(1.0, self.in_bytes / self.in_count)
        return max(1, min(self.prefetch or 65535, int(self.limit // average)))

    def buffered_bytes(self) -> int:
        """Body bytes delivered and not yet taken."""
        return self.in_bytes - self.out_bytes

    def pause(self) -> None:
        """(I/O thread) Cancel the consumer: the buffer reached its byte budget, or the first delivery told the body
        size. Deliveries before the cancel-ok still reach the buffer (pika would reject them: requeued, and on a
        quorum queue a delivery attempt counted)."""
        self.paused = True
        self.calibrating = False
        tag, channel = self.consumer_tag, self.channel()
        if tag is None or channel is None or not channel.is_open:
            return
        impl = channel._impl  # noqa: SLF001
        self.cancelling = True

        def on_cancel_ok(_frame: Any) -> None:
            impl._cleanup_consumer_ref(tag)  # noqa: SLF001 - pika's own clean-up after a cancel-ok
            channel._consumer_infos.pop(tag, None)  # noqa: SLF001 - and BlockingChannel's
            self.cancelling = False
            self.consumer_tag = None
            self.acks.wake(self.maybe_resume)  # outside pika's frame processing

        impl._rpc(spec.Basic.Cancel(consumer_tag=tag), on_cancel_ok,  # noqa: SLF001
                  [(spec.Basic.CancelOk, {"consumer_tag": tag})])
        log.debug("queue %r: consumer paused, %d body bytes buffered (budget %d)", self.queue,
                  self.buffered_bytes(), self.limit)

    def maybe_resume(self) -> None:
        """(I/O thread) Consume again once the buffer is down to half its byte budget, with the prefetch lowered
        to what the budget holds at the average body size seen."""
        if not self.paused or self.cancelling or self.limit is None:
            return
        channel = self.channel()
        if channel is None or not channel.is_open or not self._may_resume():
            return
        self.effective_prefetch = self.desired_prefetch()
        # before paused goes False: take() must never see the consumer neither paused nor restarting while consume()
        # waits for the broker (a quorum queue's log), or it hands out one linger's worth (a first batch of 1)
        self.restarted = True  # until the restarted consumer's first delivery
        self.paused = False
        self.consume()
        with self.cond:  # take() may wait for this
            self.cond.notify_all()
        log.debug("queue %r: consuming again with prefetch %d", self.queue, self.effective_prefetch)

    def _may_resume(self) -> bool:
        """A cancelled consumer consumes again once its buffer is down to half the byte budget."""
        return self.buffered_bytes() <= (self.limit or 0) // 2

    def can_grow(self, last_tag: int, generation: int) -> bool:
        """Whether the broker may send more soon, after delivery ``last_tag`` of channel ``generation``: the
        prefetch is not used up by deliveries buffered or taken and not yet acked, and a paused consumer is
        about to consume again (when it cannot, waiting for more is pointless). An ack ``acks.ack_through`` has
        asked for counts as sent: the I/O thread writes it in a moment, and what it frees arrives after (a
        commit followed at once by the next batch's take must not end that batch at what is buffered)."""
        if self.paused:
            return self._may_resume()
        if not self.effective_prefetch:
            return True
        return last_tag - self.acks.acked(generation) < self.effective_prefetch
