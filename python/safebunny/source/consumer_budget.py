"""The consumer's flow control by its byte budget: cancel the consumer when the buffer holds
``max_buffered_bytes`` of bodies, consume again at half of it with the prefetch the budget holds at the
average body size, and tell the take policy whether the broker may still send more. A mixin of
:class:`~safebunny.source.consumer.QueueConsumer`, whose state it uses (the rules themselves are pure, in
:mod:`safebunny.source.byte_budget`); kept apart so the consumer's module holds the connection and the
buffer."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from pika import spec

from safebunny.source.byte_budget import can_grow, desired_prefetch, may_resume
from safebunny.source.consumer_acks import ConsumerAcks

__all__ = ["ByteBudgetFlow"]

log = logging.getLogger("safebunny.source")


class ByteBudgetFlow:
    """Pausing and resuming a consumer by its byte budget (see :class:`~safebunny.source.consumer.QueueConsumer`)."""

    queue: str
    prefetch: int
    max_buffered_bytes: int | None
    effective_prefetch: int
    generation: int
    _paused: bool
    _cancelling: bool
    _calibrating: bool
    _restarted: bool
    _consumer_tag: str | None
    _channel: Any
    _cond: threading.Condition
    _in_bytes: int
    _in_count: int
    _out_bytes: int
    _last_tag: int
    acks: ConsumerAcks
    _consume: Callable[[], None]

    def _desired_prefetch(self) -> int:
        """The next consumer's prefetch: ``prefetch``, or what the byte budget holds at the average body size."""
        return desired_prefetch(self.prefetch, self.max_buffered_bytes, self._in_count, self._in_bytes)

    def _pause(self) -> None:
        """(I/O thread) Cancel the consumer: the buffer reached its byte budget, or the first delivery told the body
        size. Deliveries before the cancel-ok still reach the buffer (pika would reject them: requeued, and on a
        quorum queue a delivery attempt counted)."""
        self._paused = True
        self._calibrating = False
        tag = self._consumer_tag
        if tag is None or self._channel is None or not self._channel.is_open:
            return
        channel = self._channel
        impl = channel._impl  # noqa: SLF001
        self._cancelling = True

        def on_cancel_ok(_frame: Any) -> None:
            impl._cleanup_consumer_ref(tag)  # noqa: SLF001 - pika's own clean-up after a cancel-ok
            channel._consumer_infos.pop(tag, None)  # noqa: SLF001 - and BlockingChannel's
            self._cancelling = False
            self._consumer_tag = None
            self.acks.wake(self._maybe_resume)  # outside pika's frame processing

        impl._rpc(spec.Basic.Cancel(consumer_tag=tag), on_cancel_ok,  # noqa: SLF001
                  [(spec.Basic.CancelOk, {"consumer_tag": tag})])
        log.debug("queue %r: consumer paused, %d body bytes buffered (budget %d)", self.queue,
                  self._in_bytes - self._out_bytes, self.max_buffered_bytes)

    def _maybe_resume(self) -> None:
        """(I/O thread) Consume again once the buffer is down to half its byte budget, with the prefetch lowered
        to what the budget holds at the average body size seen."""
        budget = self.max_buffered_bytes
        if not self._paused or self._cancelling or budget is None:
            return
        if self._channel is None or not self._channel.is_open:
            return
        if not may_resume(self._in_bytes - self._out_bytes, budget):
            return
        self.effective_prefetch = self._desired_prefetch()
        # before _paused goes False: take() must never see the consumer neither paused nor restarting while _consume()
        # waits for the broker (a quorum queue's log), or it hands out one linger's worth (a first batch of 1)
        self._restarted = True  # until the restarted consumer's first delivery
        self._paused = False
        self._consume()
        with self._cond:  # take() may wait for this
            self._cond.notify_all()
        log.debug("queue %r: consuming again with prefetch %d", self.queue, self.effective_prefetch)

    def _can_grow(self) -> bool:
        """Whether the broker may send more soon (:func:`~safebunny.source.byte_budget.can_grow`). An ack
        ``acks.ack_through`` has asked for counts as sent: the I/O thread writes it in a moment, and what it frees
        arrives after (a commit followed at once by the next batch's take must not end that batch at what is
        buffered)."""
        acked = self.acks.acked(self.generation)
        return can_grow(paused=self._paused, buffered_bytes=self._in_bytes - self._out_bytes,
                        budget=self.max_buffered_bytes, prefetch=self.effective_prefetch, last_tag=self._last_tag,
                        acked_tag=acked)

    def buffered_bytes(self) -> int:
        """Body bytes delivered and not yet taken."""
        return self._in_bytes - self._out_bytes
