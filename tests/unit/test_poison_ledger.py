"""The poison ledger's records and the state of a parked message (no broker needed)."""

from __future__ import annotations

import datetime as dt

import pytest

from safebunny.saga.define.config import SagaLayout
from safebunny.saga.look.parked import PoisonLedger, state_of

T0 = dt.datetime(2026, 11, 24, 3, 0, tzinfo=dt.timezone.utc)


def test_actions_are_recorded_with_who_when_and_why(tmp_path) -> None:
    path = SagaLayout(str(tmp_path)).poison_ledger("stock.OrderPlaced")
    ledger = PoisonLedger(path)
    assert ledger.read() == {}
    ledger.record(["m1", "m2"], "discarded", "test data", by="ann@host", now=T0)
    ledger.record(["m2"], "redriven", now=T0 + dt.timedelta(minutes=1))
    got = PoisonLedger(path).read()
    assert path == str(tmp_path / "poison" / "stock.OrderPlaced.json")
    assert got["m1"] == {"state": "discarded", "at": T0.isoformat(), "by": "ann@host", "reason": "test data"}
    assert got["m2"]["state"] == "redriven" and "@" in got["m2"]["by"]
    with pytest.raises(ValueError, match="resolved"):
        ledger.record(["m3"], "resolved")


def test_the_state_follows_the_last_action_the_inbox_and_a_later_park() -> None:
    redriven = {"state": "redriven", "at": T0.isoformat()}
    discarded = {"state": "discarded", "at": T0.isoformat()}
    before, after = (T0 - dt.timedelta(seconds=5)).isoformat(), (T0 + dt.timedelta(seconds=5)).isoformat()
    assert state_of(None, before, done=False) == "parked"
    assert state_of(redriven, before, done=False) == "redriven"
    assert state_of(redriven, before, done=True) == "resolved"
    assert state_of(redriven, after, done=False) == "parked"  # redriven, failed again, parked again
    assert state_of(discarded, before, done=False) == "discarded"
    assert state_of(discarded, None, done=True) == "discarded"
