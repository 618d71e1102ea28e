"""The ack-age budget's arithmetic (against a broker: tests/integration/test_consumer_timeout_budget.py)."""

import logging

import pytest

from safebunny.errors import SafeBunnyBrokerError
from safebunny.queues.ack_budget import AckBudget


def test_two_losses_within_five_commits_fail_with_what_to_do():
    budget = AckBudget("orders", 2000)
    for lost in (True, False, False, False):
        budget.committed(lost)
        budget.check()
    budget.committed(True)
    with pytest.raises(SafeBunnyBrokerError, match="in 2 of the last 5 batches") as info:
        budget.check()
    assert "'orders'" in str(info.value) and "consumerTimeoutMs" in str(info.value)


def test_losses_further_apart_than_the_window_do_not_fail():
    budget = AckBudget("orders", 2000)
    for lost in (True, False, False, False, False, True, False, False, False, False, True):
        budget.committed(lost)
        budget.check()


def test_warns_when_two_batch_durations_pass_half_the_timeout_but_not_after_an_idle_spell(caplog):
    caplog.set_level(logging.WARNING, logger="safebunny.source")
    budget = AckBudget("orders", 2000)
    budget.planned(previous_pending=False, now=0.0)
    budget.planned(previous_pending=False, now=100.0)  # idle in between: not a batch's duration
    assert not caplog.records
    budget.planned(previous_pending=True, now=100.4)  # 2 x 0.4 s < 1 s
    assert not caplog.records and budget.batch_s == pytest.approx(0.4)
    budget.planned(previous_pending=True, now=101.0)  # 2 x 0.6 s > 1 s
    assert "waits about 1.2 s" in caplog.records[-1].getMessage()
