"""Retry tiers and poison decisions, pure."""

import datetime as dt

import pytest

from safebunny import Retry
from safebunny.errors import SafeBunnyOptionError
from safebunny.saga.define.retry import ATTEMPT, FIRST_FAILURE, REASON, decide, failure_headers, parse_duration_ms


@pytest.mark.parametrize("text,ms", [("250ms", 250), ("10s", 10_000), ("1m", 60_000), ("2h", 7_200_000),
                                     ("1d", 86_400_000), (1.5, 1500)])
def test_durations(text, ms):
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("bad", ["10", "ten s", "0s", "-1s", ""])
def test_bad_durations_name_the_value(bad):
    with pytest.raises(SafeBunnyOptionError, match="retry delay"):
        parse_duration_ms(bad)


def test_each_failure_climbs_one_tier_then_poison():
    retry = Retry(delays=("1s", "5s"))
    assert decide(retry, {}, "TimeoutError").tier == 0
    assert decide(retry, {ATTEMPT: "1"}, "TimeoutError").tier == 1
    last = decide(retry, {ATTEMPT: 2}, "TimeoutError")
    assert (last.target, last.attempt) == ("poison", 3)


def test_listed_errors_and_malformed_bodies_go_to_poison_at_once():
    retry = Retry(delays=("1s",), poison_on=("ValueError",))
    assert decide(retry, {}, "ValueError").target == "poison"
    assert decide(retry, {}, "MalformedMessage").target == "poison"


def test_failure_headers_keep_the_first_failure_and_drop_x_death():
    first = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    h = failure_headers({"x-death": [1], "app": "x"}, step="s.T", error_type="E", reason="boom", attempt=1,
                        poisoned=False, now=first)
    assert "x-death" not in h and h["app"] == "x" and h[FIRST_FAILURE] == first.isoformat() and REASON not in h
    again = failure_headers(h, step="s.T", error_type="E", reason="boom", attempt=2, poisoned=True,
                            now=first + dt.timedelta(hours=1))
    assert again[FIRST_FAILURE] == first.isoformat() and again[ATTEMPT] == 2 and again[REASON] == "boom"


@pytest.mark.parametrize("text, ms", [("1 second", 1000.0), ("250ms", 250.0), ("2 Minutes", 120_000.0),
                                      ("1.5h", 5_400_000.0), ("1 day", 86_400_000.0), ("500 milliseconds", 500.0)])
def test_one_duration_parser_reads_trigger_intervals_and_retry_delays(text, ms):
    from safebunny.options import duration_ms

    assert duration_ms(text) == ms and parse_duration_ms(text) == int(ms)
    assert duration_ms("availableNow") is None and duration_ms("10") is None
