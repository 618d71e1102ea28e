"""The consumer's flow control by its byte budget: cancel the consumer when the buffer holds
``max_buffered_bytes`` of bodies, consume again at half of it with the prefetch the budget holds at the
average body size, and tell the take policy whether the broker may still send more. :class:`ByteBudgetFlow`
is owned by a :class:`~safebunny.source.consumer.QueueConsumer` (its ``budget``), which hands it the current
channel and the call that consumes again; the counters and flags of the budget are its own (the rules
themselves are pure, in :mod:`safebunny.source.byte_budget`)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from pika import spec

from safebunny.source.byte_budget import can_grow, desired_prefetch, may_resume
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
        return desired_prefetch(self.prefetch, self.limit, self.in_count, self.in_bytes)

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
        if channel is None or not channel.is_open or not may_resume(self.buffered_bytes(), self.limit):
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

    def can_grow(self, last_tag: int, generation: int) -> bool:
        """Whether the broker may send more soon (:func:`~safebunny.source.byte_budget.can_grow`), after
        delivery ``last_tag`` of channel ``generation``. An ack ``acks.ack_through`` has asked for counts as sent:
        the I/O thread writes it in a moment, and what it frees arrives after (a commit followed at once by the
        next batch's take must not end that batch at what is buffered)."""
        return can_grow(paused=self.paused, buffered_bytes=self.buffered_bytes(), budget=self.limit,
                        prefetch=self.effective_prefetch, last_tag=last_tag, acked_tag=self.acks.acked(generation))
