"""An ``availableNow`` run ends only when the messages counted at its start have been read.

The reader counts the queue when the run starts and reads that many. A ``take`` that comes back empty
before then does not mean the rest is gone: a large body can still be on its way (a 10 MB message under
CPU load arrived after ``pollTimeoutMs``, and the run ended with half the queue unread). So the reader
asks the broker: a passive declare on the consumer's channel is answered after every delivery the
broker sent before it, so once it returns, a message still ready at the broker or waiting in the buffer
is one this run must read, and it keeps taking. Only when the broker holds none ready and nothing is
buffered has the count gone elsewhere (another consumer took those messages, they expired, the queue
was purged), and the run may end. Messages that stay ready without reaching this consumer for
``timeout`` seconds fail the run with a clear error instead of ending it as complete.
"""

from __future__ import annotations

import logging
import time

from safebunny.errors import SafeBunnyBrokerError
from safebunny.source.consumer import Delivery, QueueConsumer

__all__: list[str] = []

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
