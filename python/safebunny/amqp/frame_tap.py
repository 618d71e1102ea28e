"""Deliveries decoded from pika's incoming bytes before pika's own frame machinery sees them.

:class:`FrameTap` replaces one pika connection's ``_on_data_available``: a ``basic.deliver`` on the tapped
channel followed directly by its header and body frames is decoded by
:func:`safebunny.amqp.frame_decode.parse_delivery` and handed to ``on_delivery``; every other frame goes to pika
in order, and the connection's byte and frame counters advance as pika's would (for its heartbeat checker).
It relies on pika 1.x internals (docs/source.md); :func:`install` leaves the connection alone when they are
missing, and ``SAFEBUNNY_PIKA_DECODE=1`` in the environment turns the tap off.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

import pika
from pika.frame import decode_frame

from safebunny.amqp.frame_decode import INCOMPLETE, Properties, parse_delivery

__all__ = ["FrameTap", "install"]

log = logging.getLogger("safebunny.amqp.frame_tap")

#: ``(delivery_tag, redelivered, exchange, routing_key, properties, body)``
DeliveryCallback = Callable[[int, bool, Any, Any, Properties, bytes], None]

_REQUIRED = ("_on_data_available", "_frame_buffer", "_process_frame", "bytes_received", "frames_received")


class FrameTap:
    """Decode the deliveries of ``channel_number`` on ``impl`` (a pika ``Connection``) and pass them to
    ``on_delivery``; see the module docstring."""

    def __init__(self, impl: Any, channel_number: int, on_delivery: DeliveryCallback) -> None:
        self.impl = impl
        self.channel_number = channel_number
        self.on_delivery = on_delivery
        self.fast = 0  # deliveries decoded here

    def feed(self, data: bytes) -> None:
        """pika's ``_on_data_available``: process ``data`` after what an earlier chunk left unfinished."""
        impl = self.impl
        buf = impl._frame_buffer + data if impl._frame_buffer else data  # noqa: SLF001
        pos = 0
        n = len(buf)
        channel = self.channel_number
        deliver = self.on_delivery
        try:
            while pos < n:
                parsed = parse_delivery(buf, pos, channel)
                if parsed is INCOMPLETE:
                    break
                if parsed is not None:
                    impl.bytes_received += parsed.end - pos
                    impl.frames_received += parsed.frames
                    pos = parsed.end
                    self.fast += 1
                    deliver(parsed.delivery_tag, parsed.redelivered, parsed.exchange, parsed.routing_key,
                            parsed.properties, parsed.body)
                    continue
                # one frame for pika, as its own loop does: trim first, then process
                consumed, frame = decode_frame(buf[pos:] if pos else buf)
                if frame is None:
                    break
                pos += consumed
                impl.bytes_received += consumed
                impl._frame_buffer = buf[pos:]  # noqa: SLF001 - as pika leaves it while processing a frame
                impl._process_frame(frame)  # noqa: SLF001
                buf = impl._frame_buffer  # noqa: SLF001 - unchanged unless a callback fed more data
                pos = 0
                n = len(buf)
        finally:
            impl._frame_buffer = buf[pos:] if pos < n else b""  # noqa: SLF001


def install(impl: Any, channel_number: int, on_delivery: DeliveryCallback) -> FrameTap | None:
    """Tap ``impl``'s deliveries on ``channel_number``; None (pika decodes everything) when turned off or
    when this pika lacks an internal the tap relies on."""
    if os.environ.get("SAFEBUNNY_PIKA_DECODE") == "1":
        return None
    missing = [name for name in _REQUIRED if not hasattr(impl, name)]
    if missing:
        log.info("pika %s lacks %s: deliveries are decoded by pika", getattr(pika, "__version__", "?"),
                 ", ".join(missing))
        return None
    tap = FrameTap(impl, channel_number, on_delivery)
    impl._on_data_available = tap.feed  # noqa: SLF001 - an instance attribute shadows the method
    return tap
