"""Opening AMQP 0-9-1 connections and translating client errors into safebunny's own.

Every reader and writer goes through :func:`open_blocking` (or :func:`broker_error` for
clients it does not open), so a wrong password, a missing vhost or queue, or an unreachable
host reads the same everywhere: what failed, at which ``host:port`` and vhost, and what to
check, never the password. Every connection carries a client-provided name (:func:`client_properties`), which
RabbitMQ shows in its management UI and API and in ``rabbitmqctl list_connections client_properties``, so an
operator can tell which saga, driver, step or shard and role a connection serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from safebunny.errors import (
    BrokerAuthenticationError,
    BrokerUnreachableError,
    QueueNotFoundError,
    SafeBunnyBrokerError,
    VhostNotFoundError,
)
from safebunny.optional import optional_classes
from safebunny.uri import connection_parameters, describe, redact

__all__ = ["CONNECT_TIMEOUT_S", "StreamEndpoint", "broker_error", "client_properties", "close_quietly",
           "open_blocking"]

CONNECT_TIMEOUT_S = 10.0


def client_properties(name: str) -> dict[str, str]:
    """pika's ``client_properties`` of a connection named ``name`` (e.g. ``safebunny/<saga>/<driver>/<step>.<shard>
    /consumer``): RabbitMQ lists it as the connection's ``connection_name``, beside ``process`` (``pid <n>``: which
    process on the client's host holds it, as the management UI shows it)."""
    return {"connection_name": name, "product": "safebunny", "process": f"pid {os.getpid()}"}


@dataclass(frozen=True)
class StreamEndpoint:
    """Where and as whom to connect, from an AMQP URI; the password is never in ``repr``."""

    uri: str = field(repr=False)
    host: str
    stream_port: int
    vhost: str
    username: str
    password: str = field(repr=False)
    tls: bool

    @classmethod
    def from_uri(cls, uri: str, stream_port: int = 5552) -> StreamEndpoint:
        parts = urlsplit(uri)
        tls = parts.scheme == "amqps"
        return cls(
            uri=uri,
            host=parts.hostname or "localhost",
            stream_port=stream_port,
            vhost=unquote(parts.path[1:]) if len(parts.path) > 1 else "/",
            username=unquote(parts.username) if parts.username else "guest",
            password=unquote(parts.password) if parts.password else "guest",
            tls=tls,
        )

    def where(self, stream: bool = False) -> str:
        """``host:port vhost '/'`` for messages (the stream port when ``stream``)."""
        if stream:
            return f"{self.host}:{self.stream_port} (stream protocol) vhost {self.vhost!r}"
        return describe(self.uri)


# --------------------------------------------------------------------------------------------
# Errors and AMQP 0-9-1 connections


def _rstream_errors() -> tuple[tuple[type, ...], tuple[type, ...], tuple[type, ...]]:
    """rstream's (login refused, vhost refused, stream missing) exception classes; empty without rstream.

    Error translation must work without optional packages: an rstream exception cannot be
    raised where rstream is not installed, so nothing is lost by not importing it.
    """
    return (
        optional_classes("rstream.exceptions", "AuthenticationFailure", "SASLAuthenticationFailureLoopback"),
        optional_classes("rstream.exceptions", "VirtualHostAccessFailure"),
        optional_classes("rstream.exceptions", "StreamDoesNotExist"),
    )


def broker_error(exc: BaseException, endpoint: StreamEndpoint, action: str, queue: str | None = None,
                 stream_protocol: bool = False) -> SafeBunnyBrokerError:
    """Translate a pika/rstream/socket error into a clear :class:`SafeBunnyBrokerError`, the same with or
    without rstream installed (:func:`_rstream_errors`)."""
    import pika.exceptions as pe

    if isinstance(exc, SafeBunnyBrokerError):
        return exc
    auth_errors, vhost_errors, missing_stream = _rstream_errors()
    where = endpoint.where(stream_protocol)
    detail = redact(f"{type(exc).__name__}: {exc}")
    closed_code = exc.reply_code if isinstance(exc, pe.ConnectionClosedByBroker) else None
    if isinstance(exc, (pe.ProbableAuthenticationError, pe.AuthenticationError, *auth_errors)) \
            or closed_code == 403:
        return BrokerAuthenticationError(
            f"RabbitMQ at {where} refused the login of user {endpoint.username!r} while trying to {action}: "
            "check the user name and password in the 'uri' option (the password is not shown here).",
            403,
        )
    if isinstance(exc, (pe.ProbableAccessDeniedError, *vhost_errors)) or closed_code == 530:
        return VhostNotFoundError(
            f"RabbitMQ at {where} denied access to vhost {endpoint.vhost!r} for user {endpoint.username!r} "
            f"while trying to {action}: the vhost does not exist or the user has no permission on it. "
            "Check the vhost part of the 'uri' option (URL-encoded; '/' is '%2F').",
            530,
        )
    if isinstance(exc, missing_stream) or (
        isinstance(exc, pe.ChannelClosedByBroker) and exc.reply_code == 404
    ):
        return QueueNotFoundError(
            f"Queue {queue!r} does not exist at {where} (while trying to {action}). Declare it first, or run "
            "the saga topology declaration, or fix the 'queue' option.",
            404,
        )
    if closed_code is not None:  # the broker answered and then closed: not an unreachable broker
        return SafeBunnyBrokerError(
            f"RabbitMQ at {where} closed the connection while trying to {action}: {closed_code} "
            f"{redact(str(exc.reply_text))} (a broker-side close: an operator or policy closed it, the node "
            "is shutting down (320), or a protocol rule was broken). It is not a network failure.",
            closed_code,
        )
    unreachable = (ConnectionError, socket.gaierror, socket.timeout, TimeoutError, asyncio.TimeoutError,
                   pe.AMQPConnectionError, OSError)
    if isinstance(exc, unreachable):
        return BrokerUnreachableError(
            f"Cannot reach RabbitMQ at {where} to {action} ({detail}). Check the host and port in the "
            "'uri' option (and 'streamPort' for the stream protocol) and that the broker is running.",
        )
    code = getattr(exc, "reply_code", None)
    return SafeBunnyBrokerError(f"RabbitMQ at {where} failed while trying to {action}: {detail}", code)


def open_blocking(uri: str, heartbeat: int | None = None, action: str = "connect", *, name: str) -> Any:
    """Open a pika ``BlockingConnection`` named ``name`` (one attempt, bounded timeouts) or raise a clear error."""
    import pika

    params = connection_parameters(uri, heartbeat=heartbeat, connection_attempts=1, socket_timeout=CONNECT_TIMEOUT_S,
                                   stack_timeout=CONNECT_TIMEOUT_S * 2, blocked_connection_timeout=60,
                                   client_properties=client_properties(name))
    try:
        return pika.BlockingConnection(params)
    except Exception as exc:
        raise broker_error(exc, StreamEndpoint.from_uri(uri), action) from None


def close_quietly(closeable: Any) -> None:
    """Close a connection, channel or client that may already be gone, ignoring any error."""
    with contextlib.suppress(Exception):
        closeable.close()
