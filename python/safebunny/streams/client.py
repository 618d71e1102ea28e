"""Reading stream queues by offset: the stream protocol (rstream) and the AMQP 0-9-1 fallback.

Two clients with one interface (:class:`StreamQueueClient`):

* :class:`RStreamClient` speaks the stream protocol (plugin ``rabbitmq_stream``, port 5552 by
  default). It is about ten times cheaper than AMQP 0-9-1 here. rstream is asyncio: each
  client runs its own private event loop, driven step by step, so a read can be a plain
  generator of Arrow batches.
* :class:`AmqpStreamClient` consumes over AMQP 0-9-1 with ``x-stream-offset`` (prefetch is
  mandatory on streams; every delivery carries its offset in the ``x-stream-offset``
  header; nack/reject would close the connection, so it only acks).

:func:`open_stream_client` picks the stream protocol when its port answers and falls back to
AMQP 0-9-1 (with a warning) when nothing listens there; ``stream_port=0`` means never use it.

Both read ``[start, end)`` exactly: a stream chunk can start before the requested offset and
those entries are dropped. Differences, documented in docs/source.md: over AMQP 0-9-1 the
``timestamp`` column is null for messages without a ``timestamp`` property (the stream
protocol uses the chunk's time then); a ``timestamp:`` start is resolved to whole seconds.

Connection helpers and error translation live in :mod:`safebunny.amqp.connection`, the error classes in
:mod:`safebunny.errors`; import them from there.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import logging
import socket
import ssl
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from safebunny.amqp.connection import (
    CONNECT_TIMEOUT_S,
    StreamEndpoint,
    broker_error,
    open_blocking,
)
from safebunny.amqp.message_rows import AmqpColumns, render_headers, rows_to_record_batch
from safebunny.errors import (
    SafeBunnyBrokerError,
)
from safebunny.optional import available, require
from safebunny.streams.offsets import StreamBounds, check_data_loss

__all__ = [
    "StreamQueueClient",
    "RStreamClient",
    "AmqpStreamClient",
    "open_stream_client",
    "stream_protocol_answers",
]

log = logging.getLogger("safebunny.stream")

#: Rows per Arrow batch yielded by a read (Spark moves ~85k rows/s in batches of 10k here).
BATCH_ROWS = 10_000
#: A read fails when the broker delivers nothing for this long while offsets are still due.
READ_IDLE_TIMEOUT_S = 60.0
#: Any single stream-protocol request (subscribe, metadata, close) that takes longer fails.
REQUEST_TIMEOUT_S = 30.0
#: Over AMQP 0-9-1 the tail is where deliveries from the newest chunk stop for this long...
TAIL_IDLE_S = 0.2
#: ... or what was delivered within this long (a stream written faster than it is read).
TAIL_BUDGET_S = 10.0
#: Subscription ids are one byte in the stream protocol.
SUBSCRIPTION_IDS = 256


def _close_quietly(closeable: Any) -> None:
    try:
        closeable.close()
    except Exception:
        pass


# --------------------------------------------------------------------------------------------
# The client interface


class StreamQueueClient:
    """Offset-level access to one broker's stream queues. Use as a context manager."""

    protocol: str = ""

    def bounds(self, stream: str, empty_wait_s: float) -> StreamBounds:
        """The oldest stored offset, the tail (last offset + 1) and a message-size estimate.

        A stream never written to has no chunk to look at; it is taken as empty when nothing
        arrives within ``empty_wait_s``.
        """
        raise NotImplementedError

    def offset_for_timestamp(self, stream: str, epoch_ms: int, empty_wait_s: float) -> int | None:
        """The first offset of the first chunk written at or after ``epoch_ms``; None if none."""
        raise NotImplementedError

    def first_message_from(self, stream: str, offset: int, wait_s: float) -> tuple[int, bytes | None] | None:
        """``(offset, body)`` of the first stored message at or after ``offset``; None if none arrives in time."""
        raise NotImplementedError

    def read_range(self, stream: str, queue_name: str, start: int, end: int, *, include_headers: bool,
                   fail_on_data_loss: bool, warn: Callable[[str], None] | None = None,
                   batch_rows: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
        """Arrow batches with exactly the stored messages of ``[start, end)``, in offset order.

        Offsets that retention removed raise :class:`SafeBunnyDataLossError`, or are skipped with
        ``warn(message)`` when ``fail_on_data_loss`` is false.
        """
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> StreamQueueClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _empty_columns(include_headers: bool) -> dict[str, list[Any]]:
    names = ["value", "messageId", "correlationId", "routingKey", "exchange", "timestamp", "contentType",
             "type", "offset"]
    if include_headers:
        names.append("headers")
    return {name: [] for name in names}


def _batch(columns: dict[str, list[Any]], queue_name: str, include_headers: bool) -> pa.RecordBatch:
    n = len(columns["offset"])
    full = dict(columns)
    full["queue"] = [queue_name] * n
    full["redelivered"] = [False] * n
    return rows_to_record_batch(full, include_headers)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", errors="replace")
    return str(value)


# --------------------------------------------------------------------------------------------
# The stream protocol


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
        try:  # rstream keeps one delivery task and queue per subscription id until told otherwise
            await self.client.stop_queue_listener_task(subscriber_id=self.id)
            self.client._frames.pop(self.id, None)
        except Exception:
            pass
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
            try:
                await asyncio.wait_for(client.sync_request(
                    schema.Close(client._corr_id_seq.next(), code=1, reason="OK"),
                    resp_schema=schema.CloseResponse), 2)
            except BaseException:
                pass
        client._is_not_closed = False
        tasks = list(client._tasks.values())
        client._tasks.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if client._conn is not None:
            await client._conn.close()
            client._conn = None

    try:
        loop.run_until_complete(asyncio.wait_for(fast_close(), 5))
    except AttributeError:
        try:
            loop.run_until_complete(asyncio.wait_for(client.close(), 5))
        except Exception:
            pass
    except Exception:
        pass


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

    def __init__(self, endpoint: StreamEndpoint) -> None:
        self.endpoint = endpoint
        self._loop = asyncio.new_event_loop()
        self._holder: list[Any] = [None]  # the rstream Client, shared with the finalizer
        self._next_id = 0  # the last subscription id handed out
        self._ids_in_use: set[int] = set()
        self.connection_lost = False
        # a client dropped without close() (Spark never calls the reader's stop()) still closes
        self._finalizer = weakref.finalize(self, _shutdown, self._loop, self._holder)

    @property
    def _client(self) -> Any:
        return self._holder[0]

    def _run(self, coro: Any, timeout: float = REQUEST_TIMEOUT_S) -> Any:
        """Run ``coro`` on the private loop; a dead connection surfaces as a timeout, not a hang."""
        return self._loop.run_until_complete(asyncio.wait_for(coro, timeout))

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
                        connection_name="safebunny-stream-source", connection_closed_handler=on_closed)

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
        """Fail fast on a connection the broker closed while the loop was idle (between triggers)."""
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
        first = self._first_chunk(stream, OffsetType.FIRST, None, READ_IDLE_TIMEOUT_S)
        first_offset = first.chunk_first_offset if first is not None else last.chunk_first_offset
        avg = last.data_length / max(1, last.num_records)
        self.last_chunk_timestamp_ms = last.timestamp
        return StreamBounds(min(first_offset, tail), tail, avg)

    def _first_offset(self, stream: str, delivered: Any) -> int:
        """The oldest stored message's offset (to tell retention from an offset gap)."""
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
                        columns = _empty_columns(False)
                        _append_amqp10(columns, raw, at, frame.timestamp, False)
                        return at, columns["value"][0]
                    at += 1
                if time.monotonic() >= deadline:
                    return None
                self._run(self._client.credit(sub.id, 1))
        finally:
            self._unsubscribe(sub)

    def offset_for_timestamp(self, stream: str, epoch_ms: int, empty_wait_s: float) -> int | None:
        from rstream.constants import OffsetType

        last = self._first_chunk(stream, OffsetType.LAST, None, empty_wait_s)
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
            columns = _empty_columns(include_headers)
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
                    raise SafeBunnyBrokerError(
                        f"Stream queue {stream!r} at {self.endpoint.where(True)} delivered nothing for "
                        f"{READ_IDLE_TIMEOUT_S:.0f} s while offsets {pos} to {end - 1} were still due. Was the "
                        "stream deleted and re-created? Then restart the query from a new checkpoint."
                    )
                if not checked:
                    checked = True
                    if frame.chunk_first_offset > pos:  # retention, or offsets of broker tracking records
                        pos = check_data_loss(stream, pos, end, self._first_offset(stream, frame), fail_on_data_loss,
                                              warn)
                        if pos >= end:
                            break
                self._run(self._client.credit(sub.id, 1))
                offset = frame.chunk_first_offset
                for raw in frame.get_messages():
                    if offset >= end:
                        break
                    if offset >= pos:
                        _append_amqp10(columns, raw, offset, frame.timestamp, include_headers)
                    offset += 1
                # offsets within a chunk are contiguous; between chunks there can be gaps (offsets taken by
                # the broker's own tracking records, never delivered), so progress is by chunk
                pos = max(pos, min(end, frame.chunk_first_offset + frame.num_records))
                if len(columns["offset"]) >= batch_rows:
                    yield _batch(columns, queue_name, include_headers)
                    columns = _empty_columns(include_headers)
            if columns["offset"]:
                yield _batch(columns, queue_name, include_headers)
        finally:
            self._unsubscribe(sub)


def _amqp10_value(message: Any) -> bytes | None:
    body = getattr(message, "body", None)
    if body is None:
        body = getattr(message, "value", None)
    if body is None:
        seq = getattr(message, "sequence", None)
        if seq is not None:
            import orjson

            return orjson.dumps(seq, default=_text)
        return None
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body)
    if isinstance(body, str):
        return body.encode("utf-8")
    if isinstance(body, list) and all(isinstance(b, (bytes, bytearray)) for b in body):
        return b"".join(body)
    import orjson

    return orjson.dumps(body, default=_text)


def _append_amqp10(columns: dict[str, list[Any]], raw: bytes, offset: int, chunk_ms: int,
                   include_headers: bool) -> None:
    """Append one stored message (AMQP 1.0 encoded, as the broker stores AMQP 0-9-1 publishes)."""
    from rstream._pyamqp._decode import decode_payload

    try:
        message = decode_payload(memoryview(raw))
    except Exception:
        message = None
    if message is None:  # not AMQP 1.0: a raw stream-protocol publish
        props = app = annotations = None
        value: bytes | None = bytes(raw)
    else:
        props = message.properties
        app = message.application_properties or {}
        annotations = message.message_annotations or {}
        value = _amqp10_value(message)
    columns["value"].append(value)
    columns["offset"].append(offset)
    if props is not None:
        columns["messageId"].append(_text(props.message_id))
        columns["correlationId"].append(_text(props.correlation_id))
        columns["contentType"].append(_text(props.content_type))
        created = props.creation_time
    else:
        columns["messageId"].append(None)
        columns["correlationId"].append(None)
        columns["contentType"].append(None)
        created = None
    columns["timestamp"].append((created if created is not None else chunk_ms) * 1000)
    if annotations:
        columns["routingKey"].append(_text(annotations.get(b"x-routing-key")))
        columns["exchange"].append(_text(annotations.get(b"x-exchange")))
    else:
        columns["routingKey"].append(None)
        columns["exchange"].append(None)
    columns["type"].append(_text(app.get(b"x-basic-type")) if app else None)
    if include_headers:
        if app is None:
            columns["headers"].append(None)
        else:
            user = {k: v for k, v in app.items() if not _text(k).startswith("x-basic-")}
            columns["headers"].append(render_headers(user) if user else None)


# --------------------------------------------------------------------------------------------
# AMQP 0-9-1 with x-stream-offset


class _Consumption:
    """One ``x-stream-offset`` consumer: deliveries collected by a callback, counts for the window."""

    def __init__(self) -> None:
        self.pending: list[tuple[Any, Any, bytes]] = []
        self.delivered = 0
        self.acked = 0

    def on_message(self, ch: Any, method: Any, props: Any, body: bytes) -> None:
        self.pending.append((method, props, body))
        self.delivered += 1


class AmqpStreamClient(StreamQueueClient):
    """Stream queues over AMQP 0-9-1 (``x-stream-offset``); slower, works without the plugin.

    Stream queues refuse ``basic.nack``/``reject`` by closing the connection, and pika nacks
    deliveries that arrive while a consumer is being cancelled. So a consumer is only closed
    once its prefetch window is full or nothing more arrives (see :meth:`_release`), and a
    connection the broker closed anyway is reopened for the next operation.
    """

    protocol = "amqp"
    PREFETCH = 1000

    def __init__(self, endpoint: StreamEndpoint, heartbeat: int | None = None) -> None:
        self.endpoint = endpoint
        self._heartbeat = heartbeat
        self._conn: Any = None

    def connect(self) -> AmqpStreamClient:
        self._conn = open_blocking(self.endpoint.uri, self._heartbeat, "open an AMQP connection")
        return self

    def close(self) -> None:
        if self._conn is not None:
            _close_quietly(self._conn)
            self._conn = None

    def _consume(self, stream: str, spec: Any, prefetch: int) -> tuple[Any, _Consumption]:
        if self._conn is None or not self._conn.is_open:
            self.connect()
        state = _Consumption()
        try:
            channel = self._conn.channel()
            channel.basic_qos(prefetch_count=prefetch)
            channel.basic_consume(stream, state.on_message, auto_ack=False, arguments={"x-stream-offset": spec})
        except Exception as exc:
            raise broker_error(exc, self.endpoint, f"consume stream {stream!r}", stream) from None
        return channel, state

    def _drain(self, seconds: float) -> None:
        try:
            self._conn.process_data_events(time_limit=seconds)
        except Exception as exc:
            raise broker_error(exc, self.endpoint, "read a stream queue") from None

    def _release(self, channel: Any, state: _Consumption, prefetch: int, budget_s: float = 2.0) -> None:
        """Close ``channel`` once no delivery can still be in flight (window full, or idle)."""
        try:
            stop = time.monotonic() + budget_s
            while state.delivered - state.acked < prefetch and time.monotonic() < stop:
                before = state.delivered
                self._conn.process_data_events(time_limit=0.05)
                if state.delivered == before:
                    break
        except Exception:
            pass
        _close_quietly(channel)

    def _sample(self, stream: str, spec: Any, wait_s: float, idle_s: float = 0.05,
                max_messages: int = 1000, budget_s: float = 1.0) -> list[tuple[int, int]]:
        """``(offset, body length)`` of the first deliveries from ``spec`` (until idle or budget)."""
        channel, state = self._consume(stream, spec, prefetch=max_messages)
        try:
            deadline = time.monotonic() + wait_s
            while not state.pending and time.monotonic() < deadline:
                self._drain(min(0.05, max(0.0, deadline - time.monotonic())))
            stop = time.monotonic() + budget_s
            while state.pending and len(state.pending) < max_messages and time.monotonic() < stop:
                before = len(state.pending)
                self._drain(idle_s)
                if len(state.pending) == before:
                    break
        finally:
            self._release(channel, state, max_messages)
        seen = []
        for _, props, body in state.pending:
            offset = (props.headers or {}).get("x-stream-offset")
            if isinstance(offset, int):
                seen.append((int(offset), len(body)))
        return seen

    def _read_to_end(self, stream: str, wait_s: float, idle_s: float = TAIL_IDLE_S,
                     budget_s: float = TAIL_BUDGET_S) -> list[tuple[int, int]]:
        """``(offset, body length)`` of every delivery from the newest chunk on, until the stream is quiet.

        The newest chunk can hold more messages than one prefetch window (a batch publisher, sub-entry
        batching, a fast AMQP publisher), so the deliveries are acked and read until nothing arrives for
        ``idle_s`` (or ``budget_s`` passed: then a stream still being written gives a lower tail, and the
        next look-up finds the rest). Only the last ``PREFETCH`` deliveries are kept.
        """
        channel, state = self._consume(stream, "last", self.PREFETCH)
        seen: list[tuple[int, int]] = []
        try:
            deadline = time.monotonic() + wait_s
            while not state.pending and time.monotonic() < deadline:
                self._drain(min(0.05, max(0.0, deadline - time.monotonic())))
            stop = time.monotonic() + budget_s
            quiet_since = time.monotonic()
            while time.monotonic() - quiet_since < idle_s:
                if state.pending:
                    batch, state.pending = state.pending, []
                    for _method, props, body in batch:
                        offset = (props.headers or {}).get("x-stream-offset")
                        if isinstance(offset, int):
                            seen.append((int(offset), len(body)))
                    if time.monotonic() >= stop:
                        break  # stop acking: the window fills, deliveries stop, _release can close
                    try:
                        channel.basic_ack(batch[-1][0].delivery_tag, multiple=True)
                    except Exception as exc:
                        raise broker_error(exc, self.endpoint, f"ack deliveries of stream {stream!r}", stream) \
                            from None
                    state.acked += len(batch)
                    del seen[:-self.PREFETCH]
                    quiet_since = time.monotonic()
                self._drain(0.02)
        finally:
            self._release(channel, state, self.PREFETCH)
        return seen

    def bounds(self, stream: str, empty_wait_s: float) -> StreamBounds:
        last = self._read_to_end(stream, empty_wait_s)
        if not last:
            return StreamBounds(0, 0, 0.0)
        tail = max(o for o, _ in last) + 1
        first = self._sample(stream, "first", READ_IDLE_TIMEOUT_S, max_messages=1)
        first_offset = first[0][0] if first else min(o for o, _ in last)
        avg = sum(n for _, n in last) / len(last)
        return StreamBounds(int(min(first_offset, tail)), int(tail), float(avg))

    def first_message_from(self, stream: str, offset: int, wait_s: float) -> tuple[int, bytes | None] | None:
        prefetch = 10
        channel, state = self._consume(stream, offset, prefetch)
        try:
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                if not state.pending:
                    self._drain(min(0.05, max(0.0, deadline - time.monotonic())))
                    continue
                batch, state.pending = state.pending, []
                for _method, props, body in batch:  # deliveries start at the chunk, maybe before the offset
                    at = (props.headers or {}).get("x-stream-offset")
                    if isinstance(at, int) and at >= offset:
                        return int(at), body
                try:
                    channel.basic_ack(batch[-1][0].delivery_tag, multiple=True)
                except Exception as exc:
                    raise broker_error(exc, self.endpoint, f"ack deliveries of stream {stream!r}", stream) from None
                state.acked += len(batch)
            return None
        finally:
            self._release(channel, state, prefetch)

    def offset_for_timestamp(self, stream: str, epoch_ms: int, empty_wait_s: float) -> int | None:
        when = _dt.datetime.fromtimestamp(epoch_ms // 1000, tz=_dt.timezone.utc).replace(tzinfo=None)
        got = self._sample(stream, when, empty_wait_s, max_messages=1)
        return got[0][0] if got else None

    def read_range(self, stream: str, queue_name: str, start: int, end: int, *, include_headers: bool,
                   fail_on_data_loss: bool, warn: Callable[[str], None] | None = None,
                   batch_rows: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
        if start >= end:
            return
        prefetch = min(self.PREFETCH, max(10, end - start))
        channel, state = self._consume(stream, start, prefetch)
        try:
            pos = start
            checked = False
            columns = AmqpColumns(include_headers)
            idle_since = time.monotonic()
            while pos < end:
                if not state.pending:
                    if time.monotonic() - idle_since > READ_IDLE_TIMEOUT_S:
                        raise SafeBunnyBrokerError(
                            f"Stream queue {stream!r} at {self.endpoint.where()} delivered nothing for "
                            f"{READ_IDLE_TIMEOUT_S:.0f} s while offsets {pos} to {end - 1} were still due. Was "
                            "the stream deleted and re-created? Then restart the query from a new checkpoint."
                        )
                    self._drain(0.2)
                    continue
                idle_since = time.monotonic()
                batch, state.pending = state.pending, []
                for method, props, body in batch:
                    headers = dict(props.headers or {})
                    offset = headers.pop("x-stream-offset", None)
                    if not isinstance(offset, int):
                        continue
                    offset = int(offset)
                    if not checked:
                        checked = True
                        if offset > pos:  # retention, or offsets of broker tracking records (never delivered)
                            first = self._sample(stream, "first", READ_IDLE_TIMEOUT_S, max_messages=1)
                            oldest = first[0][0] if first else offset
                            pos = check_data_loss(stream, pos, end, oldest, fail_on_data_loss, warn)
                    if offset >= end:
                        pos = end
                        break
                    if offset < pos:
                        continue
                    columns.append(body, props, method.exchange, method.routing_key, offset=offset,
                                   headers=headers)
                    pos = offset + 1
                if pos < end:  # after the range, stop acking: the window fills and deliveries stop
                    try:
                        channel.basic_ack(batch[-1][0].delivery_tag, multiple=True)
                    except Exception as exc:
                        raise broker_error(exc, self.endpoint, f"ack deliveries of stream {stream!r}", stream) \
                            from None
                    state.acked += len(batch)
                if len(columns) >= batch_rows:
                    yield columns.to_batch(queue_name)
                    columns = AmqpColumns(include_headers)
            if len(columns):
                yield columns.to_batch(queue_name)
        finally:
            self._release(channel, state, prefetch)


# --------------------------------------------------------------------------------------------
# Choosing the protocol


def stream_protocol_answers(host: str, port: int, timeout: float = 2.0) -> bool:
    """True when something accepts TCP connections on the stream port."""
    if port <= 0:
        return False
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def open_stream_client(uri: str, stream_port: int, heartbeat: int | None = None) -> StreamQueueClient:
    """A connected client: the stream protocol when ``stream_port`` answers, else AMQP 0-9-1.

    ``stream_port=0`` always uses AMQP 0-9-1. When the port does not answer, a warning says so
    (enable the plugin with ``rabbitmq-plugins enable rabbitmq_stream``) and AMQP 0-9-1 is used;
    a login refused on the stream port is an error, not a fallback.
    """
    endpoint = StreamEndpoint.from_uri(uri, stream_port)
    if stream_port > 0:
        if stream_protocol_answers(endpoint.host, stream_port):
            if available("rstream.client"):
                return RStreamClient(endpoint).connect()
            log.warning(
                "The stream protocol port %s:%s answers, but the package 'rstream' cannot be imported; reading "
                "stream queues over AMQP 0-9-1 instead (about ten times slower). Install it with: pip install "
                "'rstream>=0.20' (a dependency of safebunny), or set streamPort=0 to silence this warning.",
                endpoint.host, stream_port,
            )
            return AmqpStreamClient(endpoint, heartbeat).connect()
        log.warning(
            "The stream protocol port %s:%s does not answer; reading stream queues over AMQP 0-9-1 instead "
            "(about ten times slower). Enable it with 'rabbitmq-plugins enable rabbitmq_stream', or set "
            "streamPort=0 to choose AMQP 0-9-1 and silence this warning.", endpoint.host, stream_port,
        )
    return AmqpStreamClient(endpoint, heartbeat).connect()
