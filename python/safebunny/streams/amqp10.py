"""Decoding a stored stream message, which the broker keeps AMQP 1.0 encoded for AMQP 0-9-1 publishes; a raw
stream-protocol publish is kept as it is."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from safebunny.amqp.message_rows import AmqpColumns, as_text, render_headers

__all__: list[str] = []

#: the properties of a message stored without any (a raw stream-protocol publish, or none in the message)
_NO_PROPERTIES = SimpleNamespace(message_id=None, correlation_id=None, content_type=None, creation_time=None)


def _amqp10_value(message: Any) -> bytes | None:
    body = getattr(message, "body", None)
    if body is None:
        body = getattr(message, "value", None)
    if body is None:
        body = getattr(message, "sequence", None)
        if body is None:
            return None
    elif isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body)
    elif isinstance(body, str):
        return body.encode("utf-8")
    elif isinstance(body, list) and all(isinstance(b, (bytes, bytearray)) for b in body):
        return b"".join(body)
    import orjson

    return orjson.dumps(body, default=as_text)


def _decoded(raw: bytes, decode: Any) -> tuple[Any, Any, Any, bytes | None]:
    """(properties, application properties, message annotations, value) of one stored message; a raw
    stream-protocol publish (not AMQP 1.0) is (None, None, None, its bytes)."""
    try:
        message = decode(memoryview(raw))
    except Exception:
        message = None
    if message is None:
        return None, None, None, bytes(raw)
    return (message.properties, message.application_properties, message.message_annotations,
            _amqp10_value(message))


def append_amqp10_many(columns: AmqpColumns, raws: Sequence[bytes], first_offset: int, chunk_ms: int) -> None:
    """Append stored messages (AMQP 1.0 encoded, as the broker stores AMQP 0-9-1 publishes; or raw) to
    ``columns``: ``raws`` are a chunk's messages, at offsets ``first_offset``, ``first_offset + 1``, ...,
    decoded column by column, with a list comprehension per column instead of a dozen appends per message, and
    constant columns when no message of the chunk has properties, annotations or application properties (a
    partition's hot loop). One message is a chunk of one, so every path reads a message the same way."""
    from rstream._pyamqp._decode import decode_payload

    rows = [_decoded(raw, decode_payload) for raw in raws]
    n = len(rows)
    if not n:
        return
    c = columns.columns
    nones = [None] * n
    c["value"] += [r[3] for r in rows]
    c["offset"] += range(first_offset, first_offset + n)
    props = [r[0] for r in rows]
    if any(p is not None for p in props):
        props = [_NO_PROPERTIES if p is None else p for p in props]
        c["messageId"] += [as_text(p.message_id) for p in props]
        c["correlationId"] += [as_text(p.correlation_id) for p in props]
        c["contentType"] += [as_text(p.content_type) for p in props]
        c["timestamp"] += [(chunk_ms if p.creation_time is None else p.creation_time) * 1000 for p in props]
    else:
        c["messageId"] += nones
        c["correlationId"] += nones
        c["contentType"] += nones
        c["timestamp"] += [chunk_ms * 1000] * n
    annotations = [r[2] for r in rows]
    if any(annotations):
        c["routingKey"] += [as_text(a.get(b"x-routing-key")) if a else None for a in annotations]
        c["exchange"] += [as_text(a.get(b"x-exchange")) if a else None for a in annotations]
    else:
        c["routingKey"] += nones
        c["exchange"] += nones
    apps = [r[1] for r in rows]
    any_app = any(apps)
    c["type"] += [as_text(a.get(b"x-basic-type")) if a else None for a in apps] if any_app else nones
    c["redelivered"] += [False] * n
    c["deliveryCount"] += nones  # a stream queue counts no deliveries
    if columns.include_headers:
        c["headers"] += [_user_headers(a) if a else None for a in apps] if any_app else nones


def _user_headers(app: Any) -> Any:
    user = {k: v for k, v in app.items() if not as_text(k).startswith("x-basic-")}
    return render_headers(user) if user else None

