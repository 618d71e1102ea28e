"""Decoding a stored stream message, which the broker keeps AMQP 1.0 encoded for AMQP 0-9-1 publishes; a raw
stream-protocol publish is kept as it is."""

from __future__ import annotations

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


def append_amqp10(columns: AmqpColumns, raw: bytes, offset: int, chunk_ms: int) -> None:
    """Append one stored message (AMQP 1.0 encoded, as the broker stores AMQP 0-9-1 publishes) to ``columns``."""
    from rstream._pyamqp._decode import decode_payload

    try:
        message = decode_payload(memoryview(raw))
    except Exception:
        message = None
    if message is None:  # not AMQP 1.0: a raw stream-protocol publish
        props, app, annotations, value = None, {}, {}, bytes(raw)
    else:
        props = message.properties
        app = message.application_properties or {}
        annotations = message.message_annotations or {}
        value = _amqp10_value(message)
    if props is None:
        props = _NO_PROPERTIES
    c = columns.columns
    c["value"].append(value)
    c["offset"].append(offset)
    c["messageId"].append(as_text(props.message_id))
    c["correlationId"].append(as_text(props.correlation_id))
    c["contentType"].append(as_text(props.content_type))
    created = props.creation_time
    c["timestamp"].append((created if created is not None else chunk_ms) * 1000)
    c["routingKey"].append(as_text(annotations.get(b"x-routing-key")))
    c["exchange"].append(as_text(annotations.get(b"x-exchange")))
    c["type"].append(as_text(app.get(b"x-basic-type")))
    c["redelivered"].append(False)
    c["deliveryCount"].append(None)  # a stream queue counts no deliveries
    if columns.include_headers:
        user = {k: v for k, v in app.items() if not as_text(k).startswith("x-basic-")}
        c["headers"].append(render_headers(user) if user else None)
