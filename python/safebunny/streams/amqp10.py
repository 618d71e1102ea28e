"""Decoding a stored stream message: the broker keeps AMQP 0-9-1 publishes AMQP 1.0 encoded; a raw
stream-protocol publish is kept as it is."""

from __future__ import annotations

from typing import Any

from safebunny.amqp.message_rows import render_headers
from safebunny.streams.client import as_text

__all__: list[str] = []


def _amqp10_value(message: Any) -> bytes | None:
    body = getattr(message, "body", None)
    if body is None:
        body = getattr(message, "value", None)
    if body is None:
        seq = getattr(message, "sequence", None)
        if seq is not None:
            import orjson

            return orjson.dumps(seq, default=as_text)
        return None
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body)
    if isinstance(body, str):
        return body.encode("utf-8")
    if isinstance(body, list) and all(isinstance(b, (bytes, bytearray)) for b in body):
        return b"".join(body)
    import orjson

    return orjson.dumps(body, default=as_text)


def append_amqp10(columns: dict[str, list[Any]], raw: bytes, offset: int, chunk_ms: int,
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
        columns["messageId"].append(as_text(props.message_id))
        columns["correlationId"].append(as_text(props.correlation_id))
        columns["contentType"].append(as_text(props.content_type))
        created = props.creation_time
    else:
        columns["messageId"].append(None)
        columns["correlationId"].append(None)
        columns["contentType"].append(None)
        created = None
    columns["timestamp"].append((created if created is not None else chunk_ms) * 1000)
    if annotations:
        columns["routingKey"].append(as_text(annotations.get(b"x-routing-key")))
        columns["exchange"].append(as_text(annotations.get(b"x-exchange")))
    else:
        columns["routingKey"].append(None)
        columns["exchange"].append(None)
    columns["type"].append(as_text(app.get(b"x-basic-type")) if app else None)
    if include_headers:
        if app is None:
            columns["headers"].append(None)
        else:
            user = {k: v for k, v in app.items() if not as_text(k).startswith("x-basic-")}
            columns["headers"].append(render_headers(user) if user else None)
