"""Broker-side helpers of the benchmark: queues (all named ``bench-...``), depth, the stream plugin.

Every queue the harness declares goes through :class:`QueueBook`, which deletes them at the end.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import orjson
import pika

__all__ = [
    "QueueBook",
    "QueueMonitor",
    "broker_version",
    "STREAM_PORT_ENV",
    "StreamBroker",
    "stream_broker",
    "stream_port",
    "make_body",
    "port_open",
    "transform_body",
]

_PAD = "x" * 76


def make_body(i: int, ts: float | None = None) -> bytes:
    """A ~200-byte JSON message body carrying its index and a send timestamp."""
    return orjson.dumps({
        "id": i, "ts": time.time() if ts is None else ts, "type": "OrderPlaced", "customer": f"customer-{i % 997:05d}",
        "amount": (i % 10_000) / 100.0, "currency": "EUR", "note": _PAD,
    })


def transform_body(body: bytes) -> bytes:
    """The stage's transform in plain Python (the raw loop): parse, add a field, serialise."""
    doc = orjson.loads(body)
    doc["stage"] = "priced"
    return orjson.dumps(doc)


def _params(uri: str) -> pika.URLParameters:
    return pika.URLParameters(uri)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def broker_version(uri: str) -> str:
    """The broker's product and version from the AMQP handshake."""
    conn = pika.BlockingConnection(_params(uri))
    try:
        props = conn._impl.server_properties  # noqa: SLF001 - pika exposes no public accessor
        product = props.get("product", b"?")
        version = props.get("version", b"?")
        return f"{_text(product)} {_text(version)}"
    finally:
        conn.close()


def port_open(host: str, port: int, timeout: float = 1.0) -> bool:
    """Whether something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


#: The environment variable that tells the stream-protocol clients (rstream, the stream source) the port.
STREAM_PORT_ENV = "SAFEBUNNY_BENCH_STREAM_PORT"


def stream_port() -> int:
    """The stream protocol's port of the broker the stream cases use (5552 unless :func:`stream_broker` moved it)."""
    return int(os.environ.get(STREAM_PORT_ENV, "5552"))


@dataclass
class StreamBroker:
    """The broker the stream cases run on: ``uri`` and its stream ``port``; ``stop`` ends a throwaway one."""

    uri: str
    port: int
    said: str
    stop: Callable[[], None] = lambda: None


def stream_broker(uri: str, port: int = 5552) -> StreamBroker:
    """A broker whose stream protocol answers: the one at ``uri`` when ``port`` answers there, else a throwaway
    ``rabbitmq-server`` with the stream plugin (``tests/brokers.py``; the machine's broker and its plugins are
    left as they are). Sets :data:`STREAM_PORT_ENV` for the stream clients."""
    host = urlparse(uri).hostname or "127.0.0.1"
    if port_open(host, port):
        os.environ[STREAM_PORT_ENV] = str(port)
        return StreamBroker(uri, port, f"the stream protocol answered on {host}:{port}")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from brokers import ThrowawayBroker

    tb = ThrowawayBroker(plugins=("rabbitmq_stream",)).start()  # a start cut short (SIGTERM, SIGINT) ends its node
    os.environ[STREAM_PORT_ENV] = str(tb.stream_port)
    return StreamBroker(tb.uri, int(tb.stream_port or 0),
                        f"port {port} did not answer on {host}, so the stream cases ran on a throwaway "
                        f"rabbitmq-server with the stream plugin (ports {tb.port}/{tb.stream_port})", tb.destroy)


class QueueBook:
    """Declares the benchmark's queues and deletes all of them at the end."""

    def __init__(self, uri: str, run_id: str) -> None:
        self.uri = uri
        self.prefix = f"bench-{run_id}"
        self.names: list[str] = []
        self._conn = pika.BlockingConnection(_params(uri))
        self._ch = self._conn.channel()

    def _channel(self) -> pika.adapters.blocking_connection.BlockingChannel:
        try:  # a blocking connection answers heartbeats only when used: the broker may have closed it while idle
            self._conn.process_data_events(0)
        except pika.exceptions.AMQPError:
            pass
        if self._conn.is_closed:
            self._conn = pika.BlockingConnection(_params(self.uri))
        if self._ch.is_closed:
            self._ch = self._conn.channel()
        return self._ch

    def declare(self, label: str, kind: str) -> str:
        """Declare a fresh durable queue of ``kind`` (classic, quorum, stream); returns its name."""
        name = f"{self.prefix}-{label}-{len(self.names)}"
        self._channel().queue_declare(name, durable=True, arguments={"x-queue-type": kind})
        self.names.append(name)
        return name

    def depth(self, name: str) -> int:
        """Ready messages of a classic or quorum queue (streams report 0 here)."""
        return self._channel().queue_declare(name, passive=True).method.message_count

    def delete(self, name: str) -> None:
        try:
            self._channel().queue_delete(name)
        except pika.exceptions.AMQPError:
            pass
        if name in self.names:
            self.names.remove(name)

    def close(self) -> None:
        """Delete every queue still on the book, then close."""
        for name in list(self.names):
            self.delete(name)
        try:
            self._conn.close()
        except pika.exceptions.AMQPError:
            pass


class QueueMonitor:
    """Samples a queue's ready count every ``interval`` seconds on its own connection."""

    def __init__(self, uri: str, queue: str, interval: float = 0.1) -> None:
        self.uri, self.queue, self.interval = uri, queue, interval
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"monitor-{queue}", daemon=True)

    def __enter__(self) -> QueueMonitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        conn = pika.BlockingConnection(_params(self.uri))
        ch = conn.channel()
        try:
            while not self._stop.is_set():
                count = ch.queue_declare(self.queue, passive=True).method.message_count
                self.samples.append((time.time(), count))
                self._stop.wait(self.interval)
        finally:
            conn.close()

    def fill_span(self, target: int) -> tuple[float, float] | None:
        """(start, end): the last sample still empty and the first sample holding ``target``."""
        end = next((t for t, c in self.samples if c >= target), None)
        if end is None:
            return None
        start = max((t for t, c in self.samples if c == 0 and t < end), default=None)
        if start is None:
            return None
        return start, end
