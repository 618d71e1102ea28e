"""Stream-queue offset arithmetic (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from safebunny.errors import SafeBunnyDataLossError, SafeBunnyError
from safebunny.options.source import parse_ending_offsets
from safebunny.streams.offsets import (
    StreamBounds,
    capped_end,
    check_data_loss,
    from_spark_offset,
    lost_offsets,
    resolve_end,
    resolve_start,
    split_range,
    to_spark_offset,
)


@given(st.integers(0, 10**12), st.integers(0, 10_000), st.integers(1, 64))
def test_split_range_covers_everything_disjointly(start, length, parts):
    end = start + length
    ranges = split_range(start, end, parts)
    assert len(ranges) == min(parts, length)
    covered = start
    for lo, hi in ranges:
        assert lo == covered and hi > lo
        covered = hi
    assert covered == end or (length == 0 and ranges == [])
    sizes = [hi - lo for lo, hi in ranges]
    assert not sizes or max(sizes) - min(sizes) <= 1


def test_split_range_examples_and_errors():
    assert split_range(10, 20, 3) == [(10, 14), (14, 17), (17, 20)]
    assert split_range(5, 5, 4) == []
    assert split_range(0, 2, 8) == [(0, 1), (1, 2)]
    with pytest.raises(ValueError):
        split_range(0, 10, 0)
    with pytest.raises(ValueError):
        split_range(10, 0, 1)


@given(st.integers(0, 10**15))
def test_spark_offset_round_trip(n):
    assert from_spark_offset(to_spark_offset(n)) == n


@pytest.mark.parametrize("bad", [None, {}, {"offset": -1}, {"offset": "3"}, {"offset": True}, {"seq": 3}])
def test_from_spark_offset_rejects_foreign_checkpoints(bad):
    with pytest.raises(SafeBunnyError, match="new checkpoint"):
        from_spark_offset(bad)


def test_resolve_start():
    bounds = StreamBounds(first=100, tail=250)
    assert resolve_start("earliest", bounds) == 100
    assert resolve_start("latest", bounds) == 250
    assert resolve_start(7, bounds) == 7
    assert resolve_start(999, bounds) == 999
    assert resolve_start({"timestamp": 1}, bounds, timestamp_offset=180) == 180
    assert resolve_start({"timestamp": 1}, bounds, timestamp_offset=None) == 250
    assert resolve_start({"timestamp": 1}, bounds, timestamp_offset=50) == 100
    with pytest.raises(ValueError):
        resolve_start("sometime", bounds)


def test_stream_bounds_validation():
    with pytest.raises(ValueError):
        StreamBounds(first=5, tail=4)


@given(st.integers(0, 10**9), st.integers(0, 10**9), st.one_of(st.none(), st.integers(1, 10**6)),
       st.one_of(st.none(), st.integers(1, 10**9)), st.floats(0, 10**5))
def test_capped_end_properties(start, tail, max_messages, max_bytes, avg):
    end = capped_end(start, tail, max_messages=max_messages, max_bytes=max_bytes, avg_message_bytes=avg)
    assert end >= start
    assert end <= max(start, tail)
    if max_messages is not None:
        assert end - start <= max_messages
    if tail > start and (max_messages is None or max_messages >= 1):
        assert end > start  # always progress when there is data


def test_capped_end_examples():
    assert capped_end(10, 100) == 100
    assert capped_end(10, 100, max_messages=5) == 15
    assert capped_end(10, 100, max_bytes=1000, avg_message_bytes=100.0) == 20
    assert capped_end(10, 100, max_bytes=10, avg_message_bytes=100.0) == 11
    assert capped_end(10, 100, max_bytes=1000, avg_message_bytes=0.0) == 100
    assert capped_end(10, 5) == 10


def test_lost_offsets_and_data_loss():
    assert lost_offsets(10, 20, 5) is None
    assert lost_offsets(10, 20, 10) is None
    assert lost_offsets(10, 20, 15) == (10, 15)
    assert lost_offsets(10, 20, 40) == (10, 20)
    with pytest.raises(SafeBunnyDataLossError) as info:
        check_data_loss("events", 10, 20, 15, True)
    text = str(info.value)
    for words in ("'events'", "offsets 10 to 14", "5 messages", "oldest stored offset is 15",
                  "failOnDataLoss=false", "startingOffsets=earliest"):
        assert words in text
    warnings: list[str] = []
    assert check_data_loss("events", 10, 20, 15, False, warnings.append) == 15
    assert check_data_loss("events", 10, 20, 40, False, warnings.append) == 20
    assert len(warnings) == 2 and "SKIPPING LOST MESSAGES" in warnings[0]
    assert check_data_loss("events", 10, 20, 3, True) == 10


def test_ending_offsets():
    from safebunny.errors import SafeBunnyOptionError

    assert parse_ending_offsets("endingOffsets", " Latest ") == "latest"
    assert parse_ending_offsets("endingOffsets", "42") == 42
    for bad in ("-1", "earliest", "timestamp:5", ""):
        with pytest.raises(SafeBunnyOptionError, match="'endingOffsets'"):
            parse_ending_offsets("endingOffsets", bad)
    assert resolve_end(None, 5, 100) == 100
    assert resolve_end("latest", 5, 100) == 100
    assert resolve_end(50, 5, 100) == 50
    assert resolve_end(500, 5, 100) == 100
    assert resolve_end(3, 5, 100) == 5


# -- a re-created stream ----------------------------------------------------------------
def test_batch_start_is_the_start_offset_unless_the_end_resets():
    from safebunny.streams.offsets import batch_start

    assert batch_start({"offset": 50}, {"offset": 70}) == 50
    assert batch_start({"offset": 50}, {"offset": 20, "resetFrom": 0}) == 0
    assert batch_start({"offset": 50}, {"offset": 20, "resetFrom": 30}) == 50  # a reset beyond its end is ignored


def test_reset_message_says_what_happened_and_what_to_do():
    from safebunny.streams.offsets import StreamBounds, reset_message

    text = reset_message("orders", 500, StreamBounds(0, 200))
    for words in ("'orders'", "offset 500", "ends at offset 200", "re-created", "new checkpoint",
                  "startingOffsets=earliest", "failOnDataLoss=false"):
        assert words in text


def test_anchor_is_offset_and_body_hash():
    from safebunny.streams.offsets import anchor_offset, make_anchor, replaced_message

    a = make_anchor(49, b"old49")
    assert a.startswith("49:") and len(a) == 3 + 16
    assert make_anchor(49, b"old49") == a != make_anchor(49, b"new49") != make_anchor(48, b"old49")
    assert make_anchor(3, None) == make_anchor(3, b"")
    assert anchor_offset(a) == 49
    assert anchor_offset(None) is None and anchor_offset("x:y") is None and anchor_offset(7) is None
    text = replaced_message("orders", 50, 49)
    assert "offset 50" in text and "offset 49 is not the one stored there now" in text and "failOnDataLoss" in text
