"""When :meth:`QueueConsumer.take` waits for more deliveries, decided from the consumer's flags alone.

Pure logic: the consumer is not started; a test double stands for its connection, and the test plays the
I/O thread (deliveries appended to the buffer, as the frame tap's callback does). Both cases were races
seen on a real broker, too rare to reproduce there on demand.
"""

from __future__ import annotations

import threading
import time

from safebunny.queues.consumer import Delivery, QueueConsumer

URI = "amqp://guest:guest@127.0.0.1:5672/%2F"


class _HeldConnection:
    """An open connection whose I/O thread has not run yet: callbacks wait in a list."""

    is_open = True

    def __init__(self) -> None:
        self.callbacks: list = []

    def add_callback_threadsafe(self, fn) -> None:  # type: ignore[no-untyped-def]
        self.callbacks.append(fn)


def _deliver(consumer: QueueConsumer, tags: range, body: bytes = b"x" * 200) -> None:
    """What the I/O thread does for each delivery of the current channel."""
    with consumer._cond:
        for tag in tags:
            consumer._buffer.append(Delivery(consumer.generation, tag, body, None, "", consumer.queue, False))
            consumer._last_tag = tag
            consumer.budget.in_count += 1
            consumer.budget.in_bytes += len(body)
        consumer.restarted = False
        consumer._cond.notify_all()


def _when(condition, timeout: float = 5.0) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.001)
    return False


def test_an_ack_asked_for_but_not_yet_written_counts_as_sent():
    # CI, under load: the commit of batch (0, 10] asked for its ack, the next take ran before the I/O thread
    # wrote it, found the prefetch (20) used up by tags 11..21, and returned 1 message instead of 10
    consumer = QueueConsumer(URI, "q", prefetch=20)
    consumer.generation = 1
    consumer._connection = _HeldConnection()
    consumer._ready.set()
    consumer.acks.backlog = 30
    _deliver(consumer, range(1, 22))
    with consumer._cond:
        for _ in range(20):  # batches (0, 10] and (10, 20] were taken; tag 21 waits in the buffer
            consumer._buffer.popleft()
    assert consumer.acks.ack_through(1, 10)
    assert consumer.acks.acked_tag == 0  # not written yet: the callback waits for the I/O thread

    def broker() -> None:  # once take waits for more, the freed prefetch brings tags 22..30
        if _when(lambda: consumer._want == 10):
            _deliver(consumer, range(22, 31))

    thread = threading.Thread(target=broker)
    thread.start()
    taken = consumer.take(10, None, first_wait=2.0, linger=1.0, fill_wait=2.0)
    thread.join()
    assert [d.delivery_tag for d in taken] == list(range(21, 31))


def test_an_ack_of_an_older_channel_does_not_count():
    consumer = QueueConsumer(URI, "q", prefetch=20)
    consumer.generation = 1
    consumer._connection = _HeldConnection()
    consumer._ready.set()
    _deliver(consumer, range(1, 21))
    assert consumer.acks.ack_through(1, 10)
    consumer.generation = 2  # the channel was replaced: its acks are lost, the broker redelivers
    consumer._last_tag, consumer.acks.acked_tag = 20, 0
    assert not consumer.can_grow()


def test_a_consumer_restarting_after_calibration_is_waited_for():
    # A fresh query with a byte budget consumes one delivery to learn the body size, pauses, and consumes again
    # with the full prefetch. While that basic.consume waits for the broker, take() must see the consumer as
    # restarting and wait for its deliveries, not hand out the single calibration delivery.
    consumer = QueueConsumer(URI, "q", prefetch=20000, max_buffered_bytes=1 << 20)
    consumer.generation = 1
    consumer.acks.backlog = 30000

    class _Channel:
        is_open = True

    consumer._channel = _Channel()
    _deliver(consumer, range(1, 2))  # the calibration delivery
    consumer.paused = True
    registered = threading.Event()
    consume_called = threading.Event()

    def consume() -> None:  # basic.qos + basic.consume: a round trip to the broker
        consume_called.set()
        registered.wait(10)

    consumer._consume = consume
    io_thread = threading.Thread(target=consumer.maybe_resume)
    io_thread.start()
    assert consume_called.wait(5)

    def broker() -> None:  # take waits for the restarted consumer's first delivery: the consume completes
        _when(lambda: consumer._want == 2, timeout=3.0)
        registered.set()
        _deliver(consumer, range(2, 12))

    thread = threading.Thread(target=broker)
    thread.start()
    taken = consumer.take(10000, None, first_wait=5.0, linger=0.5, fill_wait=5.0)
    thread.join()
    io_thread.join()
    assert len(taken) == 11
