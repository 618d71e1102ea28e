"""Publishing with confirms, ``mandatory`` and an in-flight window (``ConfirmingPublisher``).

Nothing counts as written until the broker has confirmed it and has not returned it. ``publish`` sends
without waiting (up to ``max_in_flight`` unconfirmed), :meth:`ConfirmingPublisher.flush` waits for the rest;
a nack, a return, a broker's close or a confirm timeout raises :class:`~safebunny.errors.SafeBunnyPublishError`
and leaves the publisher closed (docs/sink.md, with an example). The pool (:func:`acquire`, :func:`release`) keeps
one open publisher per URI and settings in the process, so the tasks of a reused Python worker share it; all are
closed at exit.
"""

from __future__ import annotations

import atexit
import contextlib
import re
import threading
import time
from dataclasses import dataclass
from itertools import takewhile
from typing import Any

from safebunny.amqp.connection import StreamEndpoint, broker_error, client_properties
from safebunny.errors import SafeBunnyBrokerError, SafeBunnyPublishError
from safebunny.uri import connection_parameters, describe

__all__ = ["ConfirmingPublisher", "PublishCounts", "acquire", "release", "close_all"]

# Send buffered frames to the socket after this many publishes even if the window has room.
_PUMP_EVERY = 128
# The exchange a channel error names: "NOT_FOUND - no exchange 'x' in vhost '/'", "ACCESS_REFUSED - access to
# exchange 'x' in vhost '/' refused for user 'u'".
_EXCHANGE_IN_REPLY = re.compile(r"exchange '(?P<name>(?:[^']|'(?! in vhost))*)' in vhost")


@dataclass
class PublishCounts:
    """Messages published, confirmed (acked and routed), returned (unroutable) and nacked."""

    published: int = 0
    confirmed: int = 0
    returned: int = 0
    nacked: int = 0


class ConfirmingPublisher:
    """A confirming AMQP publisher on one connection and one channel (see the module docstring). ``uri``:
    ``amqp://`` or ``amqps://`` (its password never appears in errors); ``max_in_flight``: unconfirmed messages
    allowed before :meth:`publish` waits; ``confirm_timeout``: seconds a message may stay unconfirmed before the
    publish fails; ``heartbeat``: AMQP heartbeat in seconds (0 disables); ``connect_timeout``: seconds that
    opening the connection and channel may take; ``name``: the connection's client-provided name (RabbitMQ shows
    it)."""

    def __init__(self, uri: str, *, max_in_flight: int = 1000, confirm_timeout: float = 30.0,
                 heartbeat: int = 30, connect_timeout: float = 10.0, name: str = "safebunny/publisher") -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, but got {max_in_flight!r}")
        self.uri = uri
        self.name = name
        self.max_in_flight = max_in_flight
        self.confirm_timeout = confirm_timeout
        self.heartbeat = heartbeat
        self.connect_timeout = connect_timeout
        self.counts = PublishCounts()
        self.last_used = 0.0
        self._conn: Any = None
        self._channel: Any = None
        self._next_tag = 1
        # delivery tag -> (exchange, routing key, message id, publish time)
        self._pending: dict[int, tuple[str, str, str | None, float]] = {}
        self._returned_tags: set[int] = set()
        self._error: SafeBunnyBrokerError | None = None
        self._blocked: str | None = None
        self._since_pump = 0

    # -- lifecycle ---------------------------------------------------------------------
    def open(self) -> ConfirmingPublisher:
        """Connect, open a channel and put it in confirm mode."""
        import pika

        params = connection_parameters(
            self.uri, heartbeat=self.heartbeat, connection_attempts=1, socket_timeout=self.connect_timeout,
            blocked_connection_timeout=None,
            client_properties=client_properties(self.name))
        state: dict[str, Any] = {}

        def on_open(conn: Any) -> None:
            conn.channel(on_open_callback=lambda ch: ch.confirm_delivery(
                ack_nack_callback=self._on_confirm, callback=lambda _frame: state.setdefault("ready", ch)))

        def on_open_error(_conn: Any, exc: BaseException) -> None:
            state["error"] = exc

        self._conn = pika.SelectConnection(params, on_open_callback=on_open,
                                           on_open_error_callback=on_open_error,
                                           on_close_callback=self._on_connection_closed)
        self._conn.ioloop.activate_poller()  # we drive the loop ourselves, as pika's BlockingConnection does
        self._conn.add_on_connection_blocked_callback(self._on_blocked)
        self._conn.add_on_connection_unblocked_callback(self._on_unblocked)
        deadline = time.monotonic() + self.connect_timeout
        while "ready" not in state:
            if "error" in state or self._error is not None:
                error = state.get("error") or self._error
                self._teardown()
                raise broker_error(error, StreamEndpoint.from_uri(self.uri), "open a publishing connection") \
                    from None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._teardown()
                raise SafeBunnyBrokerError(
                    f"Connecting to the broker at {describe(self.uri)} took longer than {self.connect_timeout:g} s. "
                    "Check the 'uri' option, the network, or raise 'connectTimeoutMs'.")
            self._pump(remaining)
        self._channel = state["ready"]
        self._channel.add_on_return_callback(self._on_return)
        self._channel.add_on_close_callback(self._on_channel_closed)
        self.last_used = time.monotonic()
        return self

    @property
    def is_open(self) -> bool:
        """True while the connection and channel are open and nothing has failed."""
        return (self._error is None and self._conn is not None and self._conn.is_open
                and self._channel is not None and self._channel.is_open)

    def close(self) -> None:
        """Close the connection (waits briefly for the close handshake)."""
        if self._conn is None:
            return
        with contextlib.suppress(Exception):  # closing is best effort
            if self._conn.is_open:
                self._conn.close()
            deadline = time.monotonic() + 2.0
            while not self._conn.is_closed and time.monotonic() < deadline:
                self._pump(0.2)
        self._teardown()

    def _teardown(self) -> None:
        conn, self._conn, self._channel = self._conn, None, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.ioloop.deactivate_poller()
                conn.ioloop.close()

    def __enter__(self) -> ConfirmingPublisher:
        return self if self._conn is not None else self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- publishing --------------------------------------------------------------------
    def publish(self, exchange: str, routing_key: str, body: bytes, properties: Any,
                message_id: str | None = None) -> None:
        """Send one message with ``mandatory=True``; waits only while the window is full.

        ``properties`` is a ``pika.BasicProperties``. Raises
        :class:`~safebunny.errors.SafeBunnyPublishError` as soon as any earlier message of
        this publisher was nacked or returned, or timed out.
        """
        if self._error is not None:
            raise self._error
        if self._channel is None:
            raise SafeBunnyBrokerError("The publisher is not open: call open() first.")
        while len(self._pending) >= self.max_in_flight:
            self._wait_some()
        try:
            self._channel.basic_publish(exchange, routing_key, body, properties, mandatory=True)
        except Exception as exc:  # pika's wrong-state errors when the broker went away meanwhile
            self._pump(0)
            if self._error is None:
                self._error = SafeBunnyPublishError(
                    f"Could not publish to exchange {exchange!r} with routing key {routing_key!r} on "
                    f"{describe(self.uri)}: {exc!r}. The task fails so that Spark retries it.")
            self._check()
            raise self._error from exc
        tag = self._next_tag
        self._next_tag = tag + 1
        self._pending[tag] = (exchange, routing_key, message_id or getattr(properties, "message_id", None),
                              time.monotonic())
        self.counts.published += 1
        self._since_pump += 1
        if self._since_pump >= _PUMP_EVERY:
            self._since_pump = 0
            self._pump(0)
            self._check()

    def flush(self) -> PublishCounts:
        """Wait until every published message is confirmed (each within the confirm timeout); return the counts."""
        while self._pending:
            self._wait_some()
        self._check()
        self.last_used = time.monotonic()
        return self.counts

    def service(self) -> None:
        """Process pending I/O (heartbeats, a close by the broker) without blocking."""
        self._pump(0)

    # -- internals ---------------------------------------------------------------------
    def _pump(self, timeout: float) -> None:
        """Run the I/O loop once: send buffered frames, handle what arrived, wait at most ``timeout``."""
        conn = self._conn
        if conn is None:
            return
        _coalesce(conn)
        ioloop = conn.ioloop
        handle = ioloop.call_later(max(timeout, 0.0), lambda: None)
        try:
            ioloop.poll()
            ioloop.process_timeouts()
        finally:
            ioloop.remove_timeout(handle)

    def _wait_some(self) -> None:
        oldest = next(iter(self._pending.values()))
        remaining = oldest[3] + self.confirm_timeout - time.monotonic()
        if remaining <= 0:
            blocked = f" The broker blocked this connection ({self._blocked})." if self._blocked else ""
            self._error = SafeBunnyPublishError(
                f"The broker did not confirm message {oldest[2]!r} to exchange {oldest[0]!r} with routing key "
                f"{oldest[1]!r} within {self.confirm_timeout:g} s ({len(self._pending)} messages unconfirmed)."
                f"{blocked} The task fails so that Spark retries it with the same ids; check the broker's health or "
                "raise 'confirmTimeoutMs'.")
            self._check()
        self._since_pump = 0
        self._pump(min(remaining, 1.0))
        self._check()
        if self._conn is None and self._pending:
            raise SafeBunnyBrokerError("The publisher was closed while messages were unconfirmed.")

    def _check(self) -> None:
        if self._error is not None:
            error = self._error
            self._teardown()
            raise error

    def _on_confirm(self, frame: Any) -> None:
        method = frame.method
        nack = method.NAME == "Basic.Nack"
        tag = method.delivery_tag
        # multiple: every pending tag up to this one (insertion order is tag order)
        tags = list(takewhile(lambda t: t <= tag, self._pending)) if method.multiple else [tag]
        for t in tags:
            info = self._pending.pop(t, None)
            if info is None:
                continue
            if nack:
                self.counts.nacked += 1
                if self._error is None:
                    self._error = SafeBunnyPublishError(
                        f"The broker nacked message {info[2]!r} to exchange {info[0]!r} with routing key "
                        f"{info[1]!r}: it did not take responsibility for it (a queue it routes to may be "
                        "full with x-overflow=reject-publish, or the broker hit an internal error). The task "
                        "fails so that Spark retries it with the same ids.")
            elif t in self._returned_tags:
                self._returned_tags.discard(t)
            else:
                self.counts.confirmed += 1

    def _on_return(self, _channel: Any, method: Any, properties: Any, _body: bytes) -> None:
        self.counts.returned += 1
        mid = getattr(properties, "message_id", None)
        # A return comes before the ack of the same message: mark the oldest pending message that
        # matches (message id, exchange and routing key; else the message id alone, else exchange and
        # routing key) so that its ack is not counted. Two rows may carry one user message id.
        target = (method.exchange, method.routing_key)
        open_tags = [(tag, info) for tag, info in self._pending.items() if tag not in self._returned_tags]
        for match in (lambda i: i[2] == mid and (i[0], i[1]) == target, lambda i: i[2] == mid,
                      lambda i: (i[0], i[1]) == target):
            candidates = [tag for tag, info in open_tags if match(info)]
            if candidates:
                self._returned_tags.add(candidates[0])
                break
        if self._error is None:
            self._error = SafeBunnyPublishError(
                f"Message {mid!r} to exchange {method.exchange!r} with routing key {method.routing_key!r} was "
                f"returned as unroutable ({method.reply_code} {method.reply_text}): no queue is bound for that "
                "routing key. Bind a queue to the exchange for it, or fix the 'routingKey' option or column.",
                reply_code=method.reply_code)

    def _on_channel_closed(self, _channel: Any, reason: Any) -> None:
        import pika.exceptions

        if self._error is None and isinstance(reason, pika.exceptions.ChannelClosedByBroker):
            code = getattr(reason, "reply_code", None)
            text = str(getattr(reason, "reply_text", reason))
            advice = (" Declare the exchange before writing (or fix the 'exchange' option or column)."
                      if code == 404 else "")
            self._error = SafeBunnyPublishError(
                f"The broker closed the channel while publishing {self._culprit(text)}: {code} {text}.{advice}",
                reply_code=code)

    def _culprit(self, reply_text: str) -> str:
        """Which message a channel error is about: publishing is pipelined, so not the last one sent.

        The broker handles a channel's publishes in order and stops at the first that fails, so
        the culprit is the oldest unconfirmed message to the exchange its reply names.
        """
        named = _EXCHANGE_IN_REPLY.search(reply_text)
        if named is not None:
            exchange = named["name"]
            for _ex, routing_key, mid, _t in (i for i in self._pending.values() if i[0] == exchange):
                return f"message {mid!r} to exchange {exchange!r} with routing key {routing_key!r}"
            return f"to exchange {exchange!r}"
        return self._unconfirmed()

    def _unconfirmed(self) -> str:
        if not self._pending:
            return "(no message was unconfirmed)"
        exchange, routing_key, mid, _t = next(iter(self._pending.values()))
        return (f"({len(self._pending)} messages unconfirmed; the oldest is {mid!r} to exchange {exchange!r} "
                f"with routing key {routing_key!r})")

    def _on_connection_closed(self, _conn: Any, reason: Any) -> None:
        import pika.exceptions

        if self._error is None and not isinstance(reason, pika.exceptions.ConnectionClosedByClient):
            self._error = SafeBunnyPublishError(
                f"The connection to {describe(self.uri)} closed while publishing {self._unconfirmed()}: "
                f"{reason!s}. The task fails so that Spark retries it.",
                reply_code=getattr(reason, "reply_code", None))

    def _on_blocked(self, _conn: Any, frame: Any) -> None:
        self._blocked = getattr(frame.method, "reason", "resource alarm")

    def _on_unblocked(self, _conn: Any, _frame: Any) -> None:
        self._blocked = None


def _coalesce(conn: Any) -> None:
    """Join pika's queued output frames into one chunk, so one ``send`` carries many messages.

    pika sends every frame (three per message) with its own system call; joining them first
    halves the publisher's CPU time per message (docs/performance.md). This reaches into pika's transport
    (``_transport._tx_buffers``, a deque of bytes in pika 1.x; the byte count it keeps is
    unchanged) and does nothing when that attribute is missing.
    """
    buffers = getattr(getattr(conn, "_transport", None), "_tx_buffers", None)
    if buffers is not None and len(buffers) > 1:
        joined = b"".join(buffers)
        buffers.clear()
        buffers.append(joined)


_POOL: dict[tuple[Any, ...], list[ConfirmingPublisher]] = {}
_LOCK = threading.Lock()


def acquire(uri: str, *, max_in_flight: int = 1000, confirm_timeout: float = 30.0, heartbeat: int = 30,
            connect_timeout: float = 10.0, name: str = "safebunny/publisher") -> ConfirmingPublisher:
    """An open publisher for these settings: a cached one that is still healthy, or a new one.

    A cached publisher idle for longer than ``heartbeat`` seconds is closed and replaced
    (nobody serviced its heartbeats meanwhile). Give it back with :func:`release`.
    """
    key = (uri, max_in_flight, confirm_timeout, heartbeat, connect_timeout, name)
    while True:
        with _LOCK:
            cached = _POOL.get(key)
            publisher = cached.pop() if cached else None
        if publisher is None:
            break
        idle = time.monotonic() - publisher.last_used
        if heartbeat and idle > heartbeat:
            publisher.close()
            continue
        try:
            publisher.service()
        except Exception:  # noqa: BLE001 - a dead cached connection is replaced
            publisher.close()
            continue
        if publisher.is_open:
            publisher.counts = PublishCounts()  # this use's counts only
            return publisher
        publisher.close()
    return ConfirmingPublisher(uri, max_in_flight=max_in_flight, confirm_timeout=confirm_timeout, heartbeat=heartbeat,
                               connect_timeout=connect_timeout, name=name).open()


def release(publisher: ConfirmingPublisher, healthy: bool = True) -> None:
    """Return ``publisher`` to the cache, or close it when ``healthy`` is false or it failed."""
    if not healthy or not publisher.is_open or publisher._pending:
        publisher.close()
        return
    publisher.last_used = time.monotonic()
    key = (publisher.uri, publisher.max_in_flight, publisher.confirm_timeout, publisher.heartbeat,
           publisher.connect_timeout, publisher.name)
    with _LOCK:
        _POOL.setdefault(key, []).append(publisher)


def close_all() -> None:
    """Close every cached publisher (runs at interpreter exit)."""
    with _LOCK:
        publishers = [p for ps in _POOL.values() for p in ps]
        _POOL.clear()
    for publisher in publishers:
        publisher.close()


atexit.register(close_all)
