"""When a take keeps waiting, from what it sees of the buffer and a clock (no consumer, no pika)."""

from __future__ import annotations

from safebunny.queues.take_policy import BufferView, TakeWaits


def _view(buffered: int = 0, paused: bool = False, can_grow: bool = True, restarted: bool = False,
          backlog: int = 0, failed: bool = False) -> BufferView:
    return BufferView(buffered, paused, can_grow, restarted, backlog, failed)


def test_an_empty_buffer_waits_for_the_first_message_until_first_wait() -> None:
    waits = TakeWaits(10, None, first_wait=1.0, linger=0.05, fill_wait=0.0, now=100.0)
    assert waits.until(_view(), 100.0) == 101.0 and waits.want == 1
    assert waits.until(_view(), 101.0) is None and waits.want == 0  # nothing came: take nothing


def test_after_the_first_message_it_lingers_while_more_arrive() -> None:
    waits = TakeWaits(10, None, first_wait=1.0, linger=0.05, fill_wait=0.0, now=100.0)
    assert waits.until(_view(buffered=1), 100.2) == 100.25 and waits.want == 10
    assert waits.until(_view(buffered=3), 100.24) == 100.25  # without fill the linger is the end
    assert waits.until(_view(buffered=3), 100.25) is None


def test_a_backlog_fills_the_batch_while_deliveries_keep_coming() -> None:
    waits = TakeWaits(10, None, first_wait=1.0, linger=0.05, fill_wait=1.0, now=100.0)
    assert waits.until(_view(buffered=2, backlog=50), 100.0) == 100.05
    assert waits.until(_view(buffered=5, backlog=50), 100.04) == 100.09  # a new delivery: another linger
    assert waits.until(_view(buffered=5, backlog=50), 100.09) is None  # a pause of one linger ends it
    full = TakeWaits(10, None, first_wait=1.0, linger=0.05, fill_wait=1.0, now=100.0)
    assert full.until(_view(buffered=2, backlog=50), 100.0) is not None
    assert full.until(_view(buffered=10, backlog=50), 100.01) is None  # the batch is full


def test_no_waiting_for_more_when_the_broker_cannot_send_more() -> None:
    waits = TakeWaits(10, None, first_wait=1.0, linger=0.05, fill_wait=1.0, now=100.0)
    assert waits.until(_view(buffered=4, can_grow=False, backlog=50), 100.0) is None


def test_a_consumer_restarting_within_its_byte_budget_is_waited_for() -> None:
    waits = TakeWaits(10, None, first_wait=1.0, linger=0.05, fill_wait=0.0, now=100.0)
    assert waits.until(_view(buffered=1, paused=True), 100.1) == 101.0  # learnt the body size: back soon
    assert waits.until(_view(buffered=1, restarted=True, backlog=30), 100.2) == 101.0 and waits.want == 2
    assert waits.until(_view(buffered=2, backlog=30), 100.3) == 100.35 and waits.want == 10  # then fill


def test_a_failed_consumer_stops_every_wait() -> None:
    waits = TakeWaits(10, None, first_wait=1.0, linger=0.05, fill_wait=0.0, now=100.0)
    assert waits.until(_view(failed=True), 100.0) is None and waits.want == 0
