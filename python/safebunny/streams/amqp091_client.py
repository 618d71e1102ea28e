"""Stream queues over AMQP 0-9-1 with ``x-stream-offset``: the fallback when the stream protocol's port does
not answer. Prefetch is mandatory on streams; every delivery carries its offset in the ``x-stream-offset``
header; nack/reject would close the connection, so it only acks."""

from __future__ import annotations

import contextlib
import datetime as _dt
import time
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from safebunny.amqp.connection import StreamEndpoint, broker_error, close_quietly, open_blocking
from safebunny.amqp.message_rows import AmqpColumns
from safebunny.streams.client import BATCH_ROWS, READ_IDLE_TIMEOUT_S, TAIL_BUDGET_S, StreamQueueClient, idle_error
from safebunny.streams.offsets import StreamBounds, check_data_loss

__all__ = ["AmqpStreamClient"]


class _Consumption:
    """One ``x-stream-offset`` consumer: deliveries collected by a callback, counts for the window."""

    def __init__(self) -> None:
        self.pending: list[tuple[Any, Any, bytes]] = []
        self.delivered = 0
        self.acked = 0

    def on_message(self, ch: Any, method: Any, props: Any, body: bytes) -> None:
        self.pending.append((method, props, body))
        self.delivered += 1


def _offsets(deliveries: list[tuple[Any, Any, bytes]]) -> list[tuple[int, bytes]]:
    """``(offset, body)`` of the deliveries that carry an ``x-stream-offset``."""
    return [(int(offset), body) for _method, props, body in deliveries
            if isinstance(offset := (props.headers or {}).get("x-stream-offset"), int)]


class AmqpStreamClient(StreamQueueClient):
    """Stream queues over AMQP 0-9-1 (``x-stream-offset``); slower, works without the plugin.

    Stream queues refuse ``basic.nack``/``reject`` by closing the connection, and pika nacks
    deliveries that arrive while a consumer is being cancelled. So a consumer is only closed
    once its prefetch window is full or nothing more arrives (see :meth:`_release`), and a
    connection the broker closed anyway is reopened for the next operation.
    """

    protocol = "amqp"
    PREFETCH = 1000

    def __init__(self, endpoint: StreamEndpoint, heartbeat: int | None = None,
                 name: str = "safebunny/stream-reader") -> None:
        self.endpoint = endpoint
        self._heartbeat = heartbeat
        self.name = name  # the connection's client-provided name (RabbitMQ shows it)
        self._conn: Any = None

    def connect(self) -> AmqpStreamClient:
        self._conn = open_blocking(self.endpoint.uri, self._heartbeat, "open an AMQP connection", name=self.name)
        return self

    def close(self) -> None:
        if self._conn is not None:
            close_quietly(self._conn)
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

    def _await_first(self, state: _Consumption, wait_s: float) -> None:
        """Drain until a first delivery arrives or ``wait_s`` passed."""
        deadline = time.monotonic() + wait_s
        while not state.pending and time.monotonic() < deadline:
            self._drain(min(0.05, max(0.0, deadline - time.monotonic())))

    def _ack(self, channel: Any, state: _Consumption, batch: list[tuple[Any, Any, bytes]], stream: str) -> None:
        """Ack ``batch`` (the oldest pending deliveries) in one multiple ack."""
        try:
            channel.basic_ack(batch[-1][0].delivery_tag, multiple=True)
        except Exception as exc:
            raise broker_error(exc, self.endpoint, f"ack deliveries of stream {stream!r}", stream) from None
        state.acked += len(batch)

    def _release(self, channel: Any, state: _Consumption, prefetch: int, budget_s: float = 2.0) -> None:
        """Close ``channel`` once no delivery can still be in flight (window full, or idle)."""
        with contextlib.suppress(Exception):
            stop = time.monotonic() + budget_s
            while state.delivered - state.acked < prefetch and time.monotonic() < stop:
                before = state.delivered
                self._conn.process_data_events(time_limit=0.05)
                if state.delivered == before:
                    break
        close_quietly(channel)

    def _sample(self, stream: str, spec: Any, wait_s: float) -> list[tuple[int, bytes]]:
        """``(offset, body)`` of the first delivery from ``spec`` (none when nothing comes in ``wait_s``)."""
        channel, state = self._consume(stream, spec, prefetch=1)
        try:
            self._await_first(state, wait_s)
        finally:
            self._release(channel, state, 1)
        return _offsets(state.pending)

    def _read_to_end(self, stream: str, wait_s: float, budget_s: float = TAIL_BUDGET_S) -> list[tuple[int, bytes]]:
        """``(offset, body)`` of every delivery from the newest chunk on, up to the committed end.

        The newest chunk can hold more messages than one prefetch window (a batch publisher, sub-entry
        batching, a fast AMQP publisher). The end is found without a timing guess: the broker reads the
        log for a stream consumer inside the channel when an ack gives credit back, so after acking
        everything received, a synchronous ``basic.qos`` round trip on the same channel returns behind
        every delivery that ack caused. Nothing new before its reply means the reader stood at the
        committed end with a full window. ``budget_s`` bounds a stream written faster than it is read:
        then the tail is lower and the next look-up finds the rest. Only the last ``PREFETCH``
        deliveries are kept.
        """
        channel, state = self._consume(stream, "last", self.PREFETCH)
        seen: list[tuple[int, bytes]] = []
        try:
            self._await_first(state, wait_s)
            stop = time.monotonic() + budget_s
            while state.pending:
                batch, state.pending = state.pending, []
                seen += _offsets(batch)
                del seen[:-self.PREFETCH]
                if time.monotonic() >= stop:
                    break  # stop acking: the window fills, deliveries stop, _release can close
                self._ack(channel, state, batch, stream)
                self._barrier(channel, stream)
        finally:
            self._release(channel, state, self.PREFETCH)
        return seen

    def _barrier(self, channel: Any, stream: str) -> None:
        """A synchronous round trip on ``channel``; every delivery the broker sent before its reply is then
        in ``state.pending`` (pika queues deliveries that arrive during the wait and dispatches them here)."""
        try:
            channel.basic_qos(prefetch_count=self.PREFETCH)
            self._conn.process_data_events(time_limit=0)
        except Exception as exc:
            raise broker_error(exc, self.endpoint, f"read the tail of stream {stream!r}", stream) from None

    def bounds(self, stream: str, empty_wait_s: float) -> StreamBounds:
        last = self._read_to_end(stream, empty_wait_s)
        if not last:
            return StreamBounds(0, 0, 0.0)
        tail = max(o for o, _ in last) + 1
        first = self._sample(stream, "first", READ_IDLE_TIMEOUT_S)
        first_offset = first[0][0] if first else min(o for o, _ in last)
        avg = sum(len(body) for _, body in last) / len(last)
        return StreamBounds(int(min(first_offset, tail)), int(tail), float(avg))

    def first_message_from(self, stream: str, offset: int, wait_s: float) -> tuple[int, bytes | None] | None:
        prefetch = 10
        channel, state = self._consume(stream, offset, prefetch)
        try:
            deadline = time.monotonic() + wait_s
            while True:
                self._await_first(state, deadline - time.monotonic())
                if not state.pending:
                    return None
                batch, state.pending = state.pending, []
                for at, body in _offsets(batch):  # deliveries start at the chunk, maybe before the offset
                    if at >= offset:
                        return at, body
                self._ack(channel, state, batch, stream)
        finally:
            self._release(channel, state, prefetch)

    def offset_for_timestamp(self, stream: str, epoch_ms: int, empty_wait_s: float, stored: bool = False) -> int | None:
        # ``stored`` does not help here: no message at or after the time looks the same as a slow one
        when = _dt.datetime.fromtimestamp(epoch_ms // 1000, tz=_dt.timezone.utc).replace(tzinfo=None)
        got = self._sample(stream, when, empty_wait_s)
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
                        raise idle_error(stream, self.endpoint.where(), pos, end)
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
                            first = self._sample(stream, "first", READ_IDLE_TIMEOUT_S)
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
                    self._ack(channel, state, batch, stream)
                if len(columns) >= batch_rows:
                    yield columns.to_batch(queue_name)
                    columns = AmqpColumns(include_headers)
            if len(columns):
                yield columns.to_batch(queue_name)
        finally:
            self._release(channel, state, prefetch)


