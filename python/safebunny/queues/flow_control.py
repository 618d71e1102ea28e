"""The queue consumer's flow control on the broker: cancel its consumer when the buffer reaches the byte budget,
consume again at half the budget with the prefetch the budget holds, and say whether more deliveries may come.

The counting is pure (:class:`~safebunny.queues.byte_budget.ByteBudget`); this is its I/O on the consumer's channel
(basic.cancel and basic.consume on the I/O thread). :class:`~safebunny.queues.consumer.QueueConsumer` mixes it in:
its hot path (one call per delivery) reads the flags set here as its own attributes. A cancel, not a reject: the
deliveries in flight still reach the buffer, so nothing is requeued and no delivery attempt is counted on a quorum
queue (docs/source.md, the byte budget).
"""

from __future__ import annotations

import logging
from typing import Any

from pika import spec

from safebunny.queues.byte_budget import ByteBudget
from safebunny.queues.consumer_acks import ConsumerAcks

__all__ = ["FlowControl"]

log = logging.getLogger("safebunny.source")


class FlowControl:
    """Pause and resume of a consumer under a byte budget; the consumer sets every attribute declared here."""

    queue: str
    max_buffered_bytes: int | None
    budget: ByteBudget
    acks: ConsumerAcks
    effective_prefetch: int
    paused: bool
    restarted: bool
    _cancelling: bool
    _calibrating: bool
    _consumer_tag: str | None
    _channel: Any
    _last_tag: int
    _cond: Any

    def _consume(self) -> None:  # the consumer's: start consuming with the effective prefetch
        raise NotImplementedError

    def buffered_bytes(self) -> int:
        """Body bytes delivered and not yet taken."""
        return self.budget.buffered()

    def _pause(self) -> None:
        """(I/O thread) Cancel the consumer: the buffer reached its byte budget, or the first delivery told the body
        size. Deliveries before the cancel-ok still reach the buffer (pika would reject them: requeued, and on a
        quorum queue a delivery attempt counted)."""
        self.paused = True
        self._calibrating = False
        tag, channel = self._consumer_tag, self._channel
        if tag is None or channel is None or not channel.is_open:
            return
        impl = channel._impl  # noqa: SLF001
        self._cancelling = True

        def on_cancel_ok(_frame: Any) -> None:
            impl._cleanup_consumer_ref(tag)  # noqa: SLF001 - pika's own clean-up after a cancel-ok
            channel._consumer_infos.pop(tag, None)  # noqa: SLF001 - and BlockingChannel's
            self._cancelling = False
            self._consumer_tag = None
            self.acks.wake(self.maybe_resume)  # outside pika's frame processing

        impl._rpc(spec.Basic.Cancel(consumer_tag=tag), on_cancel_ok,  # noqa: SLF001
                  [(spec.Basic.CancelOk, {"consumer_tag": tag})])
        log.debug("queue %r: consumer paused, %d body bytes buffered (budget %d)", self.queue,
                  self.buffered_bytes(), self.max_buffered_bytes)

    def maybe_resume(self) -> None:
        """(I/O thread) Consume again once the buffer is down to half its byte budget, with the prefetch lowered
        to what the budget holds at the average body size seen."""
        if not self.paused or self._cancelling or self.max_buffered_bytes is None:
            return
        channel = self._channel
        if channel is None or not channel.is_open or not self.budget.may_resume():
            return
        self.effective_prefetch = self.budget.prefetch_for_next()
        # before paused goes False: take() must never see the consumer neither paused nor restarting while consume()
        # waits for the broker (a quorum queue's log), or it hands out one linger's worth (a first batch of 1)
        self.restarted = True  # until the restarted consumer's first delivery
        self.paused = False
        self._consume()
        with self._cond:  # take() may wait for this
            self._cond.notify_all()
        log.debug("queue %r: consuming again with prefetch %d", self.queue, self.effective_prefetch)

    def can_grow(self) -> bool:
        """Whether the broker may send more soon, after the current channel's last delivery: the prefetch is not
        used up by deliveries buffered or taken and not yet acked, and a paused consumer is about to consume
        again (when it cannot, waiting for more is pointless). An ack ``acks.ack_through`` has asked for counts
        as sent: the I/O thread writes it in a moment, and what it frees arrives after (a commit followed at
        once by the next batch's take must not end that batch at what is buffered)."""
        if self.paused:
            return self.budget.may_resume()
        if not self.effective_prefetch:
            return True
        return self._last_tag - self.acks.acked(self.generation) < self.effective_prefetch
