"""The first-message wait of an idle poll under a processing-time trigger (pure logic, a clock passed in)."""

import pytest

from safebunny.source.poll_window import PollWindow

SLOT = 1_700_000_000.0  # a whole second: Spark's 1-second triggers start at such times


def test_the_wait_ends_a_quarter_interval_before_the_slot_ends() -> None:
    window = PollWindow(1000, 1000)
    assert window.wait(SLOT + 0.01) == pytest.approx(0.74)
    assert window.wait(SLOT + 0.5) == pytest.approx(0.25)
    assert window.wait(SLOT + 0.9) == 0.0  # a trigger that started late does not wait at all


def test_poll_timeout_stays_the_longest_wait() -> None:
    assert PollWindow(10_000, 1000).wait(SLOT) == pytest.approx(1.0)
    assert PollWindow(400, 1000).wait(SLOT) == pytest.approx(0.3)


def test_a_late_idle_trigger_grows_the_reserve_and_on_time_ones_let_it_shrink_back() -> None:
    window = PollWindow(1000, 1000)
    window.started(SLOT + 0.01)
    window.ended(idle=True)
    window.started(SLOT + 1.12)  # the idle trigger before ran 0.12 s over its slot
    assert window.reserve == pytest.approx(0.25 + 0.15)
    assert window.wait(SLOT + 1.12) == pytest.approx(1.0 - 0.4 - 0.12)
    grown = window.reserve
    for second in range(2, 40):
        window.ended(idle=True)
        window.started(SLOT + second + 0.005)  # on time
    assert window.base <= window.reserve < grown
    assert window.reserve == pytest.approx(window.base, abs=0.01)


def test_only_idle_triggers_teach() -> None:
    window = PollWindow(1000, 1000)
    window.ended(idle=False)  # a batch ran: its length is the data's, not the poll's
    window.started(SLOT + 0.3)
    assert window.reserve == window.base


def test_the_reserve_never_passes_half_the_interval() -> None:
    window = PollWindow(1000, 1000)
    for second in range(10):
        window.ended(idle=True)
        window.started(SLOT + second + 0.45)
    assert window.reserve == pytest.approx(0.5)


def test_an_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="interval_ms"):
        PollWindow(0, 1000)
