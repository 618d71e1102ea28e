"""The source's own pacing of a query run with a zero trigger (safebunny.source.pacing)."""

import pytest

from safebunny.source.pacing import BatchPacer


def test_the_first_batch_is_taken_at_once():
    assert BatchPacer(1000).hold(now=123.0) == 0.0


def test_a_batch_with_data_holds_the_next_until_the_interval_has_passed():
    pacer = BatchPacer(1000)
    pacer.took(10.0)
    assert pacer.hold(10.3) == pytest.approx(0.7)
    assert pacer.hold(11.0) == 0.0


def test_a_late_poll_takes_at_once_so_a_backlog_runs_batches_back_to_back():
    pacer = BatchPacer(500)
    pacer.took(10.0)
    assert pacer.hold(10.9) == 0.0  # the batch took longer than the interval: the next starts now
    pacer.took(10.9)
    assert pacer.hold(11.0) == pytest.approx(0.4)


def test_the_spacing_follows_the_takes_not_the_wall_clock():
    # a processing-time trigger starts at multiples of the interval; the pacer counts from the last take, so a
    # query whose upstream publishes mid-interval takes that output as it arrives
    pacer = BatchPacer(1000)
    pacer.took(10.37)
    assert pacer.hold(11.0) == pytest.approx(0.37)
    assert pacer.hold(11.37) == 0.0


def test_an_interval_must_be_positive():
    with pytest.raises(ValueError, match="interval_ms must be positive, got 0"):
        BatchPacer(0)
