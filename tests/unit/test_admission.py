"""The queue source's one admission rule: whether a poll takes a batch now, and its waits
(safebunny.queues.admission)."""

import pytest

from safebunny.queues.admission import Admission


def test_an_unpaced_source_takes_at_once_and_waits_poll_timeout_for_a_first_message():
    admission = Admission(700)
    admission.took(10.0)
    assert admission.admit(10.1) == (0.0, True)
    assert admission.first_wait == pytest.approx(0.7) and not admission.paced and Admission(700, 1).paced


def test_the_first_batch_is_taken_at_once():
    assert Admission(1000, 1000).admit(now=123.0) == (0.0, True)


def test_a_batch_with_data_holds_the_next_until_the_interval_has_passed():
    admission = Admission(1000, 1000)
    admission.took(10.0)
    sleep, take = admission.admit(10.3)
    assert sleep == pytest.approx(0.7) and take
    assert admission.admit(11.0) == (0.0, True)


def test_a_late_poll_takes_at_once_so_a_backlog_runs_batches_back_to_back():
    admission = Admission(1000, 500)
    admission.took(10.0)
    assert admission.admit(10.9) == (0.0, True)  # the batch took longer than the interval: the next starts now
    admission.took(10.9)
    sleep, take = admission.admit(11.0)
    assert sleep == pytest.approx(0.4) and take


def test_the_spacing_follows_the_takes_not_the_wall_clock():
    # a processing-time trigger starts at multiples of the interval; the source counts from the last take, so a
    # query whose upstream publishes mid-interval takes that output as it arrives
    admission = Admission(1000, 1000)
    admission.took(10.37)
    assert admission.admit(11.0)[0] == pytest.approx(0.37)
    assert admission.admit(11.37) == (0.0, True)


def test_a_long_interval_is_waited_out_over_several_polls_that_take_nothing():
    admission = Admission(600, 30_000, longest_hold=1.0)
    admission.took(10.0)
    assert admission.admit(11.0) == (1.0, False)  # sleeps its longest, then ends the poll without taking
    assert admission.admit(39.5) == (pytest.approx(0.5), True)  # the rest fits in one poll: it takes after it


def test_the_poll_timeout_lengthens_the_longest_hold():
    admission = Admission(8000, 30_000, longest_hold=5.0)
    admission.took(0.0)
    assert admission.admit(23.0) == (pytest.approx(7.0), True)


def test_negative_waits_are_refused():
    with pytest.raises(ValueError, match="must not be negative"):
        Admission(-1, 0)
