"""The delivery decoder (safebunny.amqp.frame_decode) and the frame tap against pika's own encoder and decoder.

Every frame here is marshalled by pika; every expected value is what pika's decoder makes of the same
bytes. The tap is fed through a stand-in for pika's connection that records what reaches pika (pure
logic: no broker is claimed here; tests/integration/test_consumer*.py run the tap on a real broker).
"""

from __future__ import annotations

import random
from datetime import datetime
from decimal import Decimal
from typing import Any

import pytest
from pika import frame, spec

from safebunny.amqp.frame_decode import INCOMPLETE, Properties, decode_properties, parse_delivery
from safebunny.amqp.frame_tap import FrameTap, install

_FIELDS = ("content_type", "content_encoding", "headers", "delivery_mode", "priority", "correlation_id",
           "reply_to", "expiration", "message_id", "timestamp", "type", "user_id", "app_id", "cluster_id")


def delivery_bytes(channel: int, tag: int, body: bytes, props: spec.BasicProperties | None = None,
                   frame_max: int = 131072, redelivered: bool = False, exchange: str = "ex",
                   routing_key: str = "rk") -> bytes:
    props = props or spec.BasicProperties()
    out = frame.Method(channel, spec.Basic.Deliver("ctag-1", tag, redelivered, exchange, routing_key)).marshal()
    out += frame.Header(channel, len(body), props).marshal()
    step = frame_max - 8
    for i in range(0, len(body), step):
        out += frame.Body(channel, body[i:i + step]).marshal()
    return out


def pika_view(data: bytes) -> list[Any]:
    """What pika decodes from ``data``: a list of its frames."""
    frames = []
    while data:
        used, f = frame.decode_frame(data)
        assert f is not None
        frames.append(f)
        data = data[used:]
    return frames


def as_dict(props: Any) -> dict[str, Any]:
    return {name: getattr(props, name) for name in _FIELDS}


FULL = spec.BasicProperties(
    content_type="application/json", content_encoding="gzip",
    headers={"x-delivery-count": 3, "s": "é", "b": b"\xff\x00", "n": None, "d": Decimal("1.25"),
             "t": datetime(2026, 1, 2, 3, 4, 5), "nested": {"a": [1, "x", True]}, "yes": True},
    delivery_mode=2, priority=7, correlation_id="corr-1", reply_to="rq", expiration="60000",
    message_id="m-ü-1", timestamp=1_700_000_000, type="OrderPlaced", user_id="guest", app_id="app",
    cluster_id="c1")


@pytest.mark.parametrize("props", [spec.BasicProperties(), FULL, spec.BasicProperties(message_id="only"),
                                   spec.BasicProperties(delivery_mode=1, timestamp=0, headers={})],
                         ids=["none", "all", "message_id", "zeros"])
def test_properties_decode_as_pika_does(props: spec.BasicProperties) -> None:
    data = delivery_bytes(1, 5, b"body", props)
    header = pika_view(data)[1]
    parsed = parse_delivery(data, 0, 1)
    assert parsed is not INCOMPLETE and parsed is not None
    assert as_dict(parsed.properties) == as_dict(header.properties)
    assert isinstance(parsed.properties, Properties)


def _field(kind: bytes, payload: bytes) -> bytes:
    return kind + payload


def test_header_tables_decode_as_pika_does_for_every_field_kind() -> None:
    """Each kind the fast path reads (long strings, 64- and 32-bit ints, booleans) and each it hands to pika,
    encoded by hand where pika's encoder would pick another kind; keys and strings also as non-UTF-8 bytes."""
    import struct

    fields = [
        (b"s", _field(b"S", struct.pack(">I", 3) + b"abc")), (b"e", _field(b"S", struct.pack(">I", 0))),
        (b"u", _field(b"S", struct.pack(">I", 2) + "é".encode())),
        (b"bad", _field(b"S", struct.pack(">I", 2) + b"\xff\xfe")), (b"\xff", _field(b"t", b"\x01")),
        (b"l", _field(b"l", struct.pack(">q", -(2**62)))), (b"L", _field(b"L", struct.pack(">q", 2**40))),
        (b"I", _field(b"I", struct.pack(">i", -7))), (b"i", _field(b"i", struct.pack(">I", 2**32 - 1))),
        (b"f", _field(b"t", b"\x00")), (b"b", _field(b"b", b"\xfe")), (b"B", _field(b"B", b"\xfe")),
        (b"U", _field(b"U", struct.pack(">h", -2))), (b"s16", _field(b"s", struct.pack(">h", -3))),
        (b"d", _field(b"d", struct.pack(">d", 2.5))), (b"D", _field(b"D", b"\x02" + struct.pack(">i", 125))),
        (b"V", b"V"), (b"T", _field(b"T", struct.pack(">Q", 1_700_000_000))),
        (b"x", _field(b"x", struct.pack(">I", 2) + b"\x00\x01")),
        (b"A", _field(b"A", struct.pack(">I", 8) + b"S" + struct.pack(">I", 1) + b"z" + b"t\x01")),
        (b"F", _field(b"F", struct.pack(">I", 7) + b"\x01kS" + struct.pack(">I", 0))),
    ]
    body = b"".join(bytes([len(key)]) + key + value for key, value in fields)
    table = struct.pack(">I", len(body)) + body
    props = b"".join(spec.BasicProperties(headers={"placeholder": "x"}).encode())
    # swap the placeholder table for the hand-made one (the flag words come first, then the table)
    start = 2
    size = struct.unpack_from(">I", props, start)[0]
    encoded = bytes(props[:start]) + table + bytes(props[start + 4 + size:])
    expected = spec.BasicProperties()
    expected.decode(encoded)
    got = decode_properties(encoded, 0)
    assert got.headers == expected.headers
    assert [type(v) for v in got.headers.values()] == [type(v) for v in expected.headers.values()]
    assert len(got.headers) == len(fields)


def test_non_utf8_short_strings_stay_bytes_as_in_pika() -> None:
    # pika cannot encode such a string itself: patch the bytes of an encoded message id
    data = bytearray(delivery_bytes(1, 5, b"x", spec.BasicProperties(message_id="ab")))
    at = bytes(data).index(b"\x02ab")
    data[at + 1:at + 3] = b"\xff\xfe"
    expected = pika_view(bytes(data))[1].properties.message_id
    parsed = parse_delivery(bytes(data), 0, 1)
    assert parsed.properties.message_id == expected == b"\xff\xfe"


@pytest.mark.parametrize("size", [0, 1, 1000, 131072 - 8, 131072 - 7, 300_000])
def test_method_and_body_match_pika_across_body_frames(size: int) -> None:
    body = random.Random(size).randbytes(size)
    data = delivery_bytes(3, 2**40 + 7, body, FULL, redelivered=True, exchange="amq.dïrect", routing_key="")
    frames = pika_view(data)
    method = frames[0].method
    parsed = parse_delivery(data, 0, 3)
    assert parsed.end == len(data)
    assert parsed.frames == len(frames)
    assert parsed.body == body
    assert (parsed.delivery_tag, parsed.redelivered, parsed.exchange, parsed.routing_key) == (
        method.delivery_tag, method.redelivered, method.exchange, method.routing_key)


def test_every_cut_short_of_the_last_byte_is_incomplete() -> None:
    data = delivery_bytes(1, 9, b"y" * 300, FULL, frame_max=4096 + 8)
    for cut in range(len(data)):
        assert parse_delivery(data[:cut], 0, 1) is INCOMPLETE, cut
    assert parse_delivery(data, 0, 1).end == len(data)


def test_what_is_not_a_contiguous_delivery_is_left_to_pika() -> None:
    one = delivery_bytes(1, 1, b"abc")
    method_len = len(frame.Method(1, spec.Basic.Deliver("ctag-1", 1, False, "ex", "rk")).marshal())
    heartbeat = frame.Heartbeat().marshal()
    assert parse_delivery(one, 0, 2) is None  # another channel
    assert parse_delivery(heartbeat + one, 0, 1) is None  # not a method frame
    assert parse_delivery(frame.Method(1, spec.Basic.Ack(5)).marshal() + one, 0, 1) is None  # another method
    assert parse_delivery(one[:method_len] + heartbeat + one[method_len:], 0, 1) is None  # interleaved
    broken = bytearray(one)
    broken[method_len - 1] = 0x00  # the method frame's end marker
    assert parse_delivery(bytes(broken), 0, 1) is None
    # a short heartbeat at the end of a chunk is answered, not waited on
    assert parse_delivery(heartbeat, 0, 1) is None


def test_decode_properties_with_continued_flag_words() -> None:
    # a flag word with bit 0 set announces another word (no basic property uses it, pika reads it)
    encoded = bytes([0x00, 0x81, 0x00, 0x00]) + b"\x03abc"
    assert decode_properties(encoded, 0).message_id == "abc"


# ---------------------------------------------------------------------------------------------- the tap
class StandIn:
    """The parts of pika's Connection the tap touches; records what it leaves to pika."""

    def __init__(self) -> None:
        self._frame_buffer = b""
        self.bytes_received = 0
        self.frames_received = 0
        self.to_pika: list[Any] = []

    def _on_data_available(self, data: bytes) -> None:  # pragma: no cover - replaced by the tap
        raise AssertionError("the tap should have replaced this")

    def _process_frame(self, f: Any) -> None:
        self.frames_received += 1
        self.to_pika.append(f)


def stream(seed: int, big: bool) -> tuple[bytes, list[tuple[str, Any]]]:
    """Deliveries on channel 1 mixed with heartbeats, a reply and a delivery on channel 2 (with bodies over
    two frames when ``big``)."""
    rnd = random.Random(seed)
    data = b""
    expected: list[tuple[str, Any]] = []
    for tag in range(1, 60):
        roll = rnd.random()
        if roll < 0.1:
            data += frame.Heartbeat().marshal()
            expected.append(("pika", "Heartbeat"))
        elif roll < 0.15:
            data += frame.Method(1, spec.Queue.DeclareOk("q", 5, 1)).marshal()
            expected.append(("pika", "Queue.DeclareOk"))
        body = rnd.randbytes(rnd.choice([0, 10, 5000, 140_000] if big else [0, 10, 300]))
        data += delivery_bytes(1, tag, body, FULL if rnd.random() < 0.3 else None)
        expected.append(("fast", (tag, body)))
    data += delivery_bytes(2, 1, b"other channel")
    expected += [("pika", "Basic.Deliver"), ("pika", "Header"), ("pika", "Body")]
    return data, expected


@pytest.mark.parametrize("chunk", [1, 7, 100, 4096, 65536, 10**9])
def test_tap_keeps_order_and_counts_as_pika_would(chunk: int) -> None:
    data, expected = stream(chunk, big=chunk >= 100)  # byte by byte, pika's buffer copying is quadratic
    impl = StandIn()
    seen: list[tuple[str, Any]] = []

    def on_delivery(tag: int, redelivered: bool, exchange: Any, routing_key: Any, props: Any, body: bytes) -> None:
        seen.append(("fast", (tag, body)))

    tap = install(impl, 1, on_delivery)
    assert tap is not None and impl._on_data_available == tap.feed
    original = impl._process_frame

    def record(f: Any) -> None:
        original(f)
        name = f.method.NAME if isinstance(f, frame.Method) else type(f).__name__
        seen.append(("pika", name))

    impl._process_frame = record  # type: ignore[method-assign]
    for i in range(0, len(data), chunk):
        impl._on_data_available(data[i:i + chunk])
    assert seen == expected
    assert impl._frame_buffer == b""
    assert impl.bytes_received == len(data)
    assert impl.frames_received == len(pika_view(data))
    assert tap.fast == sum(1 for kind, _ in expected if kind == "fast")


def test_tap_keeps_an_unfinished_delivery_for_the_next_chunk() -> None:
    data = delivery_bytes(1, 1, b"z" * 100)
    impl = StandIn()
    got: list[int] = []
    tap = FrameTap(impl, 1, lambda tag, *_: got.append(tag))
    tap.feed(data[:50])
    assert got == [] and impl._frame_buffer == data[:50] and impl.bytes_received == 0
    tap.feed(data[50:])
    assert got == [1] and impl._frame_buffer == b""


def test_a_callback_error_leaves_the_rest_buffered() -> None:
    data = delivery_bytes(1, 1, b"a") + delivery_bytes(1, 2, b"b")
    impl = StandIn()

    def fail(tag: int, *_: Any) -> None:
        raise RuntimeError(f"refused {tag}")

    tap = FrameTap(impl, 1, fail)
    with pytest.raises(RuntimeError, match="refused 1"):
        tap.feed(data)
    assert impl._frame_buffer == delivery_bytes(1, 2, b"b")


def test_install_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAFEBUNNY_PIKA_DECODE", "1")
    assert install(StandIn(), 1, lambda *_: None) is None


def test_install_leaves_a_connection_without_the_internals_alone() -> None:
    class Bare:
        pass

    assert install(Bare(), 1, lambda *_: None) is None
