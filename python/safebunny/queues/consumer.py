"""A queue consumer whose connection lives on its own I/O thread.

One thread owns the connection and keeps calling ``process_data_events`` (so heartbeats flow between
Spark's calls, docs/source.md); the Spark-facing thread only takes deliveries from a buffer and asks for
acks through ``add_callback_threadsafe``. Every delivery carries the *generation* of the channel that
delivered it, and an ack for an older generation is dropped (the broker has already requeued those
messages; they come back flagged ``redelivered``). Memory is bounded by the prefetch and by a byte budget.

With a byte budget the consumer starts with a prefetch of 1, learns the body size from the first delivery and
is restarted (basic.cancel, then basic.consume on the same channel) with the prefetch the budget holds: at
most ``prefetch`` and at most ``max_buffered_bytes / average size``; should the buffer still reach the budget,
it is cancelled the same way until the take has drained the buffer to half the budget (docs/source.md).
Deliveries that arrive between a cancel and its cancel-ok are kept: nothing is rejected or requeued, so no
delivery attempt is counted on a quorum queue.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple

from safebunny.amqp.connection import StreamEndpoint, broker_error, close_quietly, open_blocking
from safebunny.amqp.frame_tap import FrameTap, install
from safebunny.errors import (
    BrokerAuthenticationError,
    QueueNotFoundError,
    SafeBunnyBrokerError,
    SafeBunnyError,
    VhostNotFoundError,
)
from safebunny.queues.byte_budget import ByteBudget
from safebunny.queues.consumer_acks import ConsumerAcks
from safebunny.queues.flow_control import FlowControl
from safebunny.queues.take_policy import BufferView, TakeWaits
from safebunny.uri import describe

__all__ = ["Delivery", "QueueConsumer", "open_connection"]

#: consecutive refusals (wrong password, vhost gone) after which reconnecting stops and the query fails
_FATAL_REFUSALS = 3

log = logging.getLogger("safebunny.source")


class Delivery(NamedTuple):
    """One message taken off the queue, with the channel generation that delivered it.

    A named tuple, not a dataclass: one is built per message on the I/O thread's hot path.
    """

    generation: int
    delivery_tag: int
    body: bytes
    properties: Any
    exchange: str
    routing_key: str
    redelivered: bool


def open_connection(uri: str, heartbeat: int | None = None, name: str = "safebunny/consumer") -> Any:
    """Open a :class:`pika.BlockingConnection` named ``name`` for consuming, or raise a clear broker error."""
    return open_blocking(uri, heartbeat=heartbeat, action="consume", name=name)


class QueueConsumer(FlowControl):
    """Consume ``queue`` with manual acks on a connection serviced by a daemon thread.

    ``prefetch`` bounds the unacked deliveries the broker hands us, so it bounds memory.
    Call :meth:`take` to get deliveries, ``acks.ack_through`` (:class:`ConsumerAcks`) to ack a prefix of them.
    """

    def __init__(self, uri: str, queue: str, prefetch: int, heartbeat: int = 30,
                 max_buffered_bytes: int | None = None, name: str | None = None) -> None:
        if not 0 <= prefetch <= 65535:
            raise ValueError(f"prefetch must be within 0..65535, but got {prefetch}")
        if max_buffered_bytes is not None and max_buffered_bytes < 1:
            raise ValueError(f"max_buffered_bytes must be >= 1 or None, but got {max_buffered_bytes}")
        self.uri = uri
        #: the connection's client-provided name (RabbitMQ shows it)
        self.name = name or f"safebunny/{queue}/consumer"
        self.queue = queue
        self.prefetch = prefetch
        self.heartbeat = heartbeat
        self._last_tag = 0  # last delivery tag of the current channel
        self._on_message: Callable[..., None] | None = None
        self._accept: Callable[..., None] | None = None
        self._tap: FrameTap | None = None  # decodes deliveries from the socket's bytes
        self.generation = 0
        self._buffer: deque[Delivery] = deque()
        self._want = 0  # buffer length the Spark thread waits for; 0 when nobody waits
        self._cond = threading.Condition()
        self._connection: Any = None
        self._channel: Any = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._ready = threading.Event()
        self._cancelled = threading.Event()  # the broker cancelled our consumer (queue deleted)
        self._suspended = threading.Event()  # paused by a circuit breaker: no connection, nothing buffered
        self._fatal: BaseException | None = None
        self.last_error: str | None = None
        #: acks on commit and the queue's depth, sent onto the I/O thread
        self.acks = ConsumerAcks(uri, queue, self._ready, lambda: (self._connection, self._channel, self.generation))
        self.max_buffered_bytes = max_buffered_bytes
        #: the prefetch of the current consumer: ``prefetch``, or what ``max_buffered_bytes`` holds
        self.effective_prefetch = prefetch
        self._consumer_tag: str | None = None  # the consumer a pause cancels
        self.budget = ByteBudget(max_buffered_bytes, prefetch)  #: body bytes in and out, the prefetch they hold
        self.paused = False  # consumer cancelled because the buffer reached the byte budget
        self._cancelling = False  # basic.cancel sent, cancel-ok not yet received
        self._calibrating = False  # consuming with prefetch 1 to learn the body size
        self.restarted = False  # the consumer was restarted and has not delivered since
        self.first_arrived_at: float | None = None  #: when the last take's first message arrived (monotonic)
        self._head_arrived = 0.0  # when the buffer's head arrived (the I/O thread sets it when the buffer was empty)
        #: channels the broker closed because a delivery outlived its consumer_timeout
        self.timeouts = 0

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> QueueConsumer:
        """Connect, start consuming, and return once the consumer is registered."""
        self._connect()  # in the caller's thread, so errors surface to it
        self._thread = threading.Thread(target=self._run, name=f"safebunny-io-{self.queue}", daemon=True)
        self._thread.start()
        return self

    def _connect(self) -> None:
        import pika.exceptions as px

        connection = open_connection(self.uri, self.heartbeat, self.name)
        channel = connection.channel()
        try:
            declared = channel.queue_declare(self.queue, passive=True)
        except px.ChannelClosedByBroker as exc:
            connection.close()
            raise broker_error(exc, StreamEndpoint.from_uri(self.uri), "consume", self.queue) from None
        self.generation += 1
        generation = self.generation

        buffer, new, counts = self._buffer, tuple.__new__, self.budget  # a Delivery without its Python __new__
        budget = self.max_buffered_bytes

        def accept(tag: int, redelivered: bool, exchange: Any, routing_key: Any, properties: Any,
                   body: bytes) -> None:
            if tag <= self._last_tag:  # never: an ack through a later tag would ack this one unread
                raise SafeBunnyError(f"Deliveries of queue {self.queue!r} arrived out of order (tag {tag} after "
                                     f"{self._last_tag}); reconnecting, so that the broker redelivers them.")
            if not buffer:
                self._head_arrived = time.monotonic()
            buffer.append(new(Delivery, (generation, tag, body, properties, exchange, routing_key, redelivered)))
            self._last_tag = tag
            self.restarted = False
            counts.in_count += 1
            counts.in_bytes += len(body)
            # inline, not counts.buffered(): this runs once per message
            if budget is not None and not self.paused and (
                    self._calibrating or counts.in_bytes - counts.out_bytes >= budget):
                self._pause()
            # wake the Spark thread only when it waits for this many (not once per message)
            want = self._want
            if want and len(buffer) >= want:
                with self._cond:
                    self._cond.notify_all()

        def on_message(ch: Any, method: Any, properties: Any, body: bytes) -> None:
            # pika's path: deliveries decoded before the frame tap is installed, or left to pika by it
            accept(method.delivery_tag, method.redelivered, method.exchange, method.routing_key, properties, body)

        self._on_message = on_message
        self._accept = accept
        channel.add_on_cancel_callback(lambda _frame: self._cancelled.set())
        self._connection, self._channel = connection, channel
        self._last_tag = 0
        self.acks.new_channel(declared.method.message_count)
        # a new channel: not paused; the prefetch for its consumer, 1 to learn the body size
        self.paused = self._cancelling = self.restarted = False
        self.effective_prefetch = counts.prefetch_for_next()
        self._calibrating = budget is not None and not counts.in_count
        self._consume()
        self._ready.set()

    def _consume(self) -> None:
        """(I/O thread) Start the consumer with the current effective prefetch."""
        channel = self._channel
        channel.basic_qos(prefetch_count=self.effective_prefetch)
        tag = channel.basic_consume(self.queue, self._on_message, auto_ack=False)
        # Deliveries go straight from pika's frame decoder to on_message, not through BlockingChannel's event
        # queue (pika calls channel._consumers[tag]): about 15% less CPU per message on this path. Deliveries
        # that arrived with the consume-ok wait in that queue: hand them over now, before any later one
        # arrives directly, so that the buffer stays in delivery-tag order (acks are multiple=True).
        channel._impl._consumers[tag] = self._on_message  # noqa: SLF001
        channel._dispatch_events()  # noqa: SLF001
        self._consumer_tag = tag
        if self._tap is None or self._tap.impl is not channel.connection._impl:  # noqa: SLF001
            # from now on deliveries are decoded from the socket's bytes (frame_tap), in arrival order
            # after those handed over above; other frames still go through pika
            self._tap = install(channel.connection._impl, channel.channel_number, self._accept)  # noqa: SLF001

    def _run(self) -> None:
        import pika.exceptions as px

        backoff = 0.5
        refused = 0
        while not self._stopping.is_set():
            try:
                if self._suspended.is_set():
                    if self._connection is not None:
                        self._drop_connection()
                    self._stopping.wait(0.2)
                    continue
                if self._connection is None or self._connection.is_closed:
                    self._clear_buffer()
                    self._connect()
                    log.warning("Reconnected to %s; consuming %r again (channel generation %d).",
                                describe(self.uri), self.queue, self.generation)
                self._connection.process_data_events(time_limit=0.2)
                if self.paused:
                    self.maybe_resume()
                channel = self._channel
                if channel is not None and channel.is_closed:
                    # the broker closed the channel but not the connection (consumer_timeout, a
                    # deleted queue): deliveries stopped, so treat it as a loss and start over
                    raise getattr(channel, "_closing_reason", None) or px.ChannelClosed(0, "channel closed")
                if self._cancelled.is_set():
                    self._cancelled.clear()
                    raise SafeBunnyBrokerError(f"The broker cancelled the consumer of queue {self.queue!r}.")
                backoff = 0.5
                refused = 0
            except QueueNotFoundError as exc:  # the queue is gone: retrying cannot help, say so
                self._fail(exc)
                break
            except (px.AMQPError, OSError, SafeBunnyBrokerError) as exc:
                if isinstance(exc, (BrokerAuthenticationError, VhostNotFoundError)):
                    refused += 1
                    if refused >= _FATAL_REFUSALS:  # a revoked user or a deleted vhost does not come back by retrying
                        self._fail(exc)
                        break
                self._note_loss(exc)
                if self._stopping.wait(backoff):
                    break
                backoff = min(backoff * 2, 10.0)
            except BaseException as exc:  # a bug: surface it to the Spark thread
                self._fail(exc)
                return
        self._drop_connection()

    def _fail(self, exc: BaseException) -> None:
        """Stop consuming for good: the Spark thread's next ``take`` raises ``exc`` (woken if it waits)."""
        self._fatal = exc
        with self._cond:
            self._cond.notify_all()

    def _note_loss(self, exc: BaseException) -> None:
        code = getattr(exc, "reply_code", None)
        text = getattr(exc, "reply_text", "") or str(exc)
        if code == 406 and "timeout" in text.lower():
            self.timeouts += 1
            message = (
                f"The broker closed the channel of queue {self.queue!r} because a delivery stayed unacked "
                f"longer than its consumer_timeout ({text}). Those messages are requeued and will be "
                "read again flagged 'redelivered'. Make batches finish faster or raise consumer_timeout."
            )
        else:
            message = (f"Lost the connection to {describe(self.uri)} while consuming {self.queue!r}: {text!r}; "
                       "reconnecting.")
        self.last_error = message
        log.warning(message)
        self._drop_connection()

    def _clear_buffer(self) -> None:
        with self._cond:
            self._buffer.clear()
            self.budget.out_bytes = self.budget.in_bytes

    def _drop_connection(self) -> None:
        self._clear_buffer()  # deliveries of a dead channel can never be acked: never journal them
        self._ready.clear()
        if self._connection is not None and self._connection.is_open:
            close_quietly(self._connection)
        self._connection = None

    def suspend(self) -> None:
        """Stop consuming and drop the buffer (the broker requeues it); only when no taken delivery awaits its ack."""
        self._suspended.set()

    def resume(self) -> None:
        """Consume again after :meth:`suspend` (a new channel generation)."""
        self._suspended.clear()

    @property
    def suspended(self) -> bool:
        return self._suspended.is_set()

    @property
    def ready(self) -> bool:
        """Connected and consuming (False while reconnecting or suspended)."""
        return self._ready.is_set()

    def await_connection(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for a lost connection to come back; raise a clear error if it does
        not (an outage must fail the query, not end an availableNow run "successfully")."""
        if self._ready.wait(timeout):
            return
        self._check()
        raise SafeBunnyBrokerError(
            f"Lost the connection to {describe(self.uri)} for queue {self.queue!r} and could not reconnect within "
            f"{timeout:g} s (last error: {self.last_error}). The query stops rather than report a run complete "
            "while messages wait; restart it when the broker is reachable (option 'reconnectTimeoutMs' sets the wait).")

    def stop(self) -> None:
        """Stop the I/O thread and close the connection (unacked messages are requeued)."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._clear_buffer()

    # ----------------------------------------------------------------- Spark-facing
    def _check(self) -> None:
        if isinstance(self._fatal, SafeBunnyError):
            raise self._fatal
        if self._fatal is not None:
            raise SafeBunnyError(f"The consumer thread of queue {self.queue!r} died: {self._fatal!r}")

    def take(
        self, max_messages: int, max_bytes: int | None, first_wait: float, linger: float = 0.05,
        fill_wait: float = 0.0,
    ) -> list[Delivery]:
        """Take up to ``max_messages`` deliveries (and about ``max_bytes`` of bodies), waiting as
        :class:`~safebunny.queues.take_policy.TakeWaits` says (``first_wait``, ``linger``, ``fill_wait``:
        docs/source.md, "How long a take waits"). Never blocks the I/O thread.
        """
        self._check()
        waits = TakeWaits(max_messages, max_bytes, first_wait, linger, fill_wait, time.monotonic())
        taken: list[Delivery] = []
        size = 0
        with self._cond:
            while True:
                now = time.monotonic()
                view = BufferView(len(self._buffer), self.paused, self.can_grow(), self.restarted, self.acks.backlog,
                                  self._fatal is not None)
                until = waits.until(view, now)
                if until is None:
                    break
                self._want = waits.want  # the I/O thread wakes us when the buffer reaches it
                self._cond.wait(timeout=max(0.0, until - now))
            self._want = 0
            dropped = 0
            self.first_arrived_at = self._head_arrived if self._buffer else None
            while self._buffer and len(taken) < max_messages:
                head = self._buffer[0]
                if head.generation != self.generation:
                    self._buffer.popleft()
                    dropped += len(head.body)
                    continue
                if max_bytes is not None and taken and size + len(head.body) > max_bytes:
                    break
                taken.append(self._buffer.popleft())
                size += len(head.body)
            if self._buffer:  # the rest waits for the next take: count it from now
                self._head_arrived = time.monotonic()
            self.budget.out_bytes += size + dropped
        if self.paused:
            self.acks.wake(self.maybe_resume)
        self._check()
        return taken

    def buffered(self) -> int:
        with self._cond:
            return len(self._buffer)
