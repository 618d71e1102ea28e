"""Decoding a delivery (``basic.deliver``, its content header and body frames) straight from AMQP 0-9-1 bytes.

:func:`parse_delivery` reads that one shape with :mod:`struct`, cheaper than pika's generic frame machinery
(docs/performance.md), and leaves every other frame to pika (:mod:`safebunny.amqp.frame_tap`). The values
are pika's, bit for bit: short strings are UTF-8 decoded, or left as ``bytes`` when they are not valid
UTF-8; header tables go through what :func:`pika.data.decode_table` makes of them; the timestamp is an
``int`` of seconds. Pure logic, no I/O: tested against frames marshalled by pika itself.
"""

from __future__ import annotations

import functools
import struct
from typing import Any, NamedTuple

from pika.compat import long
from pika.data import decode_value

__all__ = ["Properties", "INCOMPLETE", "parse_delivery", "decode_properties"]

_FRAME_HEADER = struct.Struct(">BHI")  # type, channel, payload size
_HEADER_FIELDS = struct.Struct(">HHQH")  # class id, weight, body size, first property-flag word
_U64 = struct.Struct(">Q")
_U16 = struct.Struct(">H")
_FRAME_END = 0xCE
_METHOD, _HEADER, _BODY = 1, 2, 3
_DELIVER = b"\x00\x3c\x00\x3c"  # class 60 (basic), method 60 (deliver)

#: :func:`parse_delivery`'s answer when the bytes end before the delivery does: wait for more data.
INCOMPLETE: Any = object()

# Named tuples are built with tuple.__new__ on the hot path: their generated ``__new__`` is a Python function,
# and calling it was the reader's single largest cost after the parsing itself (py-spy: "<lambda> (<string>)").
_new = tuple.__new__


class Properties(NamedTuple):
    """A message's basic properties, with the attribute names of :class:`pika.spec.BasicProperties`
    (read-only; what the source's columns read from a delivery)."""

    content_type: str | bytes | None = None
    content_encoding: str | bytes | None = None
    headers: dict[str, Any] | None = None
    delivery_mode: int | None = None
    priority: int | None = None
    correlation_id: str | bytes | None = None
    reply_to: str | bytes | None = None
    expiration: str | bytes | None = None
    message_id: str | bytes | None = None
    timestamp: int | None = None
    type: str | bytes | None = None
    user_id: str | bytes | None = None
    app_id: str | bytes | None = None
    cluster_id: str | bytes | None = None


class ParsedDelivery(NamedTuple):
    """One delivery and where its last frame ends (``end``), with the number of frames it took."""

    end: int
    frames: int
    delivery_tag: int
    redelivered: bool
    exchange: str | bytes
    routing_key: str | bytes
    properties: Properties
    body: bytes


def _short(buf: bytes, pos: int) -> tuple[str | bytes, int]:
    end = pos + 1 + buf[pos]
    raw = buf[pos + 1:end]
    try:
        return raw.decode("utf8"), end
    except UnicodeDecodeError:
        return raw, end


_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_LONG_STRING, _LONG_LONG_INT, _LONG_LONG_INT_ALT, _LONG_INT, _BOOL = b"SlLIt"


def _table(buf: bytes, pos: int) -> tuple[dict[str | bytes, Any], int]:
    """A field table, as :func:`pika.data.decode_table` decodes it. The values headers mostly hold (long
    strings, 64- and 32-bit integers, booleans) are read here; any other kind goes to pika's
    :func:`pika.data.decode_value` (a header table of two strings costs half of what pika's decoder takes)."""
    size = _U32.unpack_from(buf, pos)[0]
    pos += 4
    limit = pos + size
    table: dict[str | bytes, Any] = {}
    while pos < limit:
        key, pos = _short(buf, pos)
        kind = buf[pos]
        if kind == _LONG_STRING:
            start = pos + 5
            pos = start + _U32.unpack_from(buf, pos + 1)[0]
            raw = buf[start:pos]
            try:
                table[key] = raw.decode("utf8")
            except UnicodeDecodeError:
                table[key] = raw
        elif kind == _LONG_LONG_INT or kind == _LONG_LONG_INT_ALT:  # both signed (pika, RabbitMQ)
            table[key] = long(_I64.unpack_from(buf, pos + 1)[0])  # pika's int subclass, as pika returns
            pos += 9
        elif kind == _LONG_INT:
            table[key] = _I32.unpack_from(buf, pos + 1)[0]
            pos += 5
        elif kind == _BOOL:
            table[key] = bool(buf[pos + 1])
            pos += 2
        else:
            table[key], pos = decode_value(buf, pos)
    return table, pos


_SHORT, _TABLE, _OCTET, _U64_FIELD = range(4)
# (flag bit, field index, encoding) in encoding order: bit 15 (content_type) down to bit 2 (cluster_id)
_LAYOUT = tuple((1 << (15 - index), index, kind) for index, kind in enumerate(
    (_SHORT, _SHORT, _TABLE, _OCTET, _OCTET, _SHORT, _SHORT, _SHORT, _SHORT, _U64_FIELD, _SHORT, _SHORT, _SHORT,
     _SHORT)))


@functools.cache
def _present(flags: int) -> tuple[tuple[int, int], ...]:
    """The fields ``flags`` announces, as (index, encoding), worked out once per distinct flags (a publisher
    sends the same ones)."""
    return tuple((index, kind) for mask, index, kind in _LAYOUT if flags & mask)


def decode_properties(buf: bytes, pos: int) -> Properties:
    """The properties encoded at ``pos`` (their flag words first), as pika decodes them."""
    flags = 0
    word = 0
    while True:
        part = _U16.unpack_from(buf, pos)[0]
        pos += 2
        flags |= part << (word * 16)
        if not part & 1:
            break
        word += 1
    if flags == 0:
        return _EMPTY
    values: list[Any] = [None] * 14
    for index, kind in _present(flags):
        if kind == _SHORT:
            values[index], pos = _short(buf, pos)
        elif kind == _OCTET:
            values[index] = buf[pos]
            pos += 1
        elif kind == _U64_FIELD:
            values[index] = _U64.unpack_from(buf, pos)[0]
            pos += 8
        else:
            values[index], pos = _table(buf, pos)
    return _new(Properties, values)


_EMPTY = Properties()


def parse_delivery(buf: bytes, pos: int, channel: int) -> ParsedDelivery | Any | None:
    """Parse the delivery whose ``basic.deliver`` method frame starts at ``pos`` of ``buf``.

    Returns a :class:`ParsedDelivery`; :data:`INCOMPLETE` when ``buf`` ends before the delivery's last
    frame; ``None`` when the frames at ``pos`` are not a delivery on ``channel`` followed directly by its
    header and body frames (another frame between them, a bad frame end, anything unusual): the caller
    then leaves the frame at ``pos`` to pika, which handles every case (and raises on a broken frame).
    """
    n = len(buf)
    if pos + 7 > n:
        return INCOMPLETE
    kind, chan, size = _FRAME_HEADER.unpack_from(buf, pos)
    if kind != _METHOD or chan != channel:
        return None
    if pos + 11 > n:
        return INCOMPLETE  # a method frame of our channel, cut before its method id: pika would wait too
    if buf[pos + 7:pos + 11] != _DELIVER:
        return None
    method_end = pos + 7 + size
    if method_end >= n:
        return INCOMPLETE
    if buf[method_end] != _FRAME_END:
        return None
    try:
        p = pos + 11
        p += 1 + buf[p]  # consumer tag: one consumer per channel here, so it is not needed
        tag = _U64.unpack_from(buf, p)[0]
        redelivered = bool(buf[p + 8] & 1)
        exchange, p = _short(buf, p + 9)
        routing_key, p = _short(buf, p)
        if p != method_end:
            return None
        # the content header frame
        h = method_end + 1
        if h + 21 > n:
            return INCOMPLETE
        kind, chan, size = _FRAME_HEADER.unpack_from(buf, h)
        if kind != _HEADER or chan != channel:
            return None
        header_end = h + 7 + size
        if header_end >= n:
            return INCOMPLETE
        if buf[header_end] != _FRAME_END:
            return None
        body_size = _HEADER_FIELDS.unpack_from(buf, h + 7)[2]
        properties = decode_properties(buf, h + 19)
    except (struct.error, IndexError, ValueError, TypeError, KeyError):
        return None  # pika decodes it (and raises its own error if it is broken)
    # the body frames
    b = header_end + 1
    frames = 2
    if body_size == 0:
        return _new(ParsedDelivery, (b, frames, tag, redelivered, exchange, routing_key, properties, b""))
    parts: list[bytes] = []
    got = 0
    while got < body_size:
        if b + 7 > n:
            return INCOMPLETE
        kind, chan, size = _FRAME_HEADER.unpack_from(buf, b)
        if kind != _BODY or chan != channel:
            return None
        body_end = b + 7 + size
        if body_end >= n:
            return INCOMPLETE
        if buf[body_end] != _FRAME_END:
            return None
        parts.append(buf[b + 7:body_end])
        got += size
        frames += 1
        b = body_end + 1
    if got != body_size:
        return None
    body = parts[0] if len(parts) == 1 else b"".join(parts)
    return _new(ParsedDelivery, (b, frames, tag, redelivered, exchange, routing_key, properties, body))
