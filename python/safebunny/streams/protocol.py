"""Choosing how to read stream queues: the stream protocol when its port answers, else AMQP 0-9-1 (with a
warning); ``stream_port=0`` means never the stream protocol. A login refused on the stream port is an
error, not a fallback."""

from __future__ import annotations

import logging
import socket

from safebunny.amqp.connection import StreamEndpoint
from safebunny.optional import available
from safebunny.streams.amqp091_client import AmqpStreamClient
from safebunny.streams.client import StreamQueueClient
from safebunny.streams.rstream_client import RStreamClient

__all__ = ["open_stream_client", "stream_protocol_answers"]

log = logging.getLogger("safebunny.stream")


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
            log.warning(
                "The stream protocol port %s:%s does not answer; reading stream queues over AMQP 0-9-1 instead "
                "(about ten times slower). Enable it with 'rabbitmq-plugins enable rabbitmq_stream', or set "
                "streamPort=0 to choose AMQP 0-9-1 and silence this warning.", endpoint.host, stream_port,
            )
        elif available("rstream.client"):
            return RStreamClient(endpoint, name).connect()
        else:
            log.warning(
                "The stream protocol port %s:%s answers, but the package 'rstream' cannot be imported; reading "
                "stream queues over AMQP 0-9-1 instead (about ten times slower). Install it with: pip install "
                "'rstream>=0.20' (a dependency of safebunny), or set streamPort=0 to silence this warning.",
                endpoint.host, stream_port,
            )
    return AmqpStreamClient(endpoint, heartbeat, name).connect()
