"""Stream queues over the stream protocol (plugin ``rabbitmq_stream``) with the ``rstream`` package.

rstream is asyncio: each client runs its own private event loop, driven step by step, so a read can be a
plain generator of Arrow batches. Stored messages are decoded by :mod:`safebunny.streams.amqp10`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from safebunny.amqp.connection import CONNECT_TIMEOUT_S, StreamEndpoint, broker_error
from safebunny.amqp.message_rows import AmqpColumns
from safebunny.errors import SafeBunnyBrokerError
from safebunny.optional import require
from safebunny.streams.amqp10 import append_amqp10_many
from safebunny.streams.client import (
    BATCH_ROWS,
    READ_IDLE_TIMEOUT_S,
    REQUEST_TIMEOUT_S,
    SUBSCRIPTION_IDS,
    StreamQueueClient,
    idle_error,
)
from safebunny.streams.offsets import StreamBounds, check_data_loss

__all__ = ["RStreamClient"]

#: a loop that ran this recently has seen what arrived on the socket: no need to run it again before checking
_LOOP_RECENT_S = 0.5


class _Subscription:
    """One rstream subscription whose chunks arrive on an asyncio queue."""

    def __init__(self, client: Any, subscription_id: int) -> None:
        self.client = client
        self.id = subscription_id
        self.chunks: asyncio.Queue[Any] = asyncio.Queue()

    async def _on_deliver(self, frame: Any) -> None:
        if frame.subscription_id == self.id:
            await self.chunks.put(frame)

    async def start(self, stream: str, offset_type: Any, offset: int | None, credit: int) -> None:
        from rstream import schema

        self.client.add_handler(schema.Deliver, self._on_deliver, name=str(self.id))
        await self.client.run_queue_listener_task(self.id, self._on_deliver)
        await self.client.subscribe(stream, self.id, schema.OffsetSpec.from_params(offset_type, offset),
                                    initial_credit=credit)

    async def next_chunk(self, timeout: float) -> Any:
        try:
            return await asyncio.wait_for(self.chunks.get(), timeout)
        except asyncio.TimeoutError:
            return None

    async def stop(self) -> bool:
        """Unsubscribe and drop the handlers; True when the broker confirmed (the id may be reused)."""
        from rstream import schema

        try:
            await asyncio.wait_for(self.client.unsubscribe(self.id), 5)
            confirmed = True
        except Exception:
            confirmed = False
        self.client.remove_handler(schema.Deliver, str(self.id))
        # rstream keeps one delivery task and queue per subscription id until told otherwise
        with contextlib.suppress(Exception):
            await self.client.stop_queue_listener_task(subscriber_id=self.id)
            self.client._frames.pop(self.id, None)
        return confirmed


def _close_client(loop: asyncio.AbstractEventLoop, client: Any) -> None:
    """Close an rstream ``client``: say goodbye (2 s at most) and drop the socket.

    rstream 1.1.1's ``Client.close`` always sleeps 0.2 s, which every partition's read and
    every driver-side look-up would pay; this does the same work without the sleep, and
    falls back to ``Client.close`` if rstream's internals differ.
    """
    from rstream import schema

    async def fast_close() -> None:
        if client.is_connection_alive() and client.is_started:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(client.sync_request(
                    schema.Close(client._corr_id_seq.next(), code=1, reason="OK"),
                    resp_schema=schema.CloseResponse), 2)
        client._is_not_closed = False
        tasks = list(client._tasks.values())
        client._tasks.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if client._conn is not None:
            await client._conn.close()
            client._conn = None

    with contextlib.suppress(Exception):
        try:
            loop.run_until_complete(asyncio.wait_for(fast_close(), 5))
        except AttributeError:
            with contextlib.suppress(Exception):
                loop.run_until_complete(asyncio.wait_for(client.close(), 5))


def _shutdown(loop: asyncio.AbstractEventLoop, holder: list[Any]) -> None:
    """Close the client in ``holder`` and the loop (idempotent; also run by the finalizer)."""
    if loop.is_closed():
        return
    try:
        if holder[0] is not None:
            _close_client(loop, holder[0])
            holder[0] = None
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    except Exception:
        pass
    finally:
        loop.close()


class RStreamClient(StreamQueueClient):
    """The stream protocol client (rstream), with a private event loop."""

    protocol = "stream"

    def __init__(self, endpoint: StreamEndpoint, name: str = "safebunny/stream-reader") -> None:
        self.endpoint = endpoint
        self.name = name  # the connection's client-provided name (RabbitMQ shows it)
        self._loop = asyncio.new_event_loop()
        self._holder: list[Any] = [None]  # the rstream Client, shared with the finalizer
        self._next_id = 0  # the last subscription id handed out
        self._ids_in_use: set[int] = set()
        self.connection_lost = False
        self._loop_ran_at = 0.0  # when the private loop last ran (monotonic seconds)
        # a client dropped without close() (Spark never calls the reader's stop()) still closes
        self._finalizer = weakref.finalize(self, _shutdown, self._loop, self._holder)

    @property
    def _client(self) -> Any:
        return self._holder[0]

    def _run(self, coro: Any, timeout: float = REQUEST_TIMEOUT_S) -> Any:
        """Run ``coro`` on the private loop; a dead connection surfaces as a timeout, not a hang."""
        try:
            return self._loop.run_until_complete(asyncio.wait_for(coro, timeout))
        finally:
            self._loop_ran_at = time.monotonic()

    def connect(self) -> RStreamClient:
        """Open and authenticate the connection (raises a clear :class:`SafeBunnyBrokerError`).

        Without rstream installed it raises :class:`SafeBunnyMissingDependencyError` saying what to install.
        """
        Client = require("rstream.client", "read stream queues over the stream protocol").Client  # noqa: N806

        ep = self.endpoint
        context = ssl.create_default_context() if ep.tls else None
        self.connection_lost = False
        lost = weakref.ref(self)

        def on_closed(_info: Any) -> None:  # instead of rstream's logged traceback
            me = lost()
            if me is not None:
                me.connection_lost = True

        client = Client(ep.host, ep.stream_port, ssl_context=context, frame_max=1024 * 1024, heartbeat=60,
                        connection_name=self.name, connection_closed_handler=on_closed)

        async def open_() -> None:
            await asyncio.wait_for(client.start(), CONNECT_TIMEOUT_S)
            await asyncio.wait_for(client.authenticate(ep.vhost, ep.username, ep.password), CONNECT_TIMEOUT_S)

        try:
            self._run(open_())
        except Exception as exc:
            _close_client(self._loop, client)
            raise broker_error(exc, ep, "open a stream-protocol connection", stream_protocol=True) from None
        self._holder[0] = client
        return self

    def close(self) -> None:
        self._finalizer()

    def stream_exists(self, stream: str) -> bool:
        """True when ``stream`` is a stream queue in the vhost (False for other queues or none)."""
        try:
            return bool(self._run(self._client.stream_exists(stream)))
        except Exception as exc:
            raise broker_error(exc, self.endpoint, f"look up stream {stream!r}", stream, True) from None

    def _check_alive(self) -> None:
        """Fail fast on a connection the broker closed while the loop was idle (between triggers). After an idle
        loop it first runs the loop briefly, so that the listener sees an EOF that arrived meanwhile; right after
        the loop ran (a ``latestOffset`` subscribes three or four times in a row) the flags alone are checked:
        that brief run each time was most of a ``latestOffset`` call (docs/performance.md, "Figures the code's
        docstrings refer to")."""
        if time.monotonic() - self._loop_ran_at > _LOOP_RECENT_S:
            self._run(asyncio.sleep(0.005))  # let the listener see an EOF that arrived meanwhile
        if self.connection_lost or self._client is None or not self._client.is_connection_alive():
            raise SafeBunnyBrokerError(f"The stream-protocol connection to {self.endpoint.where(True)} was closed.")

    def _allocate_id(self) -> int:
        """A subscription id not in use on this connection.

        The protocol's subscription id is one byte, and the driver side keeps its connection
        across triggers (two subscriptions per trigger), so ids are recycled once the broker
        has confirmed the unsubscribe; an id whose unsubscribe was not confirmed stays taken.
        """
        for step in range(1, SUBSCRIPTION_IDS + 1):
            candidate = (self._next_id + step) % SUBSCRIPTION_IDS
            if candidate not in self._ids_in_use:
                self._next_id = candidate
                self._ids_in_use.add(candidate)
                return candidate
        raise SafeBunnyBrokerError(
            f"All {SUBSCRIPTION_IDS} stream-protocol subscription ids of the connection to "
            f"{self.endpoint.where(True)} are taken by subscriptions the broker did not confirm closing; the "
            "connection is replaced.")

    def _subscribe(self, stream: str, offset_type: Any, offset: int | None, credit: int) -> _Subscription:
        self._check_alive()
        sub = _Subscription(self._client, self._allocate_id())
        try:
            self._run(sub.start(stream, offset_type, offset, credit))
        except Exception as exc:
            self._unsubscribe(sub)
            if not isinstance(exc, (asyncio.TimeoutError, TimeoutError)):  # the broker refused: no subscription
                self._ids_in_use.discard(sub.id)
            raise broker_error(exc, self.endpoint, f"read stream {stream!r}", stream, True) from None
        return sub

    def _unsubscribe(self, sub: _Subscription) -> None:
        """End ``sub``; its id becomes free again when the broker confirmed."""
        try:
            confirmed = self._run(sub.stop())
        except Exception:
            confirmed = False
        if confirmed:
            self._ids_in_use.discard(sub.id)

    def _first_chunk(self, stream: str, offset_type: Any, offset: int | None, wait_s: float) -> Any:
        sub = self._subscribe(stream, offset_type, offset, credit=1)
        try:
            return self._run(sub.next_chunk(wait_s))
        finally:
            self._unsubscribe(sub)

    def bounds(self, stream: str, empty_wait_s: float) -> StreamBounds:
        from rstream.constants import OffsetType

        last = self._first_chunk(stream, OffsetType.LAST, None, empty_wait_s)
        if last is None:
            return StreamBounds(0, 0, 0.0)
        tail = last.chunk_first_offset + last.num_records
        avg = last.data_length / max(1, last.num_records)
        return StreamBounds(min(self._first_offset(stream, last), tail), tail, avg)

    def _first_offset(self, stream: str, delivered: Any) -> int:
        """The oldest stored message's offset (to tell retention from an offset gap); ``delivered``'s when none
        arrives in time."""
        from rstream.constants import OffsetType

        first = self._first_chunk(stream, OffsetType.FIRST, None, READ_IDLE_TIMEOUT_S)
        return delivered.chunk_first_offset if first is None else first.chunk_first_offset

    def first_message_from(self, stream: str, offset: int, wait_s: float) -> tuple[int, bytes | None] | None:
        from rstream.constants import OffsetType

        sub = self._subscribe(stream, OffsetType.OFFSET, offset, credit=1)
        try:
            deadline = time.monotonic() + wait_s
            while True:
                frame = self._run(sub.next_chunk(max(0.01, deadline - time.monotonic())))
                if frame is None:
                    return None
                at = frame.chunk_first_offset
                for raw in frame.get_messages():  # a chunk can start before the requested offset
                    if at >= offset:
                        columns = AmqpColumns(False)
                        append_amqp10_many(columns, (raw,), at, frame.timestamp)
                        return at, columns.columns["value"][0]
                    at += 1
                if time.monotonic() >= deadline:
                    return None
                self._run(self._client.credit(sub.id, 1))
        finally:
            self._unsubscribe(sub)

    def offset_for_timestamp(self, stream: str, epoch_ms: int, empty_wait_s: float, stored: bool = False) -> int | None:
        from rstream.constants import OffsetType

        # a stream known to hold messages has a newest chunk: waiting only empty_wait_s for it took a slow delivery
        # (a loaded machine) for an empty stream, and the read started at the tail, skipping every message after
        # the timestamp
        last = self._first_chunk(stream, OffsetType.LAST, None, READ_IDLE_TIMEOUT_S if stored else empty_wait_s)
        if last is None or last.timestamp < epoch_ms:
            return None
        chunk = self._first_chunk(stream, OffsetType.TIMESTAMP, epoch_ms, READ_IDLE_TIMEOUT_S)
        return None if chunk is None else chunk.chunk_first_offset

    def read_range(self, stream: str, queue_name: str, start: int, end: int, *, include_headers: bool,
                   fail_on_data_loss: bool, warn: Callable[[str], None] | None = None,
                   batch_rows: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
        from rstream.constants import OffsetType

        if start >= end:
            return
        sub = self._subscribe(stream, OffsetType.OFFSET, start, credit=4)
        try:
            pos = start
            checked = False
            columns = AmqpColumns(include_headers)
            while pos < end:
                frame = None
                waited_until = time.monotonic() + READ_IDLE_TIMEOUT_S
                while frame is None and time.monotonic() < waited_until:
                    if self.connection_lost or not self._client.is_connection_alive():
                        raise SafeBunnyBrokerError(
                            f"The stream-protocol connection to {self.endpoint.where(True)} was closed while reading "
                            f"stream {stream!r} (offsets {pos} to {end - 1} still due); Spark retries the task.")
                    frame = self._run(sub.next_chunk(1.0))
                if frame is None:
                    raise idle_error(stream, self.endpoint.where(True), pos, end)
                if not checked:
                    checked = True
                    if frame.chunk_first_offset > pos:  # retention, or offsets of broker tracking records
                        pos = check_data_loss(stream, pos, end, self._first_offset(stream, frame), fail_on_data_loss,
                                              warn)
                        if pos >= end:
                            break
                self._run(self._client.credit(sub.id, 1))
                first = frame.chunk_first_offset  # the chunk's messages are at first, first + 1, ...
                messages = frame.get_messages()
                lo, hi = max(0, pos - first), max(0, min(len(messages), end - first))
                if lo < hi:
                    append_amqp10_many(columns, messages[lo:hi], first + lo, frame.timestamp)
                # offsets within a chunk are contiguous; between chunks there can be gaps (offsets taken by
                # the broker's own tracking records, never delivered), so progress is by chunk
                pos = max(pos, min(end, frame.chunk_first_offset + frame.num_records))
                if len(columns) >= batch_rows:
                    yield columns.to_batch(queue_name)
                    columns = AmqpColumns(include_headers)
            if len(columns):
                yield columns.to_batch(queue_name)
        finally:
            self._unsubscribe(sub)


