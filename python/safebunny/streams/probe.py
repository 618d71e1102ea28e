"""Which kind of queue is this? ``classic``, ``quorum`` or ``stream``, asked of the broker.

The stream protocol's ``metadata`` first (a refused login there falls back to AMQP, so a wrong password is
reported for the AMQP port); otherwise a passive declare (404: :class:`QueueNotFoundError`), then declares
with ``x-queue-type`` set, each 406 naming an argument that differs, which is added with the broker's value
until the broker names ``x-queue-type`` or accepts (``durable``, ``auto_delete`` and ``exclusive``
mismatches mean a classic queue). Limits (a queue deleted between the declares is re-created; values are
parsed from the 406 text): docs/source.md ("Queue type"). Setting ``queueType`` skips the probe.
"""

from __future__ import annotations

import contextlib
import logging
import re
from typing import Any

from safebunny.amqp.connection import StreamEndpoint, broker_error, close_quietly, open_blocking
from safebunny.errors import (
    BrokerAuthenticationError,
    SafeBunnyBrokerError,
    VhostNotFoundError,
)
from safebunny.optional import available
from safebunny.streams.rstream_client import RStreamClient
from safebunny.streams.stream_source import stream_protocol_answers

__all__ = ["detect_queue_type", "parse_inequivalent"]

log = logging.getLogger("safebunny.source")
QUEUE_TYPES = ("classic", "quorum", "stream")
_MAX_ROUNDS = 16

_INEQUIVALENT = re.compile(
    r"inequivalent arg '(?P<arg>[^']+)' for (?P<what>queue|exchange) '(?P<name>.*)' in vhost '.*': received "
    r"(?P<ours>.+?) but current is (?P<theirs>.+)$"
)
# a value as the broker writes it: "the value '5' of type 'long'", a stream's bare "'7D'", or "none"
_VALUE = re.compile(r"the value '(?P<value>.*)' of type '(?P<type>[a-z]+)'|'(?P<quoted>.*)'")
_INTEGER_TYPES = ("signedint", "long", "short", "byte", "unsignedbyte", "unsignedshort", "unsignedint")


def _value(text: str) -> tuple[str, str | None]:
    """One value of a reply as its text and AMQP type (a bare quoted value is a string; None: ``none`` or text
    the parser cannot read)."""
    found = _VALUE.fullmatch(text.strip())
    if found is None:
        return text.strip(), None
    return (found["quoted"], "longstr") if found["type"] is None else (found["value"], found["type"])


def parse_inequivalent(reply_text: str) -> dict[str, Any] | None:
    """The argument, object and both values from a broker's 406 ``inequivalent arg`` reply; None for another reply.

    ``arg``, ``what`` (queue or exchange) and ``name`` (which may hold quotes); ``ours`` (what the declare sent)
    and ``theirs`` (what exists) as the broker wrote them, without quotes (``none``: no such argument);
    ``current``, ``theirs`` as a value to declare (None when there is none), and ``known``, whether it could
    be read as one.

    >>> found = parse_inequivalent("PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'q' in "
    ...                            "vhost '/': received 'classic' but current is 'quorum'")
    >>> found["arg"], found["theirs"], found["current"], found["known"]
    ('x-queue-type', 'quorum', 'quorum', True)
    """
    match = _INEQUIVALENT.search(reply_text.strip())
    if not match:
        return None
    ours = _value(match["ours"])[0]
    theirs, kind = _value(match["theirs"])
    current: Any = theirs
    known = kind in ("longstr", "bool")
    if kind is None and theirs == "none":
        current, known = None, True
    elif kind == "bool":
        current = theirs == "true"
    elif kind in _INTEGER_TYPES:
        with contextlib.suppress(ValueError):
            current, known = int(theirs), True
    return {"arg": match["arg"], "what": match["what"], "name": match["name"], "ours": ours, "theirs": theirs,
            "current": current, "known": known}


def _probe_stream_protocol(endpoint: StreamEndpoint, queue: str) -> bool | None:
    """True/False when the stream port answers (is ``queue`` a stream?), None when it does not."""
    if endpoint.stream_port <= 0 or not stream_protocol_answers(endpoint.host, endpoint.stream_port):
        return None
    if not available("rstream.client"):  # the AMQP 0-9-1 probe tells streams apart too
        log.warning("The stream protocol port %s:%s answers, but the package 'rstream' cannot be imported, so "
                    "queue %r is probed over AMQP 0-9-1. Install it with: pip install 'rstream>=0.20' (a "
                    "dependency of safebunny).", endpoint.host, endpoint.stream_port, queue)
        return None
    client = RStreamClient(endpoint)
    try:
        client.connect()
        return client.stream_exists(queue)
    finally:
        client.close()


def _unknown_type(endpoint: StreamEndpoint, queue: str, why: str, code: int | None = None) -> SafeBunnyBrokerError:
    """The error of a probe that could not tell the type of ``queue`` (``why`` follows the queue's place)."""
    return SafeBunnyBrokerError(
        f"Could not tell the type of queue {queue!r} at {endpoint.where()}{why}. Set the option 'queueType' to "
        "'classic', 'quorum' or 'stream' to skip this probe.", code)


def _probe_amqp(uri: str, endpoint: StreamEndpoint, queue: str) -> str:
    import pika.exceptions as pe

    connection = open_blocking(uri, action=f"look up queue {queue!r}", name=f"safebunny/{queue}/probe")
    try:
        try:
            connection.channel().queue_declare(queue, passive=True)
        except pe.ChannelClosedByBroker as exc:
            raise broker_error(exc, endpoint, f"look up queue {queue!r}", queue) from None
        arguments: dict[str, Any] = {"x-queue-type": "stream"}
        for _ in range(_MAX_ROUNDS):
            try:
                connection.channel().queue_declare(queue, durable=True, arguments=dict(arguments))
                return str(arguments["x-queue-type"])
            except pe.ChannelClosedByBroker as exc:
                if exc.reply_code == 404:
                    raise broker_error(exc, endpoint, f"look up queue {queue!r}", queue) from None
                if exc.reply_code == 405:
                    raise SafeBunnyBrokerError(
                        f"Queue {queue!r} at {endpoint.where()} is exclusive to another connection "
                        f"({exc.reply_text}); it cannot be read by safebunny.", 405,
                    ) from None
                found = parse_inequivalent(exc.reply_text) if exc.reply_code == 406 else None
                if found is None:
                    raise _unknown_type(endpoint, queue, f": the broker answered {exc.reply_code} {exc.reply_text!r}",
                                        exc.reply_code) from None
                arg, current, known = found["arg"], found["current"], found["known"]
                if arg in ("durable", "auto_delete", "exclusive"):
                    return "classic"
                if arg == "x-queue-type":
                    return "classic" if current is None else str(current)
                if not known:
                    raise _unknown_type(endpoint, queue, f": its argument {arg!r} has a value the probe cannot "
                                        f"repeat ({exc.reply_text!r})", 406) from None
                if current is None:
                    arguments.pop(arg, None)
                else:
                    arguments[arg] = current
        raise _unknown_type(endpoint, queue, f" after {_MAX_ROUNDS} declares")
    finally:
        close_quietly(connection)


def detect_queue_type(uri: str, queue: str, stream_port: int) -> str:
    """``"classic"``, ``"quorum"`` or ``"stream"`` for ``queue`` (see the module docstring).

    Raises :class:`QueueNotFoundError`, :class:`BrokerUnreachableError`,
    :class:`BrokerAuthenticationError`, :class:`VhostNotFoundError` (all
    :class:`SafeBunnyBrokerError`), naming ``host:port`` and the vhost but never the password.
    """
    endpoint = StreamEndpoint.from_uri(uri, stream_port)
    refused: SafeBunnyBrokerError | None = None
    try:
        if _probe_stream_protocol(endpoint, queue):
            return "stream"
    except (BrokerAuthenticationError, VhostNotFoundError) as exc:
        # the login the user gave is for the URI's AMQP port: ask there, so a refusal names that port (a classic
        # or quorum queue is never read over the stream protocol), and the stream port's refusal only counts
        # when AMQP lets us in and says the queue is a stream
        refused = exc
    kind = _probe_amqp(uri, endpoint, queue)
    if kind == "stream" and refused is not None:
        raise refused
    if kind not in QUEUE_TYPES:
        raise SafeBunnyBrokerError(
            f"Queue {queue!r} at {endpoint.where()} has type {kind!r}, which safebunny cannot read "
            f"(it reads {', '.join(QUEUE_TYPES)})."
        )
    return kind
