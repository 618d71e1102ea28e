"""The interface of a client that reads stream queues by offset, and what its two implementations share.

:class:`StreamQueueClient` has two implementations: :class:`~safebunny.streams.rstream_client.RStreamClient`
(the stream protocol, about ten times cheaper here) and :class:`~safebunny.streams.amqp091_client.AmqpStreamClient`
(AMQP 0-9-1 with ``x-stream-offset``); :func:`safebunny.streams.stream_source.open_stream_client` picks one. Both
read ``[start, end)`` exactly (entries of a chunk before ``start`` are dropped); their differences are in
docs/source.md ("Stream queues").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from safebunny.errors import SafeBunnyBrokerError
from safebunny.streams.offsets import StreamBounds

__all__: list[str] = []

BATCH_ROWS = 10_000
#: A read fails when the broker delivers nothing for this long while offsets are still due.
READ_IDLE_TIMEOUT_S = 60.0
#: Any single stream-protocol request (subscribe, metadata, close) that takes longer fails.
REQUEST_TIMEOUT_S = 30.0
#: Over AMQP 0-9-1 the tail is what the newest chunk on delivered within this long at most (a stream written
#: faster than it is read gives a lower tail; the next look-up finds the rest).
TAIL_BUDGET_S = 10.0
#: Subscription ids are one byte in the stream protocol.
SUBSCRIPTION_IDS = 256


def idle_error(stream: str, where: str, pos: int, end: int) -> SafeBunnyBrokerError:
    """The error of a read to which the broker delivered nothing for :data:`READ_IDLE_TIMEOUT_S`."""
    return SafeBunnyBrokerError(
        f"Stream queue {stream!r} at {where} delivered nothing for {READ_IDLE_TIMEOUT_S:.0f} s while offsets {pos} "
        f"to {end - 1} were still due. Was the stream deleted and re-created? Then restart the query from a new "
        "checkpoint.")


class StreamQueueClient:
    """Offset-level access to one broker's stream queues. Use as a context manager."""

    protocol: str = ""

    def bounds(self, stream: str, empty_wait_s: float) -> StreamBounds:
        """The oldest stored offset, the tail (last offset + 1) and a message-size estimate.

        A stream never written to has no chunk to look at; it is taken as empty when nothing
        arrives within ``empty_wait_s``.
        """
        raise NotImplementedError

    def offset_for_timestamp(self, stream: str, epoch_ms: int, empty_wait_s: float, stored: bool = False) -> int | None:
        """The first offset of the first chunk written at or after ``epoch_ms``; None if none. ``stored``: the
        stream's bounds, read just before, hold messages (a client that asks for the newest chunk to compare its
        time then waits for it as for any read, not ``empty_wait_s``)."""
        raise NotImplementedError

    def first_message_from(self, stream: str, offset: int, wait_s: float) -> tuple[int, bytes | None] | None:
        """``(offset, body)`` of the first stored message at or after ``offset``; None if none arrives in time."""
        raise NotImplementedError

    def read_range(self, stream: str, queue_name: str, start: int, end: int, *, include_headers: bool,
                   fail_on_data_loss: bool, warn: Callable[[str], None] | None = None,
                   batch_rows: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
        """Arrow batches with exactly the stored messages of ``[start, end)``, in offset order.

        Offsets that retention removed raise :class:`SafeBunnyDataLossError`, or are skipped with
        ``warn(message)`` when ``fail_on_data_loss`` is false.
        """
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> StreamQueueClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
