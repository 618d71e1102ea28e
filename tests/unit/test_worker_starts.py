"""The one policy for step queries whose Python process did not start (safebunny.saga.run.worker_starts): pure."""

from __future__ import annotations

import pytest

from safebunny.saga.run import queries
from safebunny.saga.run.worker_starts import TRIES, UnstartedSteps


def test_each_miss_in_a_row_doubles_the_wait_up_to_sixteen_times() -> None:
    steps = UnstartedSteps(wait_s=2.0, stagger_s=5.0)
    assert [steps.missed("a") for _ in range(7)] == [2.0, 4.0, 8.0, 16.0, 32.0, 32.0, 32.0]
    steps.ran("a")
    assert steps.missed("a") == 2.0, "a query that ran starts the count again"


def test_steps_that_missed_start_one_at_a_time_and_others_are_never_held() -> None:
    steps = UnstartedSteps(wait_s=1.0, stagger_s=5.0)
    steps.missed("a")
    steps.missed("b")
    assert steps.starting("a", now=100.0) == "again"
    assert steps.starting("b", now=103.0) == "wait", "b waits for a's stagger"
    assert steps.starting("c", now=103.0) == "restart", "a step that did not miss is never held"
    assert steps.starting("b", now=105.0) == "again"
    assert steps.starting("b", now=106.0) == "restart", "started again once: the next start is a restart"


def test_a_drain_gives_up_after_tries_misses_in_a_row() -> None:
    steps = UnstartedSteps()
    for _ in range(TRIES):
        steps.missed("a")
    assert not steps.exhausted("a")
    steps.missed("a")
    assert steps.exhausted("a") and not steps.exhausted("b")


@pytest.mark.parametrize("old", ["WORKER_START_TRIES", "WORKER_START_WAIT_S"])
def test_the_old_names_in_queries_say_where_the_policy_went(old: str) -> None:
    from safebunny.errors import SafeBunnyMovedError

    with pytest.raises(SafeBunnyMovedError, match="worker_starts"):
        getattr(queries, old)
