"""The driver side of the stream queue source, without Spark: offsets, bounds, and a stream replaced under a query.

A micro-batch between ``{"offset": a}`` and ``{"offset": b}`` reads ``[a, b)``; no journal and no ack: a
replay reads the same offsets again, and the checkpoint is the only record of progress (docs/source.md,
"Stream queues"). :class:`StreamSource` keeps one :class:`DriverConnection` between calls to find the
stream's bounds (replaced when idle for long; never pickled). Each end offset carries an *anchor*
(:data:`ANCHOR_KEY`), so that a stream deleted and re-created under a checkpoint is seen as data loss, not
read from a wrong place. :func:`read_partition` reads one ``[start, end)`` range (on executors, each with
its own connection, opened inside it and closed at its end). :func:`open_stream_client` chooses how to read:
the stream protocol when its port answers, else AMQP 0-9-1 (with a warning); ``stream_port=0`` means never the
stream protocol. A login refused on the stream port is an error, not a fallback.
"""

from __future__ import annotations

import atexit
import logging
import socket
import time
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from safebunny.amqp.connection import StreamEndpoint, close_quietly
from safebunny.errors import (
    BrokerAuthenticationError,
    QueueNotFoundError,
    SafeBunnyBrokerError,
    SafeBunnyDataLossError,
    VhostNotFoundError,
)
from safebunny.optional import available
from safebunny.streams.amqp091_client import AmqpStreamClient
from safebunny.streams.client import StreamQueueClient
from safebunny.streams.offsets import (
    ANCHOR_KEY,
    RESET_KEY,
    StreamBounds,
    anchor_offset,
    capped_end,
    from_spark_offset,
    make_anchor,
    replaced_message,
    reset_message,
    resolve_end,
    resolve_start,
    to_spark_offset,
)
from safebunny.streams.rstream_client import RStreamClient

if TYPE_CHECKING:
    from safebunny.options.source import SourceOptions

__all__ = ["StreamSource", "DriverConnection", "stream_bounds", "starting_offset", "batch_range", "read_partition",
           "open_stream_client", "stream_protocol_answers"]

log = logging.getLogger("safebunny.source")
protocol_log = logging.getLogger("safebunny.stream")
T = TypeVar("T")


def stream_protocol_answers(host: str, port: int, timeout: float = 2.0) -> bool:
    """True when something accepts TCP connections on the stream port."""
    if port <= 0:
        return False
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def open_stream_client(uri: str, stream_port: int, heartbeat: int | None = None,
                       name: str = "safebunny/stream-reader") -> StreamQueueClient:
    """A connected client whose connection is named ``name``: the stream protocol when ``stream_port`` answers, else
    AMQP 0-9-1 (``stream_port=0``: always; the warning and when a refusal is an error: docs/source.md, "Protocol")."""
    endpoint = StreamEndpoint.from_uri(uri, stream_port)
    if stream_port > 0:
        if not stream_protocol_answers(endpoint.host, stream_port):
            protocol_log.warning(
                "The stream protocol port %s:%s does not answer; reading stream queues over AMQP 0-9-1 instead "
                "(about ten times slower). Enable it with 'rabbitmq-plugins enable rabbitmq_stream', or set "
                "streamPort=0 to choose AMQP 0-9-1 and silence this warning.", endpoint.host, stream_port,
            )
        elif available("rstream.client"):
            return RStreamClient(endpoint, name).connect()
        else:
            protocol_log.warning(
                "The stream protocol port %s:%s answers, but the package 'rstream' cannot be imported; reading "
                "stream queues over AMQP 0-9-1 instead (about ten times slower). Install it with: pip install "
                "'rstream>=0.20' (a dependency of safebunny), or set streamPort=0 to silence this warning.",
                endpoint.host, stream_port,
            )
    return AmqpStreamClient(endpoint, heartbeat, name).connect()


def stream_client_name(options: SourceOptions) -> str:
    """The name of a stream source's connections, the driver-side reader's and each partition's (RabbitMQ shows
    it): the ``connectionName`` option, else ``safebunny/<queue>/consumer``."""
    return options.connection.name_or(f"safebunny/{options.queue}/consumer")


def _empty_wait_s(options: SourceOptions) -> float:
    return max(0.05, options.poll_timeout_ms / 1000.0)


class DriverConnection:
    """The driver side's client, kept between calls (opening one costs a round trip or more, TLS more).

    Between triggers nobody services its heartbeats, so a client idle for longer than ``MAX_IDLE_S`` is
    replaced rather than trusted; a broker error other than a definite answer (missing queue, refused login,
    missing vhost) is retried once on a new connection. ``opener`` opens a client (a stand-in in unit tests).
    """

    MAX_IDLE_S = 20.0

    def __init__(self, options: SourceOptions, opener: Callable[..., StreamQueueClient] = open_stream_client) -> None:
        self.options = options
        self.opener = opener
        self.client: StreamQueueClient | None = None
        self.used = 0.0
        ref = weakref.ref(self)
        atexit.register(lambda: ref() is not None and ref().close())  # Spark never calls stop()

    def close(self) -> None:
        if self.client is not None:
            close_quietly(self.client)
            self.client = None

    def _get(self) -> StreamQueueClient:
        if self.client is not None and time.monotonic() - self.used > self.MAX_IDLE_S:
            self.close()
        if self.client is None:
            o = self.options
            self.client = self.opener(o.connection.login_uri, o.stream_port, o.heartbeat_seconds, stream_client_name(o))
        return self.client

    def call(self, action: Callable[[StreamQueueClient], T]) -> T:
        try:
            result = action(self._get())
        except (QueueNotFoundError, BrokerAuthenticationError, VhostNotFoundError):
            self.close()
            raise
        except SafeBunnyBrokerError:
            self.close()
            result = action(self._get())
        self.used = time.monotonic()
        return result


def stream_bounds(options: SourceOptions, connection: DriverConnection) -> StreamBounds:
    """Ask the broker for the stream's bounds."""
    return connection.call(lambda client: client.bounds(options.queue, _empty_wait_s(options)))


def starting_offset(options: SourceOptions, connection: DriverConnection, bounds: StreamBounds) -> int:
    """Resolve ``startingOffsets`` to a stream offset on the broker, whose stream has ``bounds``."""
    spec = options.starting_offsets
    found = None
    if isinstance(spec, dict) and bounds.tail > bounds.first:  # nothing stored: no message at or after any time
        found = connection.call(lambda client: client.offset_for_timestamp(
            options.queue, spec["timestamp"], _empty_wait_s(options), stored=True))
    return resolve_start(spec, bounds, found)


def batch_range(options: SourceOptions) -> tuple[int, int]:
    """``[startingOffsets, endingOffsets)`` of a batch read, resolved on one connection opened and closed here."""
    connection = DriverConnection(options)
    try:
        bounds = stream_bounds(options, connection)
        start = starting_offset(options, connection, bounds)
        return start, resolve_end(options.ending_offsets, start, bounds.tail)
    finally:
        connection.close()


def read_partition(options: SourceOptions, start: int, end: int) -> Iterator[Any]:
    """Yield Arrow batches with exactly the stream offsets ``[start, end)`` (runs on executors)."""
    client = open_stream_client(options.connection.login_uri, options.stream_port, options.heartbeat_seconds,
                                stream_client_name(options))
    try:
        yield from client.read_range(
            options.queue, options.queue, start, end,
            include_headers=options.include_headers, fail_on_data_loss=options.fail_on_data_loss, warn=log.warning,
        )
    finally:
        client.close()


class StreamSource:
    """One query's reading of one stream queue, driver side, as its
    :class:`~safebunny.options.source.SourceOptions` say."""

    def __init__(self, options: SourceOptions, connection: DriverConnection | None = None) -> None:
        self.options = options
        self._target_end: int | None = None
        #: the stream's tail at the last :meth:`latest` (Spark's progress shows it as the latest offset)
        self.latest_tail: int | None = None
        self._connection = connection

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_connection": None}  # connections are never pickled (executors open their own)

    def driver(self) -> DriverConnection:
        if self._connection is None:
            self._connection = DriverConnection(self.options)
        return self._connection

    def initial(self) -> dict:
        return to_spark_offset(starting_offset(self.options, self.driver(), stream_bounds(self.options, self.driver())))

    def prepare_available_now(self) -> None:
        self._target_end = stream_bounds(self.options, self.driver()).tail

    def _first_message_from(self, offset: int) -> tuple[int, bytes | None] | None:
        wait = min(1.0, _empty_wait_s(self.options))
        return self.driver().call(lambda client: client.first_message_from(self.options.queue, offset, wait))

    def anchor(self, end: int) -> str | None:
        """The anchor of end offset ``end`` (see :data:`ANCHOR_KEY`), or None when there is none."""
        found = self._first_message_from(end - 1) if end > 0 else None
        return None if found is None else make_anchor(*found)

    def replaced(self, start: dict, begin: int, bounds: StreamBounds) -> str | None:
        """Why the stream behind this checkpoint offset is not the one the query read, or None."""
        spec = self.options.starting_offsets  # the startingOffsets number: beyond the tail it waits, as documented
        waits = isinstance(spec, int) and not isinstance(spec, bool) and spec == begin
        if bounds.tail < begin and not waits:
            return reset_message(self.options.queue, begin, bounds)  # offsets never go backwards
        anchor = start.get(ANCHOR_KEY) if isinstance(start, dict) else None
        at = anchor_offset(anchor)
        if at is None or at < bounds.first or begin == 0:  # no anchor, or retention removed it: cannot tell
            return None
        found = self._first_message_from(begin - 1)
        if found is None or make_anchor(*found) != anchor:
            return replaced_message(self.options.queue, begin, at)
        return None

    def latest(self, start: dict, max_messages: int | None = None, max_bytes: int | None = None,
               min_rows: int | None = None) -> dict:
        """The end offset of the next batch after ``start``: up to ``max_messages`` (and about ``max_bytes``)
        messages; with ``min_rows``, the whole tail once that many wait, else nothing (outside availableNow).
        ``start`` itself when there is nothing new."""
        begin = from_spark_offset(start)
        bounds = stream_bounds(self.options, self.driver())
        self.latest_tail = bounds.tail
        reset_from = None
        message = self.replaced(start, begin, bounds)
        if message is not None:
            # the stream was deleted and re-created since this offset was written: data loss
            if self.options.fail_on_data_loss:
                raise SafeBunnyDataLossError(message)
            log.warning("failOnDataLoss=false, SKIPPING LOST MESSAGES: %s Going on from offset %d.", message,
                        bounds.first)
            begin = reset_from = bounds.first
            if self._target_end is not None:  # an availableNow target of the old stream means nothing now
                self._target_end = bounds.tail
        tail = bounds.tail if self._target_end is None else min(bounds.tail, self._target_end)
        if min_rows is not None and self._target_end is None:
            end = tail if tail - begin >= min_rows else begin
        else:
            end = capped_end(begin, tail, max_messages=max_messages, max_bytes=max_bytes,
                             avg_message_bytes=bounds.avg_message_bytes)
        if end == begin and reset_from is None:
            return start  # nothing new: the same offset, so Spark plans no batch
        offset: dict[str, Any] = to_spark_offset(end)
        if reset_from is not None:
            offset[RESET_KEY] = reset_from
        anchor = self.anchor(end)
        if anchor is not None:
            offset[ANCHOR_KEY] = anchor
        return offset

    def stop(self) -> None:
        """Close the driver side's connection (executors close theirs at the end of each read)."""
        if self._connection is not None:
            self._connection.close()
