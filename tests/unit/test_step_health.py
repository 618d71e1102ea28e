"""A step's state in words from what ``status()`` reads, and what is wrong with a saga as a whole
(safebunny.saga.look.status.step_health and saga_problems: pure, no broker)."""

from __future__ import annotations

import pytest

from safebunny.cli.status import state_lines
from safebunny.saga.look.status import STEP_STATES, saga_problems, step_health

NOW = 1_800_000_000.0


def test_each_state_in_words() -> None:
    assert step_health(None, None, None, NOW)[0] == "not declared"
    state, detail = step_health(4, 0, NOW + 90, NOW, recent_failed=2)
    assert state == "paused" and "breaker open until" in detail and "90 s from now" in detail
    assert "saga.pause()" in detail and "4 message(s) waiting" in detail  # why, and what waits
    state, detail = step_health(3, 0, None, NOW, oldest_age_s=75)
    assert state == "not consumed" and "no consumer" in detail and "oldest has waited 75 s" in detail
    state, detail = step_health(3, 0, None, NOW, age_unknown="the management API is off")
    assert state == "not consumed" and "age unknown (the management API is off)" in detail
    state, detail = step_health(0, 1, None, NOW, recent_failed=2, recent_parked=1)
    assert state == "failing" and "2 failed, 1 parked in the last 10 min" in detail
    assert step_health(5, 1, None, NOW)[0] == "running"
    assert step_health(0, 0, None, NOW) == ("idle", "nothing waiting and no query consuming: nothing to do")
    # a paused step has no consumer either: paused says why, not "not consumed"
    assert step_health(3, 0, NOW + 5, NOW)[0] == "paused"
    # a backlog nobody consumes is worse than failures
    assert step_health(3, 0, None, NOW, recent_failed=1)[0] == "not consumed"


@pytest.mark.parametrize("backlogs, has_state, words", [
    ([None, None], True, ["is not declared on this broker", "safebunny topology declare"]),
    ([0, None], False, ["no state under the saga's root /r"]),
])
def test_what_is_wrong_with_the_saga(backlogs: list, has_state: bool, words: list[str]) -> None:
    text = " ".join(saga_problems("shop", backlogs, has_state, "/r"))
    assert all(w in text for w in words), text
    assert saga_problems("shop", [0, 3], True, "/r") == []


def test_safebunny_status_prints_each_state_worst_first() -> None:
    rows = [{"step": "a.A", "state": "idle", "state_detail": "nothing"},
            {"step": "b.B", "state": "paused", "state_detail": "breaker open until 05:11:46 UTC"}]
    assert state_lines(rows) == ["b.B: paused: breaker open until 05:11:46 UTC", "a.A: idle: nothing"]
    assert STEP_STATES[0] == "not declared" and STEP_STATES[-1] == "idle"
