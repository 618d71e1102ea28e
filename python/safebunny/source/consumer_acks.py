"""The consumer's calls onto its I/O thread from the Spark-facing thread: acks on commit, their
confirmation, and the queue's depth. A mixin of :class:`~safebunny.source.consumer.QueueConsumer`, whose
state it uses; kept apart so the consumer's module holds the connection and the buffer."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from safebunny.errors import SafeBunnyBrokerError
from safebunny.uri import describe

__all__ = ["AcksAndDepth"]

log = logging.getLogger("safebunny.source")


class AcksAndDepth:
    """Acks and depth queries of a consumer (see :class:`~safebunny.source.consumer.QueueConsumer`)."""

    uri: str
    queue: str
    generation: int
    backlog: int
    _connection: Any
    _channel: Any
    _ready: threading.Event
    _acked_tag: int
    _ack_asked: tuple[int, int]
    _unconfirmed: bool
    _depth_asked: bool

    def _wake(self, fn: Callable[[], Any]) -> None:
        """Run ``fn`` on the I/O thread soon, without waiting for it."""
        connection = self._connection
        try:
            if connection is not None and connection.is_open:
                connection.add_callback_threadsafe(fn)
        except Exception:  # the connection is going away; the I/O loop starts over anyway
            pass

    def _call(self, fn: Callable[[], Any], timeout: float = 30.0) -> Any:
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

        connection = self._connection
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
        if generation != self.generation:
            return False

        def ack() -> None:
            # on the I/O thread, which alone replaces the channel: generation and channel agree here
            if generation != self.generation or self._channel is None or not self._channel.is_open:
                log.warning("Batch through tag %d of queue %r could not be acked (channel replaced); the broker "
                            "redelivers those messages flagged 'redelivered'.", delivery_tag, self.queue)
                return
            self._channel.basic_ack(delivery_tag=delivery_tag, multiple=True)
            self._acked_tag = max(self._acked_tag, delivery_tag)
            self._unconfirmed = True

        connection = self._connection
        try:
            if connection is None or not connection.is_open or not self._ready.is_set():
                return False
            connection.add_callback_threadsafe(ack)
            self._ack_asked = (generation, delivery_tag)
        except Exception as exc:
            log.warning("Could not ack queue %r through tag %d: %r; the broker will redeliver those messages.",
                        self.queue, delivery_tag, exc)
            return False
        return True

    def confirm_acks(self, timeout: float = 30.0) -> bool:
        """Wait until the broker has processed every ack sent so far: a round trip on the same channel, whose
        methods the broker handles in order. Returns True at once when no ack waits, False when the round trip
        failed (the channel is gone: its unacked messages come back). Use it before the process may end:
        an ack merely written to a socket is lost when the process exits with deliveries still unread on
        that socket (the kernel resets the connection). The answer also refreshes :attr:`backlog`."""

        def round_trip() -> bool:
            if not self._unconfirmed:
                return True
            channel = self._channel
            if channel is None or not channel.is_open:
                return False
            self._count_ready(channel)
            self._unconfirmed = False
            return True

        try:
            return bool(self._call(round_trip, timeout=timeout))
        except Exception as exc:
            log.warning("queue %r: could not confirm the acks sent: %r; the broker redelivers what it did not "
                        "process", self.queue, exc)
            return False

    def queue_depth_estimate(self) -> int:
        """The last known number of messages ready in the queue, without a round trip to the broker (for
        progress reports on a batch's critical path); asks the I/O thread to refresh it for next time."""
        self._wake(self._refresh_depth)
        return self.backlog

    def _refresh_depth(self) -> None:
        """(I/O thread) Send a passive declare whose answer updates :attr:`backlog`; do not wait for it."""
        channel = self._channel
        if self._depth_asked or channel is None or not channel.is_open:
            return
        self._depth_asked = True

        def on_declare_ok(frame: Any) -> None:
            self.backlog = int(frame.method.message_count)
            self._depth_asked = False

        channel._impl.queue_declare(self.queue, passive=True, callback=on_declare_ok)  # noqa: SLF001

    def queue_depth(self) -> int:
        """Messages ready in the queue (not counting those delivered to us); 0 if unknown."""
        channel = self._channel
        try:
            self._call(lambda: self._count_ready(channel), timeout=10)
        except Exception:
            pass
        return self.backlog

    def _count_ready(self, channel: Any) -> int:
        """(I/O thread) A passive declare on ``channel``: the broker's count of ready messages, kept in
        :attr:`backlog`. The broker answers after every method sent before it on that channel (acks included)."""
        self.backlog = int(channel.queue_declare(self.queue, passive=True).method.message_count)
        return self.backlog
