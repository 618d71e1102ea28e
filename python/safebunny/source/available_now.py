"""An ``availableNow`` run ends only when the messages counted at its start have been read, and, with option
``availableNowAwaitFile``, not before that file is there (what arrives meanwhile is read too).

A take that comes back empty before then does not end the run: a passive declare on the consumer's channel
says whether a message is still ready at the broker or buffered, and only when none is may the run end;
messages that stay ready without reaching this consumer for ``timeout`` seconds fail the run. Why:
docs/source.md (the ``availableNow`` bullet).
"""

from __future__ import annotations

import logging
import time

from safebunny.errors import SafeBunnyBrokerError
from safebunny.source.consumer import Delivery, QueueConsumer
from safebunny.storage.pause import await_file_present

__all__: list[str] = []

#: how long an ``availableNow`` run waits at most for its ``availableNowAwaitFile``; then whoever was to write it
#: is taken to be gone (a drain whose process died) and the run ends as a plain one does
AWAIT_FILE_MAX_S = 3600.0

log = logging.getLogger("safebunny.source")


def take_the_rest(consumer: QueueConsumer, count: int, max_bytes: int | None, wait: float, timeout: float,
                  missing: int) -> list[Delivery]:
    """Deliveries for an ``availableNow`` run still ``missing`` messages of its start count, after a take
    found none: an empty list only when the broker holds none ready for this consumer."""
    deadline = time.monotonic() + timeout
    while True:
        ready = consumer.acks.queue_depth()  # a round trip: deliveries sent before its answer are buffered now
        if ready <= 0 and consumer.buffered() <= 0:
            log.info("availableNow on queue %r: %d message(s) counted at the start are no longer there (another "
                     "consumer took them, they expired, or the queue was purged); the run ends", consumer.queue,
                     missing)
            return []
        deliveries = consumer.take(count, max_bytes, max(wait, 0.05))  # never a busy loop of round trips
        if deliveries:
            return deliveries
        if time.monotonic() >= deadline:
            raise SafeBunnyBrokerError(
                f"availableNow on queue {consumer.queue!r}: {missing} message(s) counted at the start are still to "
                f"read and {ready} wait ready at the broker, but none reached this consumer in {timeout:g} s (is "
                "another consumer active on a single-active-consumer queue?). The run fails rather than end as "
                "complete; restart it (option 'reconnectTimeoutMs' sets the wait).")


class AwaitedFile:
    """The file an ``availableNow`` run awaits before it may end (option ``availableNowAwaitFile``)."""

    def __init__(self, path: str, queue: str) -> None:
        self.path, self.queue = path, queue
        self.since = time.monotonic()

    def arrived(self) -> bool:
        """Whether the file is there, or was waited for :data:`AWAIT_FILE_MAX_S` (then with a warning)."""
        if await_file_present(self.path):
            return True
        if time.monotonic() - self.since < AWAIT_FILE_MAX_S:
            return False
        log.warning("availableNow on queue %r: %s did not appear in %.0f s; the run ends once it has read what "
                    "the queue holds now", self.queue, self.path, AWAIT_FILE_MAX_S)
        return True
