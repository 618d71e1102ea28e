"""The raw-client ceilings: what pika and rstream do on this machine, with no Spark in the way.

- :func:`publish_window`: pika ``SelectConnection``, publisher confirms with a window of
  unconfirmed publishes (persistent, ``mandatory``), as the sink publishes;
- :func:`consume_multiple`: pika ``BlockingConnection``, prefetch 1,000, ``multiple`` acks every 250;
- :func:`stage_loop`: consume → transform (orjson) → publish with confirms → ack the input once
  its output is confirmed (``multiple``), one ``SelectConnection``, two channels; its outputs carry the
  properties the connector's stage sets (:func:`stage_properties`), so that the raw consume after it
  reads messages of the same shape as the source after the connector's stage;
- :func:`rstream_consume`: the stream protocol client reading a stream from its first offset.

Each returns a :class:`Run`: the count, the time from the first message to the last, and a
cumulative series for the throughput plot.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import unquote, urlparse

import pika
from pika.spec import Basic

from bench.broker import make_body, stream_port, transform_body

__all__ = [
    "BenchError", "Run", "consume_multiple", "publish_window", "rstream_consume", "rstream_publish", "stage_loop",
    "stream_write_span", "stage_properties",
]

_SAMPLE_EVERY_S = 0.2


class BenchError(RuntimeError):
    """A raw-client run did not complete (nack, return, timeout)."""


@dataclass
class Run:
    """One measured run."""

    count: int
    start: float
    end: float
    series: list[tuple[float, int]] = field(default_factory=list)  # (epoch seconds, cumulative count)
    latencies_ms: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.count / max(self.end - self.start, 1e-9)


class _Series:
    def __init__(self) -> None:
        self.points: list[tuple[float, int]] = []
        self._last = 0.0

    def tick(self, count: int, force: bool = False) -> None:
        now = time.time()
        if force or now - self._last >= _SAMPLE_EVERY_S:
            self.points.append((now, count))
            self._last = now


class _Confirms:
    """Tracks publisher confirms: which sequence numbers are confirmed, as a contiguous prefix."""

    def __init__(self) -> None:
        self.pending: deque[tuple[int, int]] = deque()  # (publish seq, attached tag)
        self.acked_out_of_order: set[int] = set()
        self.confirmed = 0
        self.last_tag = 0

    def add(self, seq: int, tag: int = 0) -> None:
        self.pending.append((seq, tag))

    def ack(self, seq: int, multiple: bool) -> None:
        if multiple:
            while self.pending and self.pending[0][0] <= seq:
                self._pop()
        else:
            self.acked_out_of_order.add(seq)
        while self.pending and self.pending[0][0] in self.acked_out_of_order:
            self.acked_out_of_order.discard(self.pending[0][0])
            self._pop()

    def _pop(self) -> None:
        _, tag = self.pending.popleft()
        self.confirmed += 1
        self.last_tag = max(self.last_tag, tag)

    @property
    def outstanding(self) -> int:
        return len(self.pending)


def publish_window(uri: str, queue: str, n: int, window: int = 1000, timeout_s: float = 300.0,
                   body: Callable[[int], bytes] = make_body) -> Run:
    """Publish ``n`` persistent, mandatory messages with at most ``window`` unconfirmed."""
    state = {"sent": 0, "t0": 0.0, "t1": 0.0, "error": ""}
    confirms = _Confirms()
    series = _Series()

    def on_open(conn: pika.SelectConnection) -> None:
        conn.channel(on_open_callback=on_channel)

    def on_channel(ch: pika.channel.Channel) -> None:
        ch.add_on_return_callback(lambda *_: fail(ch.connection, f"a message to {queue!r} was returned"))
        ch.confirm_delivery(ack_nack_callback=lambda f: on_confirm(ch, f), callback=lambda _: start(ch))

    def start(ch: pika.channel.Channel) -> None:
        state["t0"] = time.time()
        series.tick(0, force=True)
        pump(ch)

    def pump(ch: pika.channel.Channel) -> None:
        while state["sent"] < n and confirms.outstanding < window:
            props = pika.BasicProperties(delivery_mode=2, content_type="application/json",
                                         message_id=f"m-{state['sent']}")
            ch.basic_publish("", queue, body(state["sent"]), props, mandatory=True)
            state["sent"] += 1
            confirms.add(state["sent"])

    def on_confirm(ch: pika.channel.Channel, frame: pika.frame.Method) -> None:
        method = frame.method
        if isinstance(method, Basic.Nack):
            fail(ch.connection, f"the broker nacked publish {method.delivery_tag} to {queue!r}")
            return
        confirms.ack(method.delivery_tag, method.multiple)
        series.tick(confirms.confirmed)
        if confirms.confirmed >= n:
            state["t1"] = time.time()
            series.tick(n, force=True)
            ch.connection.close()
        else:
            pump(ch)

    fail = _failer(state)

    _run_select(uri, on_open, timeout_s, state, f"publishing {n} messages to {queue!r}")
    return Run(n, state["t0"], state["t1"], series.points)


def _failer(state: dict[str, object]) -> Callable[[pika.SelectConnection, str], None]:
    """A callback that records the first failure in ``state`` and closes the connection."""

    def fail(conn: pika.SelectConnection, why: str) -> None:
        state["error"] = state["error"] or why
        if conn.is_open:
            conn.close()

    return fail


def _run_select(uri: str, on_open: Callable[[pika.SelectConnection], None], timeout_s: float,
                state: dict, what: str) -> None:
    """Run a SelectConnection until it closes, failing after ``timeout_s``."""
    conn = pika.SelectConnection(
        pika.URLParameters(uri), on_open_callback=on_open,
        on_open_error_callback=lambda c, e: (state.update(error=f"cannot connect: {e}"), c.ioloop.stop()),
        on_close_callback=lambda c, e: c.ioloop.stop())

    def on_timeout() -> None:
        state["error"] = state["error"] or f"timed out after {timeout_s:.0f} s {what}"
        if conn.is_open:
            conn.close()
        else:
            conn.ioloop.stop()

    conn.ioloop.call_later(timeout_s, on_timeout)
    conn.ioloop.start()
    if state["error"]:
        raise BenchError(state["error"])


def consume_multiple(uri: str, queue: str, n: int, prefetch: int = 1000, ack_every: int = 250,
                     arguments: dict | None = None, timeout_s: float = 300.0) -> Run:
    """Consume ``n`` messages with manual acks, ``multiple=True`` every ``ack_every``."""
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=prefetch)
    state = {"count": 0, "t0": 0.0, "t1": 0.0, "tag": 0}
    series = _Series()

    def on_message(channel: object, method: Basic.Deliver, props: object, body: bytes) -> None:
        if state["count"] >= n:
            return
        if state["count"] == 0:
            state["t0"] = time.time()
            series.tick(0, force=True)
        state["count"] += 1
        state["tag"] = method.delivery_tag
        if state["count"] % ack_every == 0 or state["count"] == n:
            ch.basic_ack(method.delivery_tag, multiple=True)
        if state["count"] == n:
            state["t1"] = time.time()
        series.tick(state["count"])

    tag = ch.basic_consume(queue, on_message, arguments=arguments)
    deadline = time.monotonic() + timeout_s
    try:
        while state["count"] < n:
            if time.monotonic() > deadline:
                raise BenchError(f"consumed {state['count']} of {n} messages from {queue!r} in {timeout_s:.0f} s")
            conn.process_data_events(time_limit=0.2)
        series.tick(n, force=True)
        ch.basic_cancel(tag)
    finally:
        if conn.is_open:
            conn.close()
    return Run(n, state["t0"], state["t1"], series.points)


#: The namespace of the raw stage loop's derived message ids (any fixed UUID).
_STAGE_NS = uuid.UUID("6f1c7a52-3d0b-4d5e-9a51-2f4b8c0e7d13")


def stage_properties(message_id: str | None, correlation_id: str | None) -> pika.BasicProperties:
    """The properties of a message the raw stage loop publishes: the same fields, and about the same sizes,
    as the connector's stage sets on its outputs (a 36-character derived message id, the correlation id or
    else the cause, the cause in an ``x-causation-id`` header, a timestamp). The source case and its raw
    ceiling then read messages of one shape (header tables and longer ids cost every consumer)."""
    cause = message_id or ""
    return pika.BasicProperties(delivery_mode=2, content_type="application/octet-stream",
                                message_id=str(uuid.uuid5(_STAGE_NS, f"{cause}/priced")),
                                correlation_id=correlation_id or cause, headers={"x-causation-id": cause},
                                timestamp=int(time.time()))


def stage_loop(uri: str, in_queue: str, out_queue: str, n: int, prefetch: int = 1000, ack_every: int = 250,
               arguments: dict | None = None, timeout_s: float = 300.0,
               ready: threading.Event | None = None) -> Run:
    """Consume ``n`` messages, transform each, publish with confirms, ack inputs whose outputs are confirmed."""
    state = {"received": 0, "t0": 0.0, "t1": 0.0, "error": "", "acked_tag": 0}
    confirms = _Confirms()
    series = _Series()
    chans: dict[str, pika.channel.Channel] = {}

    def on_open(conn: pika.SelectConnection) -> None:
        conn.channel(on_open_callback=on_pub)

    def on_pub(ch: pika.channel.Channel) -> None:
        chans["pub"] = ch
        ch.add_on_return_callback(lambda *_: fail(ch.connection, f"a message to {out_queue!r} was returned"))
        ch.confirm_delivery(ack_nack_callback=on_confirm,
                            callback=lambda _: ch.connection.channel(on_open_callback=on_sub))

    def on_sub(ch: pika.channel.Channel) -> None:
        chans["sub"] = ch
        ch.basic_qos(prefetch_count=prefetch,
                     callback=lambda _: ch.basic_consume(in_queue, on_message, arguments=arguments,
                                                         callback=lambda _: ready and ready.set()))

    def on_message(ch: pika.channel.Channel, method: Basic.Deliver, props: pika.BasicProperties,
                   body: bytes) -> None:
        if state["received"] >= n:
            return
        if state["received"] == 0:
            state["t0"] = time.time()
            series.tick(0, force=True)
        state["received"] += 1
        out_props = stage_properties(props.message_id, props.correlation_id)
        chans["pub"].basic_publish("", out_queue, transform_body(body), out_props, mandatory=True)
        confirms.add(state["received"], method.delivery_tag)

    def on_confirm(frame: pika.frame.Method) -> None:
        method = frame.method
        if isinstance(method, Basic.Nack):
            fail(chans["pub"].connection, f"the broker nacked a publish to {out_queue!r}")
            return
        confirms.ack(method.delivery_tag, method.multiple)
        series.tick(confirms.confirmed)
        done = confirms.confirmed >= n
        if confirms.last_tag and (confirms.last_tag - state["acked_tag"] >= ack_every or done):
            chans["sub"].basic_ack(confirms.last_tag, multiple=True)
            state["acked_tag"] = confirms.last_tag
        if done:
            state["t1"] = time.time()
            series.tick(n, force=True)
            chans["sub"].connection.close()

    fail = _failer(state)

    _run_select(uri, on_open, timeout_s, state, f"the stage loop {in_queue!r} → {out_queue!r}")
    return Run(n, state["t0"], state["t1"], series.points)


def rstream_consume(uri: str, stream: str, n: int, port: int | None = None, timeout_s: float = 300.0,
                    chunk_times: list[tuple[float, int]] | None = None) -> Run:
    """Read ``n`` messages of a stream from its first offset with rstream (AMQP 1.0 bodies decoded).

    ``chunk_times``, when given, receives (chunk timestamp in epoch seconds, cumulative count) per
    chunk: when the broker wrote the messages, which times a writer such as the sink."""
    from rstream import AMQPMessage, Consumer, ConsumerOffsetSpecification, OffsetType, amqp_decoder

    parsed = urlparse(uri)
    vhost = unquote(parsed.path[1:]) if len(parsed.path) > 1 else "/"
    port = port or stream_port()
    series = _Series()
    state: dict = {"count": 0, "t0": 0.0, "t1": 0.0, "last_body": None}

    async def main() -> None:
        consumer = Consumer(parsed.hostname or "127.0.0.1", port, username=unquote(parsed.username or "guest"),
                            password=unquote(parsed.password or "guest"), vhost=vhost)
        await consumer.start()

        def on_message(msg: AMQPMessage, ctx: object) -> None:
            if state["count"] >= n:
                return
            if state["count"] == 0:
                state["t0"] = time.time()
                series.tick(0, force=True)
            state["count"] += 1
            state["last_body"] = msg.body
            if chunk_times is not None:
                stamp = ctx.timestamp / 1000.0  # type: ignore[attr-defined]
                if chunk_times and chunk_times[-1][0] == stamp:
                    chunk_times[-1] = (stamp, state["count"])
                else:
                    chunk_times.append((stamp, state["count"]))
            series.tick(state["count"])
            if state["count"] == n:
                state["t1"] = time.time()
                consumer.stop()

        await consumer.subscribe(stream, on_message, decoder=amqp_decoder,
                                 offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None))
        try:
            await asyncio.wait_for(consumer.run(), timeout_s)
        finally:
            await consumer.close()

    try:
        asyncio.run(main())
    except asyncio.TimeoutError:
        raise BenchError(f"rstream read {state['count']} of {n} messages of {stream!r} in {timeout_s:.0f} s")
    series.tick(n, force=True)
    return Run(n, state["t0"], state["t1"], series.points)


def rstream_publish(uri: str, stream: str, n: int, batch: int = 1000, port: int | None = None,
                    timeout_s: float = 300.0) -> Run:
    """Fill a stream through the stream protocol (``send_batch`` of ``batch``), waiting for every confirm."""
    from rstream import AMQPMessage, ConfirmationStatus, Producer

    parsed = urlparse(uri)
    vhost = unquote(parsed.path[1:]) if len(parsed.path) > 1 else "/"
    port = port or stream_port()
    series = _Series()
    state = {"confirmed": 0, "failed": 0, "t0": 0.0, "t1": 0.0}

    async def main() -> None:
        done = asyncio.Event()

        def on_confirm(status: ConfirmationStatus) -> None:
            if status.is_confirmed:
                state["confirmed"] += 1
            else:
                state["failed"] += 1
            series.tick(state["confirmed"])
            if state["confirmed"] + state["failed"] >= n:
                done.set()

        async with Producer(parsed.hostname or "127.0.0.1", port, username=unquote(parsed.username or "guest"),
                            password=unquote(parsed.password or "guest"), vhost=vhost) as producer:
            state["t0"] = time.time()
            series.tick(0, force=True)
            for i in range(0, n, batch):
                await producer.send_batch(stream, [AMQPMessage(body=make_body(j)) for j in range(i, min(n, i + batch))],
                                          on_publish_confirm=on_confirm)
            await asyncio.wait_for(done.wait(), timeout_s)
            state["t1"] = time.time()

    try:
        asyncio.run(main())
    except asyncio.TimeoutError:
        raise BenchError(f"rstream had {state['confirmed']} of {n} publishes to {stream!r} confirmed "
                         f"in {timeout_s:.0f} s")
    if state["failed"]:
        raise BenchError(f"the broker rejected {state['failed']} of {n} stream publishes to {stream!r}")
    series.tick(n, force=True)
    return Run(n, state["t0"], state["t1"], series.points)


def stream_write_span(uri: str, stream: str, n: int, timeout_s: float = 300.0) -> Run:
    """How fast ``n`` messages were written to a stream, from the broker's chunk timestamps (ms).

    The messages of the first chunk arrived before its timestamp, so they are not counted: the rate
    is the rest over the time from the first chunk to the last.
    """
    chunks: list[tuple[float, int]] = []
    rstream_consume(uri, stream, n, timeout_s=timeout_s, chunk_times=chunks)
    if len(chunks) < 2 or chunks[-1][0] <= chunks[0][0]:
        raise BenchError(f"the {n} messages of {stream!r} came in {len(chunks)} chunk(s) within one millisecond; "
                         "too few to time")
    first_ts, first_count = chunks[0]
    series = [(first_ts, 0)] + [(t, c - first_count) for t, c in chunks[1:]]
    return Run(n - first_count, first_ts, chunks[-1][0], series)
