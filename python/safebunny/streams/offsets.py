"""The pure arithmetic of the stream-queue source's offsets (no I/O).

The source's Spark offset is ``{"offset": n}``, the next stream offset to read, so a batch between Spark
offsets ``a`` and ``b`` reads ``[a, b)``; the "tail" is the last committed offset + 1, and 0 for a stream
never written to. Offsets can have gaps (docs/source.md, "Stream queues"), so a delivery after the requested
start is only data loss when the stream's oldest stored message is after that start.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import accumulate
from typing import TYPE_CHECKING, Any

from safebunny.errors import SafeBunnyDataLossError, SafeBunnyError

if TYPE_CHECKING:
    from safebunny.options.source import EndingOffsets, StartingOffsets

__all__ = ["StreamBounds", "to_spark_offset", "from_spark_offset", "split_range", "resolve_start", "capped_end",
           "lost_offsets", "check_data_loss", "RESET_KEY", "ANCHOR_KEY", "make_anchor", "anchor_offset",
           "replaced_message", "reset_message", "batch_start", "resolve_end"]

OFFSET_KEY = "offset"
#: In an end offset: the batch reads from this offset instead of from its start offset (the
#: stream was re-created and ``failOnDataLoss=false`` chose to go on at the new stream's start).
RESET_KEY = "resetFrom"
#: In an end offset ``n``: ``"<o>:<digest>"`` of the first stored message at or after ``n - 1``, so a
#: later look-up can tell that the stream was replaced even when the new one is already longer.
ANCHOR_KEY = "anchor"


@dataclass(frozen=True)
class StreamBounds:
    """What the broker says about a stream at one moment.

    ``first``: the oldest offset still stored (after retention), ``tail``: last offset + 1
    (``first == tail`` means empty), ``avg_message_bytes``: an estimate of one message's
    stored size (from the newest chunk), used for ``maxBytesPerTrigger``.
    """

    first: int
    tail: int
    avg_message_bytes: float = 0.0

    def __post_init__(self) -> None:
        if self.first < 0 or self.tail < self.first:
            raise ValueError(f"invalid stream bounds: first={self.first}, tail={self.tail}")


def to_spark_offset(next_offset: int) -> dict[str, int]:
    """The Spark offset dict for "the next stream offset to read is ``next_offset``"."""
    return {OFFSET_KEY: int(next_offset)}


def from_spark_offset(offset: Mapping[str, Any] | None) -> int:
    """The next stream offset to read from a Spark offset dict (as :func:`to_spark_offset` made it)."""
    if not isinstance(offset, Mapping) or not isinstance(offset.get(OFFSET_KEY), int) \
            or isinstance(offset.get(OFFSET_KEY), bool) or offset[OFFSET_KEY] < 0:
        raise SafeBunnyError(
            f"This checkpoint's source offset {offset!r} is not a stream-queue offset "
            "(expected {'offset': <non-negative integer>}). Was the checkpoint written by a query "
            "over a classic or quorum queue? Use a new checkpoint location for a stream queue."
        )
    return offset[OFFSET_KEY]


def split_range(start: int, end: int, min_partitions: int) -> list[tuple[int, int]]:
    """Split ``[start, end)`` into ``min(min_partitions, end - start)`` contiguous, disjoint,
    non-empty ranges of nearly equal size (they differ by at most one), in order.

    An empty range gives no partitions.
    """
    if min_partitions < 1:
        raise ValueError(f"min_partitions must be >= 1, but got {min_partitions!r}")
    if end < start:
        raise ValueError(f"end must be >= start, but got start={start!r}, end={end!r}")
    total = end - start
    parts = min(min_partitions, total)
    if parts == 0:
        return []
    size, extra = divmod(total, parts)
    cuts = list(accumulate((size + 1 if i < extra else size for i in range(parts)), initial=start))
    return list(zip(cuts, cuts[1:], strict=False))


def resolve_start(spec: StartingOffsets, bounds: StreamBounds,
                  timestamp_offset: int | None = None) -> int:
    """The first offset a new query reads, from the parsed ``startingOffsets``.

    ``earliest`` -> the oldest stored offset; ``latest`` -> the tail (only messages published
    from now on); a number -> itself (it may be below ``first``, which the read then reports as
    data loss, or beyond the tail, which waits for those offsets); ``{"timestamp": ms}`` ->
    ``timestamp_offset``, which the caller looked up on the broker (``None`` means no message
    at or after that time: the tail).
    """
    if spec == "earliest":
        return bounds.first
    if spec == "latest":
        return bounds.tail
    if isinstance(spec, int) and not isinstance(spec, bool):
        if spec < 0:
            raise ValueError(f"a starting offset must be >= 0, but got {spec!r}")
        return spec
    if isinstance(spec, Mapping) and "timestamp" in spec:
        return bounds.tail if timestamp_offset is None else max(timestamp_offset, bounds.first)
    raise ValueError(f"unknown startingOffsets value {spec!r}")


def capped_end(start: int, tail: int, *, max_messages: int | None = None, max_bytes: int | None = None,
               avg_message_bytes: float = 0.0) -> int:
    """The end offset of the next batch: ``tail`` capped by the admission limits.

    ``max_messages`` caps the count exactly. ``max_bytes`` is approximate: it allows
    ``max_bytes // avg_message_bytes`` messages (at least one, so a query always progresses);
    without an estimate (``avg_message_bytes <= 0``) it does not cap. A tail below ``start``
    (a stale look-up) returns ``start``: the end never moves backwards.
    """
    end = max(start, tail)
    if max_messages is not None:
        end = min(end, start + max(1, int(max_messages)))
    if max_bytes is not None and avg_message_bytes > 0:
        end = min(end, start + max(1, int(max_bytes // max(1.0, avg_message_bytes))))
    return end


def lost_offsets(start: int, end: int, first_available: int) -> tuple[int, int] | None:
    """The part of ``[start, end)`` that retention removed, given the oldest stored offset."""
    if first_available <= start or start >= end:
        return None
    return (start, min(end, first_available))


def check_data_loss(stream: str, start: int, end: int, first_available: int, fail_on_data_loss: bool,
                    warn: Any = None) -> int:
    """Check ``[start, end)`` against the oldest stored offset; return where reading starts.

    Raises :class:`SafeBunnyDataLossError` when offsets were lost and ``fail_on_data_loss``;
    otherwise calls ``warn(message)`` (when given) and returns the first offset still stored.
    """
    lost = lost_offsets(start, end, first_available)
    if lost is None:
        return start
    lo, hi = lost
    message = (
        f"Stream queue {stream!r}: offsets {lo} to {hi - 1} ({hi - lo} messages) were requested but are "
        f"no longer stored; the oldest stored offset is {first_available} (retention, e.g. "
        "x-max-length-bytes or x-max-age, removed them before this query read them). Either restart the "
        "query from a new checkpoint with startingOffsets=earliest, raise the stream's retention or read "
        "it more often, or set failOnDataLoss=false to skip the lost offsets with a warning."
    )
    if fail_on_data_loss:
        raise SafeBunnyDataLossError(message)
    if warn is not None:
        warn("failOnDataLoss=false, SKIPPING LOST MESSAGES: " + message)
    return min(end, first_available)


#: what both errors for a stream replaced under a checkpoint go on to say
_REPLACED = ("stream was deleted and re-created (or replaced) since the checkpoint was written, and the query cannot "
             "tell which of the new stream's messages it has read: resuming at the old offset would skip every new "
             "message below it. Restart the query from a new checkpoint (with startingOffsets=earliest to read the "
             "new stream from its start), or set failOnDataLoss=false to go on from the new stream's oldest offset.")


def reset_message(stream: str, checkpoint_offset: int, bounds: StreamBounds) -> str:
    """The words of the error (or warning) for a checkpoint offset beyond the stream's tail."""
    return (
        f"Stream queue {stream!r}: this query's checkpoint is at offset {checkpoint_offset}, but the stream now "
        f"ends at offset {bounds.tail} (oldest stored offset {bounds.first}). Offsets never go backwards, so the "
        + _REPLACED)


def make_anchor(offset: int, value: bytes | None) -> str:
    """The anchor of a message: its offset and the SHA-256 (16 hex digits) of its body.

    Only the body and the offset, so that both protocols (stream, AMQP 0-9-1) give the same anchor.
    """
    return f"{int(offset)}:{hashlib.sha256(value or b'').hexdigest()[:16]}"


def anchor_offset(anchor: Any) -> int | None:
    """The offset part of an anchor, or None when ``anchor`` is not one (absent, or from elsewhere)."""
    if not isinstance(anchor, str) or ":" not in anchor:
        return None
    head = anchor.split(":", 1)[0]
    return int(head) if head.isdigit() else None


def replaced_message(stream: str, checkpoint_offset: int, anchor_at: int) -> str:
    """The words of the error (or warning) for a checkpoint whose last message is not there any more."""
    return (
        f"Stream queue {stream!r}: this query's checkpoint is at offset {checkpoint_offset}, but the message the "
        f"query read at offset {anchor_at} is not the one stored there now (another body, or none). The "
        + _REPLACED)


def batch_start(start: Mapping[str, Any], end: Mapping[str, Any]) -> int:
    """Where the batch between Spark offsets ``start`` and ``end`` starts reading.

    Normally the start offset; an end offset with :data:`RESET_KEY` (the stream was re-created)
    starts at that offset of the new stream instead.
    """
    reset = end.get(RESET_KEY) if isinstance(end, Mapping) else None
    if isinstance(reset, int) and not isinstance(reset, bool) and 0 <= reset <= from_spark_offset(end):
        return reset
    return from_spark_offset(start)


def resolve_end(spec: EndingOffsets | None, start: int, tail: int) -> int:
    """The exclusive end of a batch read: ``latest`` (or unset) is the tail; a number is capped at the tail."""
    if spec is None or spec == "latest":
        return max(start, tail)
    return max(start, min(int(spec), tail))
