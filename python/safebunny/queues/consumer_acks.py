"""The consumer's calls onto its I/O thread from the Spark-facing thread: acks on commit, their
confirmation, and the queue's depth. :class:`ConsumerAcks` is owned by a
:class:`~safebunny.queues.consumer.QueueConsumer` (its ``acks``), which hands it the one thing it does not own:
the current connection, channel and channel generation (the consumer replaces them on a reconnect). The ack
state (what was acked, asked for, confirmed) and the queue's last known depth are its own."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

from safebunny.errors import SafeBunnyBrokerError
from safebunny.uri import describe

__all__: list[str] = []

#: the consumer's current (connection, channel, channel generation), read when an ack or a question is sent
Link = Callable[[], tuple[Any, Any, int]]

log = logging.getLogger("safebunny.source")


class ConsumerAcks:
    """Acks and depth queries of the consumer of ``queue`` at ``uri``; ``ready`` is set while it consumes."""

    def __init__(self, uri: str, queue: str, ready: threading.Event, link: Link) -> None:
        self.uri, self.queue, self._ready, self._link = uri, queue, ready, link
        #: messages ready in the queue at the broker's last count (not counting those delivered to us)
        self.backlog = 0
        self.acked_tag = 0  # last tag acked (multiple) on the current channel (I/O thread)
        # (generation, tag) of the last ack asked for by ack_through (Spark thread): the I/O thread writes it
        # soon, and the broker sends more once it has; take() counts it as acked when it decides whether to wait
        self.ack_asked = (0, 0)
        self._unconfirmed = False  # an ack was written that no round trip has confirmed yet (I/O thread)
        self._depth_asked = False  # a passive declare for the queue depth is on its way

    def new_channel(self, backlog: int) -> None:
        """(I/O thread) The consumer opened a new channel, whose declare counted ``backlog`` ready messages."""
        self.backlog = backlog
        self.acked_tag = 0
        self._unconfirmed = self._depth_asked = False

    def acked(self, generation: int) -> int:
        """The last tag acked on channel ``generation``, counting an ack asked for and not yet written."""
        asked_generation, asked = self.ack_asked
        return max(self.acked_tag, asked) if asked_generation == generation else self.acked_tag

    def wake(self, fn: Callable[[], Any]) -> None:
        """Run ``fn`` on the I/O thread soon, without waiting for it."""
        connection = self._link()[0]
        with contextlib.suppress(Exception):  # the connection is going away; the I/O loop starts over anyway
            if connection is not None and connection.is_open:
                connection.add_callback_threadsafe(fn)

    def call(self, fn: Callable[[], Any], timeout: float = 30.0) -> Any:
        """Run ``fn`` on the I/O thread and wait for its result."""
        done = threading.Event()
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                box["value"] = fn()
            except BaseException as exc:  # handed back to the caller
                box["error"] = exc
            finally:
                done.set()

        connection = self._link()[0]
        if connection is None or not connection.is_open:
            raise SafeBunnyBrokerError(f"No open connection to {describe(self.uri)} for queue {self.queue!r}.")
        connection.add_callback_threadsafe(run)
        if not done.wait(timeout):
            raise SafeBunnyBrokerError(f"The consumer of queue {self.queue!r} did not answer within {timeout}s.")
        if "error" in box:
            raise box["error"]
        return box.get("value")

    def ack_through(self, generation: int, delivery_tag: int) -> bool:
        """Ack every delivery up to ``delivery_tag`` (``multiple=True``) on channel ``generation``, without
        waiting for the broker: the I/O thread writes the ack next. Call :meth:`confirm_acks` to know the
        broker has processed it.

        Returns False, acking nothing, when that channel is gone: the broker has requeued those messages
        already (a channel lost after this returns True loses the ack the same way; they come back flagged
        ``redelivered``).
        """
        connection, _, current = self._link()
        if generation != current:
            return False

        def ack() -> None:
            # on the I/O thread, which alone replaces the channel: generation and channel agree here
            _, channel, current = self._link()
            if generation != current or channel is None or not channel.is_open:
                log.warning("Batch through tag %d of queue %r could not be acked (channel replaced); the broker "
                            "redelivers those messages flagged 'redelivered'.", delivery_tag, self.queue)
                return
            channel.basic_ack(delivery_tag=delivery_tag, multiple=True)
            self.acked_tag = max(self.acked_tag, delivery_tag)
            self._unconfirmed = True

        try:
            if connection is None or not connection.is_open or not self._ready.is_set():
                return False
            connection.add_callback_threadsafe(ack)
            self.ack_asked = (generation, delivery_tag)
        except Exception as exc:
            log.warning("Could not ack queue %r through tag %d: %r; the broker will redeliver those messages.",
                        self.queue, delivery_tag, exc)
            return False
        return True

    def confirm_acks(self, timeout: float = 30.0) -> bool:
        """Wait until the broker has processed every ack sent so far: a round trip on the same channel, whose
        methods the broker handles in order. Returns True at once when no ack waits, False when the round trip
        failed (the channel is gone: its unacked messages come back). Use it before the process may end (why:
        docs/source.md, on acks). The answer also refreshes :attr:`backlog`."""

        def round_trip() -> bool:
            if not self._unconfirmed:
                return True
            channel = self._link()[1]
            if channel is None or not channel.is_open:
                return False
            self._count_ready(channel)
            self._unconfirmed = False
            return True

        try:
            return bool(self.call(round_trip, timeout=timeout))
        except Exception as exc:
            log.warning("queue %r: could not confirm the acks sent: %r; the broker redelivers what it did not "
                        "process", self.queue, exc)
            return False

    def queue_depth_estimate(self) -> int:
        """The last known number of messages ready in the queue, without a round trip to the broker (for
        progress reports on a batch's critical path); asks the I/O thread to refresh it for next time."""
        self.wake(self._refresh_depth)
        return self.backlog

    def _refresh_depth(self) -> None:
        """(I/O thread) Send a passive declare whose answer updates :attr:`backlog`; do not wait for it."""
        channel = self._link()[1]
        if self._depth_asked or channel is None or not channel.is_open:
            return
        self._depth_asked = True

        def on_declare_ok(frame: Any) -> None:
            self.backlog = int(frame.method.message_count)
            self._depth_asked = False

        channel._impl.queue_declare(self.queue, passive=True, callback=on_declare_ok)  # noqa: SLF001

    def queue_depth(self) -> int:
        """Messages ready in the queue (not counting those delivered to us); 0 if unknown."""
        channel = self._link()[1]
        with contextlib.suppress(Exception):
            self.call(lambda: self._count_ready(channel), timeout=10)
        return self.backlog

    def _count_ready(self, channel: Any) -> int:
        """(I/O thread) A passive declare on ``channel``: the broker's count of ready messages, kept in
        :attr:`backlog`. The broker answers after every method sent before it on that channel (acks included)."""
        self.backlog = int(channel.queue_declare(self.queue, passive=True).method.message_count)
        return self.backlog
